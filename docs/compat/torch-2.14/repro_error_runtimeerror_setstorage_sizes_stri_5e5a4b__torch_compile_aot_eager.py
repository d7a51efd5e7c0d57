"""aotspec fuzz repro: torch.compile:aot_eager disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:aot_eager --seed 0` (program 20, a mutation program).
Signature: error RuntimeError: setStorage: sizes [...], strides [...], storage offset #, and itemsize #
Run alone, from anywhere aotspec is installed:
    python repro_error_runtimeerror_setstorage_sizes_stri_5e5a4b__torch_compile_aot_eager.py                  fails: torch.compile:aot_eager is wrong here
    python repro_error_runtimeerror_setstorage_sizes_stri_5e5a4b__torch_compile_aot_eager.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    the backend raised RuntimeError: setStorage: sizes [2, 2, 6], strides [0, 0, 1], storage offset 0, and itemsize 4 requiring a storage size of 24 are out of bounds for storage of size 0
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:aot_eager'
SUBJECT = pickle.loads(base64.b64decode('gASVJAQAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLAksDhpSMBnZhbHVlc5QoR8AEAAAAAAAAR7/4AAAAAAAAR7/gAAAAAAAARz/gAAAAAAAARz/4AAAAAAAAR0AEAAAAAAAAdJSMBnplcm9lZJSJjA1yZXF1aXJlc19ncmFklImMCG5vbl9sZWFmlImMBWR0eXBllIwHZmxvYXQzMpSMDWhpc3RvcnlfZnJlZWSUiXViaAwpgZR9lChoD4wCYjGUaBFLA0sChpRoEyhHQB4AAAAAAABHQCEAAAAAAABHQCMAAAAAAABHQCUAAAAAAABHQCcAAAAAAABHQCkAAAAAAAB0lGgViWgWiWgXiWgYaBloGol1YmgMKYGUfZQoaA+MAmIylGgRaB5oEyhHQDGAAAAAAABHQDKAAAAAAABHQDOAAAAAAABHQDSAAAAAAABHQDWAAAAAAABHQDaAAAAAAAB0lGgViWgWiWgXiWgYaBloGol1YoeUjAV2aWV3c5RoAIwKQ2FsbGVyVmlld5STlCmBlH2UKGgPjAJhMJSMBGJhc2WUjAJiMJSMBXNpemVzlEsBSwaGlIwHc3RyaWRlc5RLBksBhpSMBm9mZnNldJRLAIwIZGV0YWNoZWSUiXViaCcpgZR9lChoD4wCYTGUaCuMAmIwlGgtSwaFlGgvSwGFlGgxSwBoMol1YmgnKYGUfZQoaA+MAmgylGgrjAJiMJRoLUsGSwGGlGgvSwFLAYaUaDFLAGgyiXVih5SMBGFyZ3OUKIwCYjGUjAJiMpRoKmg1dJR1YowEYm9keZQoaACMBUluc3RylJOUKYGUfZQojAJvcJSMCXJhbmRfbGlrZZSMBG91dHOUjAJ2MJSFlGhAaACMA1ZhcpSTlCmBlH2UaA+MAngzlHNihZR1YmhGKYGUfZQoaEmMBmV4cGFuZJRoS4wCdjGUhZRoQGhPKYGUfZRoD4wCeDKUc2JLAksCSwaHlIaUdWJoRimBlH2UKGhJjAVzcGxpdJRoS4wCdjKUhZRoQGhPKYGUfZRoD2hbc2JLAUsAh5R1YmhGKYGUfZQoaEmMBGZ1bGyUaEuMAnYzlIWUaEBLBIWUR0AIAAAAAAAAhpR1YmhGKYGUfZQoaEmMFXJlc2l6ZV9zdG9yYWdlX2J5dGVzX5RoSyloQGhPKYGUfZRoD2hSc2JLAIaUdWJ0lIwHcmV0dXJuc5QojAJ4MJSMAngxlGhbaFJoV2hhaGl0lIwMZ3JhZF9lbmFibGVklIiMDHJldGFpbl9ncmFwaJSJdWIu'))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]).reshape((2, 3))
#     b1 = torch.tensor([7.5, 8.5, 9.5, 10.5, 11.5, 12.5]).reshape((3, 2))
#     b2 = torch.tensor([17.5, 18.5, 19.5, 20.5, 21.5, 22.5]).reshape((3, 2))
#     a0 = b0.as_strided((1, 6), (6, 1), 0)
#     a1 = b0.as_strided((6,), (1,), 0)
#     h2 = b0.as_strided((6, 1), (1, 1), 0)
#     named = {'b0': b0, 'b1': b1, 'b2': b2, 'a0': a0, 'a1': a1, 'h2': h2}
#     return named, [b1, b2, a0, a1]
#
#
# def program(x0, x1, x2, x3):
#     v0 = torch.rand_like(x3)
#     v1 = x2.expand((2, 2, 6))
#     v2, = x2.split(1, 0)
#     v3 = torch.full((4,), 3.0)
#     torch.ops.inductor.resize_storage_bytes_(x3, 0)
#     return (x0, x1, x2, x3, v1, v2, v3,)
#
#
# #: The caller's grad mode around the call; whether it backpropagates twice, the first
# #: time with retain_graph=True.
# GRAD_ENABLED = True
# RETAIN_GRAPH = False

if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else BACKEND
    verdict = judge(SUBJECT, backend)
    assert verdict.status == "pass", f"{backend}: " + "\n".join(verdict.found)
    print(f"{backend} agrees with the oracles")
