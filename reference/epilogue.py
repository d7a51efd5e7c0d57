"""What a compiled call does around its graph, on the caller's real tensors (both backends).

After the forward graph has produced its outputs (`flats`, one tensor per storage the graph made
or wrote), the epilogue acts on the caller's tensors: storage resizes, the in-place metadata ops
on argument objects, storage writes, then rebindings (`r[functionalize.epilogue.resize]`,
`r[functionalize.epilogue.metadata]`, `r[functionalize.epilogue.data]`,
`r[functionalize.epilogue.set]`), and the outputs are built: an op's result as a tensor of its
own on its flat's bytes (`r[functionalize.outputs.own]`), the others as views of the caller's
tensors for outputs that alias inputs, of those results or of the flats for the rest
(`r[functionalize.outputs]`), so autograd reaches them through ordinary torch views. No
reference interpreter here: the fast backend uses this module as it is.
"""

from __future__ import annotations

import torch

from .boundary import set_within, tensor_on
from .program_records import (
    CallerStorage,
    FunctionalProgram,
    OutputIsInput,
    OutputView,
    Rebind,
    Relayout,
    Resize,
    WriteBack,
)
from .storage import Layout


def raise_failed_check(program: FunctionalProgram, flats: list[torch.Tensor]) -> None:
    """r[capture.data-dependent.checks]: after the forward graph, before the epilogue touches
    any of the caller's tensors, eager's exception for a value check that fails."""

    def value_of(k: int):
        output = program.outputs[k]
        return _viewed_as(flats[output.storage.output_index], output.layout).item()

    program.captured.raise_failed_check(value_of)


def apply_epilogue(
    program: FunctionalProgram, tensors, caller_storages, flats: list[torch.Tensor]
) -> None:
    advanced = program.captured.advanced_inputs
    versions = [None if tensors[i] is None else tensors[i]._version for i in advanced]
    for step in program.epilogue:
        if isinstance(step, Resize):
            caller_storages[step.input_index].resize_(step.nbytes)
        elif isinstance(step, Relayout):
            storage = caller_storages[step.input_index]
            _relayout(tensors[step.input_index], storage, step, step.input_index in advanced)
        elif isinstance(step, WriteBack):
            flat, storage = flats[step.output_index], caller_storages[step.input_index]
            if flat.requires_grad and step.input_index in program.written_with_grad:
                _write_with_history(tensors[step.input_index], storage, flat)
            else:
                _write_bytes(storage, flat)
        elif isinstance(step, Rebind):
            storage = _storage_of(step.storage, caller_storages, flats)
            with torch.no_grad():
                set_within(tensors[step.input_index], storage, step.layout)
    _advance_versions(tensors, advanced, versions)


def _write_bytes(storage: torch.UntypedStorage, flat: torch.Tensor) -> None:
    """r[functionalize.epilogue.data]: the storage takes the bytes, through a fresh alias; from
    storage to storage where `flat` lays out, in order, every byte of a storage as big as the
    caller's (a buffer's new value: the same bytes, without making the alias, at every call),
    and reads them as they are (no lazy conjugate or negation to apply)."""
    source = flat.untyped_storage()
    if (
        flat.storage_offset() == 0
        and flat.is_contiguous()
        and not (flat.is_conj() or flat.is_neg())
        and flat.numel() * flat.element_size() == source.nbytes() == storage.nbytes()
        and source.device == storage.device
    ):
        storage.copy_(source)
        return
    with torch.no_grad():
        torch.empty(0, dtype=flat.dtype, device=storage.device).set_(storage).copy_(flat)


def _relayout(
    tensor: torch.Tensor, storage: torch.UntypedStorage, step: Relayout, advances: bool
) -> None:
    """r[functionalize.epilogue.metadata]: the op itself on the caller's object, under the grad
    mode it ran under in the program, leaves eager's layout, version and autograd history. The
    op checks the layout against the storage's size, which it held when the program ran it: a
    storage the program resized to 0 bytes since is grown for the op and shrunk back, its bytes
    unread."""
    nbytes = storage.nbytes()
    needed = step.layout.extent_bytes()
    if nbytes < needed:
        storage.resize_(needed)
    version = tensor._version
    with torch.set_grad_enabled(step.grad_enabled):
        step.op(tensor, *step.args)
    if not advances:
        # r[functionalize.epilogue.version]: the op eager ran left the counter (a resize_ to
        # the sizes the tensor has), where the one replayed (its as_strided_) advances it
        torch._C._autograd._unsafe_set_version_counter((tensor,), (version,))
    if nbytes < needed:
        storage.resize_(nbytes)


def _write_with_history(
    tensor: torch.Tensor, storage: torch.UntypedStorage, flat: torch.Tensor
) -> None:
    """r[autograd.input-writes]: the caller's tensor (the one object on its storage) takes its
    window of the new contents, through the layout the program left it in, by a copy_ autograd
    records, which gives it the write's history and advances its version once, as the eager
    in-place op did (`r[functionalize.epilogue.version]`); bytes outside its window are written
    first, without history (`r[autograd.input-writes.aliased]` leaves them to no other tensor).
    An expanded tensor, which copy_ refuses to write, takes them through a layout that reads its
    storage once, then its own layout again, both recorded."""
    layout = Layout.of(tensor)
    if layout.has_internal_overlap():
        with torch.enable_grad():
            tensor.as_strided_(flat.shape, (1,), 0)
            tensor.copy_(flat)
            tensor.as_strided_(layout.sizes, layout.strides, layout.offset)
        return
    if not _covers(layout, storage):
        _write_bytes(storage, flat.detach())
    with torch.enable_grad():
        tensor.copy_(flat.as_strided(layout.sizes, layout.strides, layout.offset))


def _covers(layout: Layout, storage: torch.UntypedStorage) -> bool:
    """`layout` reads every byte of `storage` once."""
    whole = Layout.contiguous(layout.dtype, layout.sizes)
    return layout.numel * layout.itemsize == storage.nbytes() and layout.addresses_like(whole)


def _advance_versions(tensors, advanced: tuple[int, ...], versions: list) -> None:
    """r[functionalize.epilogue.version]: the caller's tensors whose counters eager's ops would
    have advanced (`advanced`, by flat index, with `versions` as the epilogue began) see a new
    version once, so autograd's checks of saved tensors see the write, even when nothing is
    written back (a storage that ends at 0 bytes, an in-place metadata op through a detached
    alias): a counter the epilogue's own ops moved (the metadata op itself, a write autograd
    records, a rebinding `set_`), or that the advance of a tensor sharing it moved (a view, a
    detach()), is not advanced again."""
    for i, version in zip(advanced, versions, strict=True):
        t = tensors[i]
        if t is not None and t._version == version:
            torch.autograd.graph.increment_version(t)


def _storage_of(where, caller_storages, flats) -> torch.UntypedStorage:
    if isinstance(where, CallerStorage):
        return caller_storages[where.input_index]
    return flats[where.output_index].untyped_storage()


def apply_backward_writes(plan, targets: dict, written: list, reached: list[bool]) -> None:
    """r[autograd.custom-function.backward-writes]: after the backward graph, the caller's
    tensors take what custom Functions' backwards wrote into them, through the written tensor's
    layout, as an in-place write under torch.no_grad() that advances their version; a write of a
    Function that no reached tangent leads to is not made (eager's engine does not run that
    Function's backward)."""
    differentiated = plan.differentiated
    writes = zip(
        differentiated.backward_writes, written, differentiated.write_tangents, strict=True
    )
    for write, value, tangents in writes:
        if tangents and not any(reached[j] for j in tangents):
            continue
        layout = write.layout
        with torch.no_grad():
            targets[write.input_index].as_strided(
                layout.sizes, layout.strides, layout.offset
            ).copy_(value)


def build_outputs(
    program: FunctionalProgram, tensors, caller_storages, flats
) -> list[torch.Tensor]:
    on_storage = {}
    if program.outputs_on_caller_storages:  # the caller's tensor on a storage, by dtype
        for t in tensors:
            if t is not None:
                on_storage.setdefault((t.untyped_storage()._cdata, t.dtype), t)
    outputs = []
    returned: set[int] = set()
    grad_enabled = torch.is_grad_enabled()
    owned = _outputs_of_their_own(program, flats)
    for output in program.outputs:
        if isinstance(output, OutputIsInput):
            outputs.append(tensors[output.input_index])
            continue
        # r[autograd.grad-mode-inside.views]: an output view is built under the grad mode the
        # program took it in, whatever the mode of the call (no switch when they agree)
        if output.made_with_grad == grad_enabled:
            outputs.append(
                _output_view(output, tensors, on_storage, caller_storages, flats, returned, owned)
            )
            continue
        with torch.set_grad_enabled(output.made_with_grad):
            outputs.append(
                _output_view(output, tensors, on_storage, caller_storages, flats, returned, owned)
            )
    return outputs


def _outputs_of_their_own(program: FunctionalProgram, flats) -> dict:
    """r[functionalize.outputs.own]: the outputs that are no views in eager, as tensors of their
    own on the storages of the graph's outputs, by graph output index: the graph's output
    itself where laid out as the output, else a tensor set to the output's layout on its bytes,
    whose gradient reaches the graph's output through `_OwnLayout`. The output, returned
    twice, is one object; the views of it returned with it are views of it."""
    owned: dict[int, torch.Tensor] = {}
    for output in program.outputs:
        if not (isinstance(output, OutputView) and output.own):
            continue
        index = output.storage.output_index
        flat = flats[index]
        if index in owned:
            continue
        if _laid_out_like(flat, output.layout):
            owned[index] = flat
        elif _contents_read_once(flat, output.layout):
            owned[index] = _own_layout(flat, output)
    return owned


def _own_layout(flat: torch.Tensor, output) -> torch.Tensor:
    """`output` on `flat`'s bytes, with the history of `flat` (made with grad), if it has one."""
    if not (flat.requires_grad and output.made_with_grad):
        return _relaid(flat, output.layout)  # no history to carry: no autograd node
    with torch.enable_grad():
        return _OwnLayout.apply(flat, output.layout)


def _contents_read_once(flat: torch.Tensor, layout) -> bool:
    """`flat` is a storage's contents as they are (1-D, no conjugate or negative bit), which a
    tensor of `layout` reads as they are, each element once."""
    return (
        flat.dim() == 1
        and flat.is_contiguous()
        and flat.storage_offset() == 0
        and flat.dtype == layout.dtype
        and not (flat.is_conj() or flat.is_neg() or layout.conj or layout.neg)
        and not layout.has_internal_overlap()
        and layout.extent_bytes() <= flat.numel() * flat.element_size()
    )


def _relaid(flat: torch.Tensor, layout) -> torch.Tensor:
    """A new tensor of `layout` on `flat`'s bytes, without history, sharing its version
    counter."""
    own = flat.detach()
    with torch.autograd._unsafe_preserve_version_counter(own):
        own.set_(own.untyped_storage(), layout.offset, layout.sizes, layout.strides)
    return own


class _OwnLayout(torch.autograd.Function):
    """A storage's contents (`flat`, 1-D) as a tensor of `layout` that is no view for autograd:
    it shares their bytes and version counter; its gradient goes to the locations it reads."""

    @staticmethod
    def forward(ctx, flat, layout):
        own = _relaid(flat, layout)
        ctx.flat_numel = flat.numel()
        # every element of `flat`, in its order: the gradient is the incoming one, reshaped
        ctx.reads_in_order = own.is_contiguous() and own.numel() == ctx.flat_numel
        ctx.layout = layout
        return own

    @staticmethod
    def backward(ctx, grad):
        if ctx.reads_in_order:
            return grad.reshape(-1), None
        layout = ctx.layout
        flat_grad = grad.new_zeros(ctx.flat_numel)
        flat_grad.as_strided(layout.sizes, layout.strides, layout.offset).copy_(grad)
        return flat_grad, None


def _multi_output_view(t: torch.Tensor, layout) -> torch.Tensor:
    """r[autograd.multi-output-views]: a view autograd treats as one of several views one op
    returned, as eager's unbind and split outputs (it is one: the only view `unbind` makes of a
    size-1 dim in front): writing it in place, or using it after its base was written in place,
    raises eager's error when it requires grad."""
    sizes, strides = (1, *layout.sizes), (1, *layout.strides)
    (view,) = t.as_strided(sizes, strides, layout.offset).unbind(0)
    return view


def _detached_view(t: torch.Tensor, output) -> torch.Tensor:
    """r[autograd.detach]: an output that is (a view of) a detach()ed value aliases the bytes
    it reads and shares their version counter, and carries no gradient; as in eager, the
    detach() result itself is no view for autograd (`t` detached, then moved to the layout
    without a version change), and a view taken of it is a view."""
    layout = output.layout
    if output.view_of_detached:
        base = t.detach() if t.requires_grad else t
        return base.as_strided(layout.sizes, layout.strides, layout.offset)
    detached = t.detach()  # a new object, whatever `t` is, for set_ to move
    if not _laid_out_like(detached, layout):
        with torch.autograd._unsafe_preserve_version_counter(detached):
            detached.set_(detached.untyped_storage(), layout.offset, layout.sizes, layout.strides)
    return detached


class _ViewCarryingGradient(torch.autograd.Function):
    """r[capture.custom-function.outputs]: an output that is (a view of) a view a custom Function
    returned: a view of `base`, for aliasing, whose gradient goes to `carrier`, the compiled
    forward's output that holds its value with the Function's gradient. Like eager's, it is a
    view made inside a custom Function: writing it, or using it after its base was written,
    raises eager's error."""

    @staticmethod
    def forward(ctx, carrier, base, sizes, strides, offset):
        return base.as_strided(sizes, strides, offset)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None, None, None


def _view_carrying_gradient(output, tensors, on_storage, caller_storages, flats) -> torch.Tensor:
    layout = output.layout
    if isinstance(output.storage, CallerStorage):
        storage = caller_storages[output.storage.input_index]
        through = tensors[output.through] if output.through is not None else None
        base = through if through is not None else on_storage.get((storage._cdata, layout.dtype))
    else:
        base = flats[output.storage.output_index]
        storage = base.untyped_storage()
    on_storage = base is not None and base.untyped_storage()._cdata == storage._cdata
    if not (on_storage and base.dtype == layout.dtype):
        base = tensor_on(storage, layout)
    carrier = flats[output.gradient_from]
    return _ViewCarryingGradient.apply(carrier, base, layout.sizes, layout.strides, layout.offset)


def _output_view(
    output, tensors, on_storage, caller_storages, flats, returned, owned
) -> torch.Tensor:
    if output.gradient_from is not None:
        return _view_carrying_gradient(output, tensors, on_storage, caller_storages, flats)
    if isinstance(output.storage, CallerStorage):  # r[aliasing.view.of-input]
        return _view_of_caller(output, tensors, on_storage, caller_storages)
    flat = flats[output.storage.output_index]
    own = owned.get(output.storage.output_index)
    if own is not None:  # r[functionalize.outputs.own]: it, or views of it
        if output.own and _laid_out_like(own, output.layout):
            return own
        flat = own
    if output.detached:
        return _detached_view(flat, output)
    if output.multi_output:
        return _multi_output_view(flat, output.layout)
    if own is not None:
        return _viewed_as(own, output.layout)
    return _view_of_graph_storage(output, flat, returned)


def _view_of_graph_storage(output, flat: torch.Tensor, returned: set[int]) -> torch.Tensor:
    """`flat` itself the first time an output is laid out like it (no view for autograd to undo),
    else a view of its storage."""
    layout = output.layout
    # r[autograd.grad-mode-inside.views]: a view taken under torch.no_grad() of a value with a
    # history is a view without one, also where it reads the value as it is laid out (`t()` of a
    # 1-D value): `flat` itself would carry the history
    keeps_history = output.made_with_grad or not flat.requires_grad
    if keeps_history and id(flat) not in returned and _laid_out_like(flat, layout):
        returned.add(id(flat))
        return flat
    return _viewed_as(flat, layout)


def _viewed_as(base: torch.Tensor, layout) -> torch.Tensor:
    """A view of `base`'s storage laid out as `layout`, for autograd a view of `base`: through
    `view_as_real` or `view_as_complex` where the dtypes differ (`r[functionalize.complex-views]`),
    then conjugated or negated as the layout says (`r[memory.layout.conj-neg]`)."""
    # the stored values, through views that undo base's own bits (each is its own inverse)
    base = base.conj() if base.is_conj() else base
    base = base._neg_view() if base.is_neg() else base
    if base.dtype != layout.dtype and base.is_complex():
        base = torch.view_as_real(base)
    elif base.dtype != layout.dtype:
        pairs = base.untyped_storage().nbytes() // layout.itemsize
        base = torch.view_as_complex(base.as_strided((pairs, 2), (2, 1), 0))
    view = base.as_strided(layout.sizes, layout.strides, layout.offset)
    if layout.conj:
        view = view.conj()
    return view._neg_view() if layout.neg else view


def _reinterpretable(dtype: torch.dtype, other: torch.dtype) -> bool:
    """The same bytes read as `other` by `_viewed_as`: the same dtype, or a complex dtype and its
    real one."""
    pair = (dtype, other) if dtype.is_complex else (other, dtype)
    return dtype == other or (pair[0].is_complex and pair[0].to_real() == pair[1])


def _laid_out_like(t: torch.Tensor, layout) -> bool:
    return (
        t.dtype == layout.dtype
        and t.shape == layout.sizes  # (a torch.Size equals the tuple of its sizes)
        and t.stride() == layout.strides
        and t.storage_offset() == layout.offset
        and (t.is_conj(), t.is_neg()) == (layout.conj, layout.neg)
    )


def _view_of_caller(output, tensors, on_storage: dict, caller_storages) -> torch.Tensor:
    """A view of the caller's storage, made from a caller tensor still on it so autograd sees it:
    preferably the input the program viewed it from, as eager autograd would."""
    layout = output.layout
    storage = caller_storages[output.storage.input_index]
    if layout.extent_bytes() > storage.nbytes():
        return tensor_on(storage, layout)
    for candidate in (
        tensors[output.through] if output.through is not None else None,
        on_storage.get((storage._cdata, layout.dtype)),
    ):
        if (
            candidate is not None
            and _reinterpretable(candidate.dtype, layout.dtype)
            and candidate.untyped_storage()._cdata == storage._cdata
        ):
            if output.detached and candidate.dtype == layout.dtype:
                return _detached_view(candidate, output)
            if output.multi_output and candidate.dtype == layout.dtype:
                return _multi_output_view(candidate, layout)
            return _viewed_as(candidate, layout)
    return tensor_on(storage, layout)
