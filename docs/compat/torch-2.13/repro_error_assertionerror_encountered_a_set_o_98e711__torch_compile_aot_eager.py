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
SUBJECT = pickle.loads(base64.b64decode('gASVBAYAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLAksCSwKHlIwGdmFsdWVzlChHwAwAAAAAAABHf/gAAAAAAABHv/gAAAAAAABHv+AAAAAAAABHP+AAAAAAAABHP/gAAAAAAABHQAQAAAAAAABHQAwAAAAAAAB0lIwGemVyb2VklIiMDXJlcXVpcmVzX2dyYWSUiYwIbm9uX2xlYWaUiYwFZHR5cGWUjAdmbG9hdDMylIwNaGlzdG9yeV9mcmVlZJSJdWJoDCmBlH2UKGgPjAJiMZRoEWgSaBMoR0AaAAAAAAAAR0AeAAAAAAAAR0AhAAAAAAAAR0AjAAAAAAAAR0AlAAAAAAAAR0AnAAAAAAAAR0ApAAAAAAAAR0ArAAAAAAAAdJRoFYloFoloF4loGGgZaBqJdWJoDCmBlH2UKGgPjAJiMpRoEUsDSwKGlGgTKEdAMYAAAAAAAEdAMoAAAAAAAEdAM4AAAAAAAEdANIAAAAAAAEdANYAAAAAAAEdANoAAAAAAAHSUaBWJaBaJaBeJaBhoGWgaiXVih5SMBXZpZXdzlChoAIwKQ2FsbGVyVmlld5STlCmBlH2UKGgPjAJhMJSMBGJhc2WUjAJiMJSMBXNpemVzlEsCSwJLAoeUjAdzdHJpZGVzlEsBSwRLAoeUjAZvZmZzZXSUSwCMCGRldGFjaGVklIl1YmgnKYGUfZQoaA+MAmExlGgrjAJiMZRoLUsCSwJLAoeUaC9LBEsBSwKHlGgxSwBoMol1YmgnKYGUfZQoaA+MAmEylGgrjAJiMZRoLUsCSwJLAoeUaC9LAksESwGHlGgxSwBoMol1YmgnKYGUfZQoaA+MAmEzlGgrjAJiMpRoLUsCSwNLAYeUaC9LA0sBSwGHlGgxSwBoMol1YmgnKYGUfZQoaA+MAmg0lGgrjAJiMpRoLUsBSwNLAoeUaC9LBksCSwGHlGgxSwBoMol1YmgnKYGUfZQoaA+MAmg1lGgrjAJiMpRoLUsDhZRoL0sChZRoMUsBaDKJdWJ0lIwEYXJnc5QoaDVoQYwCYTGUaDuMAmIylGgqdJR1YowEYm9keZQoaACMBUluc3RylJOUKYGUfZQojAJvcJSMFXJlc2l6ZV9zdG9yYWdlX2J5dGVzX5SMBG91dHOUKWhSaACMA1ZhcpSTlCmBlH2UaA+MAngwlHNiSwCGlHViaFgpgZR9lChoW4wHcmVzaGFwZZRoXYwCdjCUhZRoUmhfKYGUfZRoD4wCeDKUc2JLAksCSwKHlIaUdWJoWCmBlH2UKGhbjARmdWxslGhdjAJ2MZSFlGhSSwJLA4aUR7/wAAAAAAAAhpR1YmhYKYGUfZQoaFuMCXN3YXBkaW1zX5RoXSloUmhfKYGUfZRoD4wCeDSUc2JLAEsBh5R1YmhYKYGUfZQoaFuMBmV4cGFuZJRoXYwCdjKUhZRoUmhfKYGUfZRoD4wCdjGUc2JLAksDhpSGlHViaFgpgZR9lChoW4wFY29weV+UaF0paFJoXymBlH2UaA9oenNiaF8pgZR9lGgPaINzYoaUdWJoWCmBlH2UKGhbaHBoXYwCdjOUhZRoUksFhZRHv/AAAAAAAACGlHViaFgpgZR9lChoW4wJcmFuZF9saWtllGhdjAJ2NJSFlGhSaF8pgZR9lGgPaHpzYoWUdWJoWCmBlH2UKGhbjARzZXRflGhdKWhSaF8pgZR9lGgPaINzYmhfKYGUfZRoD4wCdjOUc2KGlHViaFgpgZR9lChoW2iIaF0paFJoXymBlH2UaA9oo3NiaF8pgZR9lGgPjAJ2MZRzYoaUdWJ0lIwHcmV0dXJuc5QojAJ4MJSMAngxlIwCeDKUjAJ4M5SMAng0lIwCeDWUaGdocWh/aJB0lIwMZ3JhZF9lbmFibGVklIiMDHJldGFpbl9ncmFwaJSJdWIu'))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([-3.5, float('nan'), -1.5, -0.5, 0.5, 1.5, 2.5, 3.5]).reshape((2, 2, 2))
#     b1 = torch.tensor([6.5, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5]).reshape((2, 2, 2))
#     b2 = torch.tensor([17.5, 18.5, 19.5, 20.5, 21.5, 22.5]).reshape((3, 2))
#     a0 = b0.as_strided((2, 2, 2), (1, 4, 2), 0)
#     a1 = b1.as_strided((2, 2, 2), (4, 1, 2), 0)
#     a2 = b1.as_strided((2, 2, 2), (2, 4, 1), 0)
#     a3 = b2.as_strided((2, 3, 1), (3, 1, 1), 0)
#     h4 = b2.as_strided((1, 3, 2), (6, 2, 1), 0)
#     h5 = b2.as_strided((3,), (2,), 1)
#     torch.ops.inductor.resize_storage_bytes_(b0, 0)
#     named = {'b0': b0, 'b1': b1, 'b2': b2, 'a0': a0, 'a1': a1, 'a2': a2, 'a3': a3, 'h4': h4, 'h5': h5}
#     return named, [a1, a3, a1, a2, b2, a0]
#
#
# def program(x0, x1, x2, x3, x4, x5):
#     torch.ops.inductor.resize_storage_bytes_(x0, 0)
#     v0 = x2.reshape((2, 2, 2))
#     v1 = torch.full((2, 3), -1.0)
#     x4.swapdims_(0, 1)
#     v2 = v1.expand((2, 3))
#     x4.copy_(v1)
#     v3 = torch.full((5,), -1.0)
#     v4 = torch.rand_like(x4)
#     torch.ops.aten.set_.source_Tensor(v1, v3)
#     v3.copy_(v1)
#     return (x0, x1, x2, x3, x4, x5, v0, v1, v2, v3,)
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
