"""What a compiled call does around its graph, on the caller's real tensors (both backends).

After the forward graph has produced its outputs (`flats`, one tensor per storage the graph made
or wrote), the epilogue acts on the caller's tensors: storage resizes and writes first, then
rebindings (`r[functionalize.epilogue.data]`, `r[functionalize.epilogue.resize]`,
`r[functionalize.epilogue.set]`), and the outputs are built as views: of the caller's tensors
for outputs that alias inputs, of the flats for the rest (`r[functionalize.outputs]`), so
autograd reaches them through ordinary torch views. No reference interpreter here: the fast
backend uses this module as it is.
"""

from __future__ import annotations

import torch
from attrs import define, field

from aotspec.errors import SpecViolation

from .autograd import TrainingPlan
from .boundary import set_within, tensor_on
from .functionalize import CallerStorage, FunctionalProgram, OutputIsInput, Rebind, Resize, WriteBack
from .storage import Layout


def detached_where_needed(plan: TrainingPlan, tensors: list) -> list:
    """r[autograd.detach-no-grad-inputs]: a non-leaf input that statically gets no gradient is
    detached, so autograd does not walk the graph behind it (PyTorch #134193); leaves are not."""
    detached = []
    for i, (t, meta) in enumerate(zip(tensors, plan.functional.inputs, strict=True)):
        needs_detach = meta.requires_grad and not meta.is_leaf and i not in plan.grad_inputs
        detached.append(t.detach() if needs_detach else t)
    return detached



@define
class SavedInputs:
    """The saved inputs of one call (`r[autograd.saved-inputs]`): the caller's tensors by saved
    index, with what the backward checks before it reads them. Those the backward reads as the
    call began are noted when the forward graph hands them over; those it reads as the call left
    them, once the epilogue has run (the call's own writes are the forward's)."""

    plan: TrainingPlan
    tensors: dict[int, torch.Tensor]
    #: (tensor, its version then, bytes its storage must hold: exactly these when the backward
    #: reads it as the call left it, else at most these, the storage's size at the call)
    noted: list[tuple[torch.Tensor, int, int, bool]] = field(factory=list)

    @classmethod
    def at_call(cls, plan: TrainingPlan, tensors: dict[int, torch.Tensor]) -> SavedInputs:
        saved = cls(plan, tensors)
        saved._note(read_after_call=False)
        return saved

    def after_call(self) -> None:
        self._note(read_after_call=True)

    def _note(self, read_after_call: bool) -> None:
        after = self.plan.read_after_call
        for k, t in self.tensors.items():
            i = self.plan.saved_inputs[k]
            if (i in after) == read_after_call:
                nbytes = after[i] if read_after_call else t.untyped_storage().nbytes()
                self.noted.append((t, t._version, nbytes, read_after_call))

    def check(self) -> None:
        """Before the backward runs any op: each saved input still holds what the forward read.
        A storage as big as it was at the call is big enough; a smaller one is measured against
        the tensor's layout."""
        for t, version, nbytes, exact in self.noted:
            if not exact and t.untyped_storage().nbytes() < nbytes:
                nbytes = Layout.of(t).extent_bytes()
            _check_saved_input(t, version, nbytes)


def _check_saved_input(t: torch.Tensor, version: int, nbytes: int) -> None:
    if t._version != version:
        # r[autograd.saved-inputs.version]: eager's check on its saved variables, same words.
        raise SpecViolation(
            "one of the variables needed for gradient computation has been modified by an inplace "
            f"operation: [{t.type()} {list(t.shape)}] is at version {t._version}; expected version "
            f"{version} instead",
            rule="autograd.saved-inputs.version",
            fix="write this input only after the backward has run, or clone it inside the function "
            "and let the backward read the clone",
        )
    if nbytes > t.untyped_storage().nbytes():
        # r[autograd.saved-inputs.in-bounds]: eager would read freed memory here.
        raise SpecViolation(
            f"the backward reads {nbytes} bytes of a saved input's storage ({t.type()} "
            f"{list(t.shape)}), which holds {t.untyped_storage().nbytes()}",
            rule="autograd.saved-inputs.in-bounds",
            fix="resize the storage up and refill it before the backward (FSDP gathers parameters "
            "again in its pre-backward hook)",
        )


def tangents_as_traced(plan: TrainingPlan, grads) -> list[torch.Tensor]:
    """r[autograd.tangent-layout]: the gradients of the differentiable outputs, each laid out like
    the tangent the backward graph was traced with (autograd may pass an expanded one)."""
    tangents = []
    for k, strides in zip(plan.differentiable_outputs, plan.tangent_strides, strict=True):
        grad = grads[k]
        if grad.stride() != strides:
            grad = torch.empty_strided(grad.shape, strides, dtype=grad.dtype, device=grad.device).copy_(grad)
        tangents.append(grad)
    return tangents


def apply_epilogue(program: FunctionalProgram, tensors, caller_storages, flats: list[torch.Tensor]) -> None:
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
    for storage in program.written:
        _advance_versions(program, tensors, storage)


def _advance_versions(program: FunctionalProgram, tensors, storage: int) -> None:
    """r[functionalize.epilogue.version]: the caller's tensors on a storage the program wrote see
    a new version, as after an eager in-place op (even when the storage ends at 0 bytes and
    nothing is written back), so autograd's checks of saved tensors see the write."""
    for i, (t, meta) in enumerate(zip(tensors, program.inputs, strict=True)):
        if t is not None and meta.storage == storage and meta.same_object == i:  # each object once
            torch.autograd.graph.increment_version(t)


def _storage_of(where, caller_storages, flats) -> torch.UntypedStorage:
    if isinstance(where, CallerStorage):
        return caller_storages[where.input_index]
    return flats[where.output_index].untyped_storage()


def build_outputs(program: FunctionalProgram, tensors, caller_storages, flats) -> list[torch.Tensor]:
    on_storage = {}
    for t in tensors:
        if t is not None:
            on_storage.setdefault((t.untyped_storage()._cdata, t.dtype), t)
    outputs = []
    returned: set[int] = set()
    for output in program.outputs:
        if isinstance(output, OutputIsInput):
            outputs.append(tensors[output.input_index])
        elif isinstance(output.storage, CallerStorage):
            outputs.append(_view_of_caller(output, tensors, on_storage, caller_storages))
        else:
            outputs.append(_view_of_graph_storage(output.layout, flats[output.storage.output_index], returned))
    return outputs


def _view_of_graph_storage(layout, flat: torch.Tensor, returned: set[int]) -> torch.Tensor:
    """`flat` itself the first time an output is laid out like it (no view for autograd to undo),
    else a view of its storage."""
    if id(flat) not in returned and _laid_out_like(flat, layout):
        returned.add(id(flat))
        return flat
    return flat.as_strided(layout.sizes, layout.strides, layout.offset)


def _laid_out_like(t: torch.Tensor, layout) -> bool:
    return (
        t.dtype == layout.dtype
        and tuple(t.shape) == layout.sizes
        and t.stride() == layout.strides
        and t.storage_offset() == layout.offset
    )


def _view_of_caller(output, tensors, on_storage: dict, caller_storages) -> torch.Tensor:
    """A view of the caller's storage, made from a caller tensor still on it so autograd sees it:
    preferably the input the program viewed it from, as eager autograd would."""
    layout = output.layout
    storage = caller_storages[output.storage.input_index]
    if layout.extent_bytes() > storage.nbytes():
        return tensor_on(storage, layout)
    for candidate in (tensors[output.through] if output.through is not None else None, on_storage.get((storage._cdata, layout.dtype))):
        if candidate is not None and candidate.dtype == layout.dtype and candidate.untyped_storage()._cdata == storage._cdata:
            return candidate.as_strided(layout.sizes, layout.strides, layout.offset)
    return tensor_on(storage, layout)
