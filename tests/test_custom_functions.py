"""Custom autograd.Functions in compiled programs (`specs/capture.md`, "Custom autograd
Functions"; `specs/autograd.md`, "Custom autograd Functions"), against eager PyTorch.

Each program runs eagerly and compiled (`reference`, `fast`, and Dynamo with aotspec behind it)
through `verify` or `same_as_eager` (tests/aotdispatch/verify.py): outputs, aliasing, the inputs
after the call and after the backward, and gradients must agree. The refusals are checked by
their rule.
"""

from __future__ import annotations

import pytest
import torch

import aotspec
from aotspec import versions
from aotspec.fuzz.strategies.functions import Product, Scaled

from aotdispatch.verify import BACKENDS, randn, same_as_eager, verify

COMPILED = ("reference", "fast")


class TwoOutputs(torch.autograd.Function):
    """(2x, 3x, x > 0); the mask is an integer-like output, so not differentiable."""

    @staticmethod
    def forward(ctx, x):
        return x * 2, x * 3, x > 0

    @staticmethod
    def backward(ctx, doubled_grad, tripled_grad, mask_grad):
        return doubled_grad * 2 + tripled_grad * 3


class FirstRow(torch.autograd.Function):
    """x[0], a view of the input; the backward triples the gradient."""

    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x[0]

    @staticmethod
    def backward(ctx, grad):
        result = grad.new_zeros(ctx.shape)
        result[0] = grad * 3
        return result


class ReturnsSaved(torch.autograd.Function):
    """The backward returns the saved w itself as x's gradient."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(w)
        return x * 1

    @staticmethod
    def backward(ctx, grad):
        (w,) = ctx.saved_tensors
        return w, None


class CountsInSaved(torch.autograd.Function):
    """2x; the backward adds 1 to the counter it saved."""

    @staticmethod
    def forward(ctx, x, counter):
        ctx.save_for_backward(counter)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (counter,) = ctx.saved_tensors
        counter.add_(1)
        return grad * 2, None


class KeywordScale(torch.autograd.Function):
    """setup_context style, with a keyword argument that has a default."""

    @staticmethod
    def forward(x, scale=2.0):
        return x * scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.scale = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


#: A reference to apply taken before compiling, as libraries write `my_op = MyFunction.apply`.
scaled = Scaled.apply


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn, make",
    [
        (lambda x: Scaled.apply(x, 3.0) + 1, lambda: [randn(3, rg=True)]),
        (lambda x, y: Product.apply(x, y), lambda: [randn(2, 3, rg=True), randn(3)]),
        (lambda x: TwoOutputs.apply(x), lambda: [randn(3, rg=True)]),
        (lambda x: FirstRow.apply(x), lambda: [randn(2, 3, rg=True)]),
        (lambda x: FirstRow.apply(x * 1)[1:] * 2, lambda: [randn(2, 3, rg=True)]),
        (lambda x: Scaled.apply(x, 2.0)[0].add_(1), lambda: [randn(2, 3, rg=True)]),
        (lambda x, w: ReturnsSaved.apply(x, w), lambda: [randn(3, rg=True), randn(3)]),
        (lambda x, c: CountsInSaved.apply(x, c[1]), lambda: [randn(3, rg=True), randn(2, 3)]),
        (lambda x: KeywordScale.apply(x, scale=5.0), lambda: [randn(3, rg=True)]),
    ],
    ids=[
        "constant-on-ctx",
        "saved-inputs-broadcast",
        "several-outputs",
        "view-of-the-input",
        "view-of-a-view-output",
        "fresh-output-written-through-a-view",
        "backward-returns-a-saved-tensor",
        "backward-writes-a-view-of-an-input",
        "setup-context-keyword",
    ],
)
def test_agrees_with_eager(fn, make, backend):
    verify(fn, make, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_apply_taken_before_compiling(backend):
    """A reference to apply taken before compiling: capture sees it through torch 2.13 and agrees
    with eager; from torch 2.14 it cannot see it, and refuses it by name, the caller's tensor
    untouched (r[capture.custom-function.refused]). Dynamo traces the Function itself."""
    if backend == "dynamo" or versions.apply_references_intercepted():
        verify(lambda x: scaled(x, 3.0), lambda: [randn(3, rg=True)], backend)
        return
    x = randn(3, rg=True)
    before = x.detach().clone()
    with pytest.raises(aotspec.UnsupportedError, match="taken before the call") as raised:
        aotspec.compile(lambda x: scaled(x, 3.0), backend=backend)(x)
    assert raised.value.rule == "capture.custom-function.refused"
    torch.testing.assert_close(x.detach(), before)
    assert x.grad is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_unreached_function_writes_nothing(backend):
    """r[autograd.custom-function.backward-writes]: a backward that reaches only the other
    output does not run the Function, so its write into the counter is not made."""

    def fn(x, counter):
        return CountsInSaved.apply(x, counter), x * 3

    def run(call, rec):
        x, counter = randn(3, rg=True), torch.zeros(3)
        _, tripled = call(x, counter)
        tripled.sum().backward()
        rec("counter", counter)
        rec("x.grad", x.grad)

    same_as_eager(fn, run, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_called_under_no_grad_with_enable_grad_inside(backend):
    def fn(x):
        with torch.enable_grad():
            return Scaled.apply(x, 5.0)

    def run(call, rec):
        x = randn(3, rg=True)
        with torch.no_grad():
            y = call(x)
        rec("requires_grad", y.requires_grad)
        y.sum().backward()
        rec("x.grad", x.grad)

    same_as_eager(fn, run, backend)


class MaterializeOff(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad


class SameTensorTwice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        doubled = x * 2
        return doubled, doubled

    @staticmethod
    def backward(ctx, first, second):
        return first


class ResizesInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, buffer):
        ctx.save_for_backward(buffer)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (buffer,) = ctx.saved_tensors
        torch.ops.inductor.resize_storage_bytes_(buffer, 0)
        return grad * 2, None


@pytest.mark.parametrize("backend", COMPILED)
@pytest.mark.parametrize(
    "fn, args, match",
    [
        (lambda x: MaterializeOff.apply(x), lambda: [randn(3, rg=True)], "set_materialize"),
        (lambda x: SameTensorTwice.apply(x), lambda: [randn(3, rg=True)], "twice"),
        (
            lambda x, b: ResizesInBackward.apply(x, b),
            lambda: [randn(3, rg=True), randn(3)],
            "resizes a storage",
        ),
    ],
    ids=["materialize-grads-off", "a-tensor-returned-twice", "backward-resizes"],
)
def test_refused(fn, args, match, backend):
    """r[capture.custom-function.refused]; the caller's tensors stay as they were."""
    tensors = args()
    before = [t.detach().clone() for t in tensors]
    with pytest.raises(aotspec.UnsupportedError, match=match) as raised:
        aotspec.compile(fn, backend=backend)(*tensors)
    assert raised.value.rule == "capture.custom-function.refused"
    for t, old in zip(tensors, before, strict=True):
        torch.testing.assert_close(t.detach(), old)


@pytest.mark.parametrize("backend", COMPILED)
def test_backward_writing_a_stolen_input_is_refused(backend):
    """r[boxed.steal.read-only]: a stolen activation is given away; a backward cannot write it."""

    def fn(x, activations):
        return CountsInSaved.apply(x, activations[0])

    with pytest.raises(aotspec.UnsupportedError) as raised:
        aotspec.compile(fn, backend=backend, steal="activations")(
            randn(3, rg=True), [torch.zeros(3)]
        )
    assert raised.value.rule == "boxed.steal.read-only"


def test_backward_traced_once():
    """r[capture.custom-function.backward]: the backward's Python runs while compiling, not at
    each backward."""
    calls = []

    class Counted(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            calls.append(1)
            return grad * 2

    compiled = aotspec.compile(lambda x: Counted.apply(x), backend="fast")
    for _ in range(3):
        x = randn(3, rg=True)
        compiled(x).sum().backward()
        torch.testing.assert_close(x.grad, torch.full((3,), 2.0))
    assert len(calls) == 1
