"""Eager's derivatives for ATen-valued ops (`r[ops.aten-derivatives]`).

An aten op outside the table differentiates as eager autograd differentiates it: its backward is
traced once per signature, by running the op on fake tensors that require grad and asking
`torch.autograd.grad` for the gradients, under `make_fx`. The trace records the backward ops
that the op's formula in PyTorch's derivatives.yaml calls (`convolution_backward`,
`native_batch_norm_backward`, ...) and which of the op's arguments and outputs they read: so
what autograd saves for the op is what eager saves (`r[hooks.eager.saved-set]`), and its
gradients are laid out as eager lays them out. `EagerDerivative` replays that backward as a
derivative rule (`optable.derivative`), on whatever the rule is given; the backward ops are
ATen-valued ops themselves, or ops of the table.

Which outputs carry a gradient is eager's answer too (`differentiable_outputs`): integer outputs
never do, and an op may declare others not differentiable (batch norm's saved statistics).

Conventions: `leaves` is an op's arguments flattened by pytree, a `Slot` for each tensor and a
keyed constant otherwise (`rules.py`); `needed[k]` says whether tensor leaf k wants a gradient.
"""

from __future__ import annotations

import functools
from operator import getitem

import torch
import torch.fx
import torch.utils._pytree as pytree
from attrs import frozen
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import _disable_current_modes

from aotspec.errors import InternalError, UnsupportedError

from .optable import ATEN_VALUED, OP_TABLE, call_with, qualified_name
from .rules import Slot, example, key_of
from .storage import Layout, Tensor, carries_gradients

aten = torch.ops.aten


def signature(bound) -> tuple[pytree.TreeSpec, tuple]:
    """The (spec, leaves) of an op's arguments: torch tensors and reference cells by layout."""
    leaves, spec = pytree.tree_flatten(list(bound))

    def key(leaf):
        if isinstance(leaf, torch.Tensor):
            return Slot(Layout.of(leaf))
        if isinstance(leaf, Tensor):
            return Slot(leaf.layout)
        return key_of(leaf)

    return spec, tuple(key(leaf) for leaf in leaves)


def _arguments(spec: pytree.TreeSpec, leaves: tuple, tensors) -> list:
    """The op's arguments with `tensors` at the Slots of `leaves`."""
    it = iter(tensors)
    values = [next(it) if isinstance(leaf, Slot) else leaf.value for leaf in leaves]
    return pytree.tree_unflatten(values, spec)


def _differentiable_dtype(leaf) -> bool:
    return isinstance(leaf, Slot) and carries_gradients(leaf.layout.dtype)


@functools.lru_cache(maxsize=None)
def differentiable_outputs(
    overload, spec: pytree.TreeSpec, leaves: tuple, needed: tuple[bool, ...]
) -> tuple[bool, ...]:
    """Per output leaf of the op, whether eager autograd gives it a gradient when the `needed`
    floating-point tensor leaves require grad."""
    slots = [leaf for leaf in leaves if isinstance(leaf, Slot)]
    with _disable_current_modes(), FakeTensorMode(), torch.enable_grad():
        tensors = [
            example(slot.layout).detach().requires_grad_(wanted and _differentiable_dtype(slot))
            for slot, wanted in zip(slots, needed, strict=True)
        ]
        out = call_with(overload, _arguments(spec, leaves, tensors))
    return tuple(
        isinstance(leaf, torch.Tensor) and leaf.requires_grad for leaf in pytree.tree_leaves(out)
    )


def output_gradients(overload, bound, needed: tuple[bool, ...]) -> tuple[bool, ...] | None:
    """For an ATen-valued op whose `needed` tensor leaves need a gradient, which output leaves
    eager autograd gives one; None for the table's ops (and custom ops), whose floating-point
    outputs all carry one."""
    if not (
        isinstance(overload, torch._ops.OpOverload)
        and overload.namespace == "aten"
        and overload not in OP_TABLE
    ):
        return None
    if not any(needed):
        return ()
    return differentiable_outputs(overload, *signature(bound), needed)


@frozen
class _Backward:
    """The op's backward for one signature, as eager autograd traced it."""

    graph: torch.fx.Graph
    #: The op's own node in `graph`; the nodes after it that read no grad are its backward too.
    forward: torch.fx.Node
    #: Placeholders: one per output gradient given, then one per tensor leaf of the arguments.
    grads: tuple[torch.fx.Node, ...]
    arguments: tuple[torch.fx.Node, ...]
    #: The tensor leaves (positions) whose gradient each graph output is.
    gives: tuple[int, ...]


@functools.lru_cache(maxsize=None)
def _backward(overload, spec, leaves, grads: tuple, needed: tuple[bool, ...]) -> _Backward:
    """Trace eager autograd's backward of `overload` for arguments laid out as `leaves`, the
    output gradients laid out as `grads` (a Layout, or None where an output gets none), giving the
    gradients of the `needed` tensor leaves."""
    slots = [leaf for leaf in leaves if isinstance(leaf, Slot)]
    n_grads = sum(g is not None for g in grads)
    gives: list[int] = []

    def joint(*tensors):
        given = iter(tensors[:n_grads])
        grad_of = [None if g is None else next(given) for g in grads]
        with torch.enable_grad():
            inputs = [
                t.detach().requires_grad_(wanted)
                for t, wanted in zip(tensors[n_grads:], needed, strict=True)
            ]
            out = call_with(overload, _arguments(spec, leaves, inputs))
            outs = out if isinstance(out, (tuple, list)) else [out]
            pairs = [
                (o, g)
                for o, g in zip(outs, grad_of, strict=True)
                if g is not None and isinstance(o, torch.Tensor) and o.requires_grad
            ]
            wanted = [k for k, t in enumerate(inputs) if t.requires_grad]
            if not pairs or not wanted:
                return []
            results = torch.autograd.grad(
                [o for o, _ in pairs],
                [inputs[k] for k in wanted],
                [g for _, g in pairs],
                allow_unused=True,
            )
        gives.extend(k for k, r in zip(wanted, results, strict=True) if r is not None)
        return [r for r in results if r is not None]

    examples = [example(g) for g in grads if g is not None] + [example(s.layout) for s in slots]
    with _disable_current_modes():
        try:
            module = make_fx(joint, tracing_mode="fake")(*examples)
        except DataDependentOutputException as error:
            # r[ops.aten-derivatives.value-checks]
            raise UnsupportedError(
                f"eager's derivative of {qualified_name(overload)} decides on tensor values "
                f"({error.func}), which tracing it on tensors without values cannot",
                rule="ops.aten-derivatives.value-checks",
                fix="take the gradient of this op outside the compiled function, or detach its "
                "inputs",
            ) from error
    graph = module.graph
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    forward = next((node for node in graph.nodes if node.target is overload), None)
    if forward is None and gives:
        raise InternalError(f"the traced backward of {overload} does not call it")
    return _Backward(
        graph,
        forward,
        tuple(placeholders[:n_grads]),
        tuple(placeholders[n_grads:]),
        tuple(gives),
    )


class EagerDerivative:
    """r[ops.aten-derivatives]: the derivative rule of an ATen-valued op, `rule(grad, out, *args,
    needed=...)` as `optable.derivative` describes rules, computed by eager's formula."""

    #: `optable.call_rule` passes which tensor leaves of the arguments want a gradient, as eager
    #: passes `grad_input_mask` to backward ops such as convolution_backward.
    takes_needed = True

    def __init__(self, overload: torch._ops.OpOverload):
        self.overload = overload

    def __repr__(self) -> str:
        return f"EagerDerivative({self.overload})"

    def __call__(self, grad, out, *args, needed=None):
        args = pytree.tree_map_only(torch.Tensor, _resolved, list(args))
        spec, leaves = signature(args)
        tensors = [leaf for leaf in pytree.tree_leaves(list(args)) if _is_tensor(leaf)]
        slots = [leaf for leaf in leaves if isinstance(leaf, Slot)]
        if needed is None:
            needed = tuple(True for _ in slots)
        needed = tuple(
            wanted and _differentiable_dtype(slot)
            for wanted, slot in zip(needed, slots, strict=True)
        )
        grads = grad if isinstance(out, (tuple, list)) else (grad,)
        grads = tuple(None if g is None else _resolved(g) for g in grads)
        layouts = tuple(None if g is None else Layout.of(g) for g in grads)
        backward = _backward(self.overload, spec, leaves, layouts, needed)
        results = _replay(backward, [g for g in grads if g is not None], out, tensors)
        per_leaf = [None] * len(tensors)
        for k, result in zip(backward.gives, results, strict=True):
            per_leaf[k] = result
        return _per_argument(args, per_leaf)


def _resolved(t: torch.Tensor) -> torch.Tensor:
    """r[memory.layout.conj-neg]: `t` without a lazy conjugate or negation: eager's formulas
    resolve them where they need to, and are traced on tensors without them."""
    return t.resolve_conj().resolve_neg()


def _is_tensor(leaf) -> bool:
    return isinstance(leaf, torch.Tensor)


def _per_argument(args, per_leaf: list) -> list:
    """The gradients of the tensor leaves as one entry per argument: a tensor's gradient, a list
    for a list of tensors, None for anything else."""
    it = iter(per_leaf)
    result = []
    for arg in args:
        if _is_tensor(arg):
            result.append(next(it))
        elif isinstance(arg, (list, tuple)) and any(_is_tensor(a) for a in arg):
            result.append([next(it) if _is_tensor(a) else None for a in arg])
        else:
            result.append(None)
    return result


def _replay(backward: _Backward, grads: list, out, tensors: list) -> list:
    """Run the traced backward's ops on `grads`, the op's output `out` and its argument
    `tensors`, standing for the trace's placeholders and forward values."""
    env: dict[torch.fx.Node, object] = dict(zip(backward.grads, grads, strict=True))
    env.update(zip(backward.arguments, tensors, strict=True))
    # The trace's tensors were on torch's default device, which its factories name: the replay
    # makes them on the device of the op's tensors instead.
    device = next(t.device for t in [*grads, *tensors] if isinstance(t, torch.Tensor))
    forward_values = set(backward.arguments)
    for node in backward.graph.nodes:
        if node.op != "call_function" or node in env:
            continue
        if node is backward.forward:
            env[node] = out
            forward_values.add(node)
        elif node.target is getitem and node.args[0] in forward_values:
            env[node] = env[node.args[0]][node.args[1]]
            forward_values.add(node)
        elif node.target is aten.detach.default and node.args[0] in forward_values:
            # autograd's own detach of what it saves: the value itself
            env[node] = env[node.args[0]]
            forward_values.add(node)
        else:
            args = torch.fx.node.map_arg(node.args, env.__getitem__)
            kwargs = dict(torch.fx.node.map_arg(node.kwargs, env.__getitem__))
            if "device" in kwargs:
                kwargs["device"] = device
            env[node] = node.target(*args, **kwargs)
    output = next(iter(reversed(backward.graph.nodes)))
    return [env[node] for node in output.args[0]]


@functools.cache
def eager_derivative(overload: torch._ops.OpOverload) -> EagerDerivative:
    return EagerDerivative(overload)


ATEN_VALUED.derivative = eager_derivative
