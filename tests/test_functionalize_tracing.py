"""Functionalization traces on the fake tensors capture ran the program on, where converting the
caller's tensors again would give the same facts and autograd state (`_traced_as_captured` in
reference/functionalize.py): the functional program is the one a fresh conversion gives.

Compared: every node of the functional graph (op, target, arguments, its value's layout, dtype and
grad flags, grad mode) and the records beside it. Autograd's global sequence numbers
(`meta["seq_nr"]`) are left out: they count the autograd nodes made so far in the process, which
converting makes too.
"""

from __future__ import annotations

from unittest import mock

import attrs
import pytest
import torch
from hypothesis import given, settings

from aotspec.errors import UnsupportedError
from aotspec.reference import functionalize as functionalize_module
from aotspec.reference.capture import capture
from aotspec.reference.functionalize import functionalize
from aotspec.reference.pipeline import as_after_requires_grad

from strategies.grad import grad_programs
from strategies.mutations import programs
from strategies.program import Program, as_function, build_inputs, source


def _value(v) -> str:
    if isinstance(v, torch.Tensor):
        return (
            f"T({tuple(v.shape)}, {v.stride()}, {v.storage_offset()}, {v.dtype}, "
            f"requires_grad={v.requires_grad}, leaf={v.is_leaf}, view={v._is_view()})"
        )
    if isinstance(v, (list, tuple)):
        return f"[{', '.join(map(_value, v))}]"
    return repr(v)


def _record(x) -> str:
    """A record as text, the members of its sets and keys of its dicts in order."""
    if attrs.has(type(x)):
        fields = (f"{f.name}={_record(getattr(x, f.name))}" for f in attrs.fields(type(x)))
        return f"{type(x).__name__}({', '.join(fields)})"
    if isinstance(x, (set, frozenset)):
        return f"{{{', '.join(sorted(map(_record, x)))}}}"
    if isinstance(x, dict):
        return f"{{{', '.join(sorted(f'{_record(k)}: {_record(v)}' for k, v in x.items()))}}}"
    if isinstance(x, (list, tuple)):
        return f"[{', '.join(map(_record, x))}]"
    return repr(x)


def _described(program) -> list[str]:
    """The functional program as text, node by node, then its records."""
    lines = [
        f"{node.name} = {node.op} {node.target} {node.args} {node.kwargs} "
        f"{_value(node.meta.get('val'))} grad_enabled={node.meta.get('grad_enabled')}"
        for node in program.graph_module.graph.nodes
    ]
    records = (program.inputs, program.epilogue, program.outputs, program.stand_ins)
    return lines + [_record(record) for record in records]


def _both_ways(fn, args: list[torch.Tensor]) -> tuple[list[str], list[str]] | None:
    """The functional program traced on capture's fakes where they serve, and traced on the
    inputs converted again; None where the program is refused."""
    try:
        captured = capture(fn, args)
        tensors = as_after_requires_grad(captured.requires_grad_inputs, args)
        reused = functionalize(captured, tensors)
        with mock.patch.object(functionalize_module, "_traced_as_captured", lambda *_: None):
            converted = functionalize(captured, tensors)
    except UnsupportedError:
        return None
    return _described(reused), _described(converted)


def _check(program: Program) -> None:
    _, args = build_inputs(program.setup)
    found = _both_ways(as_function(program), args)
    if found is not None:
        reused, converted = found
        assert converted == reused, source(program)


@settings(max_examples=40, deadline=None)
@given(programs(compiled=True))
def test_mutation_programs_functionalize_alike_on_captures_fakes(program):
    _check(program)


@settings(max_examples=40, deadline=None)
@given(grad_programs())
def test_grad_programs_functionalize_alike_on_captures_fakes(program):
    _check(program)


def _write_view_under_no_grad(v):
    with torch.no_grad():
        v.mul_(2)
    return v + 1


def _write_view_with_grad(v, w):
    v.mul_(w)
    return v + 1


@pytest.mark.parametrize("program", [_write_view_under_no_grad, _write_view_with_grad])
def test_a_written_view_without_history_is_traced_on_as_captured(program):
    """A view the program wrote without giving it a history (under no_grad, or with values that
    need no gradient) has none after it, as the caller's view converts to: the replay traces on
    the fakes capture ran the program on."""
    args = [torch.arange(6.0)[1:4], torch.ones(3)][: program.__code__.co_argcount]
    captured = capture(program, args)
    assert captured.advanced_inputs == (0,)  # the view was written
    assert functionalize_module._traced_as_captured(captured, args) is not None
    reused, converted = _both_ways(program, args)
    assert converted == reused


def test_a_view_written_with_history_is_converted_again():
    """A view the program wrote with grad mode on has a history of the program's: the replay
    traces on the caller's view converted again."""
    v = (torch.arange(6.0, requires_grad=True) * 1)[1:4]
    w = torch.ones(3, requires_grad=True)
    captured = capture(_write_view_with_grad, [v, w])
    assert functionalize_module._traced_as_captured(captured, [v, w]) is None
