"""aotspec fuzz repro: torch.compile:inductor disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:inductor --seed 0` (program 25, a mutation program).
Signature: error RuntimeError: cannot mutate tensors with frozen storage
Run alone, from anywhere aotspec is installed:
    python repro_error_runtimeerror_cannot_mutate_tensors_595b15__torch_compile_inductor.py                  fails: torch.compile:inductor is wrong here
    python repro_error_runtimeerror_cannot_mutate_tensors_595b15__torch_compile_inductor.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    the backend raised BackendCompilerFailed: backend='inductor' raised: RuntimeError: cannot mutate tensors with frozen storage
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:inductor'
SUBJECT = pickle.loads(base64.b64decode('gASVpwMAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLA0sChpSMBnZhbHVlc5QoR8AEAAAAAAAAR7/4AAAAAAAAR7/gAAAAAAAARz/gAAAAAAAARz/4AAAAAAAAR0AEAAAAAAAAdJSMBnplcm9lZJSJjA1yZXF1aXJlc19ncmFklImMCG5vbl9sZWFmlImMBWR0eXBllIwHZmxvYXQzMpSMDWhpc3RvcnlfZnJlZWSUiXVihZSMBXZpZXdzlGgAjApDYWxsZXJWaWV3lJOUKYGUfZQoaA+MAmEwlIwEYmFzZZSMAmIwlIwFc2l6ZXOUSwJLA4aUjAdzdHJpZGVzlEsDSwGGlIwGb2Zmc2V0lEsAjAhkZXRhY2hlZJSJdWKFlIwEYXJnc5RoIYwCYjCUhpR1YowEYm9keZQoaACMBUluc3RylJOUKYGUfZQojAJvcJSMCXJhbmRfbGlrZZSMBG91dHOUjAJ2MJSFlGgraACMA1ZhcpSTlCmBlH2UaA+MAngxlHNihZR1YmgwKYGUfZQoaDOMBHNldF+UaDUpaCtoOSmBlH2UaA+MAngwlHNiaDkpgZR9lGgPaENzYoaUdWJoMCmBlH2UKGgzjAVjbGFtcJRoNYwCdjGUhZRoK2g5KYGUfZRoD2hDc2JHv/AAAAAAAABHP/AAAAAAAACHlHViaDApgZR9lChoM2g0aDWMAnYylIWUaCtoOSmBlH2UaA+MAnYxlHNihZR1YmgwKYGUfZQoaDOMBmNsYW1wX5RoNSloK2g5KYGUfZRoD4wCeDCUc2JHQCQAAAAAAABHQCQAAAAAAACHlHViaDApgZR9lChoM4wEZnVsbJRoNYwCdjOUhZRoK0sEhZRHQAAAAAAAAACGlHViaDApgZR9lChoM4wFY29weV+UaDUpaCtoOSmBlH2UaA+MAngxlHNiaDkpgZR9lGgPjAJ4MZRzYoaUdWJoMCmBlH2UKGgzjBVyZXNpemVfc3RvcmFnZV9ieXRlc1+UaDUpaCtoOSmBlH2UaA9oPHNiSwCGlHVidJSMB3JldHVybnOUKIwCeDCUjAJ4MZRoSmhhdJSMDGdyYWRfZW5hYmxlZJSIjAxyZXRhaW5fZ3JhcGiUiXViLg=='))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]).reshape((3, 2))
#     a0 = b0.as_strided((2, 3), (3, 1), 0)
#     named = {'b0': b0, 'a0': a0}
#     return named, [a0, b0]
#
#
# def program(x0, x1):
#     v0 = torch.rand_like(x1)
#     torch.ops.aten.set_.source_Tensor(x0, x0)
#     v1 = x0.clamp(-1.0, 1.0)
#     v2 = torch.rand_like(v1)
#     x0.clamp_(10.0, 10.0)
#     v3 = torch.full((4,), 2.0)
#     x1.copy_(x1)
#     torch.ops.inductor.resize_storage_bytes_(x1, 0)
#     return (x0, x1, v1, v3,)
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
