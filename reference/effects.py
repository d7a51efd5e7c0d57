"""Ops that act on storages and tensor cells directly: copy_ (and FSDP's fsdp.copy_), set_,
resize_storage_bytes_, and the in-place metadata ops (t_, transpose_, unsqueeze_, squeeze_,
as_strided_), which give a tensor cell a new layout on its own storage.

Each rule gets the ledger and the interpreter's Tensor cells, in schema order.
"""

from __future__ import annotations

import torch

from . import ops
from .ledger import Ledger
from .optable import effect, effect_defined_on_import
from .storage import Tensor

aten = torch.ops.aten


@effect(aten.copy_.default, "writes input 0's bytes, returns it")
def copy_(ledger: Ledger, dst: Tensor, src: Tensor, non_blocking) -> Tensor:
    # r[aliasing.copy.writes-storage]: the bytes change in place; every alias of dst sees them,
    # and dst still reads its own storage afterwards.
    dst.write(src.read())
    return dst


@effect_defined_on_import("fsdp.copy_.default", "writes input 0's bytes, returns nothing")
def fsdp_copy_(ledger: Ledger, tensor: Tensor, data: Tensor) -> None:
    # r[aliasing.copy.fsdp]: FSDP's copy into an unsharded parameter is copy_ without a result
    # (torch/distributed/fsdp/_fully_shard/_fsdp_param.py, defined when FSDP is imported).
    tensor.write(data.read())


@effect(aten.set_.source_Tensor, "rebinds input 0 to input 1's storage, returns it")
def set_(ledger: Ledger, t: Tensor, source: Tensor) -> Tensor:
    # r[aliasing.set.rebinds]: t now reads source's storage through source's layout; tensors that
    # shared t's old storage keep reading the old bytes.
    ledger.rebind(t, source.storage)  # r[aliasing.set.later-writes]: one storage from now on
    t.layout = source.layout
    # r[aliasing.set.grows-storage]: like eager's set_ (resize_impl_cpu_), a storage too small for
    # the layout grows to its extent, keeping its bytes.
    needed = t.layout.extent_bytes()
    if t.storage.nbytes < needed:
        old_nbytes = t.storage.nbytes
        t.storage.resize(needed)
        ledger.resized(t.storage, old_nbytes)
    return t


@effect(torch.ops.inductor.resize_storage_bytes_.default, "resizes input 0's storage")
def resize_storage_bytes_(ledger: Ledger, t: Tensor, new_size: int) -> None:
    # r[resize.eager.all-aliases]: the storage itself changes size, so every alias sees it;
    # no tensor's sizes or strides change (r[resize.keeps-prefix] for the bytes).
    old_nbytes = t.storage.nbytes
    t.storage.resize(new_size)
    ledger.resized(t.storage, old_nbytes)


# ---------------------------------------------------------------- in-place metadata ops


def _relayout(inplace_overload, view_overload, layout_rule) -> None:
    """`x.op_(*args)` is `x` reading its own storage through `x.op(*args)`'s layout."""

    def relayout(ledger: Ledger, t: Tensor, *args) -> Tensor:
        # r[aliasing.metadata.relayout]: the cell moves, its storage and every other cell stay.
        # (A layout its storage cannot hold never gets here: capture runs PyTorch's meta kernel,
        # which raises eager's error.)
        t.layout = layout_rule(t.layout, *args)
        return t

    description = "relays out input 0 on its own storage, returns it"
    effect(inplace_overload, description, relayout_as=view_overload)(relayout)


_relayout(aten.t_.default, aten.t.default, ops.t)
_relayout(aten.transpose_.default, aten.transpose.int, ops.transpose)
_relayout(aten.unsqueeze_.default, aten.unsqueeze.default, ops.unsqueeze)
_relayout(aten.squeeze_.default, aten.squeeze.default, ops.squeeze_all)
_relayout(aten.squeeze_.dim, aten.squeeze.dim, ops.squeeze_dim)
_relayout(aten.squeeze_.dims, aten.squeeze.dims, ops.squeeze_dims)
_relayout(aten.as_strided_.default, aten.as_strided.default, ops.as_strided)


@effect(
    aten.detach_.default, "detaches input 0 in place, returns it", relayout_as=aten.detach.default
)
def detach_(ledger: Ledger, t: Tensor) -> Tensor:
    # r[aliasing.metadata.detach]: the layout stays; the tape drops the history, and an argument's
    # caller tensor is detached when the call returns.
    t.detached = True
    return t
