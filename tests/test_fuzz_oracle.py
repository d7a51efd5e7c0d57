"""The fuzzer's oracle judges the version counters of the caller's tensors: whether a call
advanced each, as eager's ops do (`r[functionalize.epilogue.version]`)."""

from __future__ import annotations

import pytest
import torch

import aotspec
from aotspec.fuzz.oracle import call_and_backward, compare


def _adds_one(x, y):
    x.add_(1)
    return y * 2


def _inputs():
    named = {"x": torch.zeros(3), "y": torch.ones(3)}
    return named, list(named.values())


def _outcome(fn):
    named, args = _inputs()
    return call_and_backward(fn, named, args)


def test_a_counter_eager_leaves_but_the_compiler_advances_is_a_difference():
    def advances_y_too(x, y):
        out = _adds_one(x, y)
        torch.autograd.graph.increment_version(y)
        return out

    found = compare(_outcome(_adds_one), _outcome(advances_y_too))
    assert found == ["y._version: expected unchanged by the call, got advanced"]


def test_a_counter_eager_advances_but_the_compiler_leaves_is_a_difference():
    def writes_behind_autograd(x, y):
        x.data.add_(1)  # .data has a counter of its own: x's stays
        return y * 2

    found = compare(_outcome(_adds_one), _outcome(writes_behind_autograd))
    assert found == ["x._version: expected advanced by the call, got unchanged"]


def test_advancing_once_where_eager_advances_twice_is_no_difference():
    def adds_twice(x, y):
        x.add_(1)
        x.sub_(1)
        return y * 2

    def adds_nothing_once(x, y):
        x.add_(0)
        return y * 2

    assert compare(_outcome(adds_twice), _outcome(adds_nothing_once)) == []


def _transposes_a_detached_alias(x, y):
    x.detach().t_()
    return y * 2


def _sets_itself(x, y):
    x.set_(x)
    return y + 1


def _writes_through_a_rebound_tensor(x, y):
    y.set_(x)
    y.mul_(3)
    return x + 1


@pytest.mark.parametrize("backend", ["reference", "fast"])
@pytest.mark.parametrize(
    "program", [_transposes_a_detached_alias, _sets_itself, _writes_through_a_rebound_tensor]
)
def test_the_backends_advance_the_counters_eager_advances(program, backend):
    expected = _outcome(program)
    assert any(expected.advanced.values()) and not all(expected.advanced.values())
    assert compare(expected, _outcome(aotspec.compile(program, backend=backend))) == []


def _empty_view_at(start: int):
    def program(x, y):
        return (x * 2)[:, start:start]

    return program


def _two_columns():
    named = {"x": torch.zeros(4, 2), "y": torch.ones(3)}
    return named, list(named.values())


def test_the_offset_of_an_output_with_no_elements_is_not_judged():
    """r[memory.layout.unaddressed-strides]: an empty view's offset addresses nothing; eager
    and the meta kernels put it at different places when the strides it steps by address nothing
    (fuzz seeds 22 and 42). An output with elements is still judged by its offset."""
    empty = [call_and_backward(_empty_view_at(s), *_two_columns()) for s in (1, 2)]
    assert compare(*empty) == []
    rows = [call_and_backward(lambda x, y, s=s: (x * 2)[s:], *_two_columns()) for s in (1, 2)]
    assert "out0.offset: expected 2, got 4" in compare(*rows)
