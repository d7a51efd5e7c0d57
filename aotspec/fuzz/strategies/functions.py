"""Custom autograd.Functions the generated programs apply (`r[capture.custom-function]`).

Each wraps a small computation with a hand-written, correct backward, in one of the ways user code
writes them: a constant kept on ctx, tensors saved with `ctx.save_for_backward` (inputs, or the
result), `ctx.needs_input_grad`, the input returned as it is (eager makes the output a view of
it), a backward that writes into the gradient it receives, and an output marked
non-differentiable. Printed programs and repros carry their source (`functions_source`).
"""

from __future__ import annotations

import functools
import inspect

import torch


class Scaled(torch.autograd.Function):
    """x * c, with the number c kept on ctx."""

    @staticmethod
    def forward(ctx, x, c):
        ctx.c = c
        return x * c

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.c, None


class Product(torch.autograd.Function):
    """x * y (broadcasting), saving both; the engine sums each gradient to its input's shape."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        x_grad = grad * y if ctx.needs_input_grad[0] else None
        y_grad = grad * x if ctx.needs_input_grad[1] else None
        return x_grad, y_grad


class Exp(torch.autograd.Function):
    """exp(x), saving the result."""

    @staticmethod
    def forward(ctx, x):
        result = x.exp()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad):
        (result,) = ctx.saved_tensors
        return grad * result


class TanhOfSaved(torch.autograd.Function):
    """tanh(x), saving x and recomputing tanh in the backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.tanh()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (1 - x.tanh() ** 2)


class PassThrough(torch.autograd.Function):
    """x itself (eager returns a view of x whose gradient is this Function's)."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class DoubledGradInPlace(torch.autograd.Function):
    """2x; the backward doubles the gradient it receives in place (the generator gives it a
    gradient of its own: eager's result depends on who else reads a gradient written so)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        grad.mul_(2)
        return grad


class HalvedAndDoubled(torch.autograd.Function):
    """(x / 2, 2x), the second marked non-differentiable: its gradient is zeros."""

    @staticmethod
    def forward(ctx, x):
        doubled = x * 2
        ctx.mark_non_differentiable(doubled)
        return x * 0.5, doubled

    @staticmethod
    def backward(ctx, halved_grad, doubled_grad):
        return halved_grad * 0.5 + doubled_grad


def mul_with_grad_inside_no_grad(x, c):
    """x * c under torch.enable_grad() inside torch.no_grad(): recorded whatever the caller's
    grad mode. Written with `with` blocks: Dynamo (torch 2.13) cannot capture the decorators
    nested as one expression, `torch.no_grad()(torch.enable_grad()(torch.mul))`."""
    with torch.no_grad():
        with torch.enable_grad():
            return torch.mul(x, c)


#: Op name in programs -> the plain function it calls, printed with the program as Functions are.
HELPERS = {"nested_grad_mul": mul_with_grad_inside_no_grad}

#: Op name in programs -> the Function it applies.
FUNCTIONS: dict[str, type[torch.autograd.Function]] = {
    "fn_scaled": Scaled,
    "fn_product": Product,
    "fn_exp": Exp,
    "fn_tanh": TanhOfSaved,
    "fn_pass_through": PassThrough,
    "fn_doubled_grad": DoubledGradInPlace,
    "fn_halved_and_doubled": HalvedAndDoubled,
}


def functions_source(ops: set[str]) -> str:
    """The source of the Functions and helpers these ops call, to print with a program."""
    return "\n\n".join(_source_of(op) for op in sorted(ops) if op in FUNCTIONS or op in HELPERS)


@functools.cache
def _source_of(op: str) -> str:
    """The source of the Function or helper `op` calls, read once: every program that calls it
    prints it (`inspect.getsource` was 3% of judging a fuzz program)."""
    return inspect.getsource({**FUNCTIONS, **HELPERS}[op])
