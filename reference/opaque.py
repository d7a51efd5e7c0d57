"""Opaque custom ops: torch.library ops run through their own CPU kernel on reference values.

`r[ops.opaque.schema]`: the op's schema is the whole truth about its effects. Arguments annotated
`Tensor(a!)` are written (their storages take the kernel's bytes afterwards); an output annotated
`Tensor(a)` that the kernel returns on an argument's storage is a view of that argument; every
other output is fresh.
"""

from __future__ import annotations

import torch
import torch.utils._pytree as pytree

from .boundary import bytes_of, new_torch_storage, storage_from_torch, tensor_on
from .ledger import Ledger
from .storage import Layout, Storage, Tensor


def run_opaque(ledger: Ledger, overload: torch._ops.OpOverload, *args):
    torch_of: dict[int, torch.UntypedStorage] = {}
    storage_by_key: dict[int, Storage] = {}

    def to_torch(value):
        if not isinstance(value, Tensor):
            return value
        s = value.storage
        if id(s) not in torch_of:
            torch_of[id(s)] = new_torch_storage(s)
            storage_by_key[torch_of[id(s)]._cdata] = s
        return tensor_on(torch_of[id(s)], value.layout)

    schema = overload._schema
    positional, keyword = [], {}
    for argument, value in zip(schema.arguments, args, strict=True):
        converted = pytree.tree_map(to_torch, value)
        if argument.kwarg_only:
            keyword[argument.name] = converted
        else:
            positional.append(converted)
    result = overload(*positional, **keyword)

    for argument, value in zip(schema.arguments, args, strict=True):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        for cell in pytree.tree_leaves(value):
            if isinstance(cell, Tensor):
                written = bytes_of(torch_of[id(cell.storage)])
                old_nbytes = cell.storage.nbytes
                cell.storage.buffer = written
                if written.size != old_nbytes:
                    ledger.resized(cell.storage, old_nbytes)

    def from_torch(out):
        if not isinstance(out, torch.Tensor):
            return out
        st = out.untyped_storage()
        s = storage_by_key.get(st._cdata)
        return Tensor(s if s is not None else storage_from_torch(st), Layout.of(out))

    return pytree.tree_map(from_torch, result)
