"""A compiled training plan saves what eager autograd saves for softmax, log_softmax and
layer_norm (`r[hooks.eager.saved-set]`, `r[autograd.partition.saved]`).

These ops are op table entries of their own, not decompositions, so the values between the
forward and the backward graph are what their derivative rules read: softmax's and
log_softmax's result, layer_norm's input, weight, bias, mean and rstd (the rules call the backward
ops eager calls, with the same arguments). Eager's saved tensors are recorded with a pack hook;
the plan's are the last `num_saved` outputs of its forward graph.

One difference from eager is expected, where a test says so. Views: eager saves a tensor as the
op saw it, the plan saves a view's base (`r[autograd.partition.recompute-views]`). `matmul` on a
3-D tensor multiplies 2-D views of it, so eager saves the 2-D view of the input where the plan
saves the 3-D input, and layer_norm's 3-D view of the product where the plan saves the 2-D
product: same elements, other shapes.
"""

from __future__ import annotations

from collections import Counter

import torch
import torch.nn.functional as F

import aotspec

GENERATOR = torch.Generator().manual_seed(3)


def make(*shape, requires_grad=False):
    return torch.randn(shape, generator=GENERATOR).requires_grad_(requires_grad)


def eager_saves(fn, *args) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """(shape, dtype) of each tensor eager autograd saves while running `fn`."""
    saved = []

    def pack(t):
        saved.append((tuple(t.shape), t.dtype))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    return saved


def compiled_saves(fn, *args) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """(shape, dtype) of each value the compiled training plan saves for its backward."""
    compiled = aotspec.compile(fn, backend="reference")
    compiled(*args)
    (plan,) = compiled.plans.values()
    (outputs,) = next(reversed(plan.forward.graph.nodes)).args
    saved = [node.meta["val"] for node in outputs[len(outputs) - plan.num_saved :]]
    assert all(isinstance(value, torch.Tensor) for value in saved), (
        "a multi-output op is saved whole"
    )
    return [(tuple(value.shape), value.dtype) for value in saved]


def numels(saves) -> Counter:
    return Counter((torch.Size(shape).numel(), dtype) for shape, dtype in saves)


def softmax_loss(x, w):
    return torch.softmax(x @ w, -1).sum()


def log_softmax_loss(x, w):
    return F.log_softmax(x @ w, 0).sum()


def test_softmax_saves_its_result_as_eager_does():
    """mm saves x and w, softmax its (8, 6) result: not the scores, exps and sums as well."""
    args = make(8, 5, requires_grad=True), make(5, 6, requires_grad=True)
    expected = eager_saves(softmax_loss, *args)
    assert Counter(expected) == Counter(
        [((8, 5), torch.float32), ((5, 6), torch.float32), ((8, 6), torch.float32)]
    )
    assert Counter(expected) == Counter(compiled_saves(softmax_loss, *args))


def test_log_softmax_saves_its_result_as_eager_does():
    args = make(8, 5), make(5, 6, requires_grad=True)
    assert Counter(eager_saves(log_softmax_loss, *args)) == Counter(
        compiled_saves(log_softmax_loss, *args)
    )


def layer_norm_loss(x, w, weight, bias):
    return F.layer_norm(x @ w, (6,), weight, bias).sum()


def test_layer_norm_saves_input_weight_bias_and_statistics_as_eager_does():
    """On 2-D inputs: eager's saves are the plan's, shape for shape."""
    x, w = make(8, 5), make(5, 6, requires_grad=True)
    weight, bias = make(6, requires_grad=True), make(6, requires_grad=True)
    expected = eager_saves(layer_norm_loss, x, w, weight, bias)
    # x for w's gradient; the product, weight, bias, mean and rstd for layer_norm's.
    saves = [
        ((8, 5), torch.float32),
        ((8, 6), torch.float32),
        ((6,), torch.float32),
        ((6,), torch.float32),
    ]
    saves += [((8, 1), torch.float32), ((8, 1), torch.float32)]
    assert Counter(expected) == Counter(saves)
    assert Counter(expected) == Counter(compiled_saves(layer_norm_loss, x, w, weight, bias))


def test_layer_norm_without_affine_saves_input_and_statistics():
    args = make(8, 5), make(5, 6, requires_grad=True), None, None
    assert Counter(eager_saves(layer_norm_loss, *args)) == Counter(
        compiled_saves(layer_norm_loss, *args)
    )


def test_on_3d_inputs_the_saves_differ_from_eager_by_views_only():
    """matmul on 3-D x saves 2-D views in eager, their bases in the plan: the same elements."""
    x, w = make(2, 4, 5), make(5, 6, requires_grad=True)
    weight, bias = make(6, requires_grad=True), make(6, requires_grad=True)
    expected = eager_saves(layer_norm_loss, x, w, weight, bias)
    actual = compiled_saves(layer_norm_loss, x, w, weight, bias)
    assert Counter(expected) != Counter(actual)
    assert numels(expected) == numels(actual)


def test_attention_scores_are_saved_once():
    """softmax(q @ k^T) @ v: the plan saves the probabilities once, for softmax's backward and the
    second bmm's alike, where eager packs them once for each; q and k differ from eager by
    views."""

    def attention(q, k, v):
        return (torch.softmax(q @ k.transpose(-2, -1), -1) @ v).sum()

    args = [make(2, 4, 3, requires_grad=True) for _ in range(3)]
    actual = compiled_saves(attention, *args)
    assert 1 == actual.count(((2, 4, 4), torch.float32))
    assert numels(eager_saves(attention, *args)) - numels(actual) == Counter(
        {(32, torch.float32): 1}
    )
