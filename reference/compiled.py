"""The reference's compiled runtime: a plan's graphs run on the interpreter, with ledgers.

The skeleton of a compiled call (`runtime.py`) is shared with the fast backend; this module says
only how the reference runs one graph on one boxed list (`specs/boxed-calls.md`):
1. The caller's tensors cross the boundary (`r[boundary.import]`); stolen ones are dropped by the
   runtime right there (`r[boxed.steal]`).
2. The graph runs boxed: its argument list is cleared on entry, so each input and each
   intermediate dies right after its last use unless the caller still holds it
   (`r[boxed.args-cleared]`). The backward takes the saved values as one list and frees each at
   its last use (`r[autograd.saved-freed-in-backward]`). The unboxed convention (argument list
   alive until return) is simulated on request, to compare.
"""

from __future__ import annotations

import numpy as np
import torch
from attrs import define, field

from .boundary import Boundary
from .graph import GraphProgram
from .interpreter import each_tensor, interpret
from .ledger import Ledger
from .plan_records import Plan
from .runtime import run_plan
from .storage import Tensor


@define
class CompiledRun:
    """What one call of the reference backend leaves to look at: its outputs and ledgers."""

    outputs: list
    #: The forward's ledger; `backward_ledger` is filled in when the backward has run.
    ledger: Ledger = field(factory=Ledger)
    backward_ledger: Ledger | None = None
    #: The backward graph that ran: the plan's, or the one for the outputs its backward reached
    #: (`r[autograd.unreached-outputs.terms]`).
    backward: GraphProgram | None = None
    #: Storages (ledger ids) of the saved values the backward took over.
    saved_storages: frozenset[int] = frozenset()


def run_compiled(
    plan: Plan,
    tensors: list,
    *,
    stolen: frozenset[int] = frozenset(),
    boxed: bool = True,
    callers: list = (),
) -> CompiledRun:
    """Run `plan` on the caller's `tensors` (the runtime's own list; stolen entries are
    dropped)."""
    graphs = _ReferenceGraphs(plan, stolen, boxed, CompiledRun([]))
    graphs.run.outputs = run_plan(plan, graphs, tensors, stolen, callers)
    return graphs.run


@define
class _ReferenceGraphs:
    """The reference's `Graphs`: each graph runs on the interpreter, keeping its ledger."""

    plan: Plan
    stolen: frozenset[int]
    boxed: bool
    run: CompiledRun
    #: Indices of the last forward's outputs on a saved value's storage.
    outputs_saved: list[int] = field(factory=list)

    def forward(self, arguments: list) -> list:
        """Outputs as torch tensors, saved values as reference cells."""
        n = len(arguments)
        cells = _import(arguments)
        held = [i not in self.stolen for i in range(n)]
        results = self._run(self.plan.forward, cells, held, self.run.ledger)
        n_outputs = len(results) - self.plan.num_saved
        saved_storages = {s for cell in results[n_outputs:] for s in _storages(cell)}
        self.outputs_saved = [
            k for k, cell in enumerate(results[:n_outputs]) if _storages(cell) & saved_storages
        ]
        return _export(results[:n_outputs]) + results[n_outputs:]

    def outputs_on_saved(self, outputs: list, saved: list) -> list[int]:
        return self.outputs_saved

    def backward(
        self,
        arguments: list,
        saved_inputs: dict[int, torch.Tensor],
        retain: bool,
        reached: tuple[bool, ...],
    ) -> list:
        plan = self.plan
        n_saved = plan.num_saved
        boundary = Boundary()
        # r[autograd.retain-graph]: a retained node holds its saved values through the backward
        held = [retain] * n_saved + [False] * (len(arguments) - n_saved)
        for k, t in saved_inputs.items():
            arguments[k] = boundary.import_tensor(t)  # its bytes now, not at the call
            # the caller holds a saved input, unless it was stolen: then the backward (or the
            # retained node) holds it
            held[k] = retain or plan.saved_inputs[k] not in self.stolen
        saved_inputs.clear()
        for j in range(n_saved, len(arguments)):
            arguments[j] = boundary.import_tensor(arguments[j])  # the tangents
        self.run.saved_storages = frozenset().union(*map(_storages, arguments[:n_saved]))
        ledger = Ledger()
        self.run.backward_ledger = ledger
        self.run.backward = plan.backward_reaching(reached)
        return _export_gradients(self._run(self.run.backward, arguments, held, ledger))

    def _run(self, program: GraphProgram, inputs: list, caller_held: list[bool], ledger: Ledger):
        cells = list(inputs)
        inputs.clear()  # r[boxed.args-cleared]
        # the saved numbers of a symbolic plan hold nothing (r[sizes.symbolic.saved])
        for cell, held in zip(cells, caller_held, strict=True):
            if held:
                each_tensor(cell, ledger.hold)  # the caller's own reference
        if not self.boxed:
            each_tensor(cells, ledger.hold)  # the argument list, alive until the call returns
        with np.errstate(all="ignore"):
            results = interpret(program, cells, ledger, sizes=self.plan.sizes)
        if not self.boxed:
            each_tensor(cells, ledger.release)
        return results


def _import(tensors: list) -> list[Tensor]:
    """The caller's tensors as reference cells; the list is emptied, so a stolen tensor's last
    torch reference goes with it (`r[boxed.steal.freed-at-last-use]`: the reference holds its
    own copy)."""
    boundary = Boundary()
    cells = [boundary.import_tensor(t) for t in tensors]
    tensors.clear()
    return cells


def _storages(cell) -> set[int]:
    """The storages (ledger ids) a value reads: a sparse one's are its parts'
    (`r[ops.aten-values.sparse-gradient]`), a number's none (a symbolic plan saves sizes, and
    numbers computed from them, for its backward: `r[sizes.symbolic.saved]`)."""
    ids = set()
    each_tensor(cell, lambda t: ids.add(t.storage.id))
    return ids


def _export(cells: list) -> list[torch.Tensor]:
    boundary = Boundary()
    return [boundary.export(cell) for cell in cells]


def _export_gradients(cells: list) -> list:
    """The backward's gradients as torch tensors, each on a storage of its own: a value that is
    the gradient of several inputs (`x + w`'s incoming gradient, for both), or values on one
    storage (it and a view of it), would reach autograd as tensors sharing their bytes, which it
    keeps as each input's `.grad`, so that a later backward accumulates into all of them through
    any one (r[autograd.retain-graph]: each input's `.grad` is its own, as eager's accumulation
    copies a gradient that something else still holds)."""
    boundary = Boundary()
    exported = []
    storages: set[int] = set()
    for cell in cells:
        grad = boundary.export(cell)
        if isinstance(grad, torch.Tensor) and grad.layout == torch.strided:
            storage = grad.untyped_storage().data_ptr()
            if storage in storages:
                grad = grad.clone()  # r[autograd.retain-graph]
            storages.add(storage)
        exported.append(grad)
    return exported
