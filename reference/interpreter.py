"""The evaluator: runs a graph of aten ops on the reference's storage model, one node at a time.

An environment loop in the style of `torch.fx.Interpreter.boxed_run` and JAX's `eval_jaxpr`:
each node reads its arguments from the environment, runs its op table entry, writes its value,
and every value is dropped right after its last use (`r[memory.eager.last-use]`), so the ledger
sees exactly when each storage dies. It depends on no compile pass: the eager interpreter
(`eager.py`), its autograd tape and the compiled runtime (`compiled.py`) all run graphs here.

Conventions: `node` is an fx Node, `env` maps nodes to values (Tensor cells, tuples of them, or
Python constants), `entry` is an OpEntry.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from operator import getitem
from typing import Any, Protocol

import numpy as np
import torch
import torch.fx
import torch.utils._pytree as pytree

from aotspec.errors import InternalError, UnsupportedError
from aotspec.versions import add_note

from .aten import run_aten
from .boundary import storage_from_torch
from .custom_functions import custom_function_call
from .graph import source_line
from .ledger import Ledger
from .lifetimes import last_uses
from .optable import CLONES_STORAGE, OpEntry, OpKind, bind
from .storage import REDUCED_FLOATS, WIDE_UNSIGNED, Layout, SparseCoo, Storage, Tensor
from .symbols import SizeBinding, meta_at_sizes


class Runnable(Protocol):
    """What the interpreter runs: a `CapturedProgram` or a `GraphProgram`."""

    graph_module: torch.fx.GraphModule
    entries: dict[torch.fx.Node, OpEntry]


#: Runs one op: (node, its table entry, the environment, the ledger) -> the node's value.
OpCall = Callable[[torch.fx.Node, OpEntry | None, dict, Ledger], Any]


def interpret(
    program: Runnable,
    inputs: list[Tensor],
    ledger: Ledger,
    call: OpCall | None = None,
    sizes: SizeBinding | None = None,
):
    """Run the graph on reference tensors; returns the graph outputs (held for the caller).

    `call` runs one op: `call_op`, or the autograd tape's wrapper of it. A symbolic plan's graph
    runs at the `sizes` of its call (`r[sizes.symbolic.per-call]`).
    """
    if call is None:
        call = call_op if not sizes else functools.partial(call_op, sizes=sizes)
    graph_module = program.graph_module
    graph = graph_module.graph
    env: dict[torch.fx.Node, Any] = {}
    dies_at = last_uses(graph)
    placeholders = iter(inputs)
    outputs: list = []
    for node in graph.nodes:
        ledger.begin_step(node.name)
        if node.op == "placeholder":
            env[node] = next(placeholders)
        elif node.op == "get_attr":
            env[node] = _constant(getattr(graph_module, node.target), node.name)
        elif node.op == "call_function":
            env[node] = call(node, program.entries.get(node), env, ledger)
        elif node.op == "output":
            outputs = [env[value] for value in node.args[0]]
            each_tensor(outputs, ledger.hold)  # the caller holds what is returned
        else:
            raise InternalError(f"unexpected node kind {node.op} in a graph: {node.format_node()}")
        if node.op != "output":
            each_tensor(env[node], ledger.hold)
        for dead in dies_at[node]:  # r[memory.eager.last-use]
            each_tensor(env.pop(dead), ledger.release)
        ledger.end_step()
    return outputs


def each_tensor(value, action) -> None:
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, Tensor):
            action(leaf)
        elif isinstance(leaf, SparseCoo):
            for part in leaf.parts:  # r[ops.aten-values.sparse-gradient]: its parts' storages
                action(part)


def _constant(value, name: str):
    """A tensor constant of the graph as a reference tensor; another object (a generator) as it
    is."""
    if not isinstance(value, torch.Tensor):
        return value
    return Tensor(storage_from_torch(value.untyped_storage()), Layout.of(value), name=name)


def call_op(
    node: torch.fx.Node,
    entry: OpEntry | None,
    env,
    ledger: Ledger,
    sizes: SizeBinding | None = None,
):
    """Run one node's op on the values of its arguments in `env`, at the call's `sizes` where the
    graph's are symbols."""
    args = torch.fx.node.map_arg(node.args, env.__getitem__)
    if node.target is getitem:
        container, index = args
        return container[index]
    if node.target is custom_function_call:
        # r[capture.custom-function]: on values, the identity on the Function's outputs (a plan
        # without autograd keeps the node)
        return tuple(args[2])
    kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
    if entry.kind is OpKind.SIZE:
        return entry.rule(*args, **kwargs)  # r[sizes.symbolic.arithmetic]
    bound = bind(node.target._schema, args, kwargs)
    meta = _meta(node, sizes)
    try:
        if _reads_sparse(node, entry, bound):  # r[ops.aten-values.sparse-gradient]
            return _named(run_aten(node.target, meta, *bound), node.name)
        if entry.kind is OpKind.COMPUTE and _aten_valued_dtype(bound, meta):
            # r[ops.complex.aten-values], r[memory.layout.unsigned]
            return _named(run_aten(node.target, meta, *bound), node.name)
        if entry.kind is OpKind.COMPUTE and _clones_storage(node.target, bound):
            return _on_a_clone_of_the_storage(node.target, bound, meta, node.name)
        if entry.kind is OpKind.COMPUTE:
            values = entry.rule(*pytree.tree_map(_read_for_compute, bound))
            return _fresh(values, meta, node.name)
        if entry.kind in (OpKind.ATEN, OpKind.COLLECTIVE):
            return _named(entry.rule(node.target, meta, *bound), node.name)
        if entry.kind is OpKind.VIEW:
            return _view(entry.rule(bound[0].layout, *bound[1:]), bound[0], meta, node.name)
        if entry.kind is OpKind.INPLACE and _aten_valued_dtype(bound, meta):
            # r[ops.complex.aten-values], r[memory.layout.unsigned]: the functional op's kernel,
            # written back
            bound[0].write(run_aten(entry.functional, meta, *bound).read())
            return bound[0]
        if entry.kind is OpKind.INPLACE:
            target = bound[0]
            target.write(entry.rule(*pytree.tree_map(_read_for_compute, bound)))
            return target
        if entry.kind is OpKind.EFFECT:
            return entry.rule(ledger, *bound)
        if entry.kind is OpKind.OPAQUE:
            return entry.rule(ledger, node.target, *bound)
    except (InternalError, RuntimeError, IndexError, ValueError) as error:
        add_note(error, f"while executing {node.format_node()}")
        raise
    raise InternalError(f"op table entry of unknown kind: {entry}")


def _meta(node: torch.fx.Node, sizes: SizeBinding | None):
    """The node's traced value, at the call's sizes (r[sizes.symbolic.per-call])."""
    meta = node.meta.get("val")
    return meta_at_sizes(meta, sizes) if sizes else meta


def _reads_sparse(node: torch.fx.Node, entry: OpEntry, bound) -> bool:
    """r[ops.aten-values.sparse-gradient]: whether the op reads a sparse gradient, which only a
    value rule, the table's or ATen's, may read (ATen's kernel computes it then)."""
    if not any(isinstance(leaf, SparseCoo) for leaf in pytree.tree_leaves(bound)):
        return False
    if entry.kind not in (OpKind.COMPUTE, OpKind.ATEN):
        raise UnsupportedError(
            f"{node.target} views, writes or acts on the sparse gradient an ATen kernel gave "
            f"({source_line(node)})",
            rule="ops.aten-values.sparse-gradient",
            fix="make the parameter's gradient dense (sparse=False), or compute this part "
            "outside the compiled function",
        )
    return True


def _aten_valued_dtype(bound, meta) -> bool:
    """Whether a tensor argument or output of the op is complex (`r[ops.complex.aten-values]`)
    or a wide unsigned integer (`r[memory.layout.unsigned]`): its values are ATen's."""
    leaves = pytree.tree_leaves([bound, meta])
    tensors = [leaf for leaf in leaves if isinstance(leaf, Tensor | torch.Tensor)]
    return any(t.dtype.is_complex or t.dtype in WIDE_UNSIGNED for t in tensors)


def _read_for_compute(value):
    """Tensor arguments become arrays; reduced-precision floats widen to float32
    (r[ops.opmath])."""
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
        parts = zip(values, meta, strict=True)
        return tuple(_fresh(v, m, f"{name}[{i}]") for i, (v, m) in enumerate(parts))
    # Sized from the layout, not from the fake storage: tracing may have resized that one since.
    layout = Layout.of(meta)
    out = Tensor(Storage.zeros(layout.extent_bytes()), layout, name=name)
    out.write(values, fresh=True)  # r[ops.fresh-output]: even through overlapping strides
    return out


def _clones_storage(overload, bound) -> bool:
    return overload in CLONES_STORAGE and not bound[0].layout.has_internal_overlap()


def _on_a_clone_of_the_storage(overload, bound, meta, name: str) -> Tensor:
    """r[ops.fresh-output.cloned-storage]: the result is laid out as the first argument, on a
    copy of that argument's whole storage, and the op writes its values there: `copy` through
    the result's layout, `as_strided_scatter` through its window, whose offset counts from the
    storage's start (bytes past the argument's extent keep the argument's storage's bytes)."""
    x, src = bound[0], bound[1]
    clone = Tensor(Storage(x.storage.buffer.copy()), x.layout, name=name)
    if overload is torch.ops.aten.copy.default:
        clone.write(src.read())
    else:
        size, stride, offset = bound[2:]
        window = Layout(x.layout.dtype, tuple(size), tuple(stride), offset or 0)
        Tensor(clone.storage, window).write(src.read())
    layout = Layout.of(meta)
    if layout == x.layout:
        return clone
    # r[ops.fresh-output.meta-layout]: the values, laid out as the meta value says
    out = Tensor(Storage.zeros(max(x.storage.nbytes, layout.extent_bytes())), layout, name=name)
    out.write(clone.read())
    return out


def _named(value, name: str):
    """ATen-valued outputs take the node's name, as `_fresh` gives compute outputs theirs."""
    cells = []
    each_tensor(value, cells.append)
    for i, cell in enumerate(cells):
        cell.name = name if len(cells) == 1 else f"{name}[{i}]"
    return value


def _view(layouts, base: Tensor, meta, name: str):
    """r[aliasing.view.shares-storage]: the output reads the base's storage through a new
    layout."""
    if isinstance(layouts, tuple):
        parts = zip(layouts, meta, strict=True)
        return tuple(_view(layout, base, m, f"{name}[{i}]") for i, (layout, m) in enumerate(parts))
    if meta is not None and not layouts.addresses_like(Layout.of(meta)):
        raise InternalError(
            f"view rule of {name} gives {layouts}, PyTorch's meta kernel gives {Layout.of(meta)}"
        )
    return Tensor(base.storage, layouts, name=name)
