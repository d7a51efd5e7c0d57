"""aotspec fuzz repro: torch.compile:aot_eager disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:aot_eager --seed 0` (program 16, a mutation program).
Signature: crash SIGSEGV
Run alone, from anywhere aotspec is installed:
    python repro_crash_sigsegv_4271a8__torch_compile_aot_eager.py                  fails: torch.compile:aot_eager is wrong here
    python repro_crash_sigsegv_4271a8__torch_compile_aot_eager.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    the backend crashed the worker with SIGSEGV
    Fatal Python error: Segmentation fault
    File "torch/_ops.py", line 875 in __call__
    File "torch/_functorch/_aot_autograd/runtime_wrappers.py", line 432 in __torch_dispatch__
    File "torch/_dynamo/eval_frame.py", line 1446 in _fn
    File "torch/_compile.py", line 54 in inner
    File "torch/_ops.py", line 875 in __call__
    File "<eval_with_key> from torch/fx/experimental/proxy_tensor.py:1738 in wrapped", line 16 in forward
    File "torch/nn/modules/module.py", line 1789 in _call_impl
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:aot_eager'
SUBJECT = pickle.loads(base64.b64decode('gASVagMAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLA0sChpSMBnZhbHVlc5QoR8AEAAAAAAAAR7/4AAAAAAAAR7/gAAAAAAAARz/gAAAAAAAARz/4AAAAAAAAR0AEAAAAAAAAdJSMBnplcm9lZJSJjA1yZXF1aXJlc19ncmFklImMCG5vbl9sZWFmlIl1YmgMKYGUfZQoaA+MAmIxlGgRSwSFlGgTKEdAIQAAAAAAAEdAIwAAAAAAAEdAJQAAAAAAAEdAJwAAAAAAAHSUaBWJaBaJaBeJdWKGlIwFdmlld3OUaACMCkNhbGxlclZpZXeUk5QpgZR9lChoD4wCYTCUjARiYXNllIwCYjGUjAVzaXplc5RLBEsBSwGHlIwHc3RyaWRlc5RLAUsBSwGHlIwGb2Zmc2V0lEsAjAhkZXRhY2hlZJSJdWKFlIwEYXJnc5RoI4wCYjCUjAJiMZSHlHVijARib2R5lChoAIwFSW5zdHKUk5QpgZR9lCiMAm9wlIwHcmVzaGFwZZSMBG91dHOUjAJ2MJSFlGgtaACMA1ZhcpSTlCmBlH2UaA+MAngwlHNiSwSFlIaUdWJoMymBlH2UKGg2jAVjb3B5X5RoOCloLWg8KYGUfZRoD2g/c2JoPCmBlH2UaA9oP3NihpR1YmgzKYGUfZQoaDaMBnNlbGVjdJRoOIwCdjGUhZRoLWg8KYGUfZRoD2g/c2JLAEsAh5R1YmgzKYGUfZQoaDaMBGZ1bGyUaDiMAnYylIWUaC1LAUsDhpRHQAgAAAAAAACGlHViaDMpgZR9lChoNowVcmVzaXplX3N0b3JhZ2VfYnl0ZXNflGg4KWgtaDwpgZR9lGgPjAJ4MpRzYksAhpR1YmgzKYGUfZQoaDaMB21heGltdW2UaDiMAnYzlIWUaC1oPCmBlH2UaA+MAngxlHNiaDwpgZR9lGgPaGdzYoaUdWJ0lIwHcmV0dXJuc5QoaD9oZ2heaDloTWhVaGN0lIwMZ3JhZF9lbmFibGVklIiMDHJldGFpbl9ncmFwaJSJdWIu'))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]).reshape((3, 2))
#     b1 = torch.tensor([8.5, 9.5, 10.5, 11.5]).reshape((4,))
#     a0 = b1.as_strided((4, 1, 1), (1, 1, 1), 0)
#     named = {'b0': b0, 'b1': b1, 'a0': a0}
#     return named, [a0, b0, b1]
#
#
# def program(x0, x1, x2):
#     v0 = x0.reshape((4,))
#     x0.copy_(x0)
#     v1 = x0.select(0, 0)
#     v2 = torch.full((1, 3), 3.0)
#     torch.ops.inductor.resize_storage_bytes_(x2, 0)
#     v3 = torch.maximum(x1, x1)
#     return (x0, x1, x2, v0, v1, v2, v3,)
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
