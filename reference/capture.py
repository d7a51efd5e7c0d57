"""Capture: a user's function and example inputs become an aten-level torch.fx graph.

`r[capture.aten-graph]`: the graph is what `make_fx` records on fake tensors, with composite ops
decomposed by PyTorch's own decomposition tables (the list below) and every mutation kept
(`add_`, `copy_`, `set_.source_Tensor`, `inductor.resize_storage_bytes_`).
`r[capture.detach-in-place]`: `detach_()`, which no kernel sees, is recorded as its own node.
`r[capture.no-side-effects]`: tracing runs on fake tensors, so the caller's tensors are never
written, resized or rebound by capture.
`r[capture.flat-inputs]`: arguments are flattened with pytree; tensor leaves become placeholders
in order, other leaves are baked into the program as constants.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
from collections.abc import Callable
from operator import getitem
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from attrs import define, frozen
from torch._decomp import get_decompositions
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot, make_fx
from torch.overrides import TorchFunctionMode

from aotspec.errors import UnsupportedError

from . import effects, ops  # noqa: F401  (importing them fills the op table)
from .optable import OpEntry, lookup

aten = torch.ops.aten

# Composite ops that reach make_fx's dispatch and decompose into ops of the table.
DECOMPOSED = [
    aten.gelu,
    aten.silu,
    aten.stack,
    aten.addcmul,
    aten.addcdiv,
    aten.lerp,
    aten.hardtanh,
    aten.leaky_relu,
    aten.softplus,
    aten.mv,
    aten.dot,
    aten.square,
    aten.rsub,
    aten.masked_fill,
    aten.log_sigmoid_forward,
    aten.elu,
    aten.hardsigmoid,
    aten.hardswish,
    aten.mish,
    aten.logsumexp,
    aten.mse_loss,
    # In-place forms (F.silu(x, inplace=True), x.masked_fill_(...), optimizer updates):
    # the functional decomposition followed by copy_.
    aten.silu_,
    aten.masked_fill_,
    aten.leaky_relu_,
    aten.hardtanh_,
    aten.elu_,
    aten.hardsigmoid_,
    aten.hardswish_,
    aten.mish_,
    aten.addcmul_,
    aten.addcdiv_,
    aten.lerp_,
]
DECOMPOSITIONS = get_decompositions(DECOMPOSED)


class GradModes:
    """The grad mode each node of a graph being traced by make_fx was recorded under
    (`r[capture.grad-mode]`): `note` the mode whenever it changes; `annotate` the graph after."""

    def __init__(self):
        self._initial = torch.is_grad_enabled()
        #: (number of nodes in the traced graph at the change, grad mode from there on)
        self._changes: list[tuple[int, bool]] = []

    def note(self, enabled: bool) -> None:
        self._changes.append((len(get_proxy_mode().tracer.graph.nodes), enabled))

    def annotate(self, graph: torch.fx.Graph) -> None:
        changes = iter(self._changes + [(math.inf, None)])
        at, next_mode = next(changes)
        mode = self._initial
        for k, node in enumerate(graph.nodes):
            while k >= at:
                mode = next_mode
                at, next_mode = next(changes)
            node.meta["grad_enabled"] = mode


@frozen
class _RequiresGradCall:
    """`tensor.requires_grad_(flag)` changing the flag, after `position` nodes of the graph."""

    tensor: torch.Tensor
    flag: bool
    position: int


class _WatchGradMode(TorchFunctionMode):
    """Notes the user function's grad-mode changes (`torch.no_grad()`, `set_grad_enabled`), and
    the `requires_grad_()` calls that change a tensor's flag (`r[autograd.requires-grad-inside]`);
    records `detach_()` calls (`r[capture.detach-in-place]`).
    """

    def __init__(self, modes: GradModes, requires_grad_calls: list[_RequiresGradCall]):
        super().__init__()
        self.modes = modes
        self.requires_grad_calls = requires_grad_calls
        #: Storages of tensors that require grad and that an in-place metadata op relaid out.
        self.relaid: set[int] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            result = self._call(func, args, kwargs)
        except (RuntimeError, ValueError) as error:
            self._refuse_stale_view(args, kwargs, error)
            raise
        if func in _METADATA_OPS and args[0].requires_grad:
            self.relaid.add(args[0].untyped_storage()._cdata)
        return result

    def _call(self, func, args, kwargs):
        if func is torch._C._set_grad_enabled:
            self.modes.note(bool(args[0]))
        elif func is torch._C.TensorBase.requires_grad_:
            flag = bool(args[1] if len(args) > 1 else kwargs.get("requires_grad", True))
            if flag != args[0].requires_grad:
                position = len(get_proxy_mode().tracer.graph.nodes)
                self.requires_grad_calls.append(_RequiresGradCall(args[0], flag, position))
        elif func in (torch._C.TensorBase.detach_, aten.detach_.default):
            result = func(*args, **kwargs)
            _record_detach_(args[0])
            return result
        return func(*args, **kwargs)

    def _refuse_stale_view(self, args, kwargs, error: Exception) -> None:
        """r[capture.metadata-views]: fake tensors regenerate a view's history by replaying its
        view ops on its base, which may fail once an in-place metadata op relaid the base out
        (eager regenerates it by address)."""
        tensors = [a for a in pytree.tree_leaves((args, kwargs)) if _is_tensor(a)]
        if any(t._is_view() and t.untyped_storage()._cdata in self.relaid for t in tensors):
            raise UnsupportedError(
                "the function uses, with grad mode on, a view taken before an in-place metadata "
                "op (t_, transpose_, ...) changed the layout of the tensor it views; tracing "
                f"cannot regenerate that view's history ({error})",
                rule="capture.metadata-views",
                fix="take the view again after the in-place op, or use a view op (x.t()) "
                "instead of the in-place one",
            ) from None


#: The in-place metadata ops as the function calls them (`swapdims_` and `swapaxes_` included).
_METADATA_OPS = frozenset(
    getattr(torch._C.TensorBase, name)
    for name in ("t_", "transpose_", "swapdims_", "swapaxes_", "unsqueeze_", "squeeze_")
) | {torch._C.TensorBase.as_strided_}


def _record_detach_(t: torch.Tensor) -> None:
    """r[capture.detach-in-place]: a node `aten.detach_.default(t)` at the end of the graph so
    far (a tensor the trace does not follow, a constant, has nothing to record)."""
    tracer = get_proxy_mode().tracer
    slot = get_proxy_slot(t, tracer, None)
    if slot is not None:
        tracer.create_proxy("call_function", aten.detach_.default, (slot.proxy,), {})


def grad_enabled(node: torch.fx.Node) -> bool:
    """Whether `node` ran with grad mode on (`r[capture.grad-mode]`)."""
    return node.meta.get("grad_enabled", True)


class _TensorSlot:
    """Marks a flat leaf that is a tensor (a graph input or output) in Program's leaf tuples."""

    def __repr__(self) -> str:
        return "<tensor>"


TENSOR = _TensorSlot()


@frozen
class Program:
    """A captured program: the graph plus how to get from user arguments to it and back."""

    graph_module: torch.fx.GraphModule
    #: pytree spec of (args, kwargs) as the user passed them.
    in_spec: pytree.TreeSpec
    #: For each flat leaf of (args, kwargs): TENSOR if it is a graph input, else the constant.
    in_leaves: tuple[Any, ...]
    #: pytree spec of the user's return value.
    out_spec: pytree.TreeSpec
    #: For each flat leaf of the return value: TENSOR if it is a graph output, else the constant.
    out_leaves: tuple[Any, ...]
    #: Op table entry of every call_function node, looked up once at capture.
    entries: dict[torch.fx.Node, OpEntry]
    name: str
    #: Flat inputs the function calls `requires_grad_()` on (`r[autograd.requires-grad-inside]`).
    requires_grad_inputs: frozenset[int] = frozenset()

    @property
    def graph(self) -> torch.fx.Graph:
        return self.graph_module.graph

    def tensor_inputs(self, args, kwargs) -> list[torch.Tensor]:
        leaves, _ = pytree.tree_flatten((tuple(args), dict(kwargs)))
        return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]

    def unflatten_outputs(self, graph_outputs: list) -> Any:
        it = iter(graph_outputs)
        leaves = [next(it) if leaf is TENSOR else leaf for leaf in self.out_leaves]
        return pytree.tree_unflatten(leaves, self.out_spec)


@define
class _Returned:
    """How the traced function's return value is built from its tensors, found while tracing."""

    spec: pytree.TreeSpec | None = None
    leaves: tuple[Any, ...] = ()


def _is_tensor(leaf) -> bool:
    return isinstance(leaf, torch.Tensor)


def capture(fn: Callable, args, kwargs=None) -> Program:
    """Trace `fn(*args, **kwargs)` to an aten graph without touching the caller's tensors."""
    kwargs = {} if kwargs is None else kwargs
    # r[capture.flat-inputs]: tensor leaves are placeholders, the other leaves constants.
    leaves, in_spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    in_leaves = tuple(TENSOR if _is_tensor(leaf) else leaf for leaf in leaves)
    tensors = [leaf for leaf in leaves if _is_tensor(leaf)]
    returned = _Returned()
    grad_modes = GradModes()
    requires_grad_calls: list[_RequiresGradCall] = []
    requires_grad_inputs: set[int] = set()

    def flat_fn(*flat_tensors):
        it = iter(flat_tensors)
        rebuilt = [next(it) if leaf is TENSOR else leaf for leaf in in_leaves]
        call_args, call_kwargs = pytree.tree_unflatten(rebuilt, in_spec)
        histories_before = [_history(t) for t in flat_tensors]
        with _WatchGradMode(grad_modes, requires_grad_calls):
            result = fn(*call_args, **call_kwargs)
        out, out_spec = pytree.tree_flatten(result)
        outputs = [leaf for leaf in out if _is_tensor(leaf)]
        histories_after = [_history(t) for t in [*outputs, *flat_tensors]]
        _refuse_custom_functions(histories_after, histories_before)
        returned.spec = out_spec
        returned.leaves = tuple(TENSOR if _is_tensor(leaf) else leaf for leaf in out)
        requires_grad_inputs.update(_inputs_set_to_require_grad(requires_grad_calls, flat_tensors))
        return [leaf for leaf in out if _is_tensor(leaf)]

    # make_fx keeps stack traces only for frames of registered functions: register the user's.
    torch.fx.proxy._register_stack_trace_anchor(fn)
    graph_module = make_fx(
        flat_fn,
        decomposition_table=DECOMPOSITIONS,  # r[capture.aten-graph]
        tracing_mode="fake",  # r[capture.no-side-effects]: the caller's tensors are not run on
        record_stack_traces=True,
    )(*tensors)
    grad_modes.annotate(graph_module.graph)
    _drop_view_replays(graph_module)
    entries = {
        node: lookup(node.target, where=_source_line(node))
        for node in graph_module.graph.nodes
        if node.op == "call_function" and node.target is not getitem
    }
    return Program(
        graph_module=graph_module,
        in_spec=in_spec,
        in_leaves=in_leaves,
        out_spec=returned.spec,
        out_leaves=returned.leaves,
        entries=entries,
        name=getattr(fn, "__qualname__", repr(fn)),
        requires_grad_inputs=frozenset(requires_grad_inputs),
    )


def _inputs_set_to_require_grad(calls: list[_RequiresGradCall], inputs: tuple) -> set[int]:
    """r[autograd.requires-grad-inside]: the flat inputs that `requires_grad_()` sets to require
    grad before any op reads them; every other call changing a flag is refused."""
    graph = get_proxy_mode().tracer.graph
    index = {node: k for k, node in enumerate(graph.nodes)}
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    found: set[int] = set()
    for call in calls:
        which = {k for k, t in enumerate(inputs) if t is call.tensor}
        read_before = any(
            index[user] < call.position for k in which for user in placeholders[k].users
        )
        if call.flag and which and not read_before:
            found |= which
            continue
        if not which:
            problem = "a tensor the function made (or a view it took)"
        elif read_before:
            problem = f"flat input {min(which)} after an op read it"
        else:
            problem = f"flat input {min(which)}, which requires grad, to stop requiring it"
        raise UnsupportedError(
            f"the function calls requires_grad_() on {problem}",
            rule="autograd.requires-grad-inside",
            fix="call requires_grad_() on the caller's tensor before the call, or, inside the "
            "function, on an input before any op reads it",
        )
    return found


_HOOKS_INSIDE = "saved_tensors_hooks entered inside a function the reference captures"


@contextlib.contextmanager
def hooks_silenced_while_tracing(rule: str = "hooks.eager.innermost"):
    """Capture runs autograd on fake tensors: the caller's hooks must not fire on them. Hooks that
    the function enters itself cannot be attributed to ops of the captured graph, so they raise
    `UnsupportedError` naming `rule` (eager: `hooks.eager.innermost`; compiled:
    `hooks.compiled.traced`)."""
    previous = torch._C._autograd._saved_tensors_hooks_get_disabled_error_message()
    torch._C._autograd._saved_tensors_hooks_disable(_HOOKS_INSIDE, False)
    try:
        yield
    except RuntimeError as error:
        if str(error) != _HOOKS_INSIDE:
            raise
        raise UnsupportedError(
            "the function enters torch.autograd.graph.saved_tensors_hooks itself; the captured "
            "graph does not say which of its ops run inside the context",
            rule=rule,
            fix="enter the context around the call instead",
        ) from None
    finally:
        if previous is None:
            torch._C._autograd._saved_tensors_hooks_enable()
        else:
            torch._C._autograd._saved_tensors_hooks_disable(previous, False)


def _history(t: torch.Tensor):
    """The tensor's grad_fn; None when autograd refuses to regenerate it (a view made under
    torch.no_grad() whose base was written since): eager raises only where something reads it,
    and anything in the function that does raises the same while capturing. Nor can tracing
    regenerate the history of a view whose base an in-place metadata op relaid out since
    (`r[capture.metadata-views]`): a view the function returns is left so, and the ops the
    failed replay traced, which feed nothing, leave the graph."""
    graph = get_proxy_mode().tracer.graph
    before = len(graph.nodes)
    try:
        return t.grad_fn
    except (RuntimeError, ValueError):
        for node in list(itertools.islice(reversed(graph.nodes), len(graph.nodes) - before)):
            graph.erase_node(node)
        return None


def _refuse_custom_functions(after: list, before: list) -> None:
    """r[capture.custom-function]: a custom autograd.Function a gradient can reach from the
    outputs or the inputs' new histories (`after`) is refused (one walk over the autograd graph,
    which stops at the histories the inputs had `before` the call)."""
    seen: set = {node for node in before if node is not None}
    stack = [node for node in after if node is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            name = getattr(node._forward_cls, "__qualname__", type(node).__name__)
            raise UnsupportedError(
                f"the function applies the custom autograd.Function {name}, and a gradient can "
                "reach it: capture sees its forward's ops, not its backward",
                rule="capture.custom-function",
                fix="call it outside the compiled function, apply it under torch.no_grad(), or "
                "write it with ops whose derivatives the op table knows",
            )
        stack.extend(next_node for next_node, _ in node.next_functions if next_node is not None)


def _drop_view_replays(graph_module: torch.fx.GraphModule) -> None:
    """r[capture.view-replays]: after a write under torch.no_grad() into an input that is a view
    of a tensor requiring grad, autograd replays the view's history from its base, which the
    trace only has as a fake constant; those ops feed nothing the function computes."""
    graph = graph_module.graph
    made_up = {
        node.target
        for node in graph.nodes
        if node.op == "get_attr" and isinstance(getattr(graph_module, node.target), FakeTensor)
    }
    # A replay may read one made-up constant through several nodes (one per history regenerated).
    replays = [node for node in graph.nodes if node.op == "get_attr" and node.target in made_up]
    replayed = set().union(*(_computed_from(node) for node in replays))
    if any(user.op == "output" or _mutates(user) for user in replayed):
        raise UnsupportedError(
            "the function reads a tensor the trace made up while replaying a view's history",
            rule="capture.view-replays",
            fix="pass the view's base, and take the view inside the function",
        )
    for user in reversed(list(graph.nodes)):
        if user in replayed:
            graph.erase_node(user)
    for target in made_up:
        delattr(graph_module, target)
    graph_module.recompile()


def _mutates(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return schema is not None and schema.is_mutable


def _computed_from(node: torch.fx.Node) -> set[torch.fx.Node]:
    """`node` and every node computed from it."""
    found = {node}
    stack = [node]
    while stack:
        for user in stack.pop().users:
            if user not in found:
                found.add(user)
                stack.append(user)
    return found


_FRAME = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n\s*(?P<code>.*)'
)


def _source_line(node: torch.fx.Node) -> str:
    """`called from file.py:12 in f: y = x.cumsum(0)`, or the node's name if no trace was kept."""
    frames = list(_FRAME.finditer(node.stack_trace or ""))
    if not frames:
        return f"graph node {node.name}"
    frame = frames[-1]
    return (
        f"called from {frame['file']}:{frame['line']} in {frame['func']}: {frame['code'].strip()}"
    )
