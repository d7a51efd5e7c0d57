"""Sparse tensors a program makes from strided parts, as capture records them
(`specs/memory-model.md`, `r[memory.layout.sparse-made-inside]`).

PyTorch's fake tensors cannot make a sparse CSR tensor (the meta kernel of its constructor fails),
and a graph value has strides, which a sparse tensor has not. So while a function is traced,
`torch.sparse_coo_tensor` and `torch.sparse_csr_tensor` give a `SparseMadeInside`: the parts the
caller gave (as eager's constructors do: the sparse tensor reads its arguments' storages, no copy)
and the size. Its `to_dense()` is recorded as strided ops on the parts; nothing else may read it.

Conventions: `shape` is the sparse tensor's sizes, its values' dense dims included.
"""

from __future__ import annotations

import torch
from attrs import frozen

from aotspec.errors import UnsupportedError


def _refuse(what: str) -> UnsupportedError:
    """r[memory.layout.sparse-made-inside.no-escape]"""
    return UnsupportedError(
        f"{what} a sparse tensor the function made: only its to_dense() is defined inside a "
        "compiled function",
        rule="memory.layout.sparse-made-inside.no-escape",
        fix="call to_dense() on it and compute on the dense tensor, or make and use the sparse "
        "tensor outside the compiled function",
    )


@frozen
class SparseMadeInside:
    """r[memory.layout.sparse-made-inside]: a sparse tensor of `layout` and `shape` that reads
    its strided parts: `index_parts`, COO `(indices,)` or CSR `(crow_indices, col_indices)`,
    and `value_part`. Named apart from eager's methods (`values()`), which are refused."""

    layout: torch.layout
    index_parts: tuple[torch.Tensor, ...]
    value_part: torch.Tensor
    shape: torch.Size

    @property
    def dtype(self) -> torch.dtype:
        return self.value_part.dtype

    def to_dense(self) -> torch.Tensor:
        """r[memory.layout.sparse-made-inside.to-dense]: zeros of the size, each value added at
        its position (duplicate COO positions sum, as eager's `to_dense` sums them); a CSR
        value's row is found from the compressed rows."""
        if self.layout == torch.sparse_csr:
            positions = torch._convert_indices_from_csr_to_coo(*self.index_parts)
        else:
            positions = self.index_parts[0]
        zeros = torch.zeros(self.shape, dtype=self.dtype, device=self.value_part.device)
        return torch.index_put(zeros, tuple(positions), self.value_part, accumulate=True)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise _refuse(f"{getattr(func, '__name__', func)}() reads")

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise _refuse(f".{name} of")


def _size(size) -> torch.Size:
    if size is None:
        raise UnsupportedError(
            "a sparse tensor made without a size: eager infers it from the indices' values, "
            "which a compiled program does not read",
            rule="memory.layout.sparse-made-inside",
            fix="pass size=(...) to the constructor",
        )
    return torch.Size(size)


def _check_kwargs(constructor: str, kwargs: dict) -> None:
    """r[memory.layout.sparse-made-inside]: the size and the values' dtype, nothing else."""
    others = sorted(set(kwargs) - {"dtype"})
    if others:
        raise UnsupportedError(
            f"torch.{constructor}() with {', '.join(others)}",
            rule="memory.layout.sparse-made-inside",
            fix="pass the parts, the size and at most dtype=",
        )


def _values(values: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """The values the sparse tensor reads: the argument itself, or, for another `dtype`, a copy
    cast to it (eager's constructor copies then too)."""
    return values if dtype is None else values.to(dtype)


def coo_tensor(indices, values, size=None, **kwargs) -> SparseMadeInside:
    """r[memory.layout.sparse-made-inside]: `torch.sparse_coo_tensor(indices, values, size)`."""
    _check_kwargs("sparse_coo_tensor", kwargs)
    shape = _size(size)
    sparse_dims = indices.shape[0] if indices.dim() == 2 else -1
    torch._check(
        indices.dim() == 2 and indices.shape[1] == values.shape[0],
        lambda: f"indices of shape {list(indices.shape)} do not index {values.shape[0]} values",
    )
    torch._check(
        len(shape) == sparse_dims + values.dim() - 1 and shape[sparse_dims:] == values.shape[1:],
        lambda: (
            f"size {list(shape)} does not fit indices {list(indices.shape)} and values "
            f"{list(values.shape)}"
        ),
    )
    # r[memory.layout.sparse-made-inside]: eager's COO indices are int64, others copied to it
    indices = indices.to(torch.int64)
    return SparseMadeInside(
        torch.sparse_coo, (indices,), _values(values, kwargs.get("dtype")), shape
    )


def csr_tensor(crow_indices, col_indices, values, size=None, **kwargs) -> SparseMadeInside:
    """r[memory.layout.sparse-made-inside]:
    `torch.sparse_csr_tensor(crow_indices, col_indices, values, size)`, unbatched."""
    _check_kwargs("sparse_csr_tensor", kwargs)
    shape = _size(size)
    torch._check(
        crow_indices.dim() == 1 and col_indices.dim() == 1,
        lambda: "a batched CSR tensor (indices of more than one dim)",
    )
    torch._check(
        len(shape) >= 2 and crow_indices.shape[0] == shape[0] + 1,
        lambda: f"{crow_indices.shape[0]} compressed rows for size {list(shape)}",
    )
    torch._check(
        col_indices.shape[0] == values.shape[0] and shape[2:] == values.shape[1:],
        lambda: (
            f"{col_indices.shape[0]} column indices for values {list(values.shape)} and "
            f"size {list(shape)}"
        ),
    )
    indices = (crow_indices, col_indices)
    return SparseMadeInside(torch.sparse_csr, indices, _values(values, kwargs.get("dtype")), shape)


#: By function name: the sparse constructors a traced function may call.
CONSTRUCTORS = {"sparse_coo_tensor": coo_tensor, "sparse_csr_tensor": csr_tensor}
