"""aotspec fuzz repro: torch.compile:inductor disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:inductor --seed 0` (program 1, a mutation program).
Signature: error IndexError: list index out of range
Run alone, from anywhere aotspec is installed:
    python repro_error_indexerror_list_index_out_of_range_2d25d2__torch_compile_inductor.py                  fails: torch.compile:inductor is wrong here
    python repro_error_indexerror_list_index_out_of_range_2d25d2__torch_compile_inductor.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    the backend raised IndexError: list index out of range
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:inductor'
SUBJECT = pickle.loads(base64.b64decode('gASVWQMAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLAksCSwKHlIwGdmFsdWVzlChHwAwAAAAAAABHwAQAAAAAAABHv/gAAAAAAABHv+AAAAAAAABHP+AAAAAAAABHP/gAAAAAAABHQAQAAAAAAABHQAwAAAAAAAB0lIwGemVyb2VklImMDXJlcXVpcmVzX2dyYWSUiYwIbm9uX2xlYWaUiYwFZHR5cGWUjAdmbG9hdDMylIwNaGlzdG9yeV9mcmVlZJSJdWJoDCmBlH2UKGgPjAJiMZRoEWgSaBMoR0AaAAAAAAAAR0AeAAAAAAAAR0AhAAAAAAAAR0AjAAAAAAAAR0AlAAAAAAAAR0AnAAAAAAAAR0ApAAAAAAAAR0ArAAAAAAAAdJRoFYloFoloF4loGGgZaBqJdWJoDCmBlH2UKGgPjAJiMpRoEUsDSwKGlGgTKEdAMYAAAAAAAEdAMoAAAAAAAEdAM4AAAAAAAEdANIAAAAAAAEdANYAAAAAAAEdANoAAAAAAAHSUaBWJaBaJaBeJaBhoGWgaiXVih5SMBXZpZXdzlGgAjApDYWxsZXJWaWV3lJOUKYGUfZQoaA+MAmEwlIwEYmFzZZSMAmIxlIwFc2l6ZXOUSwiFlIwHc3RyaWRlc5RLAYWUjAZvZmZzZXSUSwCMCGRldGFjaGVklIl1YmgnKYGUfZQoaA+MAmgxlGgrjAJiMJRoLShLAksCSwFLAnSUaC8oSwRLAksCSwF0lGgxSwBoMol1YoaUjARhcmdzlCiMAmIwlIwCYjGUaCqMAmIylHSUdWKMBGJvZHmUaACMBUluc3RylJOUKYGUfZQojAJvcJSMBHNldF+UjARvdXRzlCloOmgAjANWYXKUk5QpgZR9lGgPjAJ4MpRzYmhIKYGUfZRoD4wCeDOUc2KGlHVihZSMB3JldHVybnOUKIwCeDCUjAJ4MZSMAngylIwCeDOUdJSMDGdyYWRfZW5hYmxlZJSIjAxyZXRhaW5fZ3JhcGiUiXViLg=='))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5]).reshape((2, 2, 2))
#     b1 = torch.tensor([6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5]).reshape((2, 2, 2))
#     b2 = torch.tensor([17.5, 18.5, 19.5, 20.5, 21.5, 22.5]).reshape((3, 2))
#     a0 = b1.as_strided((8,), (1,), 0)
#     h1 = b0.as_strided((2, 2, 1, 2), (4, 2, 2, 1), 0)
#     named = {'b0': b0, 'b1': b1, 'b2': b2, 'a0': a0, 'h1': h1}
#     return named, [b0, b1, a0, b2]
#
#
# def program(x0, x1, x2, x3):
#     torch.ops.aten.set_.source_Tensor(x2, x3)
#     return (x0, x1, x2, x3,)
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
