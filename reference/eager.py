"""The reference eager interpreter: runs a captured mutable graph with eager PyTorch semantics.

An environment loop in the style of `torch.fx.Interpreter.boxed_run` and JAX's `eval_jaxpr`:
each node reads its arguments from the environment, runs its op table entry, writes its value,
and every value is dropped right after its last use (`r[memory.eager.last-use]`), so the ledger
sees exactly when each storage dies. With grad mode on and an input that requires grad, each op runs
through the autograd tape of `reference/eager_autograd.py`, which records what the backward needs.

Conventions: `node` is an fx Node, `env` maps nodes to values (Tensor cells, tuples of them, or
Python constants), `entry` is an OpEntry.
"""

from __future__ import annotations

from operator import getitem
from typing import Any

import numpy as np
import torch
import torch.fx
import torch.utils._pytree as pytree
from attrs import define

from aotspec.errors import InternalError

from .boundary import Boundary, storage_from_torch
from .capture import Program, capture
from .eager_autograd import Tape, connect, hooks_silenced_while_tracing
from .ledger import Ledger
from .lifetimes import last_uses
from .optable import OpEntry, OpKind, bind
from .storage import REDUCED_FLOATS, Layout, Storage, Tensor


@define
class EagerRun:
    """What one eager run returns: the user's outputs (torch) and the ledger of the run."""

    outputs: Any
    ledger: Ledger
    program: Program
    #: With autograd: the backward's ledger, once `.backward()` has run the tape.
    backward_ledger: Ledger | None = None
    #: Storages (ledger ids) of the values the tape saved, which the backward took over.
    saved_storages: frozenset[int] = frozenset()


def run(fn, *args, **kwargs) -> EagerRun:
    """Capture `fn` on these arguments and run it on the reference, like eager PyTorch would."""
    with hooks_silenced_while_tracing():
        program = capture(fn, args, kwargs)
    return execute(program, args, kwargs)


def execute(program: Program, args, kwargs) -> EagerRun:
    boundary = Boundary()
    callers = program.tensor_inputs(args, kwargs)
    inputs = [boundary.import_tensor(t, name=node.name) for t, node in zip(callers, _placeholders(program), strict=True)]
    ledger = Ledger()
    for cell in inputs:
        ledger.hold(cell)  # the caller holds its arguments for the whole call
    tape = Tape.needed(inputs, callers, ledger)
    input_storages = [cell.storage for cell in inputs]
    with np.errstate(all="ignore"):  # inf and nan are values here, as in PyTorch
        outputs = interpret(program, inputs, ledger, call=_call if tape is None else tape.call)
    boundary.apply_to_caller()
    if tape is not None:
        tape.note_callers_after_call(input_storages, callers)
    torch_outputs = [boundary.export(value) for value in outputs]
    run = EagerRun(None, ledger, program)
    if tape is not None:
        torch_outputs = connect(tape, outputs, torch_outputs, run)
    run.outputs = program.unflatten_outputs(torch_outputs)
    return run


def _placeholders(program: Program) -> list[torch.fx.Node]:
    return [node for node in program.graph.nodes if node.op == "placeholder"]


def interpret(program: Program, inputs: list[Tensor], ledger: Ledger, call=None) -> list:
    """Run the graph on reference tensors; returns the graph outputs (held for the caller).

    `call(node, entry, env, ledger)` runs one op (`_call`, or the autograd tape's wrapper of it).
    """
    call = _call if call is None else call
    graph_module = program.graph_module
    env: dict[torch.fx.Node, Any] = {}
    dies_at = last_uses(program.graph)
    placeholders = iter(inputs)
    outputs: list = []
    for node in program.graph.nodes:
        ledger.begin_step(node.name)
        if node.op == "placeholder":
            env[node] = next(placeholders)
        elif node.op == "get_attr":
            env[node] = _constant(getattr(graph_module, node.target), node.name)
        elif node.op == "call_function":
            env[node] = call(node, program.entries.get(node), env, ledger)
        elif node.op == "output":
            outputs = [env[value] for value in node.args[0]]
            _each_tensor(outputs, ledger.hold)  # the caller holds what is returned
        else:
            raise InternalError(f"unexpected node kind {node.op} in a captured graph: {node.format_node()}")
        if node.op != "output":
            _each_tensor(env[node], ledger.hold)
        for dead in dies_at[node]:
            _each_tensor(env.pop(dead), ledger.release)
        ledger.end_step()
    return outputs


def _each_tensor(value, action) -> None:
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, Tensor):
            action(leaf)


def _constant(value: torch.Tensor, name: str) -> Tensor:
    return Tensor(storage_from_torch(value.untyped_storage()), Layout.of(value), name=name)


def _call(node: torch.fx.Node, entry: OpEntry | None, env, ledger: Ledger):
    args = torch.fx.node.map_arg(node.args, env.__getitem__)
    if node.target is getitem:
        container, index = args
        return container[index]
    kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
    bound = bind(node.target._schema, args, kwargs)
    meta = node.meta.get("val")
    try:
        if entry.kind is OpKind.COMPUTE:
            return _fresh(entry.rule(*pytree.tree_map(_read_for_compute, bound)), meta, node.name)
        if entry.kind is OpKind.VIEW:
            return _view(entry.rule(bound[0].layout, *bound[1:]), bound[0], meta, node.name)
        if entry.kind is OpKind.INPLACE:
            target = bound[0]
            target.write(entry.rule(*pytree.tree_map(_read_for_compute, bound)))
            return target
        if entry.kind is OpKind.EFFECT:
            return entry.rule(ledger, *bound)
        if entry.kind is OpKind.OPAQUE:
            return entry.rule(ledger, node.target, *bound)
    except (InternalError, RuntimeError, IndexError, ValueError) as error:
        error.add_note(f"while executing {node.format_node()}")
        raise
    raise InternalError(f"op table entry of unknown kind: {entry}")


def _read_for_compute(value):
    """Tensor arguments become arrays; reduced-precision floats widen to float32 (r[ops.opmath])."""
    if not isinstance(value, Tensor):
        return value
    values = value.read()
    return values.astype(np.float32) if value.dtype in REDUCED_FLOATS else values


def _fresh(values, meta, name: str):
    """r[ops.fresh-output]: new storages, laid out as the meta value says, holding `values`; None
    for an output the op leaves undefined (native_layer_norm_backward's masked gradients)."""
    if meta is None:
        return None
    if isinstance(meta, (tuple, list)):
        return tuple(_fresh(v, m, f"{name}[{i}]") for i, (v, m) in enumerate(zip(values, meta, strict=True)))
    # Sized from the layout, not from the fake storage: tracing may have resized that one since.
    layout = Layout.of(meta)
    out = Tensor(Storage.zeros(layout.extent_bytes()), layout, name=name)
    out.write(values)
    return out


def _view(layouts, base: Tensor, meta, name: str):
    """r[aliasing.view.shares-storage]: the output reads the base's storage through a new layout."""
    if isinstance(layouts, tuple):
        return tuple(_view(layout, base, m, f"{name}[{i}]") for i, (layout, m) in enumerate(zip(layouts, meta, strict=True)))
    if meta is not None and not layouts.addresses_like(Layout.of(meta)):
        raise InternalError(f"view rule of {name} gives {layouts}, PyTorch's meta kernel gives {Layout.of(meta)}")
    return Tensor(base.storage, layouts, name=name)
