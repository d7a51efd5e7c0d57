"""The fast backend's runtime (`fast/runtime.py`) where a plan's values share storages: which
outputs it version-checks before the backward, against the reference's ledger."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.autograd.forward_ad as forward_ad

import aotspec
from aotspec.errors import SpecViolation

BACKENDS = ["reference", "fast"]


def _exp_viewed(x):
    y = x.exp()  # exp's backward reads its result
    return y.view(2, 2)


def _exp_split_unsafely(x):
    y = x.exp()
    first, _ = torch.ops.aten.unsafe_split.Tensor(y, 2)  # views its schema does not declare
    return first


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("program", [_exp_viewed, _exp_split_unsafely])
def test_an_output_on_a_saved_values_storage_written_before_the_backward_raises(backend, program):
    """r[autograd.saved-outputs.version]: the output lies on the storage of a value the
    backward reads (a view of it, or a result of an op whose schema hides that it is one); a
    write into it between the call and the backward raises before any gradient is computed."""
    x = torch.tensor([0.0, 1.0, 2.0, 3.0], requires_grad=True)
    out = aotspec.compile(program, backend=backend)(x)
    with torch.no_grad():
        out.add_(1)
    with pytest.raises(SpecViolation, match="modified by an inplace operation"):
        out.sum().backward()
    assert x.grad is None


def _linear_relu(x, w, b):
    return torch.nn.functional.linear(x, w, b).relu()


def _linear_inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return tuple(torch.randn(*shape, requires_grad=True) for shape in [(5, 4), (3, 4), (3,)])


def _facts(t: torch.Tensor) -> tuple:
    return t.stride(), t._is_view(), t.requires_grad, t.grad_fn is None


def test_gradients_are_the_views_eager_returns():
    """The backward graph's ops run with autograd's kernels skipped, yet a gradient that eager
    returns as a view (a weight's, the transpose of a transpose of mm's result; a bias's, sum's
    keepdim result viewed) is a view, of eager's strides, without history, sharing its base's
    version counter. (The reference computes its gradients on bytes: none is a view.)"""
    inputs = _linear_inputs()
    expected = torch.autograd.grad(_linear_relu(*inputs).sum(), inputs)
    compiled = aotspec.compile(_linear_relu, backend="fast")
    grads = torch.autograd.grad(compiled(*inputs).sum(), inputs)
    assert [_facts(g) for g in expected] == [_facts(g) for g in grads]
    for grad, eager in zip(grads, expected, strict=True):
        torch.testing.assert_close(grad, eager, rtol=0, atol=0)
        if grad._is_view():
            version = grad._base._version
            grad.mul_(1)
            assert version + 1 == grad._base._version


def test_forward_mode_tangents_of_incoming_gradients_reach_the_gradients():
    """A backward whose incoming gradient carries a forward-mode tangent (forward over reverse)
    gives gradients whose tangents are eager's: the backward graph's ops, on torch tensors, run
    through autograd's kernels, which carry it. (The reference's graph, on bytes, drops it.)"""
    inputs = _linear_inputs()
    compiled = aotspec.compile(_linear_relu, backend="fast")
    tangents = []
    for function in (_linear_relu, compiled):
        out = function(*inputs)
        with forward_ad.dual_level():
            incoming = forward_ad.make_dual(torch.ones(5, 3), torch.full((5, 3), 2.0))
            grads = torch.autograd.grad(out, inputs, incoming)
            tangents.append([forward_ad.unpack_dual(g).tangent for g in grads])
    for expected, got in zip(*tangents, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def _only_plan(compiled):
    (fast,) = compiled.plans.values()
    return fast


def _two_outputs(x, w, b):
    y = torch.nn.functional.linear(x, w, b)
    return y.relu(), y.sigmoid()


def test_a_plain_plan_runs_its_written_out_call_with_eager_observables():
    """A step whose plan holds nothing but its graphs runs through the call written out for it
    (`fast/plain.py`): values and gradients as eager's (their layouts and views too), a saved
    input written between the call and the backward refused, a second backward refused unless
    the first retained the graph, and a backward that reaches one output of two (handed to the
    skeleton) as eager's."""
    inputs = _linear_inputs()
    compiled = aotspec.compile(_linear_relu, backend="fast")
    out = compiled(*inputs)
    assert callable(_only_plan(compiled).runner)
    assert not isinstance(_only_plan(compiled).runner, functools.partial)  # written out
    expected = torch.autograd.grad(_linear_relu(*inputs).sum(), inputs)
    grads = torch.autograd.grad(out.sum(), inputs, retain_graph=True)
    assert [_facts(g) for g in expected] == [_facts(g) for g in grads]
    for grad, eager in zip(grads, expected, strict=True):
        torch.testing.assert_close(grad, eager, rtol=0, atol=0)
    torch.autograd.grad(out.sum(), inputs)  # retained once: a second backward runs
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        torch.autograd.grad(out.sum(), inputs)
    out = compiled(*inputs)
    with torch.no_grad():
        inputs[1].mul_(1)  # the weight, which the backward reads
    with pytest.raises(SpecViolation, match="modified by an inplace operation"):
        out.sum().backward()
    inputs = _linear_inputs()
    first, _ = aotspec.compile(_two_outputs, backend="fast")(*inputs)
    eager_first, _ = _two_outputs(*inputs)
    grads = torch.autograd.grad(first.sum(), inputs)
    expected = torch.autograd.grad(eager_first.sum(), inputs)
    for grad, eager in zip(grads, expected, strict=True):
        torch.testing.assert_close(grad, eager, rtol=0, atol=0)


def test_a_plan_with_an_epilogue_runs_through_the_skeleton():
    """A training step that writes an input (an epilogue) is not plain: its call is the
    skeleton's `run_plan`, and the write reaches the caller's tensor."""

    def scale_(x, w):
        x.mul_(2)
        return (x * w).sum()

    x, w = torch.ones(3), torch.ones(3, requires_grad=True)
    compiled = aotspec.compile(scale_, backend="fast")
    compiled(x, w).backward()
    assert isinstance(_only_plan(compiled).runner, functools.partial)
    assert [2.0, 2.0, 2.0] == x.tolist()
    assert [2.0, 2.0, 2.0] == w.grad.tolist()
