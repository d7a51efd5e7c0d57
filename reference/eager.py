"""The reference eager interpreter: runs a captured mutable graph with eager PyTorch semantics.

`run(fn, *args)` captures `fn` and `execute`s it: the evaluator (`interpreter.py`) runs the
captured graph op by op on the reference's storage model, dropping every value right after its
last use (`r[memory.eager.last-use]`). With grad mode on and an input that requires grad, each op
runs through the autograd tape (`tape.py`), which records what the backward
(`eager_backward.py`) needs. Nothing here depends on a compile pass.
"""

from __future__ import annotations

from collections import Counter
from operator import getitem
from typing import Any

import numpy as np
import torch
import torch.utils._pytree as pytree
from attrs import define

from aotspec.errors import UnsupportedError

from .boundary import Boundary, autocast_off, refuse_inference_tensors, refuse_transformed
from .capture import capture, hooks_silenced_while_tracing
from .eager_backward import connect
from .graph import placeholders
from .interpreter import OpCall, call_op, interpret
from .ledger import Ledger
from .lift import lift
from .program_records import CapturedProgram
from .storage import Tensor
from .tape import Tape, bumps_version


@define
class EagerRun:
    """What one eager run returns: the user's outputs (torch) and the ledger of the run."""

    outputs: Any
    ledger: Ledger
    program: CapturedProgram
    #: With autograd: the backward's ledger, once `.backward()` has run the tape.
    backward_ledger: Ledger | None = None
    #: Storages (ledger ids) of the values the tape saved, which the backward took over.
    saved_storages: frozenset[int] = frozenset()


class WritesCounted:
    """Runs each op with `inner`, counting the in-place ops made through each storage."""

    def __init__(self, inner: OpCall):
        self.inner = inner
        #: id of a storage -> the in-place ops made through it (`r[boundary.export.versions]`)
        self.through: Counter[int] = Counter()

    def call(self, node: torch.fx.Node, entry, env, ledger: Ledger):
        if node.target is not getitem and bumps_version(node, entry):
            self.through[id(env[node.args[0]].storage)] += 1
        return self.inner(node, entry, env, ledger)


def _advance_versions(
    callers: list[torch.Tensor], storages: list, before: list[int], writes: Counter[int]
) -> None:
    """r[boundary.export.versions]: each caller tensor's counter is advanced once per in-place op
    through its storage, counting an advance the write-back made (its `set_`) as one of them."""
    for t, storage, version in zip(callers, storages, before, strict=True):
        target = version + writes[id(storage)]
        while t._version < target:  # a counter shared with an earlier tensor is there already
            torch.autograd.graph.increment_version(t)


def run(fn, *args, **kwargs) -> EagerRun:
    """Capture `fn` on these arguments and run it on the reference, like eager PyTorch would."""
    lifted = lift(fn)
    if lifted.tensors:  # r[capture.lift]
        fn, args = lifted.wrap(fn), (list(lifted.tensors), *args)
    leaves = pytree.tree_leaves((args, kwargs))
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    refuse_transformed(tensors)
    refuse_inference_tensors(tensors, len(lifted.tensors))
    with hooks_silenced_while_tracing():
        program = capture(fn, args, kwargs)
    return execute(program, args, kwargs)


def execute(program: CapturedProgram, args, kwargs) -> EagerRun:
    """Run a captured program on the caller's arguments (`r[boundary.import]`,
    `r[boundary.export]`): the caller's tensors take the program's effects once it succeeded."""
    if program.custom_functions:
        # r[capture.custom-function.eager-interpreter]
        raise UnsupportedError(
            f"the function applies the custom autograd.Function "
            f"{program.custom_functions[0].name}, and a gradient can reach it: the eager "
            "interpreter's autograd tape has no entry for a Function's own backward",
            rule="capture.custom-function.eager-interpreter",
            fix="compile the function (aotspec.compile), or apply the Function under "
            "torch.no_grad()",
        )
    boundary = Boundary()
    callers = program.tensor_inputs(args, kwargs)
    for i in program.requires_grad_inputs:
        callers[i].requires_grad_()  # r[autograd.requires-grad-inside]: before any op reads it
    inputs = [
        boundary.import_tensor(t, name=node.name)
        for t, node in zip(callers, placeholders(program.graph), strict=True)
    ]
    ledger = Ledger()
    for cell in inputs:
        ledger.hold(cell)  # the caller holds its arguments for the whole call
    tape = Tape.needed(inputs, callers, ledger, program.graph)
    input_storages = [cell.storage for cell in inputs]
    writes = WritesCounted(call_op if tape is None else tape.call)
    # inf and nan are values here, as in PyTorch; r[capture.autocast]: the casts are ops
    with np.errstate(all="ignore"), autocast_off():
        outputs = interpret(program, inputs, ledger, call=writes.call)
    # r[capture.data-dependent.checks]: before anything reaches the caller
    program.raise_failed_check(lambda k: boundary.export(outputs[k]).item())
    versions_before = [t._version for t in callers]
    boundary.apply_to_caller()  # r[boundary.failed-call]: reached only when the run succeeded
    _advance_versions(callers, input_storages, versions_before, writes.through)
    torch_outputs = [boundary.export(value) for value in outputs]
    run = EagerRun(None, ledger, program)
    if tape is not None:
        torch_outputs = connect(tape, outputs, torch_outputs, run)
        # r[autograd.saved-outputs.version]: the caller's writes into its outputs reach the
        # tape's storages too (aliases without history: no cycle through the tape's node)
        returned = [
            (value.storage, t.detach())
            for value, t in zip(outputs, torch_outputs, strict=True)
            if isinstance(value, Tensor)
        ]
        storages = input_storages + [storage for storage, _ in returned]
        tape.note_callers_after_call(storages, callers + [t for _, t in returned])
    for k in program.requires_grad_outputs:
        torch_outputs[k].requires_grad_()  # r[autograd.requires-grad-inside.outputs]
    run.outputs = program.unflatten_outputs(torch_outputs)
    return run
