"""A memory tracker on real torch tensors, in the format of the reference's ledger.

`MemoryTracker` watches the storages a program makes and the ones the caller registers, and
keeps an account in the terms of `aotspec.reference.ledger`: an `Event` for each allocation,
resize and free, a `Probe` after each step (which tracked storages are alive, how many bytes
they hold), `live_bytes` and `peak_bytes`. A step is one aten op, as the dispatcher sees it, so
the same account comes out of eager PyTorch, the fast backend and `torch.compile(backend=
"aot_eager")`, and compares directly with the reference's ledger of the same program.

How it sees the heap (docs/design.md section 5):
- A dispatch mode sees every aten op, the autograd engine's backward included (on CPU the
  engine runs in the caller's thread, with the caller's modes). After an op, each output whose
  storage is not the storage of a tensor argument is a new storage: an "alloc" event.
- It holds only `StorageWeakRef`s, which keep no bytes alive. A free happens whenever Python
  drops the last reference, which is between ops, so the tracker sweeps its storages at each
  op boundary, on `mark` and on exit: an expired weak reference is a "free" event of the step
  that just ended, and a storage whose size changed (`inductor.resize_storage_bytes_`) a
  "resize" event. A storage resized to zero stays alive, with zero bytes, as in the reference.
- The mode answers `ignore_compile_internals()` with True: `torch.compile` turns it off while
  it compiles and back on while the compiled code runs, so it sees the aten ops that
  `aot_eager` runs rather than making Dynamo fall back to eager.

Use:

    tracker = MemoryTracker()
    tracker.track(x, *model.parameters())   # storages that exist already
    with tracker:
        loss = model(x).sum()
        tracker.reset_peak()                # peak of the backward alone from here
        loss.backward()
    tracker.peak_bytes, tracker.probes, tracker.events

Storages made outside the tracker and never registered are not counted; views of them are not
either (they are not new storages).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
import torch.utils._pytree as pytree
from attrs import define, field
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

from aotspec.reference.ledger import Event, Probe


@define
class _Watched:
    """A tracked storage: its weak reference, its ledger id and its size when last seen."""

    ref: StorageWeakRef
    id: int
    nbytes: int


@define
class MemoryTracker:
    """Which storages are alive after each step, and the peak of their bytes (see module doc)."""

    events: list[Event] = field(factory=list)
    probes: list[Probe] = field(factory=list)
    live_bytes: int = 0
    peak_bytes: int = 0
    step: int = 0
    node: str = "<start>"
    #: The tracked storages that are alive, by weak reference (equal for the same StorageImpl).
    _watched: dict[StorageWeakRef, _Watched] = field(factory=dict, repr=False)
    _ids: itertools.count = field(factory=itertools.count, repr=False)
    _mode: _Watch | None = field(default=None, repr=False)
    #: Whether the current step's probe is still to be taken (step 0: the registrations).
    _step_open: bool = field(default=True, repr=False)

    # -------------------------------------------------------- the caller's side

    def track(self, *tensors) -> list[int]:
        """Register the storages of `tensors` (any pytree of them: inputs, parameters, ...), so
        their resizes and frees are seen; returns their ids (the same id for a shared storage)."""
        return [self._watch(t.untyped_storage()) for t in _tensors(tensors)]

    def storage_id(self, t: torch.Tensor) -> int | None:
        """The id of `t`'s storage, or None when the tracker does not watch it."""
        watched = self._watched.get(StorageWeakRef(t.untyped_storage()))
        return None if watched is None or watched.ref.expired() else watched.id

    def alive(self) -> frozenset[int]:
        return frozenset(watched.id for watched in self._watched.values())

    def mark(self, node: str) -> int:
        """A step named `node` with no op: a probe point of the caller's choosing (outside `with`
        too). Frees since the last op count to that op's step, as they would at the next op."""
        self._end_step()
        self._begin_step(node)
        self._end_step()
        return self.step

    def reset_peak(self) -> None:
        """Peak bytes from now on: the peak becomes the bytes alive now."""
        self.sweep()
        self.peak_bytes = self.live_bytes

    def sweep(self) -> None:
        """Account for every free and resize since the last sweep, in the current step. (The
        tracker sweeps twice an op: it reads its weak references with torch's C functions
        themselves.)"""
        for key, watched in list(self._watched.items()):
            cdata = watched.ref.cdata
            if _storage_expired(cdata):
                del self._watched[key]
                self._change_live(-watched.nbytes)
                self._record("free", watched.id, 0)
            elif _weakly_referenced(cdata).nbytes() != watched.nbytes:
                self._update_size(watched)

    def __enter__(self) -> MemoryTracker:
        if self._mode is not None:
            raise RuntimeError(
                "this MemoryTracker is already active; a tracker is entered once at a time. "
                "Leave it first, or make a second MemoryTracker"
            )
        self._mode = _Watch(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        mode, self._mode = self._mode, None
        mode.__exit__(*exc_info)
        self._end_step()

    # -------------------------------------------------------- the mode's side

    def _before_op(self, func) -> None:
        self._end_step()
        self._begin_step(str(func))

    def _after_op(self, args, outputs) -> None:
        argument_storages = {StorageWeakRef(t.untyped_storage()) for t in _op_tensors(args)}
        for t in _op_tensors(outputs):
            storage = t.untyped_storage()
            key = StorageWeakRef(storage)
            if key not in argument_storages or key in self._watched:
                self._watch(storage)
        self.sweep()

    # -------------------------------------------------------- bookkeeping

    def _watch(self, storage: torch.UntypedStorage) -> int:
        key = StorageWeakRef(storage)
        watched = self._watched.get(key)
        if watched is not None and watched.ref.expired():  # a new storage at a freed one's address
            self.sweep()
            watched = None
        if watched is not None:
            self._update_size(watched)
            return watched.id
        watched = _Watched(key, next(self._ids), storage.nbytes())
        self._watched[key] = watched
        self._change_live(watched.nbytes)
        self._record("alloc", watched.id, watched.nbytes)
        return watched.id

    def _update_size(self, watched: _Watched) -> None:
        nbytes = _nbytes(watched.ref)
        if nbytes != watched.nbytes:
            self._change_live(nbytes - watched.nbytes)
            watched.nbytes = nbytes
            self._record("resize", watched.id, nbytes)

    def _begin_step(self, node: str) -> None:
        self.step += 1
        self.node = node
        self._step_open = True

    def _end_step(self) -> None:
        """Sweep and take the probe of the current step, once."""
        self.sweep()
        if self._step_open:
            self.probes.append(Probe(self.step, self.node, self.alive(), self.live_bytes))
            self._step_open = False

    def _change_live(self, delta: int) -> None:
        self.live_bytes += delta
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def _record(self, kind: str, storage: int, nbytes: int) -> None:
        self.events.append(Event(self.step, self.node, kind, storage, nbytes, self.live_bytes))


class _Watch(TorchDispatchMode):
    """The dispatch mode behind a `MemoryTracker`: tells it where each op begins and ends."""

    def __init__(self, tracker: MemoryTracker):
        super().__init__()
        self.tracker = tracker

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True  # torch.compile compiles with the mode off and runs its code with it on

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.tracker._before_op(func)
        outputs = func(*args, **(kwargs or {}))
        self.tracker._after_op((args, kwargs), outputs)
        return outputs


def step_memory(forward: Callable[[], torch.Tensor], *tracked) -> tuple[int, int]:
    """(bytes alive when `forward()` returns, the peak of its loss's backward) of one training
    step, counting the storages the step makes and those of `tracked` (inputs, parameters)."""
    tracker = MemoryTracker()
    tracker.track(*tracked)
    with tracker:
        loss = forward()
        tracker.sweep()  # frees since the forward's last op
        after_forward = tracker.live_bytes
        tracker.reset_peak()
        loss.backward()
        del loss
    return after_forward, tracker.peak_bytes


def _is_plain(value) -> bool:
    """A tensor with real storage (not a meta tensor or a subclass without one)."""
    return type(value) in (torch.Tensor, torch.nn.Parameter) and value.device.type != "meta"


def _tensors(tree) -> list[torch.Tensor]:
    """The strided tensors of `tree`, a sparse tensor standing for the parts that hold its bytes
    (`r[memory.layout.sparse-made-inside]`, `r[ops.aten-values.sparse-gradient]`)."""
    return [part for leaf in pytree.tree_leaves(tree) if _is_plain(leaf) for part in _parts(leaf)]


def _op_tensors(values, found: list | None = None) -> list[torch.Tensor]:
    """`_tensors` of an op's arguments or results, which hold their tensors in tuples, lists
    and dicts: walked directly, without pytree's general machinery, at every op (and without a
    closure, whose reference cycle would keep the tensors alive past the op)."""
    found = [] if found is None else found
    if isinstance(values, (tuple, list)):
        for value in values:
            _op_tensors(value, found)
    elif isinstance(values, dict):
        for value in values.values():
            _op_tensors(value, found)
    elif _is_plain(values):
        found.extend(_parts(values))
    return found


def _parts(t: torch.Tensor) -> list[torch.Tensor]:
    if t.layout == torch.strided:
        return [t]
    if t.layout == torch.sparse_coo:
        return [t._indices(), t._values()]
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        return [t.crow_indices(), t.col_indices(), t.values()]
    return [t.ccol_indices(), t.row_indices(), t.values()]


#: torch's C functions behind `StorageWeakRef`: whether the storage a weak reference's `cdata`
#: names is freed, and that storage (alive).
_storage_expired = torch.UntypedStorage._expired
_weakly_referenced = torch.UntypedStorage._new_with_weak_ptr


def _nbytes(ref: StorageWeakRef) -> int:
    return _weakly_referenced(ref.cdata).nbytes()
