"""aotspec fuzz repro: torch.compile:aot_eager disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:aot_eager --seed 0` (program 3, a mutation program).
Signature: _version of a caller's tensor
Run alone, from anywhere aotspec is installed:
    python repro_version_of_a_caller_s_tensor_46bad2__torch_compile_aot_eager.py                  fails: torch.compile:aot_eager is wrong here
    python repro_version_of_a_caller_s_tensor_46bad2__torch_compile_aot_eager.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    b1._version: expected advanced by the call, got unchanged
    a1._version: expected advanced by the call, got unchanged
    h2._version: expected advanced by the call, got unchanged
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:aot_eager'
SUBJECT = pickle.loads(base64.b64decode('gASVDwMAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLAksCSwKHlIwGdmFsdWVzlChHwAwAAAAAAABHwAQAAAAAAABHv/gAAAAAAABHv+AAAAAAAABHP+AAAAAAAABHP/gAAAAAAABHQAQAAAAAAABHQAwAAAAAAAB0lIwGemVyb2VklIiMDXJlcXVpcmVzX2dyYWSUiYwIbm9uX2xlYWaUiYwFZHR5cGWUjAdmbG9hdDMylIwNaGlzdG9yeV9mcmVlZJSJdWJoDCmBlH2UKGgPjAJiMZRoEWgSaBMoR0AaAAAAAAAAR0AeAAAAAAAAR0AhAAAAAAAAR0AjAAAAAAAAR0AlAAAAAAAAR0AnAAAAAAAAR0ApAAAAAAAAR0ArAAAAAAAAdJRoFYloFoloF4loGGgZaBqJdWKGlIwFdmlld3OUaACMCkNhbGxlclZpZXeUk5QpgZR9lChoD4wCYTCUjARiYXNllIwCYjCUjAVzaXplc5RLBEsChpSMB3N0cmlkZXOUSwJLAYaUjAZvZmZzZXSUSwCMCGRldGFjaGVklIl1YmgiKYGUfZQoaA+MAmExlGgmjAJiMZRoKChLAUsCSwJLAnSUaCooSwhLBEsCSwF0lGgsSwBoLYl1YmgiKYGUfZQoaA+MAmgylGgmjAJiMZRoKEsCSwSGlGgqSwRLAYaUaCxLAGgtiXVih5SMBGFyZ3OUaDBoJYaUdWKMBGJvZHmUaACMBUluc3RylJOUKYGUfZQojAJvcJSMBHNldF+UjARvdXRzlCloO2gAjANWYXKUk5QpgZR9lGgPjAJ4MJRzYmhGKYGUfZRoD4wCeDCUc2KGlHVihZSMB3JldHVybnOUjAJ4MJSMAngxlIaUjAxncmFkX2VuYWJsZWSUiIwMcmV0YWluX2dyYXBolIl1Yi4='))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5]).reshape((2, 2, 2))
#     b1 = torch.tensor([6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5]).reshape((2, 2, 2))
#     a0 = b0.as_strided((4, 2), (2, 1), 0)
#     a1 = b1.as_strided((1, 2, 2, 2), (8, 4, 2, 1), 0)
#     h2 = b1.as_strided((2, 4), (4, 1), 0)
#     torch.ops.inductor.resize_storage_bytes_(b0, 0)
#     named = {'b0': b0, 'b1': b1, 'a0': a0, 'a1': a1, 'h2': h2}
#     return named, [a1, a0]
#
#
# def program(x0, x1):
#     torch.ops.aten.set_.source_Tensor(x0, x0)
#     return (x0, x1,)
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
