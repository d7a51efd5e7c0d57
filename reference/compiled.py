"""The reference's compiled runtime: run a compiled plan boxed, then apply its epilogue.

A compiled call (`specs/boxed-calls.md`, `specs/functionalization.md`):
1. The caller's tensors cross the boundary (`r[boundary.import]`); stolen ones are dropped by the
   runtime right there (`r[boxed.steal]`).
2. The forward graph runs boxed: its argument list is cleared on entry, so each input and each
   intermediate dies right after its last use unless the caller still holds it (`r[boxed.args-cleared]`).
   With autograd, the forward also returns the saved values, which the backward takes as one list
   and frees at their last use (`r[autograd.saved-freed-in-backward]`).
   The unboxed convention (argument list alive until return) is simulated on request, to compare.
3. The epilogue acts on the caller's own tensors: storage resizes and writes first, then rebindings.
4. Outputs are built as layouts on storages: views of the caller's tensors for outputs that alias
   inputs, views of the graph's results for the rest (`r[functionalize.outputs]`), so autograd
   reaches them through ordinary torch views.
"""

from __future__ import annotations

import numpy as np
import torch
from attrs import define, field

from .autograd import TrainingPlan
from .boundary import Boundary, set_within, tensor_on
from .eager import interpret
from .functionalize import CallerStorage, FunctionalProgram, OutputIsInput, Rebind, Resize, WriteBack
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
        flats = _Forward.apply(_TrainingCall(plan, stolen, boxed, run), *_detached_where_needed(plan, tensors))
        flats = list(flats)
    else:
        program = plan
        runner = _GraphRunner(boxed)
        results = runner.run(plan, _import(tensors, stolen), [i not in stolen for i in range(len(tensors))])
        flats = _export(results)
        run = CompiledRun([], runner.ledger)
    _apply_epilogue(program, tensors, caller_storages, flats)
    run.outputs = _outputs(program, tensors, caller_storages, flats)
    return run


def _detached_where_needed(plan: TrainingPlan, tensors: list) -> list:
    """r[autograd.detach-no-grad-inputs]: a non-leaf input that statically gets no gradient is
    detached, so autograd does not walk the graph behind it (PyTorch #134193); leaves are not."""
    detached = []
    for i, (t, meta) in enumerate(zip(tensors, plan.functional.inputs, strict=True)):
        needs_detach = meta.requires_grad and not meta.is_leaf and i not in plan.grad_inputs
        detached.append(t.detach() if needs_detach else t)
    return detached


@define
class _TrainingCall:
    plan: TrainingPlan
    stolen: frozenset[int]
    boxed: bool
    run: CompiledRun
    saved: list | None = None


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
        flats = _export(results[:n_outputs])
        ctx.call = call
        ctx.mark_non_differentiable(*[f for k, f in enumerate(flats) if k not in plan.differentiable_outputs])
        return tuple(flats)

    @staticmethod
    def backward(ctx, *grads):
        call: _TrainingCall = ctx.call
        plan = call.plan
        saved, call.saved = call.saved, None  # handed over in one list, freed at last use
        tangents = [grads[k] for k in plan.differentiable_outputs]  # materialized: zeros, never None
        boundary = Boundary()
        inputs = saved + [boundary.import_tensor(t) for t in tangents]
        runner = _GraphRunner(call.boxed)
        results = runner.run(plan.backward, inputs, [False] * len(inputs))
        call.run.backward_ledger = runner.ledger
        call.run.saved_storages = frozenset(cell.storage.id for cell in saved)
        input_grads: list = [None] * len(plan.functional.inputs)
        for i, grad in zip(plan.grad_inputs, _export(results), strict=True):
            input_grads[i] = grad
        return (None, *input_grads)


def _apply_epilogue(program: FunctionalProgram, tensors, caller_storages, flats: list[torch.Tensor]) -> None:
    for step in program.epilogue:
        if isinstance(step, Resize):
            caller_storages[step.input_index].resize_(step.nbytes)
        elif isinstance(step, WriteBack):
            target = torch.empty(0, dtype=flats[step.output_index].dtype).set_(caller_storages[step.input_index])
            with torch.no_grad():
                target.copy_(flats[step.output_index])
        elif isinstance(step, Rebind):
            storage = _storage_of(step.storage, caller_storages, flats)
            with torch.no_grad():
                set_within(tensors[step.input_index], storage, step.layout)


def _storage_of(where, caller_storages, flats) -> torch.UntypedStorage:
    if isinstance(where, CallerStorage):
        return caller_storages[where.input_index]
    return flats[where.output_index].untyped_storage()


def _outputs(program: FunctionalProgram, tensors, caller_storages, flats) -> list[torch.Tensor]:
    on_storage = {}
    for t in tensors:
        if t is not None:
            on_storage.setdefault((t.untyped_storage()._cdata, t.dtype), t)
    outputs = []
    for output in program.outputs:
        if isinstance(output, OutputIsInput):
            outputs.append(tensors[output.input_index])
        elif isinstance(output.storage, CallerStorage):
            outputs.append(_view_of_caller(output, on_storage, caller_storages))
        else:
            layout = output.layout
            flat = flats[output.storage.output_index]
            outputs.append(flat.as_strided(layout.sizes, layout.strides, layout.offset))
    return outputs


def _view_of_caller(output, on_storage: dict, caller_storages) -> torch.Tensor:
    """A view of the caller's storage; through a caller tensor still on it, so autograd sees it."""
    layout = output.layout
    storage = caller_storages[output.storage.input_index]
    through = on_storage.get((storage._cdata, layout.dtype))
    if through is not None and layout.extent_bytes() <= storage.nbytes():
        return through.as_strided(layout.sizes, layout.strides, layout.offset)
    return tensor_on(storage, layout)
