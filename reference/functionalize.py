"""Functionalization: a captured mutable graph becomes a functional graph plus an epilogue.

The pass replays the mutable graph node by node on traced tensors, keeping for every storage its
current contents as a value (`r[functionalize.storage-values]`), and `make_fx` records what the
replay computes: a graph with no mutation in it. What the mutable program did to the caller's
tensors comes out as data: an epilogue of storage writes, resizes and rebindings, applied after the
graph, and a description of every output as a layout on a storage (`r[functionalize.outputs]`).
In-place metadata ops (`t_`) move a cell to a new layout on its storage; on an argument object the
epilogue applies them again after the graph (`r[functionalize.epilogue.metadata]`).

Conventions: a `_Cell` is a tensor object of the program (`set_` rebinds it in place), a
`_Storage` the bytes it reads; `value` is a traced torch tensor; `n` counts bytes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from operator import getitem
from typing import Any

import numpy as np
import torch
import torch.fx
import torch.fx.traceback as fx_traceback
import torch.utils._pytree as pytree
from attrs import define, field
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.proxy_tensor import (
    disable_proxy_modes_tracing,
    get_proxy_mode,
    get_proxy_slot,
    track_tensor_tree,
)

from aotspec.errors import InternalError, SpecViolation, UnsupportedError
from aotspec.versions import make_fx_keeping_detach

from .aten import advances_version
from .capture import (
    CheckpointRegions,
    GradModes,
    checkpoint_region,
    grad_enabled,
    program_of_graph,
)
from .collectives import is_impure
from .custom_functions import CustomFunction, custom_function_call
from .graph import placeholders, traced_from
from .optable import (
    NONDIFFERENTIABLE,
    OpEntry,
    OpKind,
    bind,
    derivative_reads_first_argument,
    lookup,
)
from .program_records import (
    BackwardWrite,
    CallerStorage,
    CapturedProgram,
    CustomCall,
    FunctionalProgram,
    GraphStorage,
    InputMeta,
    OutputIsInput,
    OutputView,
    Rebind,
    Relayout,
    Resize,
    StandIns,
    WriteBack,
    input_facts,
)
from .storage import Layout, numpy_dtype

aten = torch.ops.aten

# ---------------------------------------------------------------- the replay state


@define(eq=False)
class _Storage:
    dtype: torch.dtype
    nbytes: int
    #: The first flat input reading this storage, or None for a storage the program made.
    caller: int | None
    #: A traced value whose storage, read through `origin_layout`, is this storage at version 0.
    origin: torch.Tensor
    entry_nbytes: int = field(default=None)
    #: The contents as a 1-D value, once the storage has been written or resized.
    flat: torch.Tensor | None = None
    version: int = 0
    written: bool = False
    written_with_grad: bool = False
    resized: bool = False
    #: The last contents a write or resize gave it (kept when a resize to 0 drops `flat`).
    last_contents: torch.Tensor | None = None
    #: A resize up gave it `flat`, and nothing has read those bytes since.
    unread_since_resize: bool = False
    #: The layout each write went through, by the version it gave the storage
    #: (`r[functionalize.reads.unwritten]`).
    writes: dict[int, Layout] = field(factory=dict)

    def __attrs_post_init__(self):
        if self.entry_nbytes is None:
            self.entry_nbytes = self.nbytes

    @property
    def elements(self) -> int:
        return self.nbytes // numpy_dtype(self.dtype).itemsize


@define(eq=False)
class _Cell:
    storage: _Storage
    layout: Layout
    value: torch.Tensor | None
    version: int = 0
    #: For a tensor object the caller passed: its flat input index and its layout at entry.
    input_index: int | None = None
    entry_layout: Layout | None = None
    #: The input this tensor was viewed from (itself for an input), if any.
    root: int | None = None
    #: A view taken under torch.no_grad(): what it reads carries no gradient, after writes too.
    viewed_without_grad: bool = False
    #: A view of a detach()ed value (`r[autograd.detach]`): no gradient, even with grad mode on.
    detached: bool = False
    #: Taken of a detached value by a view op other than detach() itself.
    view_of_detached: bool = False
    #: A view, taken with grad mode on, of one of the views a multi-output view op returned
    #: (unbind, split), or that view itself (`r[autograd.multi-output-views]`).
    multi_output: bool = False
    #: An input that set_ rebound under torch.no_grad(): what it reads is that input for autograd.
    read_as_input: int | None = None
    #: A view a custom Function returned, or a view of one: its value carries the Function's
    #: gradient; its storage's contents do not (`r[capture.custom-function.outputs]`).
    custom_view: bool = False
    #: An as_strided (or as_strided_) in its view chain reads locations of a storage the program
    #: made that its input does not read: its value carries eager's gradient, which reaches only
    #: the locations both read; its storage's contents do not (`r[autograd.as-strided.outside]`).
    reaches_outside: bool = False
    #: set_ rebound it (to any storage and layout).
    rebound: bool = False
    #: An op's result, which is no view in eager (`r[functionalize.outputs.own]`).
    own: bool = False
    #: For a tensor object the caller passed: the in-place metadata ops applied to it, in order.
    relayouts: list[Relayout] = field(factory=list)
    #: An in-place metadata op relaid it out under torch.no_grad(), which leaves its history, if
    #: it has one, for its old layout: the storage contents then, which carry a gradient when
    #: the tensor has a history (`r[autograd.no-grad-metadata]`).
    stale_history: torch.Tensor | None = None


def _flat(storage: _Storage, replay: _Replay) -> torch.Tensor:
    """The storage's whole contents as a 1-D value."""
    storage.unread_since_resize = False
    if storage.flat is None:
        # Version 0: the origin value's own storage holds the bytes
        # (r[functionalize.storage-values]).
        with replay.materializing(grad_enabled=True):
            storage.flat = aten.as_strided(storage.origin, [storage.elements], [1], 0)
    return storage.flat


def _check_in_bounds(cell: _Cell, action: str, name: str) -> None:
    # with symbolic sizes, the check's arithmetic is the replay's, not the program's: no node
    with disable_proxy_modes_tracing():
        needed = cell.layout.extent_bytes()
        out_of_bounds = needed > cell.storage.nbytes
    if out_of_bounds:
        raise SpecViolation(
            f"{action} of tensor {name} ({cell.layout.sizes}, {cell.layout.dtype}) needs "
            f"{needed} bytes but "
            f"its storage holds {cell.storage.nbytes} at that point of the program",
            rule="memory.access-in-bounds",
            fix="resize the storage up (resize_storage_bytes_) and fill it with copy_ before "
            "using the tensor",
        )


def _read(cell: _Cell, name: str, replay: _Replay, *, for_view: bool = False) -> torch.Tensor:
    """The cell's current value; after a write to its storage it is read back through its layout.

    Taking a view reads no element, so a view of a zero-storage tensor is not an out-of-bounds
    read.
    """
    if not for_view:
        _check_in_bounds(cell, "read", name)
    if cell.stale_history is not None:  # r[autograd.no-grad-metadata]
        replay.stale_histories.add(node_of(cell.stale_history))
    if cell.value is not None and _unwritten_since(cell) and not _gained_history(cell):
        return cell.value
    layout = cell.layout
    flat = _flat(cell.storage, replay)
    # r[functionalize.reads.grad-mode]: made under the grad mode of the tensor read, not the
    # reader's (the read through an input too).
    with replay.materializing(grad_enabled=not cell.viewed_without_grad):
        flat = _read_through(cell, flat, replay)
        contents = _contents_as(flat, layout.dtype)
        value = aten.as_strided(contents, layout.sizes, layout.strides, layout.offset)
        # r[memory.layout.conj-neg]: the cell reads its storage conjugated or negated
        value = aten._conj(value) if layout.conj else value
        cell.value = aten._neg_view(value) if layout.neg else value
    if cell.read_as_input is not None:  # r[autograd.no-grad-set]
        replay.read_as_input[node_of(cell.value)] = cell.read_as_input
    cell.version = cell.storage.version
    return cell.value


def _read_in_storage(cell: _Cell, name: str, replay: _Replay, *, for_view: bool) -> torch.Tensor:
    """The cell's value read back through its layout from its storage's contents, not the values
    a write with history left it (`r[functionalize.reads.unwritten]`): an as_strided of it that
    reads locations beside its own reads them there (`r[autograd.as-strided.outside]`)."""
    cached = cell.value, cell.version
    cell.value = None
    value = _read(cell, name, replay, for_view=for_view)
    cell.value, cell.version = cached
    return value


def _read_through(cell: _Cell, flat: torch.Tensor, replay: _Replay) -> torch.Tensor:
    """The storage contents `flat` as the cell reads them for autograd. On a caller storage of
    `_read_through_storages`, they are the input the cell was viewed from, whatever wrote them
    (`r[autograd.no-grad-input-writes.identity]`): the read's gradient goes to that input as
    the view ops from it to the read would take it there."""
    through_inputs = cell.storage.caller in replay.read_through_storages
    if not through_inputs or cell.viewed_without_grad:
        return flat
    if not replay.inputs[cell.root].requires_grad:
        return flat
    layout = replay.inputs[cell.root].layout
    contents = _contents_as(flat, layout.dtype)
    value = aten.as_strided(contents, layout.sizes, layout.strides, layout.offset)
    # r[autograd.no-grad-input-writes.identity]: the input itself, read from the contents
    replay.read_through_input[node_of(value)] = cell.root
    through = aten.as_strided(value, [contents.numel()], [1], 0)
    return _contents_as(through, flat.dtype)


def _contents_as(flat: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """r[functionalize.complex-views]: a storage's 1-D contents read as `dtype`: a complex
    storage's as its real and imaginary parts in turn (`view_as_real`), a real storage's as the
    complex numbers its pairs make (`view_as_complex`); other dtypes as they are."""
    if flat.is_complex() and not dtype.is_complex and dtype.itemsize * 2 == flat.itemsize:
        return aten.view(aten.view_as_real(flat), [flat.numel() * 2])
    if dtype.is_complex and not flat.is_complex() and flat.itemsize * 2 == dtype.itemsize:
        return aten.view_as_complex(aten.view(flat, [flat.numel() // 2, 2]))
    return flat


#: How many later writes `_unwritten_since` looks through before it reads the storage again: a
#: bound that keeps a read's cost constant.
_WRITES_LOOKED_THROUGH = 8


def _unwritten_since(cell: _Cell) -> bool:
    """r[functionalize.reads.unwritten]: the cell's value, from its last read or write, is still
    what its layout reads: every change of its storage since was a write through a layout that
    touches none of its bytes (a write into another chunk of one result).

    On a caller's storage, only when nothing wrote it since: a read there after a write is the
    input as the call leaves it (`r[autograd.saved-inputs.final-contents]`), whose version the
    backward checks as of the call's return, as eager's saved tensor holds the version of the
    write before it."""
    storage = cell.storage
    later = range(cell.version + 1, storage.version + 1)
    if storage.caller is not None:
        return not later
    if len(later) > _WRITES_LOOKED_THROUGH:
        return False
    return all(v in storage.writes and not storage.writes[v].overlaps(cell.layout) for v in later)


def _gained_history(cell: _Cell) -> bool:
    """r[functionalize.reads.unwritten]: a write elsewhere on the cell's storage gave its
    contents a history the cell's value lacks. Eager's view then takes its history from its
    base, whose version moved: it requires grad, with a zero gradient for the written values
    (a view with no elements too). A view taken under no_grad or a detached alias takes none."""
    contents = cell.storage.flat
    return (
        contents is not None
        and contents.requires_grad
        and not cell.value.requires_grad
        and not (cell.viewed_without_grad or cell.detached)
    )


def node_of(value: torch.Tensor) -> torch.fx.Node:
    """The graph node `make_fx` is recording for a traced value."""
    return get_proxy_slot(value, get_proxy_mode().tracer).proxy.node


def _note_contents(storage: _Storage, contents: torch.Tensor | None = None) -> None:
    """Note a caller storage's new contents (`flat`, or a contiguous value it views): the last
    ones become the input as the call leaves it (`r[autograd.saved-inputs]`)."""
    if storage.caller is not None and storage.flat is not None:
        storage.last_contents = storage.flat if contents is None else contents


def _relaid_contents(storage: _Storage, replay: _Replay) -> None:
    """r[autograd.metadata.inputs]: after an in-place metadata op on a tensor of a caller storage,
    the storage's contents are a new value (an alias: no byte moves), as eager's version counter
    moves on, so what the program reads from here on is the storage as the call leaves it, which
    the backward reads from the caller's tensor (`r[autograd.saved-inputs.final-contents]`)."""
    unread = storage.unread_since_resize  # a relayout reads no byte
    contents = _flat(storage, replay)
    with replay.materializing(grad_enabled=True):
        storage.flat = aten.alias(contents)
    storage.unread_since_resize = unread
    storage.version += 1
    _note_contents(storage)


def _write(
    cell: _Cell,
    new: torch.Tensor,
    name: str,
    replay: _Replay,
    *,
    private: bool = False,
    from_cell: bool = True,
    advances_version: bool = True,
) -> None:
    """r[functionalize.writes]: a write through a layout is an as_strided_scatter into the
    contents. `private`: no tensor of the program reads `new` but this write. `from_cell`: `new`
    was computed from the cell's value (an in-place op's result), not copied from elsewhere.
    `advances_version`: eager's write advances the tensor's version; one that does not gives it
    no history either (`r[ops.aten-mutations.versions]`)."""
    if replay.region is not None:  # r[checkpoint.functional]
        raise UnsupportedError(
            f"{name} writes a tensor in place inside a checkpointed region",
            rule="checkpoint.functional",
            fix="use the out-of-place op inside the checkpointed function, or write outside it",
        )
    layout = cell.layout
    if layout.has_internal_overlap():  # r[aliasing.inplace.no-overlapping-write]
        raise RuntimeError(
            "unsupported operation: more than one element of the written-to tensor refers to a "
            "single memory location. Please clone() the tensor before performing the operation."
        )
    _check_in_bounds(cell, "write", name)
    new = _as_stored(new, layout)
    storage = cell.storage
    # r[autograd.detach]: a write through a detached alias records no history.
    with_grad = replay.grad_enabled and not cell.detached and advances_version
    if storage.unread_since_resize and _covers(layout, storage):
        # r[functionalize.writes.whole-after-resize]: the written values are the new contents;
        # the unspecified bytes of the resize are never read, so they are never held alongside.
        contents = aten.clone(new, memory_format=torch.contiguous_format)
        storage.flat = aten.view(contents, [storage.elements])
        replay.resized_contents[node_of(storage.flat)] = storage.caller
        storage.unread_since_resize = False
    elif private and _takes_the_written_values(new, layout, storage, replay, from_cell, with_grad):
        contents = None
        storage.flat = aten.view(new, [storage.elements])
    else:
        contents = None
        old = _contents_as(_flat(storage, replay), layout.dtype)
        with _keeping_history(old):
            written = aten.as_strided_scatter(
                old, new, layout.sizes, layout.strides, layout.offset
            )
        storage.flat = _contents_as(written, storage.dtype)
        if not with_grad:
            # r[autograd.no-grad-writes]: the tensor keeps its history; the written values carry
            # none.
            replay.no_grad_writes.add(node_of(storage.flat))
        if replay.grad_enabled and cell.detached:  # r[autograd.detach]: as if under no_grad
            replay.detached_writes.add(node_of(storage.flat))
    storage.version += 1
    storage.writes[storage.version] = layout
    storage.written = True
    # r[autograd.input-writes]; a write under torch.no_grad() gives the input no history
    # (r[autograd.no-grad-input-writes])
    storage.written_with_grad |= with_grad
    _note_contents(storage, contents)
    if with_grad and from_cell and storage.caller is None and not cell.viewed_without_grad:
        # r[functionalize.reads.unwritten]: what the cell reads now is what was written, with
        # the write's history, until a write touches its bytes
        cell.value, cell.version = new, storage.version


def _as_stored(new: torch.Tensor, layout: Layout) -> torch.Tensor:
    """The values `new` as a write through `layout` stores them: in its dtype and sizes."""
    if new.dtype != layout.dtype:
        new = aten._to_copy(new, dtype=layout.dtype)
    if tuple(new.shape) != layout.sizes:
        new = aten.expand(new, list(layout.sizes))
    # r[memory.layout.conj-neg]: a conjugating or negating layout stores the values so
    if layout.conj:
        new = aten.conj_physical(new)
    if layout.neg:
        new = aten.neg(new)
    return new


def _takes_the_written_values(
    new: torch.Tensor, layout: Layout, storage: _Storage, replay: _Replay, from_cell: bool,
    with_grad: bool,
) -> bool:
    """Whether a write of `new`, values nothing else reads, through `layout` makes them the
    storage's contents as they are, with no as_strided_scatter into the old ones."""
    if not _replaces(new, layout, storage):
        return False
    if from_cell and with_grad and storage.caller is None:
        # r[functionalize.writes.whole-private]: as eager's in-place op leaves them in the one
        # storage, not held beside a copy; values copied from elsewhere lack the old contents'
        # history (r[functionalize.writes.copied])
        return True
    # r[functionalize.writes.whole-without-history]: scattering every element of contents no
    # gradient reaches gives the written values themselves
    return not _has_history(new, storage, replay)


def _has_history(new: torch.Tensor, storage: _Storage, replay: _Replay) -> bool:
    """Whether a gradient can reach `new`, the storage's contents, or an input on the storage."""
    return (
        new.requires_grad
        or storage.caller in replay.storages_requiring_grad
        or _may_carry_gradient(storage)
    )


def _keeping_history(contents: torch.Tensor):
    """r[autograd.no-grad-writes]: a change of a storage's `contents` that records no history (a
    write under torch.no_grad(), through a detached alias) leaves them their history: the traced
    value it makes requires grad when they do, as eager's written tensor does."""
    return torch.set_grad_enabled(torch.is_grad_enabled() or contents.requires_grad)


def _replaces(new: torch.Tensor, layout: Layout, storage: _Storage) -> bool:
    """Writing `new` through `layout` replaces all of `storage`'s contents, in `new`'s order.
    Not where there are none: a 0-dim value broadcast into no element counts as contiguous, but
    lies on that value's bytes (r[functionalize.writes.whole-without-history])."""
    return _covers(layout, storage) and new.is_contiguous() and layout.numel != 0


def _covers(layout: Layout, storage: _Storage) -> bool:
    """`layout` reads every element of `storage` once, in order."""
    whole = Layout.contiguous(layout.dtype, layout.sizes)
    return (
        layout.dtype == storage.dtype
        and layout.numel == storage.elements
        and layout.addresses_like(whole)
    )


# ---------------------------------------------------------------- op by op


def _resize(cell: _Cell, n: int, name: str, replay: _Replay) -> None:
    storage = cell.storage
    if storage.caller is None and n > storage.nbytes:
        _grow_made(storage, n, replay)
        return
    if storage.caller is None:
        raise UnsupportedError(
            f"resize_storage_bytes_ of {name}, a tensor the program made, from "
            f"{storage.nbytes} to {n} bytes",
            rule="resize.compiled.inputs-only",
            fix="resize only storages of the function's inputs (FSDP's parameters); a storage "
            "the program made may only grow",
        )
    if cell.input_index is None or cell.layout != cell.entry_layout or storage.caller is None:
        raise UnsupportedError(
            f"resize_storage_bytes_ of {name}, which is a view, was rebound by set_, or was "
            "relaid out by an in-place metadata op",
            rule="resize.compiled.base-only",
            fix="resize the input tensor itself, not a view of it",
        )
    with_grad = any(meta.requires_grad for meta in replay.inputs if meta.storage == storage.caller)
    if 0 < storage.nbytes < n and not with_grad:
        _grow_input(storage, n, replay)
        return
    if n != 0 and storage.nbytes != 0 and n != storage.nbytes:
        raise UnsupportedError(
            f"resize_storage_bytes_ of {name} from {storage.nbytes} to {n} bytes (or a resize_ "
            "growing an input's storage)"
            + (", a storage an input that requires grad reads" if with_grad else ""),
            rule="resize.compiled.zero-only",
            fix="resize a storage only down to 0 bytes or up from 0 bytes, as FSDP does, or grow "
            "one that no input requiring grad reads",
        )
    if n == storage.nbytes:
        return
    storage.nbytes = n
    storage.resized = True
    storage.version += 1
    # r[resize.keeps-prefix] in a compiled program: from or to 0 bytes nothing is kept, and the
    # bytes after a resize up are written before they are read.
    storage.flat = aten.zeros([storage.elements], dtype=storage.dtype) if n else None
    if n:
        # r[autograd.no-grad-input-writes.identity]: bytes a resize up gives an input are that
        # input.
        replay.resized_contents[node_of(storage.flat)] = storage.caller
        storage.unread_since_resize = True
    _note_contents(storage)


def _grow_made(storage: _Storage, n: int, replay: _Replay) -> None:
    """r[resize.compiled.grows-made]: a storage the program made grows to `n` bytes: its contents
    are its old contents and zeros after them (`r[resize.keeps-prefix]`: unspecified in eager),
    which every tensor on it reads from here on."""
    old = _flat(storage, replay)
    with _keeping_history(old):
        storage.flat = aten.cat([old, old.new_zeros([n // old.itemsize - old.numel()])])
    storage.nbytes = n
    storage.version += 1  # nothing read so far is what the storage holds now


def _grow_input(storage: _Storage, n: int, replay: _Replay) -> None:
    """r[resize.compiled.grows-inputs]: an input's storage that no input requiring grad reads
    grows to `n` bytes: the program reads its contents followed by zeros (unspecified in eager),
    and the epilogue resizes the caller's storage up, keeping its bytes."""
    old = _flat(storage, replay)
    storage.flat = aten.cat([old, old.new_zeros([n // old.itemsize - old.numel()])])
    storage.nbytes = n
    storage.resized = True
    storage.version += 1
    _note_contents(storage)


def _origins(inputs: tuple[InputMeta, ...]) -> dict[int, int]:
    """The input each caller storage (by first input) is read from at version 0: one on it that
    requires grad, when one reads it in the storage's dtype, so its contents carry the gradient
    to that input (`r[autograd.detach.inputs]`); else the first input on it."""
    origins: dict[int, int] = {}
    for i, meta in enumerate(inputs):
        first = origins.setdefault(meta.storage, i)
        same_dtype = meta.layout.dtype == inputs[meta.storage].layout.dtype
        if meta.requires_grad and same_dtype and not inputs[first].requires_grad:
            origins[meta.storage] = i
    return origins


def _read_through_storages(inputs: tuple[InputMeta, ...]) -> set[int]:
    """Caller storages (by first input) whose reads send their gradient to the input they read
    through (`r[autograd.no-grad-input-writes.identity]`): those that more than one input object
    requiring grad reads, and those that one reads in another dtype than the storage's (the
    storage's contents at the call are then not its value)."""
    objects: dict[int, set[int]] = {}
    for meta in inputs:
        if meta.requires_grad:
            objects.setdefault(meta.storage, set()).add(meta.same_object)
    return {
        storage
        for storage, on_it in objects.items()
        if len(on_it) > 1 or inputs[min(on_it)].layout.dtype != inputs[storage].layout.dtype
    }


@define
class _Replay:
    """Walks the mutable graph, keeping cells and storages, calling torch ops on traced values."""

    program: CapturedProgram
    inputs: tuple[InputMeta, ...]
    #: The functional graph's grad modes, noted as the replay crosses the captured graph's.
    grad_modes: GradModes
    #: Its checkpointed regions, noted the same way (`r[checkpoint.region]`).
    regions: CheckpointRegions
    #: The functionalized backward of each of the program's custom Functions.
    backwards: tuple[FunctionalProgram, ...] = ()
    region: int | None = None
    #: The value of each node of the captured graph replayed so far: a cell, or a constant.
    env: dict[torch.fx.Node, Any] = field(factory=dict)
    #: The cell of each flat input (the same cell for the same object passed twice).
    placeholder_cells: list[_Cell] = field(factory=list)
    #: The caller's storages, in the order of their first input.
    caller_storages: list[_Storage] = field(factory=list)
    grad_enabled: bool = field(factory=torch.is_grad_enabled)
    #: Inputs that set_ rebound with grad mode on.
    rebound_with_grad: set[int] = field(factory=set)
    #: What the replay found for `StandIns`, filled as the graph is traced.
    resized_contents: dict[torch.fx.Node, int] = field(factory=dict)
    read_as_input: dict[torch.fx.Node, int] = field(factory=dict)
    read_through_input: dict[torch.fx.Node, int] = field(factory=dict)
    no_grad_writes: set[torch.fx.Node] = field(factory=set)
    detached_writes: set[torch.fx.Node] = field(factory=set)
    #: The custom Functions' nodes of the functional graph, with the cells their backward writes.
    custom_nodes: list[_CustomNode] = field(factory=list)
    stale_histories: set[torch.fx.Node] = field(factory=set)
    #: Caller storages (by first input) whose reads go to the input they read through.
    read_through_storages: set[int] = field(factory=set)
    #: Caller storages, by first input (`FunctionalProgram.relocated`).
    relocated: set[int] = field(factory=set)
    #: The functional graph's outputs, as the replay's end assembles them, and where among them
    #: each storage's contents are (by the storage's id).
    graph_outputs: list[torch.Tensor] = field(factory=list)
    output_index_of: dict[int, int] = field(factory=dict)
    #: Caller storages (by first input) that an input requiring grad reads.
    storages_requiring_grad: frozenset[int] = field(init=False)

    def __attrs_post_init__(self):
        self.storages_requiring_grad = frozenset(
            meta.storage for meta in self.inputs if meta.requires_grad
        )

    def run(self, values: list[torch.Tensor]):
        storages: dict[int, _Storage] = {}
        cells: dict[int, _Cell] = {}
        placeholders = [node for node in self.program.graph.nodes if node.op == "placeholder"]
        origins = _origins(self.inputs)
        for i, (node, value, meta) in enumerate(
            zip(placeholders, values, self.inputs, strict=True)
        ):
            if meta.same_object not in cells:
                if meta.storage not in storages:
                    storages[meta.storage] = _Storage(
                        meta.layout.dtype,
                        meta.storage_nbytes,
                        meta.storage,
                        values[origins[meta.storage]],
                    )
                # r[autograd.detach.inputs]: an alias without grad of an input with grad
                origin = self.inputs[origins[meta.storage]]
                detached = not meta.requires_grad and origin.requires_grad
                cells[meta.same_object] = _Cell(
                    storages[meta.storage],
                    meta.layout,
                    value,
                    0,
                    i,
                    meta.layout,
                    i,
                    viewed_without_grad=detached,
                    detached=detached,
                )
            self.env[node] = cells[meta.same_object]
        self.placeholder_cells = [cells[meta.same_object] for meta in self.inputs]
        self.read_through_storages = _read_through_storages(self.inputs)
        self.caller_storages = list(storages.values())
        # r[capture.grad-mode]: each op runs in the grad mode it ran in, so its traced values
        # require grad where eager's do; the caller's mode again after the last
        with torch.set_grad_enabled(self.grad_enabled):
            return self.replay_nodes()

    def replay_nodes(self) -> list:
        for node in traced_from(self.program.graph.nodes, "functionalize"):
            if node.op == "call_function":
                if grad_enabled(node) != self.grad_enabled:  # r[capture.grad-mode], carried over
                    self.grad_enabled = grad_enabled(node)
                    self.grad_modes.note(self.grad_enabled)
                    torch.set_grad_enabled(self.grad_enabled)
                if checkpoint_region(node) != self.region:  # r[checkpoint.region], carried over
                    self.region = checkpoint_region(node)
                    self.regions.note(self.region)
                self.env[node] = self.call(node)
            elif node.op == "get_attr":  # r[capture.constants]: a fresh copy at every call
                constant = getattr(self.program.graph_module, node.target)
                # a tensor constant is a fresh value; another object (a generator) is itself
                is_tensor = isinstance(constant, torch.Tensor)
                self.env[node] = self.fresh(constant.clone()) if is_tensor else constant
            elif node.op == "output":
                return [self.env[value] for value in node.args[0]]
        raise InternalError("a captured graph ends with an output node")

    @contextlib.contextmanager
    def materializing(self, grad_enabled: bool):
        """Nodes made inside count as made under `grad_enabled` (r[capture.grad-mode]): a value
        read back lazily belongs to the tensor it reads, whatever op first needs it."""
        if grad_enabled == self.grad_enabled:
            yield
            return
        self.grad_modes.note(grad_enabled)
        try:
            yield
        finally:
            self.grad_modes.note(self.grad_enabled)

    def fresh(self, value: torch.Tensor) -> _Cell:
        layout = Layout.of(value)
        storage = _Storage(value.dtype, layout.extent_bytes(), None, value)
        return _Cell(storage, layout, value, own=True)

    def call(self, node: torch.fx.Node):
        args = torch.fx.node.map_arg(node.args, self.env.__getitem__)
        if node.target is getitem:
            return args[0][args[1]]
        if node.target is custom_function_call:
            return self.custom_function(node, *args)
        kwargs = torch.fx.node.map_arg(node.kwargs, self.env.__getitem__)
        entry = self.program.entries[node]
        name = node.name

        def read_all(tree):
            return pytree.tree_map(
                lambda v: _read(v, name, self) if isinstance(v, _Cell) else v, tree
            )

        if entry.kind in (OpKind.COMPUTE, OpKind.ATEN, OpKind.COLLECTIVE):
            values = node.target(*read_all(args), **read_all(kwargs))
            return pytree.tree_map_only(torch.Tensor, self.fresh, values)
        if entry.kind is OpKind.SIZE:  # r[sizes.symbolic.arithmetic]: the replay's own sizes
            return node.target(*read_all(args), **read_all(kwargs))
        if entry.kind is OpKind.VIEW:
            return self.view(node, entry, args, kwargs, read_all)
        if entry.kind is OpKind.INPLACE:
            target = args[0]
            operands, keywords = read_all(args), read_all(kwargs)
            if self.keeps_original(target) or self.copies_part(target, entry, operands, keywords):
                operands = (aten.clone(operands[0]), *operands[1:])
            new = entry.functional(*operands, **keywords)
            _write(target, new, name, self, private=True)
            return target
        if entry.kind is OpKind.EFFECT:
            return self.effect(node, args, kwargs, read_all)
        if entry.kind is OpKind.OPAQUE:
            return self.opaque(node, entry, args, kwargs, read_all)
        raise InternalError(f"op table entry of unknown kind: {entry}")

    def keeps_original(self, target: _Cell) -> bool:
        """r[autograd.input-writes.original-value]: an in-place op that records history on an
        input's value at the call reads a copy of it, which its derivative rule may save, as
        eager's in-place ops save the original self: the write-back then bumps the input's
        version without failing the backward."""
        return (
            self.grad_enabled
            and not target.detached
            and target.storage.caller is not None
            and not (target.storage.written or target.storage.resized)
            and any(meta.requires_grad for meta in self.inputs)
        )

    def copies_part(self, target: _Cell, entry: OpEntry, operands, keywords) -> bool:
        """r[functionalize.writes.original-part]: an in-place op with grad mode on whose
        derivative reads the value it overwrites, on a tensor that reads part of a storage the
        program made, reads a copy of that part, as eager's in-place op copies its original
        `self`: its backward then saves the part, not the whole storage around it."""
        value = operands[0]
        return (
            self.grad_enabled
            and not target.detached
            and target.storage.caller is None
            and target.layout.numel * value.element_size() < target.storage.nbytes
            and derivative_reads_first_argument(
                entry.functional, bind(entry.functional._schema, operands, keywords)
            )
        )

    def view(self, node, entry: OpEntry, args, kwargs, read_all):
        source: _Cell = args[0]
        bound = bind(node.target._schema, args, kwargs)
        layouts = entry.rule(source.layout, *bound[1:])
        outside = node.target is aten.as_strided.default and _outside(source, layouts)
        read = _read_in_storage if outside else _read
        values = node.target(
            read(source, node.name, self, for_view=True), *read_all(args[1:]), **read_all(kwargs)
        )
        # r[autograd.detach]: detach() is a view that carries no gradient, nor do views of it
        detached = source.detached or node.target in NONDIFFERENTIABLE
        view_of_detached = source.detached and node.target not in NONDIFFERENTIABLE
        without_grad = source.viewed_without_grad or not self.grad_enabled or detached
        # r[autograd.multi-output-views]: eager marks such views made with grad mode on, and
        # views of them
        multi_output = self.grad_enabled and not detached
        # views autograd tracks: unsafe_split's are not (r[ops.aten-views])
        tracked = node.target._schema.returns[0].alias_info is not None
        multi_output &= source.multi_output or (isinstance(layouts, tuple) and tracked)
        # r[capture.custom-function.outputs]: a view of a custom Function's view output carries
        # the Function's gradient, as the value it was viewed from does
        custom_view = source.custom_view and not detached
        reaches_outside = not detached and (
            source.reaches_outside or (outside and _may_carry_gradient(source.storage))
        )
        if isinstance(layouts, tuple):
            return tuple(
                _Cell(
                    source.storage,
                    layout,
                    value,
                    source.storage.version,
                    root=source.root,
                    viewed_without_grad=without_grad,
                    detached=detached,
                    view_of_detached=view_of_detached,
                    multi_output=multi_output,
                    custom_view=custom_view,
                )
                for layout, value in zip(layouts, values, strict=True)
            )
        return _Cell(
            source.storage,
            layouts,
            values,
            source.storage.version,
            root=source.root,
            viewed_without_grad=without_grad,
            detached=detached,
            view_of_detached=view_of_detached,
            multi_output=multi_output,
            custom_view=custom_view,
            reaches_outside=reaches_outside,
        )

    def custom_function(self, node, key: int, inputs, outputs, saved) -> tuple[_Cell, ...]:
        """r[capture.custom-function.outputs]: a custom Function's node reads its inputs, its
        outputs and its saved values, and gives each differentiable output a new value that
        carries the Function's gradient: a fresh output stays the same tensor, its storage's
        contents now that value; a view output becomes a view with that value, its storage's
        contents unchanged. A non-differentiable output stays as the forward made it (without
        grad) when fresh, and becomes an alias that carries no gradient when it is a view."""
        function = self.program.custom_functions[key]
        read = [[_read(c, node.name, self) for c in group] for group in (inputs, outputs, saved)]
        tracer = get_proxy_mode().tracer
        proxies = [[get_proxy_slot(v, tracer).proxy for v in group] for group in read]
        call = tracer.create_proxy("call_function", custom_function_call, (key, *proxies), {})
        # as eager's: each output requires grad when the call records (grad mode on, an input
        # requiring grad), though the forward's ops ran under torch.no_grad()
        records = self.grad_enabled and any(v.requires_grad for v in read[0])
        with disable_proxy_modes_tracing():
            results = [aten.alias(_requiring_grad(v, records)) for v in read[1]]
        track_tensor_tree(results, call, constant=None, tracer=tracer)
        kinds = list(zip(outputs, results, function.differentiable, function.views, strict=True))
        cells: list[_Cell | None] = [None] * len(outputs)
        # Fresh outputs first: their storages take new contents, which views of them then read.
        for j, (cell, result, differentiable, view) in enumerate(kinds):
            fresh = not (view or cell.storage.caller is not None)
            if fresh:  # computed under torch.no_grad(): without a gradient until relabelled
                cells[j] = _relabel(cell, result) if differentiable else cell
        for j, (cell, result, differentiable, _) in enumerate(kinds):
            if cells[j] is not None:
                continue
            if differentiable:
                cells[j] = _Cell(
                    cell.storage,
                    cell.layout,
                    result,
                    cell.storage.version,
                    root=cell.root,
                    custom_view=True,
                )
            else:
                cells[j] = _Cell(
                    cell.storage,
                    cell.layout,
                    aten.detach(read[1][j]),
                    cell.storage.version,
                    root=cell.root,
                    viewed_without_grad=True,
                    detached=True,
                )
        written = sorted(k for k in self.backwards[key].written if k < function.num_saved)
        versions = [cell.storage.version for cell in saved]
        self.custom_nodes.append(
            _CustomNode(call.node, key, [(k, saved[k], versions[k]) for k in written], saved)
        )
        return tuple(cells)

    def effect(self, node, args, kwargs, read_all):
        if self.program.entries[node].relayouts:
            return self.relayout(node, self.program.entries[node], args, kwargs)
        if node.target is aten.copy_.default:
            dst, src = args[0], args[1]
            # an ATen-valued in-place op is captured as its functional op and a copy_ of the
            # result, which nothing else reads (r[ops.aten-mutations])
            private = _read_only_here(src, node.args[1], node)
            # r[functionalize.writes.copied]: only an ATen-valued in-place op's result was
            # computed from dst; other values lack the history eager's copy_ gives dst through
            # its old value
            from_dst = isinstance(src, _Cell) and node.args[0] in node.args[1].all_input_nodes
            _write(
                dst,
                read_all(src),
                node.name,
                self,
                private=private,
                from_cell=from_dst,
                advances_version=advances_version(node),  # r[ops.aten-mutations.versions]
            )
            return dst
        if self.program.entries[node].name == "fsdp.copy_.default":  # r[aliasing.copy.fsdp]
            _write(args[0], read_all(args[1]), node.name, self, from_cell=False)
            return None
        if node.target is aten.set_.source_Tensor:
            return self.set_(args[0], args[1], node.name)
        if node.target is torch.ops.inductor.resize_storage_bytes_.default:
            _resize(args[0], args[1], node.name, self)
            return None
        raise InternalError(f"effect op without a functionalization rule: {node.target}")

    def relayout(self, node, entry: OpEntry, args, kwargs) -> _Cell:
        """r[functionalize.metadata.cell]: an in-place metadata op gives the tensor object the
        layout its view op would give; the storage and every other tensor on it stay as they
        are."""
        cell: _Cell = args[0]
        bound = bind(node.target._schema, args, kwargs)[1:]
        layout = lookup(entry.functional, where=node.name).rule(cell.layout, *bound)
        self.refuse_relayout_after_set(cell, node.name)
        storage = cell.storage
        if entry.functional in NONDIFFERENTIABLE:
            # r[aliasing.metadata.detach]: no layout or version moves; the tensor reads without
            # a gradient from here on, as a detach()ed alias does (r[autograd.detach])
            cell.value = aten.detach(_read(cell, node.name, self, for_view=True))
            cell.detached = cell.viewed_without_grad = True
            cell.view_of_detached = False
        elif storage.caller is None:
            # a value the program made: the value in the new layout is the view of the old one
            outside = node.target is aten.as_strided_.default and _outside(cell, layout)
            read = _read_in_storage if outside else _read
            cell.value = entry.functional(read(cell, node.name, self, for_view=True), *bound)
            cell.version = storage.version
            carries = not cell.detached and _may_carry_gradient(storage)
            cell.reaches_outside |= outside and carries  # r[autograd.as-strided.outside]
        else:
            _relaid_contents(storage, self)
            cell.value = None  # read again through the new layout
            relocates = not np.array_equal(cell.layout.locations(), layout.locations())
            if entry.functional is aten.as_strided.default and relocates:
                self.relocated.add(storage.caller)  # r[autograd.metadata.as-strided]
        cell.layout = layout
        with_history = not (cell.detached or cell.viewed_without_grad)
        if not self.grad_enabled and with_history and cell.stale_history is None:
            # r[autograd.no-grad-metadata]
            cell.stale_history = storage.origin if storage.flat is None else storage.flat
        if cell.input_index is not None:
            constants = tuple(tuple(a) if isinstance(a, list) else a for a in bound)
            step = Relayout(cell.input_index, node.target, constants, layout, self.grad_enabled)
            cell.relayouts.append(step)
        return cell

    def refuse_relayout_after_set(self, cell: _Cell, name: str, setting: bool = False) -> None:
        """r[functionalize.metadata.set]: an argument that requires grad may not be both rebound
        by set_ under torch.no_grad() and relaid out with grad mode on."""
        i = cell.input_index
        if i is None or not self.inputs[i].requires_grad:
            return
        if setting:
            clash = not self.grad_enabled and any(r.grad_enabled for r in cell.relayouts)
        else:
            clash = self.grad_enabled and cell.rebound
        if clash:
            raise UnsupportedError(
                f"{name}: flat input {i} requires grad, and the program both rebinds it with "
                "set_ under torch.no_grad() and changes its layout in place with grad mode on, "
                "so no one history of the caller's tensor is eager's",
                rule="functionalize.metadata.set",
                fix="change the layout of a view of the input instead (x.t() rather than "
                "x.t_()), or do both under torch.no_grad()",
            )

    def set_(self, cell: _Cell, source: _Cell, name: str) -> _Cell:
        # r[functionalize.set.rebinds-cell]: the tensor object moves; its old storage keeps its
        # contents.
        self.refuse_relayout_after_set(cell, name, setting=True)
        if source.layout.extent_bytes() > source.storage.nbytes:
            raise UnsupportedError(
                f"set_ of {name} to a source whose storage is smaller than its layout",
                rule="aliasing.set.grows-storage",
                fix="compiled programs do not grow storages through set_; resize the source up "
                "first",
            )
        cell.storage = source.storage
        cell.layout = source.layout
        cell.root = source.root
        cell.value = source.value
        cell.version = source.version
        cell.rebound = True
        if cell.input_index is not None and self.grad_enabled:
            self.rebound_with_grad.add(cell.input_index)
        elif cell.input_index is not None:
            # r[autograd.no-grad-set]: the input keeps its identity; the source's history stays
            # behind, so the cell reads the source's bytes afresh, as that input.
            cell.read_as_input = cell.input_index
            cell.viewed_without_grad = True
            cell.value = None
        return cell

    def opaque(self, node, entry: OpEntry, args, kwargs, read_all):
        schema = node.target._schema
        if any(a.alias_info is not None for a in schema.arguments) or any(
            r.alias_info is not None for r in schema.returns
        ):
            raise UnsupportedError(
                f"custom op {entry.name} mutates or aliases its arguments ({schema})",
                rule="functionalize.opaque-functional-only",
                fix="compiled programs call only functional custom ops; return a new tensor "
                "instead",
            )
        return pytree.tree_map(self.fresh, node.target(*read_all(args), **read_all(kwargs)))

    # ------------------------------------------------------------ the replay's end: its records

    def graph_storage(self, storage: _Storage) -> int:
        """The index among the graph's outputs of the storage's contents, added on first use."""
        if id(storage) not in self.output_index_of:
            self.output_index_of[id(storage)] = len(self.graph_outputs)
            # r[functionalize.outputs]: a storage no op wrote or resized is returned as the
            # result that made it, so an output laid out like that result is the result itself.
            contents = storage.origin if storage.flat is None else _flat(storage, self)
            self.graph_outputs.append(contents)
        return self.output_index_of[id(storage)]

    def where(self, storage: _Storage) -> CallerStorage | GraphStorage:
        if storage.caller is not None:
            return CallerStorage(storage.caller)
        return GraphStorage(self.graph_storage(storage))

    def epilogue(self) -> list[WriteBack | Resize | Relayout | Rebind]:
        """What the runtime does to the caller's tensors after the graph, in order."""
        epilogue: list[WriteBack | Resize | Relayout | Rebind] = []
        objects = list({id(cell): cell for cell in self.placeholder_cells}.values())
        # r[sizes.symbolic.decisions]: comparing sizes decides the records (a guard where they
        # are symbols); the tracer records no graph node for it
        with disable_proxy_modes_tracing():
            resized = [s for s in self.caller_storages if s.nbytes != s.entry_nbytes]
            written = [s for s in self.caller_storages if s.nbytes > 0 and s.written]
            moved = [cell for cell in objects if cell.rebound and self._moved(cell)]
        for storage in resized:
            # r[resize.compiled.epilogue]: resized up or down overall: the caller's storage
            # follows.
            epilogue.append(Resize(storage.caller, storage.nbytes))
        for cell in objects:
            if not cell.rebound:  # r[functionalize.epilogue.metadata]: before the writes
                epilogue += cell.relayouts
        for storage in written:
            epilogue.append(WriteBack(storage.caller, self.graph_storage(storage)))
        for cell in moved:
            epilogue.append(Rebind(cell.input_index, self.where(cell.storage), cell.layout))
        return epilogue

    def _moved(self, cell: _Cell) -> bool:
        """Whether an argument object ends on another storage or layout than it came with."""
        entry = self.inputs[cell.input_index]
        return cell.storage.caller != entry.storage or cell.layout != entry.layout

    def output_records(self, output_cells: list[_Cell]) -> list[OutputIsInput | OutputView]:
        """How the runtime makes each of the program's outputs from the graph's."""
        outputs: list[OutputIsInput | OutputView] = []
        carriers: dict[int, int] = {}
        for cell in output_cells:
            if cell.input_index is not None and cell is self.placeholder_cells[cell.input_index]:
                outputs.append(OutputIsInput(cell.input_index))
                continue
            if cell.stale_history is not None:  # r[autograd.no-grad-metadata]
                self.stale_histories.add(node_of(cell.stale_history))
            outputs.append(
                OutputView(
                    self.where(cell.storage),
                    cell.layout,
                    cell.root,
                    made_with_grad=not cell.viewed_without_grad,
                    detached=cell.detached,
                    view_of_detached=cell.view_of_detached,
                    multi_output=cell.multi_output,
                    gradient_from=_gradient_carrier(cell, self.graph_outputs, carriers, self),
                    own=cell.own and not cell.rebound,
                )
            )
        return outputs


def _requiring_grad(value: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    """`value`'s bytes, as a leaf that requires grad when `requires_grad` and its dtype can."""
    differentiable = value.is_floating_point() or value.is_complex()
    return value.detach().requires_grad_(requires_grad and differentiable)


def _read_only_here(cell: _Cell, made_by: torch.fx.Node, reader: torch.fx.Node) -> bool:
    """`cell`, which node `made_by` made, is a whole storage the program made, unwritten, that
    nothing reads but `reader`: no later op, no view of it, no output."""
    storage = cell.storage
    return (
        storage.caller is None
        and storage.flat is None
        and cell.value is storage.origin
        and set(made_by.users) == {reader}
    )


def _relabel(cell: _Cell, value: torch.Tensor) -> _Cell:
    """A fresh output of a custom Function: the same tensor, and its storage's contents are now
    `value`, so what reads the storage later reads the Function's gradient too
    (`r[capture.custom-function.outputs]`)."""
    storage = cell.storage
    storage.origin = value
    storage.flat = None
    storage.version += 1
    cell.value = value
    cell.version = storage.version
    return cell


@define(eq=False)
class _CustomNode:
    """A custom Function's node as the replay met it: the saved values its backward writes into,
    as (position, cell, the storage's version at the node), and every saved value's cell."""

    node: torch.fx.Node
    key: int
    written: list[tuple[int, _Cell, int]]
    saved: list[_Cell]


# ---------------------------------------------------------------- the pass


@define
class _Replayed:
    """What the traced replay found besides the graph it recorded."""

    state: _Replay | None = None
    epilogue: tuple[WriteBack | Resize | Relayout | Rebind, ...] = ()
    outputs: tuple[OutputIsInput | OutputView, ...] = ()
    final_contents: dict[torch.fx.Node, int] = field(factory=dict)
    custom_calls: dict[torch.fx.Node, CustomCall] = field(factory=dict)
    output_values: tuple[int, ...] = ()


def functionalize(
    program: CapturedProgram, tensors: list[torch.Tensor], *, values_out: bool = False
) -> FunctionalProgram:
    """The functional graph and epilogue of `program`, specialized to these input tensors.
    With `values_out`, the graph also returns the value of each of the program's outputs."""
    inputs = InputMeta.of(tensors)
    replayed = _Replayed()
    grad_modes = GradModes()
    regions = CheckpointRegions()
    backwards = tuple(_functional_backward(function) for function in program.custom_functions)

    def replay(*values):
        state = _Replay(program, inputs, grad_modes, regions, backwards)
        output_cells = state.run(list(values))
        epilogue = state.epilogue()
        outputs = state.output_records(output_cells)
        if values_out:
            first = len(state.graph_outputs)
            state.graph_outputs.extend(_read(cell, "output", state) for cell in output_cells)
            replayed.output_values = tuple(range(first, len(state.graph_outputs)))
        replayed.custom_calls = {
            custom.node: _custom_call(custom, state, backwards, epilogue, state.output_index_of)
            for custom in state.custom_nodes
        }
        replayed.state = state
        replayed.epilogue = tuple(epilogue)
        replayed.outputs = tuple(outputs)
        replayed.final_contents = {
            node_of(storage.last_contents): storage.caller
            for storage in state.caller_storages
            if storage.last_contents is not None
        }
        return state.graph_outputs

    graph_module = _trace(replay, program, tensors)
    grad_modes.annotate(graph_module.graph)
    regions.annotate(graph_module.graph)
    # the graph is functional: unused values go, but collectives run (r[collectives.program-order])
    graph_module.graph.eliminate_dead_code(is_impure_node=is_impure)
    graph_module.recompile()
    alive = set(graph_module.graph.nodes)
    entries = {
        node: lookup(node.target, where=f"functional graph node {node.name}")
        for node in graph_module.graph.nodes
        if node.op == "call_function" and node.target not in (getitem, custom_function_call)
    }
    state = replayed.state
    storages = state.caller_storages
    stand_ins = StandIns(
        state.resized_contents,
        replayed.final_contents,
        state.read_as_input,
        state.read_through_input,
        frozenset(state.no_grad_writes),
        frozenset(state.detached_writes),
        frozenset(state.stale_histories),
    )
    return FunctionalProgram(
        graph_module,
        entries,
        inputs,
        replayed.epilogue,
        replayed.outputs,
        program,
        stand_ins.kept_in(graph_module.graph),
        **_caller_storages_changed(storages),
        read_through_storages=frozenset(state.read_through_storages),
        rebound_with_grad=frozenset(state.rebound_with_grad),
        custom_calls={node: call for node, call in replayed.custom_calls.items() if node in alive},
        output_values=replayed.output_values,
        relocated=frozenset(state.relocated),
    )


def _caller_storages_changed(storages) -> dict[str, frozenset[int]]:
    """The caller storages the program touched, wrote and wrote with history, by first input."""
    return {
        "touched_storages": frozenset(s.caller for s in storages if s.written or s.resized),
        "written": frozenset(s.caller for s in storages if s.written),
        "written_with_grad": frozenset(s.caller for s in storages if s.written_with_grad),
    }


def _trace(replay: Callable, program: CapturedProgram, tensors: list) -> torch.fx.GraphModule:
    """The graph `make_fx` records of `replay` run on fakes of `tensors`: capture's, in its fake
    tensor mode and as they are (as the joint trace takes functionalize's), where they serve."""
    traced = _traced_as_captured(program, tensors)
    # r[capture.constants]: the program's constants are real tensors; the functional graph
    # reads them as constants too.
    with fx_traceback.preserve_node_meta():  # the user's source lines, for `aotspec explain`
        if traced is None:
            return make_fx_keeping_detach(
                replay, tracing_mode="fake", _allow_non_fake_inputs=True
            )(*tensors)
        with traced[0].fake_mode:
            return make_fx_keeping_detach(replay)(*traced)


def _traced_as_captured(program: CapturedProgram, tensors: list[torch.Tensor]) -> list | None:
    """Fake tensors capture traced `tensors` as, to trace the replay on in capture's fake tensor
    mode (now taking real constants too), where they are as converting `tensors` again would
    make them: the same facts (layout, storages, grad flags), and autograd state. Either the
    tensors the program ran on, none written but tensors without a history (a write moves only
    their version, which no trace reads); or, where no input requires grad, the graph's
    placeholders' values, copies detached before the program ran. None where make_fx converts
    `tensors` in a mode of its own; converting them is a good part of a trace's fixed cost."""
    if any(isinstance(t, FakeTensor) for t in tensors):
        _forget_conversions(tensors)
        return None  # traced symbolically: make_fx traces in their mode
    facts = input_facts(tensors)
    traced = list(program.traced_inputs)
    if not all(isinstance(t, FakeTensor) and _as_converted(t) for t in traced):
        traced = []
    if not (traced and input_facts(traced) == facts):
        traced = [node.meta.get("val") for node in placeholders(program.graph)]
        no_grad = not any(t.requires_grad for t in tensors)
        if not (traced and no_grad and all(isinstance(t, FakeTensor) for t in traced)):
            return None
        if input_facts(traced) != facts:
            return None
    traced[0].fake_mode.allow_non_fake_inputs = True
    return traced


def _forget_conversions(fakes: list[FakeTensor]) -> None:
    """Symbolic inputs are fakes, which make_fx converts in their own mode, where a conversion
    is kept: capture's trace of the program ran on the conversions it made, so make_fx would
    hand the replay tensors the program relaid out (a `squeeze_` of an input) or wrote. Forget
    them, so that the replay's are converted afresh, as the caller's tensors are."""
    for fake in fakes:
        converter = fake.fake_mode.fake_tensor_converter
        converted = converter.meta_converter.describer.lookup_tensor.get(fake)
        if converted is not None:
            converter.tensor_memo.pop(converted, None)  # r[sizes.symbolic.inputs-as-passed]


def _as_converted(t: torch.Tensor) -> bool:
    """Whether the traced input `t` has the autograd state converting its caller's tensor gives
    (its facts aside): unwritten, or written but without a history. A view's history follows its
    base's writes (its `grad_fn` is regenerated when read): a view that has none after the
    program is one the caller's view converts to, as long as the facts (`requires_grad`, a leaf)
    agree. A written tensor with a history is not: its history is the program's."""
    if t._version == 0:
        return True
    try:
        return t.grad_fn is None
    except RuntimeError:  # a view made under no_grad, its base written since with grad mode on
        return False


def _outside(source: _Cell, layout: Layout) -> bool:
    """r[autograd.as-strided.outside]: an as_strided of `source`, on a storage the program made,
    laid out as `layout`, reads locations `source` does not."""
    if source.storage.caller is not None:
        return False
    return not np.isin(layout.locations(), source.layout.locations()).all()


def _may_carry_gradient(storage: _Storage) -> bool:
    """Whether the contents of `storage` may carry a gradient: their traced value requires grad
    (the replay runs each op in its grad mode, `_Replay.run`)."""
    contents = storage.origin if storage.flat is None else storage.flat
    return contents.requires_grad


def _gradient_carrier(
    cell: _Cell, graph_outputs: list, carriers: dict[int, int], state: _Replay
) -> int | None:
    """r[capture.custom-function.outputs]: for an output that is (a view of) a view a custom
    Function returned, a graph output holding its value, which carries the Function's gradient
    (one per cell in `carriers`, so a cell returned twice gets its gradient from both); None for
    other outputs."""
    if not (cell.custom_view or cell.reaches_outside):
        return None
    if id(cell) in carriers:
        return carriers[id(cell)]
    if cell.version != cell.storage.version and not cell.custom_view:
        raise UnsupportedError(
            "an output is an as_strided view of a value the program made that reads storage "
            "locations the viewed value does not, and the program writes that storage after "
            "taking it",
            rule="autograd.as-strided.outside",
            fix="clone() the as_strided view before writing the storage, or view only locations "
            "the viewed value reads",
        )
    if cell.version != cell.storage.version:
        raise UnsupportedError(
            "an output is a view a custom autograd.Function returned (or a view of one), and "
            "the program writes its storage after the Function returned it: eager autograd "
            "refuses its backward",
            rule="capture.custom-function.outputs",
            fix="clone() the Function's output before writing what it views",
        )
    graph_outputs.append(_read(cell, "output", state))
    carriers[id(cell)] = len(graph_outputs) - 1
    return carriers[id(cell)]


def _functional_backward(function: CustomFunction) -> FunctionalProgram:
    """r[autograd.custom-function]: a custom Function's traced backward, functionalized on its
    own, each tensor it reads on a storage of its own laid out as traced; its graph returns the
    values of its outputs (`values_out`). A backward that resizes or rebinds a tensor is
    refused."""
    graph_module = function.backward
    effects = (aten.set_.source_Tensor, torch.ops.inductor.resize_storage_bytes_.default)
    if any(node.target in effects for node in graph_module.graph.nodes):
        raise UnsupportedError(
            f"the backward of the custom autograd.Function {function.name} resizes a storage or "
            "rebinds a tensor with set_",
            rule="capture.custom-function.refused",
            fix="let the backward compute new tensors (it may write into existing ones)",
        )
    traced = [node.meta["val"] for node in graph_module.graph.nodes if node.op == "placeholder"]
    examples = [
        torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device) for v in traced
    ]
    return functionalize(program_of_graph(graph_module, function.name), examples, values_out=True)


def _custom_call(custom: _CustomNode, state: _Replay, backwards, epilogue, index_of) -> CustomCall:
    """r[autograd.custom-function.backward-writes]: where the writes of a custom Function's
    backward into the tensors it read go: into the caller's storage for a tensor on one (the
    tensor must be the only saved value on it, its storage neither resized nor rebound by the
    program, nor written after the Function ran or with history), nowhere for a value the
    program made that no output reads; a write into a value an output reads is refused."""
    function = state.program.custom_functions[custom.key]
    rebinds = any(isinstance(step, Rebind) for step in epilogue)
    writes = []
    for k, cell, version in custom.written:
        storage = cell.storage
        shared = sum(other.storage is storage for other in custom.saved) > 1
        problem = None
        if storage.caller is None:
            if id(storage) in index_of:
                problem = "a value an output of the program reads"
            writes.append((k, None))
        elif shared or rebinds or storage.resized or storage.written_with_grad:
            problem = (
                "a caller's tensor whose storage another saved tensor reads, or that the "
                "program resizes, rebinds or writes with grad mode on"
            )
        elif storage.version != version:
            problem = "a caller's tensor the program writes after the Function ran"
        else:
            writes.append((k, BackwardWrite(_write_target(cell, state), cell.layout)))
        if problem is not None:
            raise UnsupportedError(
                f"the backward of the custom autograd.Function {function.name} writes into "
                f"{problem}",
                rule="autograd.custom-function.backward-writes",
                fix="clone() the tensor in the forward and save the clone, or write it outside "
                "the backward",
            )
    return CustomCall(function, backwards[custom.key], tuple(writes))


def _write_target(cell: _Cell, state: _Replay) -> int:
    """A caller's tensor on the cell's storage that reads it in the cell's dtype: the input the
    cell was viewed from, else the first such input."""
    candidates = [cell.root] if cell.root is not None else []
    candidates += [i for i, meta in enumerate(state.inputs) if meta.storage == cell.storage.caller]
    for i in candidates:
        if state.inputs[i].layout.dtype == cell.layout.dtype:
            return i
    raise UnsupportedError(
        "the backward of a custom autograd.Function writes into a caller's storage that no "
        "argument reads in the written tensor's dtype",
        rule="autograd.custom-function.backward-writes",
        fix="pass a tensor of that dtype on the storage, or write it outside the backward",
    )
