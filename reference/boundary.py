"""The boundary between the caller's torch tensors and the reference's storage model.

`r[boundary.import]`: each distinct torch storage among the arguments becomes one reference Storage
holding a copy of its bytes (zero-byte storages included), and each distinct tensor object one
Tensor cell, so aliasing between arguments (shared storages, the same object twice) is kept.
`r[boundary.export]`: after a successful run the final state goes back to the caller: every input
storage takes the new bytes and size, every input rebound by `set_` is rebound to the matching
torch storage, and outputs are torch tensors on the storages their reference tensors read
(an output that is an input is the caller's very object). A failed run exports nothing.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
import torch.autograd.forward_ad as forward_ad
from attrs import define, field

from aotspec.errors import UnsupportedError

from .storage import Layout, SparseCoo, Storage, Tensor

#: The device types whose autocast state a compiled program assumes (`r[capture.autocast]`).
AUTOCAST_DEVICES = ("cpu", "cuda")


def autocast_state() -> tuple:
    """r[capture.autocast]: whether autocast is on, and its dtype, per device type: part of what
    a compiled program assumes, since capture records the casts autocast makes."""
    dtype = torch.get_autocast_dtype
    if not torch._C._is_any_autocast_enabled():  # one question for every device type
        return tuple([(False, dtype(device)) for device in AUTOCAST_DEVICES])
    enabled = torch.is_autocast_enabled
    return tuple([(enabled(device), dtype(device)) for device in AUTOCAST_DEVICES])


NOTHING_TO_DO = contextlib.nullcontext()


def autocast_off() -> contextlib.AbstractContextManager:
    """r[capture.autocast]: graphs hold autocast's casts as ops, so they run with autocast off,
    each cast applied once. (Entered at every call: nothing to enter when autocast is off, which
    one question to torch answers for every device type.)"""
    if not torch._C._is_any_autocast_enabled():
        return NOTHING_TO_DO
    enabled = [device for device in AUTOCAST_DEVICES if torch.is_autocast_enabled(device)]
    return _autocast_disabled(enabled) if enabled else NOTHING_TO_DO


@contextlib.contextmanager
def _autocast_disabled(devices: list[str]):
    with contextlib.ExitStack() as stack:
        for device in devices:
            stack.enter_context(torch.autocast(device, enabled=False))
        yield


class grad_on_recording_nothing:  # noqa: N801  (used as a function: `with grad_on_...():`)
    """r[ops.aten-values.grad-mode]: kernels see grad mode on, as eager's do where autograd
    records, while autograd's own kernels are skipped, so nothing records a history."""

    def __enter__(self) -> None:
        self._was_enabled = torch.is_grad_enabled()
        torch._C._set_grad_enabled(True)
        self._below_autograd = torch._C._AutoDispatchBelowAutograd()
        self._below_autograd.__enter__()

    def __exit__(self, *exc_info) -> None:
        self._below_autograd.__exit__(*exc_info)
        torch._C._set_grad_enabled(self._was_enabled)


def refuse_transformed(tensors: list[torch.Tensor]) -> None:
    """r[boundary.import]: no functorch transform is active around the call, and no
    argument carries a forward-mode tangent; checked before anything runs."""
    if torch._C._functorch.peek_interpreter_stack() is not None:
        raise UnsupportedError(
            "the call runs inside a functorch transform (torch.func.grad, vmap, jacrev, ...), "
            "whose wrapped tensors have no storage to compile against",
            rule="boundary.import",
            fix="apply the transform to the uncompiled function, or compile a function that "
            "calls the transform inside it with torch.compile",
        )
    if forward_ad._current_level >= 0:
        for i, t in enumerate(tensors):
            if forward_ad.unpack_dual(t).tangent is not None:
                raise UnsupportedError(
                    f"flat argument {i} carries a forward-mode tangent (make_dual), which the "
                    "compiled graphs would drop",
                    rule="boundary.import",
                    fix="take forward-mode derivatives of the uncompiled function, or use "
                    "reverse mode (backward) through the compiled one",
                )


def refuse_inference_tensors(tensors: list[torch.Tensor], lifted: int) -> None:
    """r[boundary.inference-tensors]: none of the call's flat tensors, its `lifted` tensors
    first, was made under torch.inference_mode(); checked before anything runs."""
    for i, t in enumerate(tensors):
        if t.is_inference():
            which = f"lifted tensor {i}" if i < lifted else f"flat argument {i - lifted}"
            raise UnsupportedError(
                f"{which} is an inference tensor (made under torch.inference_mode()), which has "
                "no version counter and which autograd cannot save, so a compiled call could "
                "neither tell whether it was written nor differentiate through it",
                rule="boundary.inference-tensors",
                fix="make it under torch.no_grad() instead of torch.inference_mode(), or pass "
                "t.clone() taken outside inference mode",
            )


def bytes_of(st: torch.UntypedStorage) -> np.ndarray:
    """A copy of a torch storage's bytes."""
    # .numpy() on the caller's storage would mark it non-resizable for good: copy first.
    return torch.empty(0, dtype=torch.uint8).set_(st).clone().numpy()


def storage_from_torch(st: torch.UntypedStorage) -> Storage:
    return Storage(bytes_of(st))


def write_bytes(st: torch.UntypedStorage, s: Storage) -> None:
    """Make torch storage `st` hold exactly `s`'s bytes, resizing it if needed."""
    if st.nbytes() != s.nbytes:
        st.resize_(s.nbytes)
    if s.nbytes:
        torch.empty(0, dtype=torch.uint8).set_(st).copy_(torch.from_numpy(s.buffer))


def new_torch_storage(s: Storage) -> torch.UntypedStorage:
    # torch.empty, not torch.from_numpy: the storage must stay resizable like any eager one.
    st = torch.empty(s.nbytes, dtype=torch.uint8).untyped_storage()
    write_bytes(st, s)
    return st


def set_within(t: torch.Tensor, st: torch.UntypedStorage, layout: Layout) -> torch.Tensor:
    """`t.set_(st, ...)` with `layout`, even when `st` is too small for it (a zero storage)."""
    size = st.nbytes()
    needed = layout.extent_bytes()
    # set_ checks bounds, so a too-small storage is grown for the call and shrunk back after.
    if size < needed:
        st.resize_(needed)
    t.set_(st, layout.offset, layout.sizes, layout.strides)
    if size < needed:
        st.resize_(size)
    return t


def tensor_on(st: torch.UntypedStorage, layout: Layout) -> torch.Tensor:
    t = set_within(torch.empty(0, dtype=layout.dtype), st, layout)
    # r[memory.layout.conj-neg]: eager's lazy views of the same storage
    if layout.conj:
        t = t._conj()
    return t._neg_view() if layout.neg else t


@define
class Boundary:
    #: torch storage key -> (torch storage, reference storage), for the caller's storages.
    _storages: dict[int, tuple[torch.UntypedStorage, Storage]] = field(factory=dict)
    #: id(reference storage) -> torch storage, for every storage known on both sides.
    _torch_of: dict[int, torch.UntypedStorage] = field(factory=dict)
    #: id(torch tensor) -> (torch tensor, reference tensor, its storage and layout at import).
    _inputs: dict[int, tuple[torch.Tensor, Tensor, Storage, Layout]] = field(factory=dict)
    #: id(reference tensor) -> the caller's torch tensor it stands for.
    _caller_of: dict[int, torch.Tensor] = field(factory=dict)

    def import_tensor(self, t: torch.Tensor, name: str = "") -> Tensor:
        if id(t) in self._inputs:
            return self._inputs[id(t)][1]
        st = t.untyped_storage()
        key = st._cdata
        if key not in self._storages:
            # r[aliasing.inputs.shared-storage]: one reference storage per torch storage.
            s = storage_from_torch(st)
            self._storages[key] = (st, s)
            self._torch_of[id(s)] = st
        s = self._storages[key][1]
        layout = Layout.of(t)
        cell = Tensor(s, layout, name=name)
        self._inputs[id(t)] = (t, cell, s, layout)
        self._caller_of[id(cell)] = t
        return cell

    def torch_storage(self, s: Storage) -> torch.UntypedStorage:
        if id(s) not in self._torch_of:
            self._torch_of[id(s)] = new_torch_storage(s)
        return self._torch_of[id(s)]

    def apply_to_caller(self) -> None:
        """Write the final bytes, sizes and bindings back into the caller's tensors."""
        for st, s in self._storages.values():
            write_bytes(st, s)
        for t, cell, storage, layout in self._inputs.values():
            if cell.detached:
                t.detach_()  # r[aliasing.metadata.detach]
            if cell.storage is storage and cell.layout == layout:
                continue
            with torch.no_grad():
                # r[aliasing.set.rebinds]: the caller's object moves, its old aliases stay put.
                set_within(t, self.torch_storage(cell.storage), cell.layout)

    def export(self, value):
        """A torch value for a reference output (tensors recursively; other values as they are)."""
        if isinstance(value, (list, tuple)):
            return type(value)(self.export(v) for v in value)
        if isinstance(value, SparseCoo):
            # r[ops.aten-values.sparse-gradient]: a sparse torch tensor reading its parts
            indices, values = (self.export(part) for part in value.parts)
            return torch.sparse_coo_tensor(
                indices, values, value.sizes, is_coalesced=value.coalesced
            )
        if not isinstance(value, Tensor):
            return value
        if id(value) in self._caller_of:
            return self._caller_of[id(value)]
        return tensor_on(self.torch_storage(value.storage), value.layout)
