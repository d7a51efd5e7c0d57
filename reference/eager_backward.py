"""The eager interpreter's backward: walks a tape in reverse, and links it to torch's autograd.

The outputs of an eager run reach torch's autograd through one node (`TapeFunction`) whose
backward walks the tape (`tape.py`) in reverse on the reference, with its own ledger, running
each entry's traced derivative rule (`traced_rules.py`) on the interpreter and unpacking saved
values right before their op's rule reads them (`r[hooks.eager.unpack-on-use]`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from attrs import define

from aotspec.errors import SECOND_BACKWARD, InternalError, UnsupportedError

from .boundary import Boundary
from .interpreter import each_tensor, interpret
from .ledger import Ledger
from .storage import Tensor
from .tape import Crossing, Entry, Saved, Tape, Var, cells_of
from .traced_rules import Slot, rule_program, sum_program


class Backward:
    """Walks a tape in reverse on the reference, with its own ledger."""

    def __init__(self, tape: Tape, retain: bool = False):
        self.tape = tape
        #: r[autograd.retain-graph]: the saved values stay on the tape for a later backward.
        self.retain = retain
        self.ledger = Ledger()
        self._grads: dict[Var, Tensor] = {}

    def run(self, seeds: list[tuple[Var, Tensor]]) -> dict[Var, Tensor]:
        ledger = self.ledger
        for cell in self.tape.heldcells_of():
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
                fix="add a @derivative rule beside the op in reference/ops.py, "
                "or compute this part under torch.no_grad()",
            )
        self.ledger.begin_step(f"{entry.name}.unpack")
        values = {
            position: self._unpack(entry, position, saved)
            for position, saved in entry.saved.items()
        }
        unpacked = [
            cell
            for position, saved in entry.saved.items()
            if saved.unpack is not None
            for cell in cells_of(values[position])
        ]
        for cell in unpacked:
            self.ledger.hold(cell)
        self.ledger.end_step()
        leaves = tuple(
            Slot(values[k].layout) if k in values else leaf for k, leaf in enumerate(entry.leaves)
        )
        grad_layouts = tuple(None if g is None else g.layout for g in grads)
        needed = tuple(var is not None for var in entry.inputs)
        program = rule_program(entry.rule, entry.spec, leaves, entry.n_out, grad_layouts, needed)
        missing = [k for k in program.reads if k not in values]
        if missing and entry.saved_freed:
            raise RuntimeError(SECOND_BACKWARD)  # r[autograd.retain-graph]
        if missing:
            raise InternalError(
                f"the rule of {entry.name} reads leaves {missing}, which were not saved"
            )
        inputs = [g for g in grads if g is not None] + [values[k] for k in program.reads]
        results = interpret(program.program, inputs, self.ledger)
        self._release(entry, unpacked, grads)
        for k, grad in zip(program.gives, results, strict=True):
            self._accumulate(entry.inputs[k], grad)

    def _unpack(self, entry: Entry, position: int, saved: Saved) -> Tensor:
        if saved.unpack is None:
            cell = saved.value
            if (
                cell.storage is not saved.storage
                or self.tape._version(cell.storage) != saved.version
            ):
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by an "
                    f"inplace operation: {cell.name}, saved by {entry.name}, is at version "
                    f"{self.tape._version(cell.storage)}; "
                    f"expected version {saved.version} instead."
                )
            return cell
        # r[hooks.eager.unpack-on-use]: unpack runs when the backward reaches the op.
        crossing = Crossing()
        unpacked = crossing.to_reference(saved.unpack(crossing.to_torch(saved.value)))
        if not isinstance(unpacked, Tensor):
            raise RuntimeError(
                f"the unpack hook returned {type(unpacked).__name__} for a tensor saved by "
                f"{entry.name}; it must return a tensor"
            )
        return unpacked

    def _release(self, entry: Entry, unpacked: list[Tensor], grads: list) -> None:
        """r[hooks.eager.unpack-on-use]: the saved (or packed) values go after the op's
        backward."""
        self.ledger.begin_step(f"{entry.name}.release")
        saved = [] if self.retain else self._savedcells_of(entry)
        for cell in unpacked + saved + [g for g in grads if g is not None]:
            each_tensor(cell, self.ledger.release)  # r[ops.aten-values.sparse-gradient]: parts
        if not self.retain:  # r[autograd.retain-graph]
            entry.saved_freed = bool(entry.saved)
            entry.saved.clear()
        self.ledger.end_step()

    @staticmethod
    def _savedcells_of(entry: Entry) -> list[Tensor]:
        return [cell for saved in entry.saved.values() for cell in saved.held]

    def _accumulate(self, var: Var | None, grad: Tensor) -> None:
        if var is None:
            self._release_now(grad)
            return
        if var not in self._grads:
            self._grads[var] = grad
            return
        old = self._grads.pop(var)
        (total,) = interpret(sum_program(old.layout, grad.layout), [old, grad], self.ledger)
        self._release_now(old, grad)
        self._grads[var] = total

    def _release_now(self, *cells: Tensor) -> None:
        self.ledger.begin_step("release")
        for cell in cells:
            each_tensor(cell, self.ledger.release)  # r[ops.aten-values.sparse-gradient]: parts
        self.ledger.end_step()


# ---------------------------------------------------------------- the link to torch's autograd


def connect(tape: Tape, outputs: list, torch_outputs: list, run) -> list:
    """Torch outputs connected to torch's autograd: those with a history on the tape come out of
    one autograd node whose backward walks the tape; the others are returned as they are."""
    linked = [
        k
        for k, value in enumerate(outputs)
        if isinstance(value, Tensor) and _has_own_history(tape, value)
    ]
    if not linked:
        return torch_outputs
    seeds_for = [tape.var(outputs[k]) for k in linked]
    node = _TapeNode(tape, seeds_for, [torch_outputs[k] for k in linked], weakref.ref(run))
    # r[autograd.grad-mode-inside]: what ops inside torch.enable_grad() computed has a history,
    # even when the call is made under torch.no_grad()
    with torch.enable_grad():
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
    #: The EagerRun, weakly: it holds the outputs, which hold this node.
    run: Callable[[], Any]


class TapeFunction(torch.autograd.Function):
    """The whole eager call as one autograd node; its backward walks the tape."""

    @staticmethod
    def forward(ctx, node: _TapeNode, *leaves):
        ctx.set_materialize_grads(False)
        ctx.node = node
        # the outputs take this node as their grad_fn: the node does not keep them (no cycle)
        outputs, node.outputs = tuple(node.outputs), []
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        node: _TapeNode = ctx.node
        boundary = Boundary()
        seeds = [
            (var, boundary.import_tensor(g.detach()))
            for var, g in zip(node.seeds_for, grads, strict=True)
            if g is not None
        ]
        node.tape.catch_up_with_callers()
        backward = Backward(node.tape, torch._C._autograd._get_current_graph_task_keep_graph())
        saved_storages = frozenset(cell.storage.id for cell in node.tape.heldcells_of())
        results = backward.run(seeds)
        run = node.run()  # the caller's EagerRun, if it still holds it
        if run is not None:
            run.saved_storages, run.backward_ledger = saved_storages, backward.ledger
        export = Boundary()
        return (
            None,
            *(
                export.export(results[var]) if var in results else None
                for _, var in node.tape.leaves
            ),
        )
