"""aotspec fuzz repro: torch.compile:aot_eager disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:aot_eager --seed 0` (program 25, a mutation program).
Signature: error RuntimeError: cannot mutate tensors with frozen storage
Run alone, from anywhere aotspec is installed:
    python repro_error_runtimeerror_cannot_mutate_tensors_595b15__torch_compile_aot_eager.py                  fails: torch.compile:aot_eager is wrong here
    python repro_error_runtimeerror_cannot_mutate_tensors_595b15__torch_compile_aot_eager.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    the backend raised BackendCompilerFailed: backend='aot_eager' raised: RuntimeError: cannot mutate tensors with frozen storage
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:aot_eager'
SUBJECT = pickle.loads(base64.b64decode('gASVqwMAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLAksDhpSMBnZhbHVlc5QoR8AEAAAAAAAAR7/4AAAAAAAAR7/gAAAAAAAARz/gAAAAAAAARz/4AAAAAAAAR0AEAAAAAAAAdJSMBnplcm9lZJSJjA1yZXF1aXJlc19ncmFklImMCG5vbl9sZWFmlImMBWR0eXBllIwHZmxvYXQzMpSMDWhpc3RvcnlfZnJlZWSUiXVihZSMBXZpZXdzlGgAjApDYWxsZXJWaWV3lJOUKYGUfZQoaA+MAmEwlIwEYmFzZZSMAmIwlIwFc2l6ZXOUSwJLA0sBh5SMB3N0cmlkZXOUSwNLAUsBh5SMBm9mZnNldJRLAIwIZGV0YWNoZWSUiXVihZSMBGFyZ3OUjAJiMJRoIYaUdWKMBGJvZHmUKGgAjAVJbnN0cpSTlCmBlH2UKIwCb3CUjAlyYW5kX2xpa2WUjARvdXRzlIwCdjCUhZRoK2gAjANWYXKUk5QpgZR9lGgPjAJ4MZRzYoWUdWJoMCmBlH2UKGgzjARzZXRflGg1KWgraDkpgZR9lGgPjAJ4MJRzYmg5KYGUfZRoD2hDc2KGlHViaDApgZR9lChoM4wFY2xhbXCUaDWMAnYxlIWUaCtoOSmBlH2UaA9oQ3NiR7/wAAAAAAAARz/wAAAAAAAAh5R1YmgwKYGUfZQoaDNoNGg1jAJ2MpSFlGgraDkpgZR9lGgPjAJ2MZRzYoWUdWJoMCmBlH2UKGgzjAZjbGFtcF+UaDUpaCtoOSmBlH2UaA+MAngwlHNiR0AkAAAAAAAAR0AkAAAAAAAAh5R1YmgwKYGUfZQoaDOMBGZ1bGyUaDWMAnYzlIWUaCtLBIWUR0AAAAAAAAAAhpR1YmgwKYGUfZQoaDOMBWNvcHlflGg1KWgraDkpgZR9lGgPjAJ4MZRzYmg5KYGUfZRoD4wCeDGUc2KGlHViaDApgZR9lChoM4wVcmVzaXplX3N0b3JhZ2VfYnl0ZXNflGg1KWgraDkpgZR9lGgPaDxzYksAhpR1YnSUjAdyZXR1cm5zlCiMAngwlIwCeDGUaEpoYXSUjAxncmFkX2VuYWJsZWSUiIwMcmV0YWluX2dyYXBolIl1Yi4='))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]).reshape((2, 3))
#     a0 = b0.as_strided((2, 3, 1), (3, 1, 1), 0)
#     named = {'b0': b0, 'a0': a0}
#     return named, [b0, a0]
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
