"""aotspec fuzz repro: torch.compile:inductor disagrees with the oracles on the program below.

Found by `aotspec fuzz --backend torch.compile:inductor --seed 0` (program 13, a grad program).
Signature: error AssertionError: expected a function variable, got <class 'torch._dynamo.variables.torch.
Run alone, from anywhere aotspec is installed:
    python repro_error_assertionerror_expected_a_function_e943ca__torch_compile_inductor.py                  fails: torch.compile:inductor is wrong here
    python repro_error_assertionerror_expected_a_function_e943ca__torch_compile_inductor.py torch-eager      passes: eager PyTorch is the oracle
The oracles: eager PyTorch for values, input mutations, aliasing and gradients (numeric
differences forgiven when no farther from a float64 run than eager's), the reference for memory
facts (aotspec/fuzz/judge.py). When found:
    the backend raised AssertionError: expected a function variable, got <class 'torch._dynamo.variables.torch.TorchInGraphFunctionVariable'> from user code:
"""

import base64
import pickle
import sys

from aotspec.fuzz.judge import judge

BACKEND = 'torch.compile:inductor'
SUBJECT = pickle.loads(base64.b64decode('gASVqgUAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLAksChpSMBnZhbHVlc5QoR7/4AAAAAAAAR7/QAAAAAAAARz/gAAAAAAAAR7/gAAAAAAAAdJSMBnplcm9lZJSJjA1yZXF1aXJlc19ncmFklIiMCG5vbl9sZWFmlIiMBWR0eXBllIwHZmxvYXQzMpSMDWhpc3RvcnlfZnJlZWSUiXViaAwpgZR9lChoD4wCYjGUaBFLAksDhpRoEyhHv/gAAAAAAABHwAAAAAAAAABHwAAAAAAAAABHv9AAAAAAAABHv+AAAAAAAABHAAAAAAAAAAB0lGgViWgWiWgXiWgYaBloGol1YoaUjAV2aWV3c5RoAIwKQ2FsbGVyVmlld5STlCmBlH2UKGgPjAJhMJSMBGJhc2WUjAJiMJSMBXNpemVzlEsCSwJLAYeUjAdzdHJpZGVzlEsBSwJLBIeUjAZvZmZzZXSUSwCMCGRldGFjaGVklIl1YmgjKYGUfZQoaA+MAmExlGgnjAJiMZRoKUsChZRoK0sDhZRoLUsAaC6JdWKGlIwEYXJnc5QojAJiMJRoJowCYjGUaDF0lHVijARib2R5lChoAIwFSW5zdHKUk5QpgZR9lCiMAm9wlIwEYWRkX5SMBG91dHOUKWg2aACMA1ZhcpSTlCmBlH2UaA+MAngzlHNiR0AIAAAAAAAAR0AAAAAAAAAAh5R1Ymg8KYGUfZQoaD+MFWZuX2hhbHZlZF9hbmRfZG91YmxlZJRoQYwCdjCUjAJ2MZSGlGg2aEMpgZR9lGgPjAJ4MpRzYoWUdWJoPCmBlH2UKGg/jANzdGSUaEGMAnYylIWUaDZoQymBlH2UaA+MAnYxlHNiSwGGlHViaDwpgZR9lChoP4wGZGV0YWNolGhBjAJ2M5SFlGg2aEMpgZR9lGgPjAJ2MpRzYoWUdWJoPCmBlH2UKGg/jAVzbGljZZRoQYwCdjSUhZRoNihoQymBlH2UaA9oXnNiSwBLAEsBSwN0lHViaDwpgZR9lChoP4wJbm9ybWFsaXpllGhBjAJ2NZSFlGg2aEMpgZR9lGgPjAJ2NJRzYkdAAAAAAAAAAEsAh5R1Ymg8KYGUfZQoaD+MD2ZuX3Bhc3NfdGhyb3VnaJRoQYwCdjaUhZRoNmhDKYGUfZRoD4wCdjWUc2KFlHViaDwpgZR9lChoP4wDY2F0lGhBjAJ2N5SFlGg2KEsAaEMpgZR9lGgPjAJ2NZRzYmhDKYGUfZRoD2hzc2JoQymBlH2UaA9ofHNidJR1Ymg8KYGUfZQoaD+MBGZ1bGyUaEGMAnY4lIWUaDZLAoWUR7/wAAAAAAAAhpR1Ymg8KYGUfZQoaD+MCmh1YmVyX2xvc3OUaEGMAnY5lIWUaDZoQymBlH2UaA+MAnYzlHNiaEMpgZR9lGgPaI5zYowDc3VtlIeUdWJoPCmBlH2UKGg/jAR2aWV3lGhBjAN2MTCUhZRoNmhDKYGUfZRoD2hQc2JLBksBhpSGlHViaDwpgZR9lChoP4wFemVyb1+UaEEpaDZoQymBlH2UaA9ooXNihZR1Ymg8KYGUfZQoaD+MD25lc3RlZF9ncmFkX211bJRoQYwDdjExlIWUaDZoQymBlH2UaA9oWXNiR0AIAAAAAAAAhpR1Ymg8KYGUfZQoaD+MD2VuYWJsZV9ncmFkX211bJRoQYwDdjEylIWUaDZoQymBlH2UaA+MAngxlHNiRz/gAAAAAAAAhpR1YnSUjAdyZXR1cm5zlGi4aLiGlIwMZ3JhZF9lbmFibGVklImMDHJldGFpbl9ncmFwaJSIdWIu'))

# The program, as Python (SUBJECT holds it as data; the judge runs this rendering of it):
# class HalvedAndDoubled(torch.autograd.Function):
#     """(x / 2, 2x), the second marked non-differentiable: its gradient is zeros."""
#
#     @staticmethod
#     def forward(ctx, x):
#         doubled = x * 2
#         ctx.mark_non_differentiable(doubled)
#         return x * 0.5, doubled
#
#     @staticmethod
#     def backward(ctx, halved_grad, doubled_grad):
#         return halved_grad * 0.5 + doubled_grad
#
#
# class PassThrough(torch.autograd.Function):
#     """x itself (eager returns a view of x whose gradient is this Function's)."""
#
#     @staticmethod
#     def forward(ctx, x):
#         return x
#
#     @staticmethod
#     def backward(ctx, grad):
#         return grad
#
#
# def mul_with_grad_inside_no_grad(x, c):
#     """x * c under torch.enable_grad() inside torch.no_grad(): recorded whatever the caller's
#     grad mode. Written with `with` blocks: Dynamo (torch 2.13) cannot capture the decorators
#     nested as one expression, `torch.no_grad()(torch.enable_grad()(torch.mul))`."""
#     with torch.no_grad():
#         with torch.enable_grad():
#             return torch.mul(x, c)
#
#
#
# def make_inputs():
#     b0_leaf = torch.tensor([-1.5, -0.25, 0.5, -0.5]).reshape((2, 2)).clone().requires_grad_()
#     b0 = b0_leaf * 1
#     b1 = torch.tensor([-1.5, -2.0, -2.0, -0.25, -0.5, 0.0]).reshape((2, 3))
#     a0 = b0.as_strided((2, 2, 1), (1, 2, 4), 0)
#     a1 = b1.as_strided((2,), (3,), 0)
#     named = {'b0_leaf': b0_leaf, 'b0': b0, 'b1': b1, 'a0': a0, 'a1': a1}
#     return named, [b0, a0, b1, a1]
#
#
# def program(x0, x1, x2, x3):
#     x3.add_(3.0, alpha=2.0)
#     v0, v1, = HalvedAndDoubled.apply(x2)
#     v2 = v1.std(1)
#     v3 = v2.detach()
#     v4 = v3[0:1:3]
#     v5 = torch.nn.functional.normalize(v4, 2.0, 0)
#     v6 = PassThrough.apply(v5)
#     v7 = torch.cat([v5, v4, v5], 0)
#     v8 = torch.full((2,), -1.0)
#     v9 = torch.nn.functional.huber_loss(v3, v8, reduction='sum')
#     v10 = x2.view((6, 1))
#     v10.zero_()
#     v11 = mul_with_grad_inside_no_grad(v1, 3.0)
#     v12 = torch.enable_grad()(torch.mul)(x1, 0.5)
#     return (v12, v12,)
#
#
# #: The caller's grad mode around the call; whether it backpropagates twice, the first
# #: time with retain_graph=True.
# GRAD_ENABLED = False
# RETAIN_GRAPH = True

if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else BACKEND
    verdict = judge(SUBJECT, backend)
    assert verdict.status == "pass", f"{backend}: " + "\n".join(verdict.found)
    print(f"{backend} agrees with the oracles")
