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
SUBJECT = pickle.loads(base64.b64decode('gASV7gMAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLA0sChpSMBnZhbHVlc5QoR8AEAAAAAAAAR3/4AAAAAAAAR7/gAAAAAAAARz/gAAAAAAAARz/4AAAAAAAAR0AEAAAAAAAAdJSMBnplcm9lZJSJjA1yZXF1aXJlc19ncmFklImMCG5vbl9sZWFmlImMBWR0eXBllIwHZmxvYXQzMpSMDWhpc3RvcnlfZnJlZWSUiXVihZSMBXZpZXdzlGgAjApDYWxsZXJWaWV3lJOUKYGUfZQoaA+MAmEwlIwEYmFzZZSMAmIwlIwFc2l6ZXOUSwNLAksBh5SMB3N0cmlkZXOUSwJLAUsBh5SMBm9mZnNldJRLAIwIZGV0YWNoZWSUiXViaB4pgZR9lChoD4wCaDGUaCKMAmIwlGgkSwFLA0sCh5RoJksGSwJLAYeUaChLAGgpiXVihpSMBGFyZ3OUjAJiMJRoIYaUdWKMBGJvZHmUKGgAjAVJbnN0cpSTlCmBlH2UKIwCb3CUjAdwZXJtdXRllIwEb3V0c5SMAnYwlIWUaDFoAIwDVmFylJOUKYGUfZRoD4wCeDCUc2JLAUsAhpSGlHViaDYpgZR9lChoOYwEc2V0X5RoOyloMWg/KYGUfZRoD4wCdjCUc2JoPymBlH2UaA+MAngwlHNihpR1Ymg2KYGUfZQoaDmMBWNsYW1wlGg7jAJ2MZSFlGgxaD8pgZR9lGgPaEpzYke/8AAAAAAAAEc/8AAAAAAAAIeUdWJoNimBlH2UKGg5jAlyYW5kX2xpa2WUaDuMAnYylIWUaDFoPymBlH2UaA9oSnNihZR1Ymg2KYGUfZQoaDmMBmNsYW1wX5RoOyloMWg/KYGUfZRoD4wCdjGUc2JHQCQAAAAAAABHQCQAAAAAAACHlHViaDYpgZR9lChoOYwEZnVsbJRoO4wCdjOUhZRoMUsEhZRHQAAAAAAAAACGlHViaDYpgZR9lChoOYwFY29weV+UaDspaDFoPymBlH2UaA+MAngxlHNiaD8pgZR9lGgPaHJzYoaUdWJoNimBlH2UKGg5jBVyZXNpemVfc3RvcmFnZV9ieXRlc1+UaDspaDFoPymBlH2UaA+MAngxlHNiSwCGlHVidJSMB3JldHVybnOUKIwCeDCUjAJ4MZRoPGhSaGl0lIwMZ3JhZF9lbmFibGVklIiMDHJldGFpbl9ncmFwaJSJdWIu'))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# def make_inputs():
#     b0 = torch.tensor([-2.5, float('nan'), -0.5, 0.5, 1.5, 2.5]).reshape((3, 2))
#     a0 = b0.as_strided((3, 2, 1), (2, 1, 1), 0)
#     h1 = b0.as_strided((1, 3, 2), (6, 2, 1), 0)
#     named = {'b0': b0, 'a0': a0, 'h1': h1}
#     return named, [b0, a0]
#
#
# def program(x0, x1):
#     v0 = x0.permute((1, 0))
#     torch.ops.aten.set_.source_Tensor(v0, x0)
#     v1 = v0.clamp(-1.0, 1.0)
#     v2 = torch.rand_like(v0)
#     v1.clamp_(10.0, 10.0)
#     v3 = torch.full((4,), 2.0)
#     x1.copy_(x1)
#     torch.ops.inductor.resize_storage_bytes_(x1, 0)
#     return (x0, x1, v0, v1, v3,)
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
