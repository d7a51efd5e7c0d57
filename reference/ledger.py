"""The ledger: an exact account of which storages are alive, step by step.

A storage is alive while some live tensor reads it (`r[memory.live]`); it is freed the moment the
last one goes (`r[memory.freed]`). Tensors are alive while something holds them: the caller (for
inputs and outputs) or the interpreter's environment (until the value's last use).
The ledger counts holders per tensor and tensors per storage, so each step costs O(1).
"""

from __future__ import annotations

from attrs import define, field, frozen

from aotspec.errors import InternalError

from .storage import Storage, Tensor


@frozen
class Event:
    """One change to the heap. `nbytes` is the storage's size after the event (0 when freed)."""

    step: int
    node: str
    kind: str  # "alloc", "free" or "resize"
    storage: int
    nbytes: int
    live_bytes: int


@frozen
class Probe:
    """The heap after one step: which storages are alive and how many bytes they hold."""

    step: int
    node: str
    alive: frozenset[int]
    live_bytes: int


@define
class Ledger:
    """The exact memory account of one run (`r[memory.live]`, `r[memory.freed]`,
    `r[memory.peak]`): who holds each tensor, which storages are live, every alloc, free and
    resize as an `Event`, and live bytes after every step as a `Probe`."""

    events: list[Event] = field(factory=list)
    probes: list[Probe] = field(factory=list)
    live_bytes: int = 0
    peak_bytes: int = 0
    step: int = 0
    node: str = "<inputs>"
    _holders: dict[int, tuple[Tensor, int]] = field(factory=dict, repr=False)
    _readers: dict[int, tuple[Storage, int]] = field(factory=dict, repr=False)

    # -------------------------------------------------------- tensors

    def hold(self, t: Tensor) -> None:
        """Someone (the caller, or an environment slot) now holds tensor `t`."""
        tensor, count = self._holders.get(id(t), (t, 0))
        self._holders[id(t)] = (tensor, count + 1)
        if count == 0:
            self._add_reader(t.storage)  # r[memory.live]: held, so its storage is live

    def release(self, t: Tensor) -> None:
        """A holder of `t` let go; the last one going frees the storage if nothing else reads
        it."""
        if id(t) not in self._holders:
            raise InternalError(f"release of a tensor the ledger does not hold: {t}")
        tensor, count = self._holders[id(t)]
        if count == 1:
            del self._holders[id(t)]
            self._drop_reader(t.storage)
        else:
            self._holders[id(t)] = (tensor, count - 1)

    def rebind(self, t: Tensor, storage: Storage) -> None:
        """`t` moves to `storage` (`set_`); its old storage loses a reader."""
        held = id(t) in self._holders
        if held:
            self._add_reader(storage)
        old = t.storage
        t.storage = storage
        if held:
            self._drop_reader(old)

    # -------------------------------------------------------- storages

    def resized(self, s: Storage, old_nbytes: int) -> None:
        """Account for `s` having changed size from `old_nbytes` to `s.nbytes`."""
        if id(s) in self._readers:
            # r[memory.resize.live-bytes]: the difference counts; the storage stays the same one.
            self._change_live(s.nbytes - old_nbytes)
        self._record("resize", s, s.nbytes)

    def is_alive(self, s: Storage) -> bool:
        return id(s) in self._readers

    def alive(self) -> frozenset[int]:
        return frozenset(s.id for s, _ in self._readers.values())

    def _add_reader(self, s: Storage) -> None:
        storage, count = self._readers.get(id(s), (s, 0))
        self._readers[id(s)] = (storage, count + 1)
        if count == 0:
            self._change_live(s.nbytes)
            self._record("alloc", s, s.nbytes)

    def _drop_reader(self, s: Storage) -> None:
        storage, count = self._readers[id(s)]
        if count == 1:  # r[memory.freed]: the last reader of the storage went
            del self._readers[id(s)]
            self._change_live(-s.nbytes)
            self._record("free", s, 0)
        else:
            self._readers[id(s)] = (storage, count - 1)

    # -------------------------------------------------------- steps

    def begin_step(self, node: str) -> None:
        self.step += 1
        self.node = node

    def end_step(self) -> None:
        self.probes.append(Probe(self.step, self.node, self.alive(), self.live_bytes))

    def _change_live(self, delta: int) -> None:
        self.live_bytes += delta
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)  # r[memory.peak]

    def _record(self, kind: str, s: Storage, nbytes: int) -> None:
        self.events.append(Event(self.step, self.node, kind, s.id, nbytes, self.live_bytes))
