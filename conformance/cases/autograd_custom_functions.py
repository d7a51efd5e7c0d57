"""Cases for specs/autograd.md's "Custom autograd Functions": a custom Function's backward in a
compiled program, and what it may write.

Expected gradients are worked out by hand, or computed by eager PyTorch on private copies.
"""

import torch

from aotspec.errors import UnsupportedError

from ..case import BackwardRaises, Case, Raises, Values
from ._autograd_common import _caller_writes_w, _leaves


class _DoublesItsGradientInPlace(torch.autograd.Function):
    """Forward: a copy of x; backward: doubles the incoming gradient in place and returns it."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        grad.mul_(2)
        return grad


def _incoming_gradient_written(a, b):
    return _DoublesItsGradientInPlace.apply(a * b) * 2


class _ScaledBySaved(torch.autograd.Function):
    """x * w, saving w for the backward."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        (w,) = ctx.saved_tensors
        return grad * w, None


def _scaled_by_saved(x, w):
    return _ScaledBySaved.apply(x, w)


class _CountsInSaved(torch.autograd.Function):
    """Forward: a copy of x, saving `counter`; backward: adds 1 to the counter it saved."""

    @staticmethod
    def forward(ctx, x, counter):
        ctx.save_for_backward(counter)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        (counter,) = ctx.saved_tensors
        counter.add_(1)
        return grad, None


def _counts_in_saved(x, counter):
    return _CountsInSaved.apply(x, counter)


class _ZeroesItsOutput(torch.autograd.Function):
    """Forward: 2x, saving the result; backward: zeroes the saved result (the caller's output)."""

    @staticmethod
    def forward(ctx, x):
        doubled = x * 2
        ctx.save_for_backward(doubled)
        return doubled

    @staticmethod
    def backward(ctx, grad):
        (doubled,) = ctx.saved_tensors
        doubled.zero_()
        return grad * 2


def _zeroes_its_output(x):
    return _ZeroesItsOutput.apply(x)


_CUSTOM_FUNCTIONS_COMPILED_ONLY = {
    "reference-eager": "the eager interpreter refuses custom Functions a gradient reaches "
    "(capture.custom-function.eager-interpreter)"
}


CASES = [
    Case(
        name="autograd.custom-function-writes-its-incoming-gradient",
        rules=["autograd.custom-function"],
        setup=lambda: _leaves(a=torch.ones(3), b=torch.ones(3)),
        args=["a", "b"],
        program=_incoming_gradient_written,
        backward=True,
        # the Function receives 2 (from * 2), doubles it to 4 in place and returns it: a.grad =
        # 4 * b (PyTorch's test_backward_mutation_on_grad_out)
        expect=[Values("a.grad", [4.0, 4.0, 4.0]), Values("b.grad", [4.0, 4.0, 4.0])],
        skip=_CUSTOM_FUNCTIONS_COMPILED_ONLY,
    ),
    Case(
        name="autograd.custom-function-saved-input-written-before-the-backward",
        rules=["autograd.custom-function", "autograd.saved-inputs.version"],
        setup=lambda: {"x": torch.ones(3, requires_grad=True), "w": torch.full((3,), 2.0)},
        args=["x", "w"],
        program=_scaled_by_saved,
        backward=True,
        before_backward=_caller_writes_w,
        # w, saved by ctx.save_for_backward, is the caller's tensor: eager's backward refuses it
        expect=[
            Values("out0", [2.0, 2.0, 2.0]),
            BackwardRaises(RuntimeError, match="modified by an inplace operation"),
        ],
        skip=_CUSTOM_FUNCTIONS_COMPILED_ONLY,
    ),
    Case(
        name="autograd.custom-function-backward-writes-an-input",
        rules=["autograd.custom-function.backward-writes"],
        setup=lambda: {"x": torch.ones(3, requires_grad=True), "counter": torch.zeros(3)},
        args=["x", "counter"],
        program=_counts_in_saved,
        backward=True,
        # eager's backward adds 1 to the caller's counter (PyTorch's test_backward_mutation_data)
        expect=[
            Values("out0", [1.0, 1.0, 1.0]),
            Values("counter", [1.0, 1.0, 1.0]),
            Values("x.grad", [1.0, 1.0, 1.0]),
        ],
        skip=_CUSTOM_FUNCTIONS_COMPILED_ONLY,
    ),
    Case(
        name="autograd.custom-function-backward-writing-an-output-is-refused",
        rules=["autograd.custom-function.backward-writes", "boundary.failed-call"],
        setup=lambda: {"x": torch.ones(3, requires_grad=True)},
        args=["x"],
        program=_zeroes_its_output,
        expect=[Raises(UnsupportedError, rule="autograd.custom-function.backward-writes")],
        skip={
            **_CUSTOM_FUNCTIONS_COMPILED_ONLY,
            "torch-eager": "eager's backward zeroes the caller's output; the spec refuses it",
        },
    ),
]
