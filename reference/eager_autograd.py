"""Autograd for the eager interpreter: a tape of derivative rules, and saved-tensor hooks.

While the interpreter runs a program (grad mode on, some input requiring grad), every op whose
inputs need a gradient (`r[autograd.requires-grad]`) appends an entry to the tape, and saves what
its derivative rule reads (`r[hooks.eager.saved-set]`), packed by the innermost saved-tensor hooks
if any are active (`r[hooks.eager.pack-on-save]`, `r[hooks.eager.innermost]`). The outputs reach
torch's autograd through one node whose backward walks the tape in reverse
(`r[hooks.eager.unpack-on-use]`).

Derivative rules are torch code (`reference/ops.py`). They run on the reference: each rule is traced
once per signature with make_fx on fake tensors, and the traced graph runs on the interpreter, with
its own ledger. The same trace tells which arguments the rule reads, so what an op saves is derived
from its rule, never listed by hand.

In-place ops follow eager autograd: the mutated tensor gets a new history; a write through a view
gives the view's base a new history too (eager's CopySlices: the old base with the window written),
and every other view of that base reads its history anew from the base's.

Conventions: a `Var` is a value that needs a gradient; `cell` is a reference Tensor; a `slot` stands
for a tensor leaf of an op's (output, arguments) by its layout; an `entry` is one op on the tape.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from operator import getitem
from typing import Any

import numpy as np
import torch
import torch.fx
import torch.utils._pytree as pytree
from attrs import define, field, frozen
from torch.fx.experimental.proxy_tensor import make_fx

from aotspec.errors import InternalError, UnsupportedError

from . import eager
from .autograd import GraphProgram
from .boundary import Boundary, bytes_of
from .capture import grad_enabled
from .ledger import Ledger
from .optable import DERIVATIVES, NONDIFFERENTIABLE, OpKind, bind, qualified_name
from .storage import Layout, Storage, Tensor

aten = torch.ops.aten


@define(eq=False)
class Var:
    """A value that needs a gradient; the gradients it receives are summed."""

    name: str


@frozen
class Slot:
    """A tensor leaf of an op's output or arguments, by its layout (what tracing a rule needs)."""

    layout: Layout


# ---------------------------------------------------------------- rules, traced


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


def _example(layout: Layout) -> torch.Tensor:
    """A tensor with exactly this layout, for tracing (its values are never read)."""
    storage = torch.empty(layout.extent_elements(), dtype=layout.dtype)
    return storage.as_strided(layout.sizes, layout.strides, layout.offset)


def _per_tensor_leaf(bound, arg_grads) -> list:
    """The rule's per-argument gradients, one per tensor leaf of the arguments (None where none)."""
    grads = []
    for arg, grad in zip(bound, arg_grads, strict=True):
        if isinstance(arg, torch.Tensor):
            grads.append(grad)
        elif isinstance(arg, (list, tuple)):  # cat's tensors, index's indices
            parts = [None] * len(arg) if grad is None else grad
            grads.extend(g for t, g in zip(arg, parts, strict=True) if isinstance(t, torch.Tensor))
    return grads


@functools.lru_cache(maxsize=None)
def rule_program(rule: Callable, spec: pytree.TreeSpec, leaves: tuple, n_out: int, grads: tuple, needed: tuple[bool, ...]) -> RuleProgram:
    """Trace `rule` for outputs and arguments laid out as `leaves` say (Slots for tensors, keyed
    constants otherwise), with the output gradients laid out as `grads` (a Layout, or None where
    the output gets no gradient); the graph returns the gradients of the `needed` tensor leaves."""
    values = [_constant(leaf) for leaf in leaves]
    tensor_positions = [i for i, leaf in enumerate(values) if isinstance(leaf, Slot)]
    returned: dict[str, tuple[int, ...]] = {}

    def flat_rule(*tensors):
        grad_values = list(tensors[: sum(g is not None for g in grads)])
        grad_it = iter(grad_values)
        grad_tuple = tuple(next(grad_it) if g is not None else None for g in grads)
        filled = list(values)
        for position, tensor in zip(tensor_positions, tensors[len(grad_values) :], strict=True):
            filled[position] = tensor
        out, bound = pytree.tree_unflatten(filled, spec)
        grad = grad_tuple if isinstance(out, (tuple, list)) else grad_tuple[0]
        arg_grads = _per_tensor_leaf(bound, rule(grad, out, *bound))
        gives = tuple(k for k, g in enumerate(arg_grads) if needed[k] and g is not None)
        returned["gives"] = gives
        return [arg_grads[k] for k in gives]

    examples = [_example(g) for g in grads if g is not None] + [_example(values[i].layout) for i in tensor_positions]
    module = make_fx(flat_rule, tracing_mode="fake")(*examples)
    graph = module.graph
    graph.eliminate_dead_code()  # rules compute gradients nobody needs; those reads go too
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    n_grads = len(placeholders) - len(tensor_positions)
    leaf_of = {node: tensor_positions[k - n_grads] for k, node in enumerate(placeholders) if k >= n_grads}
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
    save_order = sorted(first_reads, key=lambda leaf: leaf < n_out)  # stable: first use within each
    return RuleProgram(GraphProgram.of(module), reads, tuple(save_order), returned["gives"])


@frozen
class _Keyed:
    """A constant leaf in a cache key: by type as well as value, so 1, 1.0 and True differ."""

    value: Any
    kind: type


def _key(leaf):
    return leaf if isinstance(leaf, Slot) else _Keyed(leaf, type(leaf))


def _constant(leaf):
    return leaf if isinstance(leaf, Slot) else leaf.value


@functools.lru_cache(maxsize=None)
def _sum_program(a: Layout, b: Layout) -> GraphProgram:
    module = make_fx(lambda x, y: [x + y], tracing_mode="fake")(_example(a), _example(b))
    return GraphProgram.of(module)


def write_through_backward(grad, out, base, src, sizes, strides, offset):
    """The gradient of writing `src` into `base` through the window as_strided(sizes, strides,
    offset) (eager's CopySlices): the old base gets grad outside the window, src grad inside it."""
    layout = Layout.of(base)
    window = Layout(layout.dtype, sizes, strides, offset)
    start = min(layout.offset, window.offset)
    length = max(layout.extent_elements(), window.extent_elements()) - start
    # grad placed where the base's elements live in their storage (a base is never overlapping)
    placed = aten.as_strided_scatter(grad.new_zeros(length), grad, layout.sizes, layout.strides, layout.offset - start)
    src_grad = placed.as_strided(sizes, strides, offset - start)
    cleared = aten.as_strided_scatter(placed, grad.new_zeros(sizes), sizes, strides, offset - start)
    base_grad = cleared.as_strided(layout.sizes, layout.strides, layout.offset - start)
    return base_grad, src_grad, None, None, None


# ---------------------------------------------------------------- capture


_HOOKS_INSIDE = "saved_tensors_hooks entered inside a function the reference captures"


@contextlib.contextmanager
def hooks_silenced_while_tracing(rule: str = "hooks.eager.innermost"):
    """Capture runs autograd on fake tensors: the caller's hooks must not fire on them. Hooks that
    the function enters itself cannot be attributed to ops of the captured graph, so they raise
    `UnsupportedError` naming `rule` (eager: `hooks.eager.innermost`; compiled: `hooks.compiled.traced`)."""
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


# ---------------------------------------------------------------- the tape


@define(eq=False)
class Saved:
    """What the tape keeps for one saved tensor: the tensor itself, or what pack returned."""

    #: A cell (no hooks), or pack's result with its tensors as cells.
    value: Any
    #: The cells the tape holds for it.
    held: list[Tensor]
    unpack: Callable | None = None
    #: Without hooks: the storage and its version when saved (eager's saved-variable check).
    storage: Storage | None = None
    version: int = 0


@define(eq=False)
class Entry:
    """One op on the tape."""

    name: str
    rule: Callable | None
    op_name: str
    spec: pytree.TreeSpec
    #: Leaves of (output, arguments): Slots for tensors, keyed constants otherwise.
    leaves: tuple
    n_out: int
    #: One per tensor leaf of the arguments: the Var it needs a gradient for, or None.
    inputs: list
    #: One per tensor leaf of the output.
    outputs: list
    saved: dict[int, Saved] = field(factory=dict)


@define(eq=False)
class _Base:
    """A storage the program made: the cell that made it, and how often its history changed."""

    cell: Tensor
    generation: int = 0


@define(eq=False)
class _View:
    cell: Tensor
    base: _Base
    generation: int


class Tape:
    """The forward half of eager autograd: records entries while the interpreter runs."""

    def __init__(self, inputs: list[Tensor], callers: list[torch.Tensor], ledger: Ledger):
        self.ledger = ledger
        self.entries: list[Entry] = []
        self._vars: dict[int, tuple[Tensor, Var]] = {}
        self._bases: dict[int, _Base] = {}
        self._views: dict[int, _View] = {}
        self._versions: dict[int, tuple[Storage, int]] = {}
        self._input_storages = {id(cell.storage) for cell in inputs}
        #: (input storage, the caller's tensor on it, its version once the call returned).
        self._callers: list[tuple[Storage, torch.Tensor, int]] = []
        #: The caller's tensors that require grad (each once, in argument order) and their Vars.
        self.leaves: list[tuple[torch.Tensor, Var]] = []
        for cell, caller in zip(inputs, callers, strict=True):
            if caller.requires_grad and id(cell) not in self._vars:
                var = Var(cell.name)
                self._vars[id(cell)] = (cell, var)
                self.leaves.append((caller, var))

    @classmethod
    def needed(cls, inputs: list[Tensor], callers: list[torch.Tensor], ledger: Ledger) -> Tape | None:
        """A tape for this call, or None when autograd records nothing (r[autograd.requires-grad])."""
        if not torch.is_grad_enabled() or not any(t.requires_grad for t in callers):
            return None
        return cls(inputs, callers, ledger)

    # ------------------------------------------------------------ vars

    def var(self, cell: Tensor) -> Var | None:
        """The history of `cell` now: a view whose base got a new history reads it anew."""
        view = self._views.get(id(cell))
        if view is not None and view.generation != view.base.generation:
            view.generation = view.base.generation
            self._set_var(cell, self._reread_view(view))
        known = self._vars.get(id(cell))
        return None if known is None else known[1]

    def _set_var(self, cell: Tensor, var: Var | None) -> None:
        if var is None:
            self._vars.pop(id(cell), None)
        else:
            self._vars[id(cell)] = (cell, var)

    def _reread_view(self, view: _View) -> Var | None:
        base_var = self.var(view.base.cell)
        if base_var is None:
            return None
        layout = view.cell.layout
        bound = [view.base.cell, list(layout.sizes), list(layout.strides), layout.offset]
        rule = DERIVATIVES[aten.as_strided.default]
        (var,) = self._record(f"{view.cell.name}.as_strided", rule, "aten.as_strided.default", view.cell, bound, [base_var])
        return var

    def _version(self, storage: Storage) -> int:
        return self._versions.get(id(storage), (storage, 0))[1]

    def _bump(self, storage: Storage) -> None:
        self._versions[id(storage)] = (storage, self._version(storage) + 1)

    def note_callers_after_call(self, storages: list[Storage], callers: list[torch.Tensor]) -> None:
        """The caller's tensor on each input storage and its version once the call returned."""
        first: dict[int, tuple[Storage, torch.Tensor, int]] = {}
        for storage, caller in zip(storages, callers, strict=True):
            first.setdefault(id(storage), (storage, caller, caller._version))
        self._callers = list(first.values())

    def catch_up_with_callers(self) -> None:
        """Before the backward: what the caller did to its tensors since the call is what the
        saved inputs hold now, as in eager, where they are the caller's tensors. A write bumps
        the version (the saved-variable check then refuses); new bytes, resized ones included
        (FSDP's re-gather), are read."""
        for storage, caller, version in self._callers:
            if caller._version != version:
                self._bump(storage)
            storage.buffer = bytes_of(caller.untyped_storage())

    # ------------------------------------------------------------ ops

    def call(self, node: torch.fx.Node, entry, env, ledger: Ledger):
        """Run one node like the interpreter does, recording what autograd needs."""
        if node.target is getitem:
            return eager._call(node, entry, env, ledger)
        args = torch.fx.node.map_arg(node.args, env.__getitem__)
        kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
        bound = bind(node.target._schema, args, kwargs)
        if not grad_enabled(node):
            # r[capture.grad-mode]: under torch.no_grad() nothing is recorded; a write still bumps
            # the target's version (an optimizer's update of a parameter).
            result = eager._call(node, entry, env, ledger)
            if _bumps_version(node, entry):
                self._bump(bound[0].storage)
            return result
        if entry.kind is OpKind.INPLACE or node.target is aten.copy_.default:
            return self._mutation(node, entry, bound, env, ledger)
        if entry.kind is OpKind.EFFECT:
            if _bumps_version(node, entry):  # set_; a resize is nothing to autograd (FSDP's reshard)
                self._refuse_if_needs_grad(node, bound)
            result = eager._call(node, entry, env, ledger)
            if _bumps_version(node, entry):
                self._bump(bound[0].storage)
            return result
        inputs = self._input_vars(bound)
        result = eager._call(node, entry, env, ledger)
        if entry.kind is OpKind.VIEW:
            self._note_views(result)
        else:
            self._note_bases(result)
        if any(inputs) and node.target not in NONDIFFERENTIABLE:
            outputs = self._record(node.name, DERIVATIVES.get(node.target), qualified_name(node.target), result, bound, inputs)
            for cell, var in zip(_cells(result), outputs, strict=True):
                self._set_var(cell, var)
        return result

    def _mutation(self, node, entry, bound, env, ledger):
        """An in-place op: the target gets a new history, and so does its base through a view."""
        target = bound[0]
        functional = entry.functional if entry.kind is OpKind.INPLACE else aten.copy.default
        inputs = self._input_vars(bound)
        if not any(inputs):
            result = eager._call(node, entry, env, ledger)
            self._bump(target.storage)
            return result
        self._check_mutable(node, target)
        rule = DERIVATIVES.get(functional)
        # The rule reads the target's value from before the write (leaf 1: output first, then the
        # arguments): eager saves a clone of it.
        before = self._clone(target) if rule is not None and 1 in self._reads(rule, target, bound, inputs) else None
        result = eager._call(node, entry, env, ledger)
        self._bump(target.storage)
        originals = {} if before is None else {1: before}
        (var,) = self._record(node.name, rule, qualified_name(functional), target, bound, inputs, originals)
        if before is not None:
            self.ledger.release(before)  # the tape holds it now, or pack's result instead
        self._rebase(target, var)
        return result

    def _rebase(self, target: Tensor, var: Var) -> None:
        base = self._bases.get(id(target.storage))
        if base is None or base.cell is target:
            self._set_var(target, var)
            if base is not None:
                base.generation += 1
            return
        if base.cell.layout.has_internal_overlap():
            raise InternalError(f"the base {base.cell.name} of {target.name} overlaps itself")
        old = self.var(base.cell)
        window = target.layout
        bound = [base.cell, target, list(window.sizes), list(window.strides), window.offset]
        (new,) = self._record(f"{target.name}.copy_slices", write_through_backward, "CopySlices", base.cell, bound, [old, var])
        self._set_var(base.cell, new)
        base.generation += 1
        self._views.setdefault(id(target), _View(target, base, base.generation - 1))

    def _check_mutable(self, node, target: Tensor) -> None:
        if id(target.storage) in self._input_storages:
            raise UnsupportedError(
                f"{node.name} writes a gradient-carrying value into a caller's tensor, which would "
                "rebase the caller's autograd history",
                rule="autograd.mutated-grad-input",
                fix="clone the argument inside the function and mutate the clone, or run the "
                "mutation under torch.no_grad()",
            )

    def _refuse_if_needs_grad(self, node, bound) -> None:
        if any(self.var(leaf) for leaf in pytree.tree_leaves(bound) if isinstance(leaf, Tensor)):
            raise UnsupportedError(
                f"{node.name} rebinds a tensor that needs a gradient",
                rule="autograd.mutated-grad-input",
                fix="detach the tensor first, or run this part under torch.no_grad()",
            )

    def _note_bases(self, result) -> None:
        for cell in _cells(result):
            self._bases.setdefault(id(cell.storage), _Base(cell))

    def _note_views(self, result) -> None:
        for cell in _cells(result):
            base = self._bases.get(id(cell.storage))
            if base is not None and base.cell is not cell:
                self._views[id(cell)] = _View(cell, base, base.generation)

    def _clone(self, cell: Tensor) -> Tensor:
        layout = Layout.contiguous(cell.dtype, cell.sizes)
        clone = Tensor(Storage.zeros(layout.extent_bytes()), layout, name=f"{cell.name}.original")
        clone.write(cell.read())
        self.ledger.hold(clone)
        return clone

    # ------------------------------------------------------------ entries

    def _input_vars(self, bound) -> list[Var | None]:
        """One per tensor leaf of the arguments: the Var it needs a gradient for, or None."""
        return [self.var(leaf) for leaf in pytree.tree_leaves(bound) if isinstance(leaf, Tensor)]

    def _reads(self, rule, out, bound, inputs) -> tuple[int, ...]:
        """r[hooks.eager.saved-set]: the leaves of (output, arguments) the rule reads to compute
        the gradients of the arguments that need one, in the order it first reads them."""
        spec, leaves, n_out = _signature(out, bound)
        # every output that can carry a gradient gets one: eager saves before it knows which will
        grads = tuple(Layout.contiguous(s.layout.dtype, s.layout.sizes) if _differentiable(s.layout.dtype) else None for s in leaves[:n_out])
        needed = tuple(var is not None for var in inputs)
        return rule_program(rule, spec, leaves, n_out, grads, needed).save_order

    def _record(self, name, rule, op_name, out, bound, inputs, originals=None) -> list[Var | None]:
        spec, leaves, n_out = _signature(out, bound)
        outputs = [Var(f"{name}[{k}]") if _differentiable(leaf.layout.dtype) else None for k, leaf in enumerate(leaves[:n_out])]
        entry = Entry(name, rule, op_name, spec, leaves, n_out, list(inputs), outputs)
        if rule is not None:
            cells = [leaf for leaf in pytree.tree_leaves((out, bound))]
            hooks = torch._C._autograd._top_saved_tensors_default_hooks(True)  # r[hooks.eager.innermost]
            for position in self._reads(rule, out, bound, inputs):
                cell = (originals or {}).get(position, cells[position])
                entry.saved[position] = self._save(cell, hooks)
        self.entries.append(entry)
        return outputs

    def _save(self, cell: Tensor, hooks) -> Saved:
        if hooks is None:
            self.ledger.hold(cell)
            return Saved(cell, [cell], storage=cell.storage, version=self._version(cell.storage))
        pack, unpack = hooks
        # r[hooks.eager.pack-on-save]: pack sees the tensor as the op saves it, right now; the
        # tape keeps what pack returns, so the tensor itself is no longer held by the tape.
        crossing = _Crossing()
        packed = crossing.to_reference(pack(crossing.to_torch(cell)))
        held = _cells(packed)
        for kept in held:
            self.ledger.hold(kept)
        return Saved(packed, held, unpack)

    def held_cells(self) -> list[Tensor]:
        return [cell for entry in self.entries for saved in entry.saved.values() for cell in saved.held]


def _signature(out, bound):
    """The (spec, keyed leaves, number of output leaves) of an op's (output, arguments)."""
    leaves, spec = pytree.tree_flatten((out, bound))
    keyed = tuple(Slot(leaf.layout) if isinstance(leaf, Tensor) else _key(leaf) for leaf in leaves)
    return spec, keyed, len(pytree.tree_leaves(out))


def _differentiable(dtype: torch.dtype) -> bool:
    """Only floating-point and complex values carry gradients (r[autograd.requires-grad])."""
    return dtype.is_floating_point or dtype.is_complex


def _cells(value) -> list[Tensor]:
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, Tensor)]


@define
class _Crossing:
    """Reference cells handed to a hook as torch tensors and back, keeping storage identity:
    a tensor the hook returns on a storage it was given stays on that reference storage."""

    _given: dict[int, tuple[torch.UntypedStorage, Storage]] = field(factory=dict)
    _out: Boundary = field(factory=Boundary)
    _back: Boundary = field(factory=Boundary)

    def to_torch(self, value):
        def export(cell):
            if not isinstance(cell, Tensor):
                return cell
            t = self._out.export(cell)
            self._given[t.untyped_storage()._cdata] = (t.untyped_storage(), cell.storage)
            return t

        return pytree.tree_map(export, value)

    def to_reference(self, value):
        def reimport(t):
            if not isinstance(t, torch.Tensor):
                return t
            given = self._given.get(t.untyped_storage()._cdata)
            if given is not None:
                return Tensor(given[1], Layout.of(t), name="saved")
            return self._back.import_tensor(t, name="packed")

        return pytree.tree_map(reimport, value)


# ---------------------------------------------------------------- the backward


class Backward:
    """Walks a tape in reverse on the reference, with its own ledger."""

    def __init__(self, tape: Tape):
        self.tape = tape
        self.ledger = Ledger()
        self._grads: dict[Var, Tensor] = {}

    def run(self, seeds: list[tuple[Var, Tensor]]) -> dict[Var, Tensor]:
        ledger = self.ledger
        for cell in self.tape.held_cells():
            ledger.hold(cell)  # the saved values, which the tape hands to the backward
        for _, cell in seeds:
            ledger.hold(cell)
        with np.errstate(all="ignore"):
            for var, cell in seeds:
                self._accumulate(var, cell)
            for entry in reversed(self.tape.entries):
                self._step(entry)
        ledger.begin_step("output")
        ledger.end_step()
        return {var: self._grads[var] for _, var in self.tape.leaves if var in self._grads}

    def _step(self, entry: Entry) -> None:
        grads = [self._grads.pop(var, None) if var is not None else None for var in entry.outputs]
        if all(g is None for g in grads):
            self._release(entry, [], grads)
            return
        if entry.rule is None:
            raise UnsupportedError(
                f"op {entry.op_name} has no derivative rule",
                rule="autograd.derivative-rules",
                fix="add a @derivative rule beside the op in reference/ops.py, or compute this part under torch.no_grad()",
            )
        self.ledger.begin_step(f"{entry.name}.unpack")
        values = {position: self._unpack(entry, position, saved) for position, saved in entry.saved.items()}
        unpacked = [cell for position, saved in entry.saved.items() if saved.unpack is not None for cell in _cells(values[position])]
        for cell in unpacked:
            self.ledger.hold(cell)
        self.ledger.end_step()
        leaves = tuple(Slot(values[k].layout) if k in values else leaf for k, leaf in enumerate(entry.leaves))
        grad_layouts = tuple(None if g is None else g.layout for g in grads)
        needed = tuple(var is not None for var in entry.inputs)
        program = rule_program(entry.rule, entry.spec, leaves, entry.n_out, grad_layouts, needed)
        missing = [k for k in program.reads if k not in values]
        if missing:
            raise InternalError(f"the rule of {entry.name} reads leaves {missing}, which were not saved")
        inputs = [g for g in grads if g is not None] + [values[k] for k in program.reads]
        results = eager.interpret(program.program, inputs, self.ledger)
        self._release(entry, unpacked, grads)
        for k, grad in zip(program.gives, results, strict=True):
            self._accumulate(entry.inputs[k], grad)

    def _unpack(self, entry: Entry, position: int, saved: Saved) -> Tensor:
        if saved.unpack is None:
            cell = saved.value
            if cell.storage is not saved.storage or self.tape._version(cell.storage) != saved.version:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by an "
                    f"inplace operation: {cell.name}, saved by {entry.name}, is at version "
                    f"{self.tape._version(cell.storage)}; expected version {saved.version} instead."
                )
            return cell
        # r[hooks.eager.unpack-on-use]: unpack runs when the backward reaches the op.
        crossing = _Crossing()
        unpacked = crossing.to_reference(saved.unpack(crossing.to_torch(saved.value)))
        if not isinstance(unpacked, Tensor):
            raise RuntimeError(f"the unpack hook returned {type(unpacked).__name__} for a tensor saved by {entry.name}; it must return a tensor")
        return unpacked

    def _release(self, entry: Entry, unpacked: list[Tensor], grads: list) -> None:
        """r[hooks.eager.unpack-on-use]: the saved (or packed) values go after the op's backward."""
        self.ledger.begin_step(f"{entry.name}.release")
        for cell in unpacked + self._saved_cells(entry) + [g for g in grads if g is not None]:
            self.ledger.release(cell)
        entry.saved.clear()
        self.ledger.end_step()

    @staticmethod
    def _saved_cells(entry: Entry) -> list[Tensor]:
        return [cell for saved in entry.saved.values() for cell in saved.held]

    def _accumulate(self, var: Var | None, grad: Tensor) -> None:
        if var is None:
            self._release_now(grad)
            return
        if var not in self._grads:
            self._grads[var] = grad
            return
        old = self._grads.pop(var)
        (total,) = eager.interpret(_sum_program(old.layout, grad.layout), [old, grad], self.ledger)
        self._release_now(old, grad)
        self._grads[var] = total

    def _release_now(self, *cells: Tensor) -> None:
        self.ledger.begin_step("release")
        for cell in cells:
            self.ledger.release(cell)
        self.ledger.end_step()


def _bumps_version(node: torch.fx.Node, entry) -> bool:
    """In-place ops, copy_ and set_ advance a tensor's version; resize_storage_bytes_ does not
    (r[resize.eager.version])."""
    if node.target is torch.ops.inductor.resize_storage_bytes_.default:
        return False
    return entry.kind in (OpKind.INPLACE, OpKind.EFFECT) or node.target is aten.copy_.default


# ---------------------------------------------------------------- the link to torch's autograd


def connect(tape: Tape, outputs: list, torch_outputs: list, run) -> list:
    """Torch outputs connected to torch's autograd: those with a history on the tape come out of
    one autograd node whose backward walks the tape; the others are returned as they are."""
    linked = [k for k, value in enumerate(outputs) if isinstance(value, Tensor) and _has_own_history(tape, value)]
    if not linked:
        return torch_outputs
    seeds_for = [tape.var(outputs[k]) for k in linked]
    node = _TapeNode(tape, seeds_for, [torch_outputs[k] for k in linked], run)
    connected = TapeFunction.apply(node, *(caller for caller, _ in tape.leaves))
    result = list(torch_outputs)
    for k, t in zip(linked, connected, strict=True):
        result[k] = t
    return result


def _has_own_history(tape: Tape, cell: Tensor) -> bool:
    var = tape.var(cell)
    return var is not None and all(var is not leaf for _, leaf in tape.leaves)


@define
class _TapeNode:
    tape: Tape
    seeds_for: list
    outputs: list
    run: Any


class TapeFunction(torch.autograd.Function):
    """The whole eager call as one autograd node; its backward walks the tape."""

    @staticmethod
    def forward(ctx, node: _TapeNode, *leaves):
        ctx.set_materialize_grads(False)
        ctx.node = node
        return tuple(node.outputs)

    @staticmethod
    def backward(ctx, *grads):
        node: _TapeNode = ctx.node
        boundary = Boundary()
        seeds = [(var, boundary.import_tensor(g.detach())) for var, g in zip(node.seeds_for, grads, strict=True) if g is not None]
        node.tape.catch_up_with_callers()
        backward = Backward(node.tape)
        node.run.saved_storages = frozenset(cell.storage.id for cell in node.tape.held_cells())
        results = backward.run(seeds)
        node.run.backward_ledger = backward.ledger
        export = Boundary()
        return (None, *(export.export(results[var]) if var in results else None for _, var in node.tape.leaves))
