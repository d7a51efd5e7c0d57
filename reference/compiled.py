"""The reference's compiled runtime: run a compiled plan boxed, then apply its epilogue.

A compiled call (`specs/boxed-calls.md`, `specs/functionalization.md`):
1. The caller's tensors cross the boundary (`r[boundary.import]`); stolen ones are dropped by the
   runtime right there (`r[boxed.steal]`).
2. The forward graph runs boxed: its argument list is cleared on entry, so each input and each
   intermediate dies right after its last use unless the caller still holds it (`r[boxed.args-cleared]`).
   With autograd, the forward also returns the saved values, which the backward takes as one list
   and frees at their last use (`r[autograd.saved-freed-in-backward]`).
   The unboxed convention (argument list alive until return) is simulated on request, to compare.
3. The epilogue acts on the caller's own tensors and the outputs are built as views
   (`reference/epilogue.py`, shared with the fast backend).
"""

from __future__ import annotations

import numpy as np
import torch
from attrs import define, field

from .autograd import TrainingPlan
from .boundary import Boundary, tensor_on
from .eager import interpret
from .epilogue import (
    SavedInputs,
    apply_epilogue,
    build_outputs,
    detached_where_needed,
    tangents_as_traced,
)
from .functionalize import FunctionalProgram
from .ledger import Ledger
from .storage import Tensor


@define
class CompiledRun:
    outputs: list
    #: The forward's ledger; `backward_ledger` is filled in when the backward has run.
    ledger: Ledger
    backward_ledger: Ledger | None = None
    #: Storages (ledger ids) of the saved values the backward took over.
    saved_storages: frozenset[int] = frozenset()


@define
class _GraphRunner:
    """Runs one graph of a plan on the reference, keeping the ledger of that run."""

    boxed: bool
    ledger: Ledger = field(factory=Ledger)

    def run(self, program, inputs: list[Tensor], caller_held: list[bool]) -> list[Tensor]:
        for cell, held in zip(inputs, caller_held, strict=True):
            if held:
                self.ledger.hold(cell)  # the caller's own reference
        if not self.boxed:
            for cell in inputs:
                self.ledger.hold(cell)  # the argument list, alive until the call returns
        with np.errstate(all="ignore"):
            results = interpret(program, inputs, self.ledger)
        if not self.boxed:
            for cell in inputs:
                self.ledger.release(cell)
        return results


def _import(tensors: list, stolen: frozenset[int]) -> list[Tensor]:
    boundary = Boundary()
    cells = [boundary.import_tensor(t) for t in tensors]
    for i in stolen:
        # r[boxed.steal]: the reference holds its own copy now; dropping the runtime's last torch
        # reference frees the caller's tensor at once (a stolen input is only ever read).
        tensors[i] = None
    return cells


def _export(cells: list[Tensor]) -> list[torch.Tensor]:
    boundary = Boundary()
    return [tensor_on(boundary.torch_storage(cell.storage), cell.layout) for cell in cells]


def run_compiled(
    plan: FunctionalProgram | TrainingPlan,
    tensors: list,
    *,
    stolen: frozenset[int] = frozenset(),
    boxed: bool = True,
) -> CompiledRun:
    """Run `plan` on the caller's `tensors` (the runtime's own list; stolen entries are dropped)."""
    caller_storages = [t.untyped_storage() if i not in stolen else None for i, t in enumerate(tensors)]
    if isinstance(plan, TrainingPlan):
        program = plan.functional
        run = CompiledRun([], Ledger())
        call = _TrainingCall(plan, stolen, boxed, run)
        flats = list(_Forward.apply(call, *detached_where_needed(plan, tensors)))
        apply_epilogue(program, tensors, caller_storages, flats)
        call.saved_inputs.after_call()
    else:
        program = plan
        runner = _GraphRunner(boxed)
        results = runner.run(plan, _import(tensors, stolen), [i not in stolen for i in range(len(tensors))])
        flats = _export(results)
        run = CompiledRun([], runner.ledger)
        apply_epilogue(program, tensors, caller_storages, flats)
    run.outputs = build_outputs(program, tensors, caller_storages, flats)
    return run


@define
class _TrainingCall:
    plan: TrainingPlan
    stolen: frozenset[int]
    boxed: bool
    run: CompiledRun
    saved: list | None = None
    saved_inputs: SavedInputs | None = None


class _Forward(torch.autograd.Function):
    """The compiled forward as one autograd node; its backward runs the backward graph."""

    @staticmethod
    def forward(ctx, call: _TrainingCall, *tensors):
        plan = call.plan
        runner = _GraphRunner(call.boxed, call.run.ledger)
        held = [i not in call.stolen for i in range(len(tensors))]
        results = runner.run(plan.forward, _import(list(tensors), call.stolen), held)
        n_outputs = len(results) - plan.num_saved
        call.saved = results[n_outputs:]
        # r[autograd.saved-inputs]: a saved input is the caller's tensor, read when the backward runs.
        call.saved_inputs = SavedInputs.at_call(plan, {k: tensors[i] for k, i in plan.saved_inputs.items()})
        flats = _export(results[:n_outputs])
        ctx.call = call
        ctx.mark_non_differentiable(*[f for k, f in enumerate(flats) if k not in plan.differentiable_outputs])
        return tuple(flats)

    @staticmethod
    def backward(ctx, *grads):
        call: _TrainingCall = ctx.call
        plan = call.plan
        saved, call.saved = call.saved, None  # handed over in one list, freed at last use
        saved_inputs, call.saved_inputs = call.saved_inputs, None
        saved_inputs.check()
        boundary = Boundary()
        held = [False] * len(saved)
        for k, t in saved_inputs.tensors.items():
            saved[k] = boundary.import_tensor(t)  # its bytes now, not at the call
            held[k] = plan.saved_inputs[k] not in call.stolen  # else the backward holds the last reference
        tangents = tangents_as_traced(plan, grads)  # materialized: zeros, never None
        inputs = saved + [boundary.import_tensor(t) for t in tangents]
        runner = _GraphRunner(call.boxed)
        results = runner.run(plan.backward, inputs, held + [False] * len(tangents))
        call.run.backward_ledger = runner.ledger
        call.run.saved_storages = frozenset(cell.storage.id for cell in saved)
        input_grads: list = [None] * len(plan.functional.inputs)
        for i, grad in zip(plan.grad_inputs, _export(results), strict=True):
            input_grads[i] = grad
        return (None, *input_grads)
