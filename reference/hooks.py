"""Saved-tensor hooks in compiled programs: traced once, inlined into the forward and backward
graphs.

`specs/saved-tensor-hooks.md`, section "Compiled calls". After the partition
(`reference/autograd.py`) a training plan's forward returns its outputs and then the saved values,
and its backward takes the saved values and then the tangents. For each saved value the filter
selects (`r[hooks.filter.donated]`, `r[hooks.filter.no-static]`, `r[hooks.filter.all]`):
1. `pack` is traced on a tensor like the saved value; its ops go into the forward right after the
   value's last forward use, and the forward returns pack's tensors in the value's place
   (`r[hooks.place.pack-after-last-use]`), so the original dies there;
2. `unpack` is traced on pack's result (its non-tensor parts are constants,
   `r[hooks.compiled.constants]`); its ops go into the backward right before the first op that
   reads the saved value, which then reads unpack's result
   (`r[hooks.place.unpack-before-first-use]`); where unpack returns another dtype, the backward
   is typed again from it (`r[hooks.compiled.unpack-dtype]`).
Each pass visits every node once; tracing is cached per saved-tensor layout.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import types
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

import torch
import torch.fx
import torch.utils._pytree as pytree
from attrs import evolve, frozen
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from aotspec.errors import HooksWarning, UnsupportedError

from .capture import capture
from .graph import GraphProgram, graph_module, output_node
from .optable import OpKind
from .plan_records import InlinedHook, Placement, Plan
from .program_records import TENSOR, CapturedProgram


@frozen
class SavedTensorHooks:
    """The (pack, unpack) pair of a `torch.autograd.graph.saved_tensors_hooks` context."""

    pack: Callable
    unpack: Callable

    @classmethod
    def active(cls) -> SavedTensorHooks | None:
        """The innermost active pair (`r[hooks.eager.innermost]`), or None."""
        hooks = torch._C._autograd._top_saved_tensors_default_hooks(True)
        return None if hooks is None else cls(*hooks)

    @property
    def key(self) -> tuple:
        """r[hooks.compiled.respecialize]: equal for pairs that compute the same thing, made
        anew or not; it holds what it compares by identity, so those identities stay unique."""
        return (_behaviour(self.pack, set()), _behaviour(self.unpack, set()))


#: Values a hook's closure or defaults hold that compare by value.
_BY_VALUE = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device)


@frozen(eq=False)
class _Same:
    """An object compared by identity (a tensor's `==` compares elements)."""

    value: object

    def __eq__(self, other) -> bool:
        return isinstance(other, _Same) and self.value is other.value

    def __hash__(self) -> int:
        return id(self.value)


def _behaviour(value, seen: set[int]):
    """What determines what `value` computes when called or read by a hook."""
    if isinstance(value, _BY_VALUE):
        return (type(value), value)
    if isinstance(value, tuple):
        return tuple(_behaviour(item, seen) for item in value)
    if isinstance(value, functools.partial):
        keywords = tuple(sorted((k, _behaviour(v, seen)) for k, v in value.keywords.items()))
        return ("partial", _behaviour(value.func, seen), _behaviour(value.args, seen), keywords)
    if isinstance(value, types.MethodType):
        return ("method", _behaviour(value.__func__, seen), _Same(value.__self__))
    if isinstance(value, types.FunctionType) and id(value) not in seen:
        seen.add(id(value))  # a function its own closure reaches is compared by identity
        cells = tuple(_cell_behaviour(cell, seen) for cell in value.__closure__ or ())
        defaults = _behaviour(value.__defaults__ or (), seen)
        keyword_defaults = tuple(
            sorted((k, _behaviour(v, seen)) for k, v in (value.__kwdefaults__ or {}).items())
        )
        seen.discard(id(value))
        return ("function", value.__code__, cells, defaults, keyword_defaults)
    return _Same(value)


def _cell_behaviour(cell, seen: set[int]):
    try:
        return _behaviour(cell.cell_contents, seen)
    except ValueError:  # a cell not yet filled
        return ("empty cell",)


FILTERS = ("donated", "no_static", "all")


@frozen
class _TracedHooks:
    """pack and unpack for one saved-value layout, as graphs."""

    pack: CapturedProgram
    unpack: CapturedProgram


def inline_hooks(
    plan: Plan,
    hooks: SavedTensorHooks,
    hooks_filter: str,
    static_inputs: frozenset[int],
    placement: Placement = Placement.LAST_USE,
) -> Plan:
    """`plan` with `hooks` inlined for the saved values `hooks_filter` selects."""
    forward, backward = plan.forward.graph, plan.backward.graph
    saved = _saved_nodes(forward, plan.num_saved)
    selected = _select(
        forward,
        saved,
        plan.num_saved,
        hooks_filter,
        static_inputs,
        frozenset(plan.differentiated.read_after_call),
    )
    if not selected:
        if hooks_filter == "donated":
            # r[hooks.filter.donated-empty]
            warnings.warn(
                "saved-tensor hooks are active, but hooks_filter='donated' selects no saved value "
                "(the forward saves only its inputs or outputs), so no hook applies "
                "[rule hooks.filter.donated-empty]. "
                "Pass hooks_filter='no_static' or 'all' to pack inputs too",
                HooksWarning,
                stacklevel=4,
            )
        return plan
    traced = _trace_all(hooks, [saved[j] for j in selected])
    new_forward, packed = _pack_in_forward(forward, saved, selected, traced, placement)
    unpacked, read_as_saved = _unpack_in_backward(
        backward, packed, {j: traced[saved[j]] for j in selected}, placement
    )
    new_backward = graph_module(plan.backward.graph_module, unpacked)
    _propagate_meta_values(new_backward, read_as_saved)
    differentiated = evolve(
        plan.differentiated,
        forward=GraphProgram.of(graph_module(plan.forward.graph_module, new_forward)),
        backward=GraphProgram.of(new_backward),
        num_saved=plan.num_saved - len(selected) + sum(len(names) for names in packed.values()),
    )
    return evolve(plan, differentiated=differentiated)


# ---------------------------------------------------------------- selection


def _saved_nodes(forward: torch.fx.Graph, num_saved: int) -> list[torch.fx.Node]:
    outputs = output_node(forward).args[0]
    return list(outputs[len(outputs) - num_saved :])


def _select(forward, saved, num_saved, hooks_filter, static_inputs, read_after_call) -> list[int]:
    """Indices (into `saved`) of the values the hooks apply to. An input the backward reads as the
    call left it is never packed: the forward only has it as it was when the call began
    (`r[hooks.filter.read-after-call]`)."""
    placeholders = {
        node: i for i, node in enumerate(n for n in forward.nodes if n.op == "placeholder")
    }
    outputs = output_node(forward).args[0]
    returned = set(outputs[: len(outputs) - num_saved])
    if hooks_filter == "all":  # r[hooks.filter.all]
        return [j for j, node in enumerate(saved) if placeholders.get(node) not in read_after_call]
    if hooks_filter == "no_static":  # r[hooks.filter.no-static]
        return [
            j
            for j, node in enumerate(saved)
            if placeholders.get(node) not in static_inputs | read_after_call
        ]
    # r[hooks.filter.donated]: intermediates the caller never sees
    return [j for j, node in enumerate(saved) if node not in placeholders and node not in returned]


# ---------------------------------------------------------------- tracing


def _trace_all(
    hooks: SavedTensorHooks, nodes: list[torch.fx.Node]
) -> dict[torch.fx.Node, _TracedHooks]:
    by_layout: dict[tuple, _TracedHooks] = {}
    traced = {}
    for node in nodes:
        value = node.meta["val"]
        key = (tuple(value.shape), value.stride(), value.storage_offset(), value.dtype)
        if key not in by_layout:
            by_layout[key] = _trace(hooks, value)
        traced[node] = by_layout[key]
    return traced


def _trace(hooks: SavedTensorHooks, saved_value) -> _TracedHooks:
    # r[hooks.compiled.traced]: traced on a tensor with the saved value's layout.
    pack = _capture_hook("pack", hooks.pack, (_like(saved_value),))
    packed_examples = [_like(node.meta["val"]) for node in output_node(pack.graph).args[0]]

    def unpack_leaves(*tensors):
        it = iter(tensors)
        leaves = [
            next(it) if leaf is TENSOR else leaf for leaf in pack.out_leaves
        ]  # r[hooks.compiled.constants]
        return hooks.unpack(pytree.tree_unflatten(leaves, pack.out_spec))

    unpack_leaves.__qualname__ = getattr(hooks.unpack, "__qualname__", repr(hooks.unpack))
    unpack = _capture_hook("unpack", unpack_leaves, packed_examples)
    result = output_node(unpack.graph).args[0]
    if unpack.out_leaves != (TENSOR,) or pytree.tree_unflatten([0], unpack.out_spec) != 0:
        _untraceable(
            "unpack", hooks.unpack, f"it returned {unpack.out_spec} instead of one tensor"
        )
    got = result[0].meta["val"]
    # r[hooks.compiled.untraceable]: the shape must be the saved one's; the dtype may change
    # (r[hooks.compiled.unpack-dtype])
    if tuple(got.shape) != tuple(saved_value.shape):
        _untraceable(
            "unpack",
            hooks.unpack,
            f"it returned a tensor of shape {tuple(got.shape)} for a saved tensor of shape "
            f"{tuple(saved_value.shape)}",
        )
    return _TracedHooks(pack, unpack)


def _capture_hook(which: str, hook: Callable, examples) -> CapturedProgram:
    try:
        program = capture(hook, tuple(examples))
    except Exception as error:  # noqa: BLE001  (any failure to trace is the user's to fix)
        _untraceable(which, hook, f"{type(error).__name__}: {error}")
    mutating = [
        node.name
        for node, entry in program.entries.items()
        if entry.kind in (OpKind.INPLACE, OpKind.EFFECT)
    ]
    if mutating:
        _untraceable(which, hook, f"it mutates tensors in place ({', '.join(mutating)})")
    return program


def _untraceable(which: str, hook: Callable, reason: str):
    name = getattr(hook, "__qualname__", repr(hook))
    raise UnsupportedError(
        f"the saved-tensor {which} hook {name} cannot be inlined: {reason}",
        rule="hooks.compiled.untraceable",
        fix=(
            "write pack and unpack with tensor ops only (no .item(), .tolist(), .numpy() or "
            "branching on tensor values; pack returns tensors and constants, unpack one tensor "
            "of the saved one's shape), or call the compiled function outside "
            "saved_tensors_hooks"
        ),
    )


def _like(value: torch.Tensor) -> torch.Tensor:
    """A tensor with `value`'s dtype, shape, strides and storage offset."""
    span = (
        0
        if value.numel() == 0
        else 1 + sum((n - 1) * s for n, s in zip(value.shape, value.stride(), strict=True))
    )
    storage = torch.empty(value.storage_offset() + span, dtype=value.dtype, device=value.device)
    return storage.as_strided(value.shape, value.stride(), value.storage_offset())


def _propagate_meta_values(module: torch.fx.GraphModule, read_as_saved: dict) -> None:
    """Recompute every node's meta value: the backward's ops now read unpacked tensors, whose
    layout (strides, offset) may differ from the saved value's, and so may their dtype.
    `read_as_saved` maps each unpack's result to the meta value of the saved value the backward
    was traced on."""
    before = {node: _dtypes(node.meta.get("val")) for node in module.graph.nodes}
    retyped = any(before[node] != _dtypes(value) for node, value in read_as_saved.items())
    before |= {node: _dtypes(value) for node, value in read_as_saved.items()}
    mode = FakeTensorMode()
    inputs = [
        mode.from_tensor(_like(node.meta["val"]))
        for node in module.graph.nodes
        if node.op == "placeholder"
    ]
    try:
        # r[hooks.compiled.unpack-dtype]: each op's result takes the dtype its kernel computes
        # from its arguments' dtypes, unpack's results included
        with _fake_kernel_failures_unlogged() if retyped else contextlib.nullcontext():
            FakeTensorProp(module, mode).propagate_dont_convert_inputs(*inputs)
    except Exception as error:
        if not retyped:
            raise
        first_line = str(error).splitlines()[0]
        _refuse_retyping(read_as_saved, f"an op rejects the dtypes it now reads ({first_line})")
    if retyped:
        _check_retyped(module.graph, before, read_as_saved)


@contextlib.contextmanager
def _fake_kernel_failures_unlogged():
    """Fake tensors log a meta kernel's failure with its traceback; where the dtypes an unpack
    gives are rejected, the refusal (`r[hooks.compiled.unpack-dtype.refused]`) says it instead."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _dtypes(value) -> tuple[torch.dtype, ...]:
    """The dtypes of the tensors in a meta value."""
    leaves = pytree.tree_leaves(value)
    return tuple(leaf.dtype for leaf in leaves if isinstance(leaf, torch.Tensor))


def _check_retyped(graph: torch.fx.Graph, before: dict, read_as_saved: dict) -> None:
    """r[hooks.compiled.unpack-dtype.refused]: typed again from unpack's results, every other
    value of the backward keeps the dtype it was traced with, and no op reading an unpack's
    result names the saved dtype."""
    for node in graph.nodes:
        if node.op == "output" or node in read_as_saved:
            continue
        after = _dtypes(node.meta.get("val"))
        if after != before[node]:
            _refuse_retyping(
                read_as_saved,
                f"{node.name} would compute in {_listed(after)} where the backward was traced "
                f"in {_listed(before[node])} (a derivative written as separate ops rounds in "
                "the dtype of each, and eager's engine casts each gradient to its value's dtype)",
            )
        named = {
            leaf
            for leaf in pytree.tree_leaves((node.args, node.kwargs))
            if isinstance(leaf, torch.dtype)
        }
        fixed = [
            value.name
            for value in node.all_input_nodes
            if value in read_as_saved and named & set(before[value])
        ]
        if fixed:
            _refuse_retyping(
                read_as_saved,
                f"{node.name} reads {fixed[0]} and names the saved dtype in its traced arguments "
                "(a dtype= read from the saved tensor is fixed when the backward is traced)",
            )


def _listed(dtypes: tuple[torch.dtype, ...]) -> str:
    return ", ".join(str(dtype) for dtype in dtypes)


def _refuse_retyping(read_as_saved: dict, reason: str) -> NoReturn:
    # r[hooks.compiled.unpack-dtype.refused]
    retyped = [
        node.name
        for node, value in read_as_saved.items()
        if _dtypes(node.meta.get("val")) != _dtypes(value)
    ]
    raise UnsupportedError(
        f"the saved-tensor unpack hook returns another dtype than the saved one "
        f"({', '.join(retyped)}), and the backward cannot be typed again from it: {reason}",
        rule="hooks.compiled.unpack-dtype.refused",
        fix="have unpack return the saved tensor's dtype (cast back with .to(dtype)), or pick a "
        "hooks_filter that leaves that saved value alone",
    )


# ---------------------------------------------------------------- inlining


def _pack_in_forward(forward, saved, selected, traced, placement):
    """A copy of `forward` with each selected value packed; returns it and, per selected saved
    index, the new graph's nodes holding pack's tensors."""
    chosen = {saved[j] for j in selected}
    pack_after = _pack_points(forward, chosen, placement)
    new = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    packed_nodes: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for node in forward.nodes:
        if node.op == "output":
            break
        env[node] = new.node_copy(node, env.__getitem__)
        for value in pack_after.get(node, ()):
            packed_nodes[value] = _inline(
                new, traced[value].pack, [env[value]], InlinedHook("pack", value.name)
            )
    for value in pack_after.get(None, ()):  # PyTorch's placement, kept for comparisons
        packed_nodes[value] = _inline(
            new, traced[value].pack, [env[value]], InlinedHook("pack", value.name)
        )
    outputs = output_node(forward).args[0]
    user_outputs = [env[node] for node in outputs[: len(outputs) - len(saved)]]
    saved_outputs: list[torch.fx.Node] = []
    packed: dict[int, list[str]] = {}
    for j, node in enumerate(saved):
        if j in selected:
            packed[j] = [leaf.name for leaf in packed_nodes[node]]
            saved_outputs.extend(packed_nodes[node])
        else:
            saved_outputs.append(env[node])
    new.output(user_outputs + saved_outputs)
    return new, packed


def _pack_points(forward, chosen, placement) -> dict[torch.fx.Node | None, list[torch.fx.Node]]:
    """node -> the chosen values to pack right after it (None: right before the output)."""
    if placement is Placement.FORWARD_END:
        return {None: [node for node in forward.nodes if node in chosen]}
    last_use: dict[torch.fx.Node, torch.fx.Node] = {}
    last_placeholder = None
    for node in forward.nodes:
        if node.op == "placeholder":
            last_placeholder = node
        if node in chosen:
            last_use[node] = node
        if node.op == "call_function":
            for used in node.all_input_nodes:
                if used in chosen:
                    last_use[used] = node
    points: dict[torch.fx.Node | None, list[torch.fx.Node]] = {}
    for value, node in last_use.items():
        # Inputs are packed after the last placeholder: the graph's inputs come first.
        point = last_placeholder if node.op == "placeholder" else node
        points.setdefault(point, []).append(value)  # r[hooks.place.pack-after-last-use]
    return points


def _inline(
    graph: torch.fx.Graph, hook: CapturedProgram, arguments: list[torch.fx.Node], mark: InlinedHook
) -> list[torch.fx.Node]:
    """Copy `hook`'s graph into `graph` on `arguments`, each copy marked with `mark`; returns the
    nodes of its tensor outputs."""
    env: dict[torch.fx.Node, Any] = {}
    inputs = iter(arguments)
    for node in hook.graph.nodes:
        if node.op == "placeholder":
            env[node] = next(inputs)
        elif node.op == "output":
            results = [env[result] for result in node.args[0]]
        else:
            env[node] = graph.node_copy(node, env.__getitem__)
            env[node].meta["saved_tensor_hook"] = mark
    name = f"{mark.value}_{mark.hook}ed"
    fresh = [result for result in results if result not in arguments]
    for k, result in enumerate(fresh):
        result._rename(f"{name}_{k}" if len(fresh) > 1 else name)
    return results


def _unpack_in_backward(backward, packed, traced, placement):
    """A copy of `backward` taking pack's tensors (`packed`, by saved index) for each selected
    saved value, with its unpack (`traced`, by saved index) inlined right before the value's first
    use; and a map from each unpack's result to the saved value's meta value."""
    new = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    pending: dict[
        torch.fx.Node, list[torch.fx.Node]
    ] = {}  # saved placeholder -> its packed inputs
    unpack_of: dict[torch.fx.Node, CapturedProgram] = {}
    read_as_saved: dict[torch.fx.Node, Any] = {}
    placeholders = [node for node in backward.nodes if node.op == "placeholder"]
    for j, node in enumerate(placeholders):
        if j not in packed:
            env[node] = new.placeholder(node.name)
            env[node].meta = dict(node.meta)
            continue
        pending[node] = [new.placeholder(name) for name in packed[j]]
        for placeholder, source in zip(
            pending[node], output_node(traced[j].pack.graph).args[0], strict=True
        ):
            placeholder.meta = dict(source.meta)
        unpack_of[node] = traced[j].unpack

    def unpack(node):
        mark = InlinedHook("unpack", node.name)
        (result,) = _inline(new, unpack_of[node], pending.pop(node), mark)
        env[node] = result
        read_as_saved[result] = node.meta.get("val")

    if placement is Placement.FORWARD_END:
        for node in list(pending):
            unpack(node)
    for node in backward.nodes:
        if node.op == "placeholder":
            continue
        for used in node.all_input_nodes:
            if used in pending:
                unpack(used)  # r[hooks.place.unpack-before-first-use]
        if node.op == "output":
            new.output(torch.fx.node.map_arg(node.args[0], env.__getitem__))
        else:
            env[node] = new.node_copy(node, env.__getitem__)
    return new, read_as_saved
