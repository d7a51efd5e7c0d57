"""The reference's compiled runtime: run a functional program boxed, then apply its epilogue.

A compiled call (`specs/boxed-calls.md`):
1. The caller's tensors cross the boundary (`r[boundary.import]`); stolen ones are dropped by the
   caller right there (`r[boxed.steal]`).
2. The functional graph runs boxed: its argument list is cleared on entry, so each input and each
   intermediate dies right after its last use unless the caller still holds it (`r[boxed.args-cleared]`).
   The unboxed convention, where the argument list lives until the call returns, is simulated on
   request so the two can be compared.
3. The epilogue acts on the caller's own tensors: storage resizes and writes first, then rebindings
   (`r[functionalize.epilogue.data]`, `r[functionalize.epilogue.resize]`, `r[functionalize.epilogue.set]`).
4. Outputs are built as layouts on storages: the caller's storages for outputs that alias inputs,
   storages of the graph's results for the rest (`r[functionalize.outputs]`).
"""

from __future__ import annotations

import numpy as np
import torch
from attrs import frozen

from .boundary import Boundary, set_within, tensor_on
from .eager import interpret
from .functionalize import (
    CallerStorage,
    FunctionalProgram,
    OutputIsInput,
    Rebind,
    Resize,
    WriteBack,
)
from .ledger import Ledger
from .storage import Tensor


@frozen
class CompiledRun:
    outputs: list
    ledger: Ledger


def run_compiled(
    program: FunctionalProgram, tensors: list[torch.Tensor], *, stolen: frozenset[int] = frozenset(), boxed: bool = True
) -> CompiledRun:
    """Run `program` on the caller's `tensors`; returns the flat outputs and the ledger.

    `tensors` is the runtime's own list: entries at `stolen` are dropped from it during the call.
    """
    caller_storages = [t.untyped_storage() for t in tensors]
    boundary = Boundary()
    inputs = [boundary.import_tensor(t) for t in tensors]
    for i in stolen:
        # r[boxed.steal]: the reference holds its own copy now; dropping the last torch references
        # frees the caller's tensor at once (a stolen input is never written, resized or returned).
        tensors[i] = caller_storages[i] = None
    boundary.forget_caller_tensors()
    ledger = Ledger()
    for i, cell in enumerate(inputs):
        if i not in stolen:
            ledger.hold(cell)  # the caller's own reference
    if not boxed:
        for cell in inputs:
            ledger.hold(cell)  # the argument list, alive until the call returns
    with np.errstate(all="ignore"):
        results = interpret(program, inputs, ledger)
    if not boxed:
        for cell in inputs:
            ledger.release(cell)
    _apply_epilogue(program, tensors, caller_storages, results, boundary)
    return CompiledRun(_outputs(program, tensors, caller_storages, results, boundary), ledger)


def _storage_of(where, caller_storages, results: list[Tensor], boundary: Boundary) -> torch.UntypedStorage:
    if isinstance(where, CallerStorage):
        return caller_storages[where.input_index]
    return boundary.torch_storage(results[where.output_index].storage)


def _apply_epilogue(program, tensors, caller_storages, results, boundary) -> None:
    for step in program.epilogue:
        if isinstance(step, Resize):
            caller_storages[step.input_index].resize_(step.nbytes)
        elif isinstance(step, WriteBack):
            contents = results[step.output_index].read().reshape(-1).view(np.uint8)
            target = torch.empty(0, dtype=torch.uint8).set_(caller_storages[step.input_index])
            with torch.no_grad():
                target.copy_(torch.from_numpy(contents))
        elif isinstance(step, Rebind):
            storage = _storage_of(step.storage, caller_storages, results, boundary)
            with torch.no_grad():
                set_within(tensors[step.input_index], storage, step.layout)


def _outputs(program, tensors, caller_storages, results, boundary) -> list[torch.Tensor]:
    outputs = []
    for output in program.outputs:
        if isinstance(output, OutputIsInput):
            outputs.append(tensors[output.input_index])
        else:
            storage = _storage_of(output.storage, caller_storages, results, boundary)
            outputs.append(tensor_on(storage, output.layout))
    return outputs

