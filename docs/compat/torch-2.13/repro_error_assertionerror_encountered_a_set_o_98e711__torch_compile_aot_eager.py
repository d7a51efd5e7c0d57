"""aotspec fuzz repro: torch.compile:aot_eager disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:aot_eager --seed 0` (program 23, a mutation program).
Signature: error AssertionError: Encountered a set_ on a graph input, but the input has other mutations t
Run alone, from anywhere aotspec is installed:
    python repro_error_assertionerror_encountered_a_set_o_98e711__torch_compile_aot_eager.py                  fails: torch.compile:aot_eager is wrong here
    python repro_error_assertionerror_encountered_a_set_o_98e711__torch_compile_aot_eager.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    the backend raised BackendCompilerFailed: backend='aot_eager' raised: AssertionError: Encountered a set_ on a graph input, but the input has other mutations that we cannot
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:aot_eager'
SUBJECT = pickle.loads(base64.b64decode('gASVZwQAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLAksDhpSMBnZhbHVlc5QoR8AEAAAAAAAAR7/4AAAAAAAAR7/gAAAAAAAARz/gAAAAAAAARz/4AAAAAAAAR0AEAAAAAAAAdJSMBnplcm9lZJSJjA1yZXF1aXJlc19ncmFklImMCG5vbl9sZWFmlImMBWR0eXBllIwHZmxvYXQzMpSMDWhpc3RvcnlfZnJlZWSUiXViaAwpgZR9lChoD4wCYjGUaBFLA0sChpRoEyhHQB4AAAAAAABHQCEAAAAAAABHQCMAAAAAAABHQCUAAAAAAABHQCcAAAAAAABHQCkAAAAAAAB0lGgViWgWiWgXiWgYaBloGol1YmgMKYGUfZQoaA+MAmIylGgRSwJLAksCh5RoEyhHQDCAAAAAAABHQDGAAAAAAABHQDKAAAAAAABHQDOAAAAAAABHQDSAAAAAAABHQDWAAAAAAABHQDaAAAAAAABHQDeAAAAAAAB0lGgViWgWiWgXiWgYaBloGol1YoeUjAV2aWV3c5RoAIwKQ2FsbGVyVmlld5STlCmBlH2UKGgPjAJhMJSMBGJhc2WUjAJiMJSMBXNpemVzlEsBSwaGlIwHc3RyaWRlc5RLBksBhpSMBm9mZnNldJRLAIwIZGV0YWNoZWSUiXViaCgpgZR9lChoD4wCYTGUaCyMAmIxlGguSwJLA0sBh5RoMEsDSwFLAYeUaDJLAGgziXViaCgpgZR9lChoD4wCYTKUaCyMAmIylGguSwFLCEsBh5RoMEsISwFLAYeUaDJLAGgziXVih5SMBGFyZ3OUKGg8aCtoNowCYjGUdJR1YowEYm9keZQoaACMBUluc3RylJOUKYGUfZQojAJvcJSMBWNvcHlflIwEb3V0c5QpaEFoAIwDVmFylJOUKYGUfZRoD4wCeDCUc2JoTSmBlH2UaA9oUHNihpR1YmhGKYGUfZQoaEmMBGFkZF+UaEspaEFoTSmBlH2UaA+MAngylHNiR7/wAAAAAAAASwGHlHViaEYpgZR9lChoSYwFemVyb1+UaEspaEFoTSmBlH2UaA9oUHNihZR1YmhGKYGUfZQoaEmMBHNldF+UaEspaEFoTSmBlH2UaA+MAngxlHNiaE0pgZR9lGgPaFBzYoaUdWJoRimBlH2UKGhJjAR2aWV3lGhLjAJ2MJSFlGhBaE0pgZR9lGgPaFBzYksBSwRLAoeUhpR1YmhGKYGUfZQoaElobGhLjAJ2MZSFlGhBaE0pgZR9lGgPaFBzYksESwKGlIaUdWJ0lIwHcmV0dXJuc5QoaFBoZmhZjAJ4M5RobWh1dJSMDGdyYWRfZW5hYmxlZJSIjAxyZXRhaW5fZ3JhcGiUiXViLg=='))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]).reshape((2, 3))
#     b1 = torch.tensor([7.5, 8.5, 9.5, 10.5, 11.5, 12.5]).reshape((3, 2))
#     b2 = torch.tensor([16.5, 17.5, 18.5, 19.5, 20.5, 21.5, 22.5, 23.5]).reshape((2, 2, 2))
#     a0 = b0.as_strided((1, 6), (6, 1), 0)
#     a1 = b1.as_strided((2, 3, 1), (3, 1, 1), 0)
#     a2 = b2.as_strided((1, 8, 1), (8, 1, 1), 0)
#     named = {'b0': b0, 'b1': b1, 'b2': b2, 'a0': a0, 'a1': a1, 'a2': a2}
#     return named, [a2, a0, a1, b1]
#
#
# def program(x0, x1, x2, x3):
#     x0.copy_(x0)
#     x2.add_(-1.0)
#     x0.zero_()
#     torch.ops.aten.set_.source_Tensor(x1, x0)
#     v0 = x0.view((1, 4, 2))
#     v1 = x0.view((4, 2))
#     return (x0, x1, x2, x3, v0, v1,)
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
