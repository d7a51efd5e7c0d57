"""The eager interpreter's autograd tape: what each op records for the backward.

While the interpreter runs a program (grad mode on, some input requiring grad), every op whose
inputs need a gradient (`r[autograd.requires-grad]`) appends an entry to the tape, and saves what
its derivative rule reads (`r[hooks.eager.saved-set]`), packed by the innermost saved-tensor hooks
if any are active (`r[hooks.eager.pack-on-save]`, `r[hooks.eager.innermost]`). The backward
(`eager_backward.py`) walks the tape in reverse.

In-place ops follow eager autograd: the mutated tensor gets a new history; a write through a view
gives the view's base a new history too (eager's CopySlices: the old base with the window written),
and every other view of that base reads its history anew from the base's. An in-place metadata op
(`t_`) gives the tensor the history of its view op (`r[autograd.metadata]`).

Conventions: a `Var` is a value that needs a gradient; `cell` is a reference Tensor; an `entry`
is one op on the tape.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import getitem
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from attrs import define, field

from aotspec.errors import InternalError, UnsupportedError

from .aten import advances_version
from .aten_autograd import output_gradients
from .boundary import Boundary, bytes_of, grad_on_recording_nothing
from .capture import grad_enabled
from .interpreter import call_op
from .ledger import Ledger
from .optable import (
    DERIVATIVES,
    NONDIFFERENTIABLE,
    OpKind,
    bind,
    derivative_of,
    qualified_name,
)
from .storage import Layout, Storage, Tensor, carries_gradients
from .traced_rules import Slot, key_of, rule_program, write_through_backward

aten = torch.ops.aten


@define(eq=False)
class Var:
    """A value that needs a gradient; the gradients it receives are summed."""

    name: str


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
    #: A backward that did not retain the graph freed the saved values
    #: (`r[autograd.retain-graph]`).
    saved_freed: bool = False


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
        self._input_cells = {id(cell) for cell in inputs}
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
    def needed(
        cls,
        inputs: list[Tensor],
        callers: list[torch.Tensor],
        ledger: Ledger,
        graph: torch.fx.Graph,
    ) -> Tape | None:
        """A tape for this call, or None when autograd records nothing
        (r[autograd.requires-grad]): no input requires grad, or no op of `graph` runs with grad
        mode on (r[autograd.grad-mode-inside]: some may, inside `torch.enable_grad()`)."""
        if not any(t.requires_grad for t in callers):
            return None
        if not (torch.is_grad_enabled() or any(grad_enabled(node) for node in graph.nodes)):
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
        (var,) = self._record(
            f"{view.cell.name}.as_strided",
            rule,
            "aten.as_strided.default",
            view.cell,
            bound,
            [base_var],
        )
        return var

    def _version(self, storage: Storage) -> int:
        return self._versions.get(id(storage), (storage, 0))[1]

    def _bump(self, storage: Storage) -> None:
        self._versions[id(storage)] = (storage, self._version(storage) + 1)

    def note_callers_after_call(
        self, storages: list[Storage], callers: list[torch.Tensor]
    ) -> None:
        """The caller's tensors on each storage (its arguments, and its outputs as aliases) and
        their versions once the call returned."""
        self._callers = [
            (storage, caller, caller._version)
            for storage, caller in zip(storages, callers, strict=True)
        ]

    def catch_up_with_callers(self) -> None:
        """Before the backward: what the caller did to its tensors since the call is what the
        saved values on their storages hold now, as in eager, where they are the caller's
        tensors. A write through any of them bumps the storage's version (the saved-variable
        check then refuses); new bytes, resized ones included (FSDP's re-gather), are read."""
        written = {id(s) for s, caller, version in self._callers if caller._version != version}
        caught_up: set[int] = set()
        for storage, caller, _ in self._callers:
            if id(storage) in caught_up:
                continue
            caught_up.add(id(storage))
            if id(storage) in written:
                self._bump(storage)
            storage.buffer = bytes_of(caller.untyped_storage())

    # ------------------------------------------------------------ ops

    def call(self, node: torch.fx.Node, entry, env, ledger: Ledger):
        """Run one node like the interpreter does, recording what autograd needs."""
        if node.target is getitem:
            return call_op(node, entry, env, ledger)
        args = torch.fx.node.map_arg(node.args, env.__getitem__)
        kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
        bound = bind(node.target._schema, args, kwargs)
        if entry.relayouts:
            return self._relayout(node, entry, bound, env, ledger)
        if not grad_enabled(node):
            # r[capture.grad-mode]: under torch.no_grad() nothing is recorded; a write still bumps
            # the target's version (an optimizer's update of a parameter).
            result = call_op(node, entry, env, ledger)
            if bumps_version(node, entry):
                self._bump(bound[0].storage)
            return result
        if node.target is aten.copy_.default and not advances_version(node):
            # r[ops.aten-mutations.versions]: eager's kernel writes out of autograd's sight
            return call_op(node, entry, env, ledger)
        if entry.kind is OpKind.INPLACE or node.target is aten.copy_.default:
            return self._mutation(node, entry, bound, env, ledger)
        if entry.kind is OpKind.EFFECT:
            if bumps_version(
                node, entry
            ):  # set_; a resize is nothing to autograd (FSDP's reshard)
                self._refuse_if_needs_grad(node, bound)
            result = call_op(node, entry, env, ledger)
            if bumps_version(node, entry):
                self._bump(bound[0].storage)
            return result
        inputs = self._input_vars(bound)
        with grad_on_recording_nothing():  # r[ops.aten-values.grad-mode]: where eager records
            result = call_op(node, entry, env, ledger)
        if entry.kind is OpKind.VIEW:
            self._note_views(result)
        else:
            self._note_bases(result)
        needed = tuple(v is not None for v in inputs)
        carried = output_gradients(node.target, bound, needed, len(pytree.tree_leaves(result)))
        if any(inputs) and node.target not in NONDIFFERENTIABLE and carried != ():
            rule = derivative_of(node.target)
            originals = self._original_self(node, rule, result, bound, inputs, carried)
            outputs = self._record(
                node.name,
                rule,
                qualified_name(node.target),
                result,
                bound,
                inputs,
                originals,
                carried,
            )
            for cell in originals.values():
                self.ledger.release(cell)  # the tape holds it now, or pack's result instead
            for cell, var in zip(cells_of(result), outputs, strict=True):
                self._set_var(cell, var)
        return result

    def _mutation(self, node, entry, bound, env, ledger):
        """An in-place op: the target gets a new history, and so does its base through a view."""
        target = bound[0]
        functional = entry.functional if entry.kind is OpKind.INPLACE else aten.copy.default
        inputs = self._input_vars(bound)
        if not any(inputs):
            result = call_op(node, entry, env, ledger)
            self._bump(target.storage)
            return result
        self._check_mutable(node, target)
        rule = derivative_of(functional)
        # The rule reads the target's value from before the write (leaf 1: output first, then the
        # arguments): eager saves a clone of it.
        before = (
            self._clone(target)
            if rule is not None and 1 in self._reads(rule, target, bound, inputs)
            else None
        )
        result = call_op(node, entry, env, ledger)
        self._bump(target.storage)
        originals = {} if before is None else {1: before}
        (var,) = self._record(
            node.name, rule, qualified_name(functional), target, bound, inputs, originals
        )
        if before is not None:
            self.ledger.release(before)  # the tape holds it now, or pack's result instead
        self._rebase(target, var)
        return result

    def _original_self(self, node, rule, result, bound, inputs, carried) -> dict[int, Tensor]:
        """r[ops.aten-mutations.original-self]: an ATen-valued in-place op runs as its functional
        op and a copy_ of the result into its first argument; where the derivative reads that
        argument, it reads a clone of it, as eager's in-place op keeps its original self."""
        target = bound[0]
        written = any(
            user.target is aten.copy_.default and user.args == (node.args[0], node)
            for user in node.users
        )
        if rule is None or not written or not isinstance(target, Tensor):
            return {}
        position = len(pytree.tree_leaves(result))  # leaves: the output's, then the arguments'
        if position not in self._reads(rule, result, bound, inputs, carried):
            return {}
        return {position: self._clone(target)}

    def _relayout(self, node, entry, bound, env, ledger):
        """r[autograd.metadata]: an in-place metadata op on a tensor that needs a gradient gives it
        the history of the view op on its old layout; a base relaid out so has its views read
        their history anew."""
        cell = bound[0]
        var = self.var(cell)
        detaches = entry.functional in NONDIFFERENTIABLE  # r[aliasing.metadata.detach]
        if var is not None and not grad_enabled(node) and not detaches:
            raise UnsupportedError(
                f"{node.name} changes the layout of a tensor that requires grad under "
                "torch.no_grad(), which leaves it the history of its old layout",
                rule="autograd.no-grad-metadata",
                fix="change its layout with grad mode on, or take a view (x.t() rather than "
                "x.t_())",
            )
        if var is not None and id(cell) in self._input_cells:
            raise UnsupportedError(
                f"{node.name} changes the layout of a caller's tensor that requires grad, which "
                "would rebase the caller's autograd history",
                rule="autograd.mutated-grad-input",
                fix="take a view inside the function (x.t() rather than x.t_()), or compile the "
                "function with aotspec.compile, which gives the caller's tensor eager's history",
            )
        before = Tensor(cell.storage, cell.layout, name=f"{cell.name}.before")
        result = call_op(node, entry, env, ledger)
        if detaches:
            self._set_var(cell, None)  # eager's detach_ leaves the version alone
            return result
        self._bump(cell.storage)
        if var is None:
            return result
        view = entry.functional
        rule = DERIVATIVES[view]
        (new,) = self._record(
            node.name, rule, qualified_name(view), cell, [before, *bound[1:]], [var]
        )
        self._set_var(cell, new)
        base = self._bases.get(id(cell.storage))
        if base is not None and base.cell is cell:
            base.generation += 1
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
        (new,) = self._record(
            f"{target.name}.copy_slices",
            write_through_backward,
            "CopySlices",
            base.cell,
            bound,
            [old, var],
        )
        self._set_var(base.cell, new)
        base.generation += 1
        self._views.setdefault(id(target), _View(target, base, base.generation - 1))

    def _check_mutable(self, node, target: Tensor) -> None:
        if id(target.storage) in self._input_storages:
            raise UnsupportedError(
                f"{node.name} writes a gradient-carrying value into a caller's tensor, "
                "which would rebase the caller's autograd history",
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
        for cell in cells_of(result):
            self._bases.setdefault(id(cell.storage), _Base(cell))

    def _note_views(self, result) -> None:
        for cell in cells_of(result):
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

    def _reads(self, rule, out, bound, inputs, carried=None) -> tuple[int, ...]:
        """r[hooks.eager.saved-set]: the leaves of (output, arguments) the rule reads to compute
        the gradients of the arguments that need one, in the order it first reads them."""
        spec, leaves, n_out = _signature(out, bound)
        # every output that can carry a gradient gets one: eager saves before it knows which will
        grads = tuple(
            Layout.contiguous(s.layout.dtype, s.layout.sizes)
            if _carries(s, k, carried)
            else None
            for k, s in enumerate(leaves[:n_out])
        )
        needed = tuple(var is not None for var in inputs)
        return rule_program(rule, spec, leaves, n_out, grads, needed).save_order

    def _record(
        self, name, rule, op_name, out, bound, inputs, originals=None, carried=None
    ) -> list[Var | None]:
        spec, leaves, n_out = _signature(out, bound)
        outputs = [
            Var(f"{name}[{k}]") if _carries(leaf, k, carried) else None
            for k, leaf in enumerate(leaves[:n_out])
        ]
        entry = Entry(name, rule, op_name, spec, leaves, n_out, list(inputs), outputs)
        if rule is not None:
            cells = [leaf for leaf in pytree.tree_leaves((out, bound))]
            hooks = torch._C._autograd._top_saved_tensors_default_hooks(
                True
            )  # r[hooks.eager.innermost]
            for position in self._reads(rule, out, bound, inputs, carried):
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
        crossing = Crossing()
        packed = crossing.to_reference(pack(crossing.to_torch(cell)))
        held = cells_of(packed)
        for kept in held:
            self.ledger.hold(kept)
        return Saved(packed, held, unpack)

    def heldcells_of(self) -> list[Tensor]:
        return [
            cell for entry in self.entries for saved in entry.saved.values() for cell in saved.held
        ]


def _signature(out, bound):
    """The (spec, keyed leaves, number of output leaves) of an op's (output, arguments)."""
    leaves, spec = pytree.tree_flatten((out, bound))
    keyed = tuple(
        Slot(leaf.layout) if isinstance(leaf, Tensor) else key_of(leaf) for leaf in leaves
    )
    return spec, keyed, len(pytree.tree_leaves(out))


def _carries(leaf, k: int, carried: tuple[bool, ...] | None) -> bool:
    """Whether output leaf `k` gets a gradient: a floating-point tensor, and for an ATen-valued
    op one eager autograd gives a gradient (`carried`, `r[ops.aten-derivatives]`)."""
    if not (isinstance(leaf, Slot) and carries_gradients(leaf.layout.dtype)):
        return False
    return carried is None or carried[k]


def cells_of(value) -> list[Tensor]:
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, Tensor)]


@define
class Crossing:
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


def bumps_version(node: torch.fx.Node, entry) -> bool:
    """In-place ops, copy_ and set_ advance a tensor's version; resize_storage_bytes_ does not
    (r[resize.eager.version]), nor a write eager's op makes without advancing it
    (r[ops.aten-mutations.versions])."""
    if node.target is torch.ops.inductor.resize_storage_bytes_.default:
        return False
    if node.target is aten.copy_.default:
        return advances_version(node)  # r[ops.aten-mutations.versions]
    return entry.kind in (OpKind.INPLACE, OpKind.EFFECT)
