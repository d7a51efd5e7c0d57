"""aotspec fuzz repro: torch.compile:inductor disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:inductor --seed 0` (program 18, a mutation program).
Signature: crash SIGSEGV
Run alone, from anywhere aotspec is installed:
    python repro_crash_sigsegv_4271a8__torch_compile_inductor.py                  fails: torch.compile:inductor is wrong here
    python repro_crash_sigsegv_4271a8__torch_compile_inductor.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    the backend crashed the worker with SIGSEGV
    Fatal Python error: Segmentation fault
    File "<inductor cache>/7d/c7dfx43vpuq4ehha26mfd63gh42hqgqnjh6dzpqbyr7haqh6ztvg.py", line 131 in call
    File "torch/_inductor/output_code.py", line 763 in __call__
    File "torch/_functorch/_aot_autograd/subclass_codegen.py:codegen(runtime_wrapper_orchestration)", line 9 in _runtime_wrapper
    File "torch/_functorch/_aot_autograd/runtime_wrappers.py", line 1141 in runtime_wrapper
    File "torch/_functorch/_aot_autograd/runtime_wrappers.py", line 2548 in __call__
    File "torch/_functorch/aot_autograd.py", line 1277 in forward
    File "torch/_dynamo/eval_frame.py", line 1446 in _fn
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:inductor'
SUBJECT = pickle.loads(base64.b64decode('gASVkQIAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLAksCSwKHlIwGdmFsdWVzlChHwAwAAAAAAABHwAQAAAAAAABHv/gAAAAAAABHv+AAAAAAAABHP+AAAAAAAABHP/gAAAAAAABHQAQAAAAAAABHQAwAAAAAAAB0lIwGemVyb2VklIiMDXJlcXVpcmVzX2dyYWSUiYwIbm9uX2xlYWaUiXVihZSMBXZpZXdzlCmMBGFyZ3OUjAJiMJSFlHVijARib2R5lChoAIwFSW5zdHKUk5QpgZR9lCiMAm9wlIwEZnVsbJSMBG91dHOUjAJ2MJSFlGgaSwSFlEdACAAAAAAAAIaUdWJoHymBlH2UKGgijAVmaWxsX5RoJCloGmgAjANWYXKUk5QpgZR9lGgPaCVzYkdAAAAAAAAAAIaUdWJoHymBlH2UKGgijAVjb3B5X5RoJCloGmgtKYGUfZRoD2glc2JoLSmBlH2UaA9oJXNihpR1YmgfKYGUfZQoaCKMFXJlc2l6ZV9zdG9yYWdlX2J5dGVzX5RoJCloGmgtKYGUfZRoD4wCeDCUc2JLIIaUdWJoHymBlH2UKGgiaCtoJCloGmgtKYGUfZRoD2g+c2JHQAgAAAAAAACGlHViaB8pgZR9lChoImg7aCQpaBpoLSmBlH2UaA9oPnNiSwCGlHVidJSMB3JldHVybnOUaD5oJYaUjAxncmFkX2VuYWJsZWSUiIwMcmV0YWluX2dyYXBolIl1Yi4='))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5]).reshape((2, 2, 2))
#     torch.ops.inductor.resize_storage_bytes_(b0, 0)
#     named = {'b0': b0}
#     return named, [b0]
#
#
# def program(x0):
#     v0 = torch.full((4,), 3.0)
#     v0.fill_(2.0)
#     v0.copy_(v0)
#     torch.ops.inductor.resize_storage_bytes_(x0, 32)
#     x0.fill_(3.0)
#     torch.ops.inductor.resize_storage_bytes_(x0, 0)
#     return (x0, v0,)
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
