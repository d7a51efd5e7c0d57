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
SUBJECT = pickle.loads(base64.b64decode('gASVqAUAAAAAAACMH2FvdHNwZWMuZnV6ei5zdHJhdGVnaWVzLnByb2dyYW2UjAdQcm9ncmFtlJOUKYGUfZQojAVzZXR1cJRoAIwFU2V0dXCUk5QpgZR9lCiMBWJhc2VzlGgAjARCYXNllJOUKYGUfZQojARuYW1llIwCYjCUjAVzaGFwZZRLAksChpSMBnZhbHVlc5QoR7/4AAAAAAAAR7/QAAAAAAAARz/gAAAAAAAAR7/gAAAAAAAAdJSMBnplcm9lZJSJjA1yZXF1aXJlc19ncmFklIiMCG5vbl9sZWFmlIiMBWR0eXBllIwHZmxvYXQzMpSMDWhpc3RvcnlfZnJlZWSUiXViaAwpgZR9lChoD4wCYjGUaBFLAksDhpRoEyhHv/gAAAAAAABHwAAAAAAAAABHwAAAAAAAAABHv9AAAAAAAABHv+AAAAAAAABHAAAAAAAAAAB0lGgViWgWiWgXiWgYaBloGol1YoaUjAV2aWV3c5RoAIwKQ2FsbGVyVmlld5STlCmBlH2UKGgPjAJhMJSMBGJhc2WUjAJiMJSMBXNpemVzlEsChZSMB3N0cmlkZXOUSwGFlIwGb2Zmc2V0lEsAjAhkZXRhY2hlZJSJdWJoIymBlH2UKGgPjAJhMZRoJ4wCYjGUaClLAoWUaCtLA4WUaC1LAGguiXVihpSMBGFyZ3OUKIwCYjCUaCaMAmIxlGgxdJR1YowEYm9keZQoaACMBUluc3RylJOUKYGUfZQojAJvcJSMBGFkZF+UjARvdXRzlCloNmgAjANWYXKUk5QpgZR9lGgPjAJ4M5RzYkdACAAAAAAAAEdAAAAAAAAAAIeUdWJoPCmBlH2UKGg/jBVmbl9oYWx2ZWRfYW5kX2RvdWJsZWSUaEGMAnYwlIwCdjGUhpRoNmhDKYGUfZRoD4wCeDKUc2KFlHViaDwpgZR9lChoP4wDc3RklGhBjAJ2MpSFlGg2aEMpgZR9lGgPjAJ2MZRzYksBhpR1Ymg8KYGUfZQoaD+MBmRldGFjaJRoQYwCdjOUhZRoNmhDKYGUfZRoD4wCdjKUc2KFlHViaDwpgZR9lChoP4wFc2xpY2WUaEGMAnY0lIWUaDYoaEMpgZR9lGgPaF5zYksASwBLAUsDdJR1Ymg8KYGUfZQoaD+MCW5vcm1hbGl6ZZRoQYwCdjWUhZRoNmhDKYGUfZRoD4wCdjSUc2JHQAAAAAAAAABLAIeUdWJoPCmBlH2UKGg/jA9mbl9wYXNzX3Rocm91Z2iUaEGMAnY2lIWUaDZoQymBlH2UaA+MAnY1lHNihZR1Ymg8KYGUfZQoaD+MA2NhdJRoQYwCdjeUhZRoNihLAGhDKYGUfZRoD4wCdjWUc2JoQymBlH2UaA+MAnYzlHNiaEMpgZR9lGgPjAJ2NJRzYnSUdWJoPCmBlH2UKGg/jARmdWxslGhBjAJ2OJSFlGg2SwKFlEe/8AAAAAAAAIaUdWJoPCmBlH2UKGg/jApodWJlcl9sb3NzlGhBjAJ2OZSFlGg2aEMpgZR9lGgPjAJ2M5RzYmhDKYGUfZRoD2iQc2KMA3N1bZSHlHViaDwpgZR9lChoP4wEdmlld5RoQYwDdjEwlIWUaDZoQymBlH2UaA9oUHNiSwZLAYaUhpR1Ymg8KYGUfZQoaD+MBXplcm9flGhBKWg2aEMpgZR9lGgPaKNzYoWUdWJoPCmBlH2UKGg/jA9uZXN0ZWRfZ3JhZF9tdWyUaEGMA3YxMZSFlGg2aEMpgZR9lGgPaFlzYkdACAAAAAAAAIaUdWJoPCmBlH2UKGg/jA9lbmFibGVfZ3JhZF9tdWyUaEGMA3YxMpSFlGg2aEMpgZR9lGgPjAJ4MZRzYkc/4AAAAAAAAIaUdWJ0lIwHcmV0dXJuc5Roumi6hpSMDGdyYWRfZW5hYmxlZJSJjAxyZXRhaW5fZ3JhcGiUiHViLg=='))

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
#     a0 = b0.as_strided((2,), (1,), 0)
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
#     v7 = torch.cat([v5, v3, v4], 0)
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
