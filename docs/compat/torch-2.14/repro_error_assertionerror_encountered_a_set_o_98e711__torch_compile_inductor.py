"""aotspec fuzz repro: torch.compile:inductor disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:inductor --seed 0` (program 23, a mutation program).
Signature: error AssertionError: Encountered a set_ on a graph input, but the input has other mutations t
Run alone, from anywhere aotspec is installed:
    python repro_error_assertionerror_encountered_a_set_o_98e711__torch_compile_inductor.py                  fails: torch.compile:inductor is wrong here
    python repro_error_assertionerror_encountered_a_set_o_98e711__torch_compile_inductor.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    the backend raised BackendCompilerFailed: backend='inductor' raised: AssertionError: Encountered a set_ on a graph input, but the input has other mutations that we cannot
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:inductor'
SUBJECT = pickle.loads(base64.b64decode('gASVCAQAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLA0sChpSMBnZhbHVlc5QoR8AEAAAAAAAAR7/4AAAAAAAAR7/gAAAAAAAARz/gAAAAAAAARz/4AAAAAAAAR0AEAAAAAAAAdJSMBnplcm9lZJSJjA1yZXF1aXJlc19ncmFklImMCG5vbl9sZWFmlImMBWR0eXBllIwHZmxvYXQzMpSMDWhpc3RvcnlfZnJlZWSUiXViaAwpgZR9lChoD4wCYjGUaBFLAksCSwKHlGgTKEdAGgAAAAAAAEdAHgAAAAAAAEdAIQAAAAAAAEdAIwAAAAAAAEdAJQAAAAAAAEdAJwAAAAAAAEdAKQAAAAAAAEdAKwAAAAAAAHSUaBWJaBaJaBeJaBhoGWgaiXViaAwpgZR9lChoD4wCYjKUaBFLAksDhpRoEyhHQDGAAAAAAABHQDKAAAAAAABHQDOAAAAAAABHQDSAAAAAAABHQDWAAAAAAABHQDaAAAAAAAB0lGgViWgWiWgXiWgYaBloGol1YoeUjAV2aWV3c5QoaACMCkNhbGxlclZpZXeUk5QpgZR9lChoD4wCYTCUjARiYXNllIwCYjCUjAVzaXplc5RLAksDhpSMB3N0cmlkZXOUSwNLAYaUjAZvZmZzZXSUSwCMCGRldGFjaGVklIl1YmgoKYGUfZQoaA+MAmExlGgsjAJiMJRoLksBSwNLAoeUaDBLBksCSwGHlGgySwBoM4l1YmgoKYGUfZQoaA+MAmEylGgsjAJiMZRoLksBSwhLAYeUaDBLCEsBSwGHlGgySwBoM4l1YmgoKYGUfZQoaA+MAmEzlGgsjAJiMZRoLksCSwJLAoeUaDBLBEsCSwGHlGgySwBoM4l1YmgoKYGUfZQoaA+MAmE0lGgsjAJiMpRoLksDSwKGlGgwSwFLA4aUaDJLAGgziXVidJSMBGFyZ3OUKGhCaDZoK2g8aEh0lHVijARib2R5lGgAjAVJbnN0cpSTlCmBlH2UKIwCb3CUjAVmaWxsX5SMBG91dHOUKWhNaACMA1ZhcpSTlCmBlH2UaA+MAngwlHNiR7/wAAAAAAAAhpR1YmhRKYGUfZQoaFSMBHNldF+UaFYpaE1oWCmBlH2UaA+MAngylHNiaFgpgZR9lGgPaFtzYoaUdWKGlIwHcmV0dXJuc5QoaFuMAngxlGhijAJ4M5SMAng0lHSUjAxncmFkX2VuYWJsZWSUiIwMcmV0YWluX2dyYXBolIl1Yi4='))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]).reshape((3, 2))
#     b1 = torch.tensor([6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5]).reshape((2, 2, 2))
#     b2 = torch.tensor([17.5, 18.5, 19.5, 20.5, 21.5, 22.5]).reshape((2, 3))
#     a0 = b0.as_strided((2, 3), (3, 1), 0)
#     a1 = b0.as_strided((1, 3, 2), (6, 2, 1), 0)
#     a2 = b1.as_strided((1, 8, 1), (8, 1, 1), 0)
#     a3 = b1.as_strided((2, 2, 2), (4, 2, 1), 0)
#     a4 = b2.as_strided((3, 2), (1, 3), 0)
#     named = {'b0': b0, 'b1': b1, 'b2': b2, 'a0': a0, 'a1': a1, 'a2': a2, 'a3': a3, 'a4': a4}
#     return named, [a3, a1, a0, a2, a4]
#
#
# def program(x0, x1, x2, x3, x4):
#     x0.fill_(-1.0)
#     torch.ops.aten.set_.source_Tensor(x2, x0)
#     return (x0, x1, x2, x3, x4,)
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
