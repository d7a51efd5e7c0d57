"""aotspec fuzz repro: torch.compile:inductor disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:inductor --seed 0` (program 20, a mutation program).
Signature: values of an output
Run alone, from anywhere aotspec is installed:
    python repro_values_of_an_output_7f1d49__torch_compile_inductor.py                  fails: torch.compile:inductor is wrong here
    python repro_values_of_an_output_7f1d49__torch_compile_inductor.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    out4 values: Tensor-likes are not close!
    out5 values: Tensor-likes are not close!
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:inductor'
SUBJECT = pickle.loads(base64.b64decode('gASVbQQAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLAksDhpSMBnZhbHVlc5QoR8AEAAAAAAAAR7/4AAAAAAAAR7/gAAAAAAAARz/gAAAAAAAARz/4AAAAAAAAR0AEAAAAAAAAdJSMBnplcm9lZJSJjA1yZXF1aXJlc19ncmFklImMCG5vbl9sZWFmlImMBWR0eXBllIwHZmxvYXQzMpSMDWhpc3RvcnlfZnJlZWSUiXViaAwpgZR9lChoD4wCYjGUaBFLA0sChpRoEyhHQB4AAAAAAABHQCEAAAAAAABHQCMAAAAAAABHQCUAAAAAAABHQCcAAAAAAABHQCkAAAAAAAB0lGgViWgWiWgXiWgYaBloGol1YmgMKYGUfZQoaA+MAmIylGgRaB5oEyhHQDGAAAAAAABHQDKAAAAAAABHQDOAAAAAAABHQDSAAAAAAABHQDWAAAAAAABHQDaAAAAAAAB0lGgViWgWiWgXiWgYaBloGol1YoeUjAV2aWV3c5QoaACMCkNhbGxlclZpZXeUk5QpgZR9lChoD4wCYTCUjARiYXNllIwCYjCUjAVzaXplc5RLA0sBhpSMB3N0cmlkZXOUSwFLCYaUjAZvZmZzZXSUSwCMCGRldGFjaGVklIl1YmgnKYGUfZQoaA+MAmExlGgrjAJiMJRoLUsCSwJLA4eUaC9LAEsDSwGHlGgxSwBoMol1YmgnKYGUfZQoaA+MAmgylGgrjAJiMpRoLUsCSwOGlGgvSwFLAoaUaDFLAGgyiXViaCcpgZR9lChoD4wCaDOUaCuMAmIwlGgtSwNLAoaUaC9LAUsDhpRoMUsAaDKJdWJ0lIwEYXJnc5QojAJiMZSMAmIylGgqaDV0lHVijARib2R5lChoAIwFSW5zdHKUk5QpgZR9lCiMAm9wlIwQc2VlZGVkX3JhbmRfbGlrZZSMBG91dHOUjAJ2MJSFlGhGaACMA1ZhcpSTlCmBlH2UaA+MAngzlHNiTZ4XhpR1YmhMKYGUfZQoaE+MBWNvcHlflGhRKWhGaFUpgZR9lGgPjAJ4MZRzYmhVKYGUfZRoD2hfc2KGlHViaEwpgZR9lChoT4wHcmVzaGFwZZRoUYwCdjGUhZRoRmhVKYGUfZRoD4wCdjCUc2JLA0sBSwSHlIaUdWJoTCmBlH2UKGhPjARmdWxslGhRjAJ2MpSFlGhGSwJLA4aUR0AIAAAAAAAAhpR1YmhMKYGUfZQoaE9oXGhRKWhGaFUpgZR9lGgPjAJ2MpRzYmhVKYGUfZRoD2h4c2KGlHVidJSMB3JldHVybnOUKIwCeDCUjAJ4MZSMAngylIwCeDOUaFJoZmhwdJSMDGdyYWRfZW5hYmxlZJSIjAxyZXRhaW5fZ3JhcGiUiXViLg=='))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]).reshape((2, 3))
#     b1 = torch.tensor([7.5, 8.5, 9.5, 10.5, 11.5, 12.5]).reshape((3, 2))
#     b2 = torch.tensor([17.5, 18.5, 19.5, 20.5, 21.5, 22.5]).reshape((3, 2))
#     a0 = b0.as_strided((3, 1), (1, 9), 0)
#     a1 = b0.as_strided((2, 2, 3), (0, 3, 1), 0)
#     h2 = b2.as_strided((2, 3), (1, 2), 0)
#     h3 = b0.as_strided((3, 2), (1, 3), 0)
#     named = {'b0': b0, 'b1': b1, 'b2': b2, 'a0': a0, 'a1': a1, 'h2': h2, 'h3': h3}
#     return named, [b1, b2, a0, a1]
#
#
# def program(x0, x1, x2, x3):
#     v0 = (torch.manual_seed(6046), torch.rand_like(x3))[1]
#     x1.copy_(x1)
#     v1 = v0.reshape((3, 1, 4))
#     v2 = torch.full((2, 3), 3.0)
#     v2.copy_(v2)
#     return (x0, x1, x2, x3, v0, v1, v2,)
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
