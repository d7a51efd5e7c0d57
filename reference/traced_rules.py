"""Derivative rules, traced: each rule of `reference/ops.py` as a graph the interpreter runs.

Derivative rules are torch code. The eager interpreter's backward runs them on the reference:
each rule is traced once per signature with make_fx on fake tensors (`rule_program`), and the
traced graph runs on the interpreter. The same trace tells which arguments the rule reads, so
what an op saves is derived from its rule, never listed by hand (`r[hooks.eager.saved-set]`).

Conventions: a `slot` stands for a tensor leaf of an op's (output, arguments) by its layout.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as pytree
from attrs import define, frozen

from aotspec.versions import make_fx_keeping_detach

from .graph import GraphProgram
from .optable import call_rule
from .storage import Layout
from .symbols import example_value, holds_symbols

aten = torch.ops.aten


@frozen
class Slot:
    """A tensor leaf of an op's output or arguments, by its layout (what tracing a rule needs)."""

    layout: Layout


@frozen
class RuleProgram:
    """A derivative rule traced for one signature, ready to run on the reference."""

    program: GraphProgram
    #: Leaves of (output, arguments) the rule reads, in the graph's placeholder order.
    reads: tuple[int, ...]
    #: The same leaves in the order eager saves them: arguments, then outputs, each in the order
    #: the rule first uses them.
    save_order: tuple[int, ...]
    #: Tensor leaves of the arguments whose gradient the graph returns, in output order.
    gives: tuple[int, ...]


def example(layout: Layout, device: torch.device | str | None = None) -> torch.Tensor:
    """A tensor with exactly this layout, for tracing (its values are never read), on `device`
    (None: the default device)."""
    storage = torch.empty(layout.extent_elements(), dtype=layout.dtype, device=device)
    return storage.as_strided(layout.sizes, layout.strides, layout.offset)


def _per_tensor_leaf(bound, arg_grads) -> list:
    """The rule's per-argument gradients, one per tensor leaf of the arguments (None where
    none)."""
    grads = []
    for arg, grad in zip(bound, arg_grads, strict=True):
        if isinstance(arg, torch.Tensor):
            grads.append(grad)
        elif isinstance(arg, (list, tuple)):  # cat's tensors, index's indices
            parts = [None] * len(arg) if grad is None else grad
            grads.extend(g for t, g in zip(arg, parts, strict=True) if isinstance(t, torch.Tensor))
    return grads


@define
class _Returned:
    """What the traced rule returned besides its graph: which argument leaves get a gradient."""

    gives: tuple[int, ...] = ()


@functools.lru_cache(maxsize=None)
def rule_program(
    rule: Callable,
    spec: pytree.TreeSpec,
    leaves: tuple,
    n_out: int,
    grads: tuple,
    needed: tuple[bool, ...],
) -> RuleProgram:
    """Trace `rule` for outputs and arguments laid out as `leaves` say (Slots for tensors, keyed
    constants otherwise), with the output gradients laid out as `grads` (a Layout, or None where
    the output gets no gradient); the graph returns the gradients of the `needed` tensor leaves."""
    values = [_constant(leaf) for leaf in leaves]
    tensor_positions = [i for i, leaf in enumerate(values) if isinstance(leaf, Slot)]
    returned = _Returned()

    def flat_rule(*tensors):
        grad_values = list(tensors[: sum(g is not None for g in grads)])
        grad_it = iter(grad_values)
        grad_tuple = tuple(next(grad_it) if g is not None else None for g in grads)
        filled = list(values)
        for position, tensor in zip(tensor_positions, tensors[len(grad_values) :], strict=True):
            filled[position] = tensor
        out, bound = pytree.tree_unflatten(filled, spec)
        grad = grad_tuple if isinstance(out, (tuple, list)) else grad_tuple[0]
        arg_grads = _per_tensor_leaf(bound, call_rule(rule, grad, out, bound, needed))
        gives = tuple(k for k, g in enumerate(arg_grads) if needed[k] and g is not None)
        returned.gives = gives
        return [arg_grads[k] for k in gives]

    examples = [example(g) for g in grads if g is not None] + [
        example(values[i].layout) for i in tensor_positions
    ]
    module = make_fx_keeping_detach(flat_rule, tracing_mode="fake")(*examples)
    graph = module.graph
    graph.eliminate_dead_code()  # rules compute gradients nobody needs; those reads go too
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    n_grads = len(placeholders) - len(tensor_positions)
    leaf_of = {
        node: tensor_positions[k - n_grads] for k, node in enumerate(placeholders) if k >= n_grads
    }
    first_reads: dict[int, None] = {}
    for node in graph.nodes:
        for used in node.all_input_nodes:
            if used in leaf_of:
                first_reads.setdefault(leaf_of[used], None)
    for node in placeholders:
        if not node.users:
            graph.erase_node(node)
    module.recompile()
    reads = tuple(leaf_of[node] for node in placeholders if node in leaf_of and node.users)
    save_order = sorted(
        first_reads, key=lambda leaf: leaf < n_out
    )  # stable: first use within each
    return RuleProgram(GraphProgram.of(module), reads, tuple(save_order), returned.gives)


@frozen
class _Keyed:
    """A constant leaf in a cache key: by type as well as value, so 1, 1.0 and True differ."""

    value: Any
    kind: type


def key_of(leaf):
    return leaf if isinstance(leaf, Slot) else _Keyed(leaf, type(leaf))


def leaves_hold_symbols(leaves: tuple) -> bool:
    """Whether a layout or a number of a signature's `leaves` is symbolic."""
    numbers = [leaf.layout if isinstance(leaf, Slot) else leaf.value for leaf in leaves]
    return holds_symbols(numbers)


def at_example_sizes(leaves: tuple) -> tuple:
    """A signature's `leaves` with each symbolic number at its traced example value."""

    def at_example(leaf):
        if isinstance(leaf, Slot):
            return Slot(leaf.layout.mapped(example_value))
        value = example_value(leaf.value)
        return _Keyed(value, type(value))

    return tuple(map(at_example, leaves))


def _constant(leaf):
    return leaf if isinstance(leaf, Slot) else leaf.value


@functools.lru_cache(maxsize=None)
def sum_program(a: Layout, b: Layout) -> GraphProgram:
    module = make_fx_keeping_detach(lambda x, y: [x + y], tracing_mode="fake")(
        example(a), example(b)
    )
    return GraphProgram.of(module)


def write_through_backward(grad, out, base, src, sizes, strides, offset):
    """The gradient of writing `src` into `base` through the window as_strided(sizes, strides,
    offset) (eager's CopySlices): the old base gets grad outside the window, src grad inside it."""
    layout = Layout.of(base)
    window = Layout(layout.dtype, sizes, strides, offset)
    start = min(layout.offset, window.offset)
    length = max(layout.extent_elements(), window.extent_elements()) - start
    # grad placed where the base's elements live in their storage (a base is never overlapping)
    placed = aten.as_strided_scatter(
        grad.new_zeros(length), grad, layout.sizes, layout.strides, layout.offset - start
    )
    src_grad = placed.as_strided(sizes, strides, offset - start)
    cleared = aten.as_strided_scatter(
        placed, grad.new_zeros(sizes), sizes, strides, offset - start
    )
    base_grad = cleared.as_strided(layout.sizes, layout.strides, layout.offset - start)
    return base_grad, src_grad, None, None, None
