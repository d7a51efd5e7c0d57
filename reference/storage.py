"""The reference storage model: storages, layouts and tensors (the ledger is `ledger.py`).

Written for clarity, not speed. This module defines what `specs/memory-model.md` says.

Conventions: `s` is a Storage, `t` a Tensor, `layout` a Layout, `n` a byte count.

A Storage is a byte buffer whose size can change (`r[memory.storage]`).
A Layout is how a tensor reads a storage: dtype, sizes, strides, offset (`r[memory.layout]`).
A Tensor is a mutable cell pairing a Storage with a Layout, like PyTorch's TensorImpl:
`set_` rebinds the cell in place, so every holder of the same tensor object sees the rebinding,
while other tensors on the old storage keep it (`r[aliasing.set.rebinds]`).
"""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import torch
from attrs import define, evolve, field, frozen

from aotspec.errors import SpecViolation, UnsupportedError

from .symbols import settled, settled_all

# ---------------------------------------------------------------- dtypes

NUMPY_DTYPES: dict[torch.dtype, np.dtype] = {
    torch.float64: np.dtype(np.float64),
    torch.float32: np.dtype(np.float32),
    torch.float16: np.dtype(np.float16),
    torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
    # r[memory.layout.complex]: a real part then an imaginary part, as in eager's storages
    torch.complex128: np.dtype(np.complex128),
    torch.complex64: np.dtype(np.complex64),
    # r[memory.layout.complex32]: numpy has no complex type of float16 halves; a pair holds them
    torch.complex32: np.dtype([("real", np.float16), ("imag", np.float16)]),
    torch.float8_e4m3fn: np.dtype(ml_dtypes.float8_e4m3fn),
    torch.float8_e5m2: np.dtype(ml_dtypes.float8_e5m2),
    torch.int64: np.dtype(np.int64),
    torch.int32: np.dtype(np.int32),
    torch.int16: np.dtype(np.int16),
    torch.int8: np.dtype(np.int8),
    # r[memory.layout.unsigned]: eager's unsigned integers of every width
    torch.uint64: np.dtype(np.uint64),
    torch.uint32: np.dtype(np.uint32),
    torch.uint16: np.dtype(np.uint16),
    torch.uint8: np.dtype(np.uint8),
    torch.bool: np.dtype(np.bool_),
}

#: r[memory.layout.unsigned]: the unsigned dtypes whose values are ATen's kernels' (eager has
#: kernels for few ops on them, and the table's numpy rules would compute where eager raises).
WIDE_UNSIGNED = frozenset({torch.uint16, torch.uint32, torch.uint64})

# r[ops.opmath]: reduced-precision floats are computed in float32 and rounded once to the result.
REDUCED_FLOATS = frozenset(
    {torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2}
)


def carries_gradients(dtype: torch.dtype) -> bool:
    """Only floating-point and complex values carry gradients (r[autograd.requires-grad])."""
    return dtype.is_floating_point or dtype.is_complex


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    if dtype not in NUMPY_DTYPES:
        supported = ", ".join(str(d) for d in NUMPY_DTYPES)
        raise UnsupportedError(
            f"dtype {dtype} is not in the reference's dtype table",
            rule="memory.layout",
            fix=f"use one of {supported}",
        )
    return NUMPY_DTYPES[dtype]


def _widened(stored: np.ndarray) -> np.ndarray:
    """Stored values as arrays of numpy's own types: r[memory.layout.complex32]: a complex32's
    float16 pairs read as complex64, which holds every one of them exactly."""
    if stored.dtype != NUMPY_DTYPES[torch.complex32]:
        return stored
    return stored["real"].astype(np.complex64) + 1j * stored["imag"].astype(np.complex64)


def _narrowed(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`values` cast to the stored `dtype`: r[memory.layout.complex32]: each part of a complex
    value rounded to float16 through float32, as eager's cast to complex32 rounds it."""
    if dtype != NUMPY_DTYPES[torch.complex32]:
        return values.astype(dtype)
    pairs = np.empty(values.shape, dtype=dtype)
    pairs["real"] = np.real(values).astype(np.float32)
    pairs["imag"] = np.imag(values).astype(np.float32)
    return pairs


# ---------------------------------------------------------------- storage

_storage_ids = itertools.count()


@define(eq=False)
class Storage:
    """A resizable byte buffer; tensors that share one alias each other (`r[memory.alias]`)."""

    buffer: np.ndarray = field(repr=lambda b: f"<{b.size} bytes>")  # r[memory.storage]
    id: int = field(factory=lambda: next(_storage_ids))

    @classmethod
    def zeros(cls, n: int) -> Storage:
        return cls(np.zeros(n, dtype=np.uint8))

    @property
    def nbytes(self) -> int:
        return self.buffer.size

    def resize(self, n: int) -> None:
        # r[resize.keeps-prefix]: the first min(old, new) bytes survive; new bytes are unspecified
        # (the reference zero-fills them, and no conforming program may read them).
        # r[resize.zero-then-back]: the buffer changes, the Storage object (its identity) stays.
        resized = np.zeros(n, dtype=np.uint8)
        kept = min(n, self.nbytes)
        resized[:kept] = self.buffer[:kept]
        self.buffer = resized


# ---------------------------------------------------------------- layout


def contiguous_strides(sizes: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for size in reversed(sizes):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


@frozen
class Layout:
    """How a tensor reads its storage: element `i` lives at `offset + sum(i_k * strides_k)`."""

    dtype: torch.dtype
    sizes: tuple[int, ...] = field(converter=settled_all)
    strides: tuple[int, ...] = field(converter=settled_all)
    offset: int = field(default=0, converter=settled)
    #: r[memory.layout.conj-neg]: the tensor reads the conjugate (`conj`) or the negation (`neg`)
    #: of what its storage holds, as eager's lazy `conj()` and `_neg_view` do.
    conj: bool = False
    neg: bool = False

    @classmethod
    def contiguous(cls, dtype: torch.dtype, sizes) -> Layout:
        sizes = tuple(sizes)
        return cls(dtype, sizes, contiguous_strides(sizes), 0)

    @classmethod
    def of(cls, t: torch.Tensor) -> Layout:
        offset = t.storage_offset()
        return cls(t.dtype, tuple(t.shape), tuple(t.stride()), offset, t.is_conj(), t.is_neg())

    @property
    def itemsize(self) -> int:
        return numpy_dtype(self.dtype).itemsize

    def numbers(self) -> tuple:
        """Its sizes, strides and offset: the numbers that are symbols in a symbolic plan."""
        return (*self.sizes, *self.strides, self.offset)

    def mapped(self, number) -> Layout:
        """This layout with `number` applied to each of its sizes, strides and offset."""
        sizes, strides = tuple(map(number, self.sizes)), tuple(map(number, self.strides))
        return evolve(self, sizes=sizes, strides=strides, offset=number(self.offset))

    @property
    def numel(self) -> int:
        return math.prod(self.sizes)

    def extent_elements(self) -> int:
        """Elements of the storage, from its start, that this layout can touch."""
        # r[memory.extent]
        if self.numel == 0:
            return 0
        return (
            self.offset
            + sum((n - 1) * s for n, s in zip(self.sizes, self.strides, strict=True))
            + 1
        )

    def extent_bytes(self) -> int:
        return self.extent_elements() * self.itemsize

    def addresses_like(self, other: Layout) -> bool:
        """Same dtype, sizes, offset, and strides wherever a stride moves (size > 1).

        Strides of size-1 dims address nothing; eager's view and its meta kernel disagree on them
        (eager `empty_strided((1,), (2,)).view(1, 1)` has strides (2, 2), the meta kernel (1, 1)).
        """
        if (self.dtype, self.sizes, self.offset) != (other.dtype, other.sizes, other.offset):
            return False
        pairs = zip(self.sizes, self.strides, other.strides, strict=True)
        # r[memory.layout.unaddressed-strides]: strides of size-1 dims are not compared.
        return all(mine == theirs for size, mine, theirs in pairs if size > 1)

    def locations(self) -> np.ndarray:
        """The storage elements this layout reads, each once, in increasing order."""
        offsets = np.array(self.offset)
        for n, s in zip(self.sizes, self.strides, strict=True):
            offsets = offsets[..., None] + np.arange(n) * s
        return np.unique(offsets)

    def byte_span(self) -> tuple[int, int]:
        """The bytes of the storage this layout can touch: [first, last) (empty for no element)."""
        if self.numel == 0:
            return (0, 0)
        steps = zip(self.sizes, self.strides, strict=True)
        first = self.offset + sum((n - 1) * s for n, s in steps if s < 0)
        return (first * self.itemsize, self.extent_bytes())

    def overlaps(self, other: Layout) -> bool:
        """Some byte of the storage is read by both layouts."""
        (a, b), (c, d) = self.byte_span(), other.byte_span()
        if b <= c or d <= a:
            return False
        if self.addresses_like(other):
            # the same elements: decided without listing them, which symbolic sizes cannot
            # (r[sizes.symbolic.decisions])
            return self.numel != 0
        return bool(np.intersect1d(self._bytes(), other._bytes(), assume_unique=True).size)

    def _bytes(self) -> np.ndarray:
        return (self.locations()[:, None] * self.itemsize + np.arange(self.itemsize)).ravel()

    def has_internal_overlap(self) -> bool:
        """True when two distinct elements share a memory location (an `expand`ed layout)."""
        if self.numel == 0:
            return False
        return any(s == 0 and n > 1 for n, s in zip(self.sizes, self.strides, strict=True))


# ---------------------------------------------------------------- tensor


@define(eq=False)
class Tensor:
    """A mutable cell: a storage read through a layout. `set_` rebinds both in place."""

    storage: Storage
    layout: Layout
    name: str = ""
    #: `detach_()` was applied to it (`r[aliasing.metadata.detach]`): an argument's caller
    #: tensor takes it too.
    detached: bool = False

    @property
    def dtype(self) -> torch.dtype:
        return self.layout.dtype

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.layout.sizes

    def _array_view(self, *, writeable: bool) -> np.ndarray:
        layout = self.layout
        needed = layout.extent_bytes()
        if needed > self.storage.nbytes:
            # r[memory.access-in-bounds]
            action = "write" if writeable else "read"
            raise SpecViolation(
                f"{action} of tensor {self.name or '<unnamed>'} (sizes {layout.sizes}, strides "
                f"{layout.strides}, offset {layout.offset}, {layout.dtype}) needs {needed} bytes "
                f"but its storage holds {self.storage.nbytes}",
                rule="memory.access-in-bounds",
                fix="resize the storage up (resize_storage_bytes_) and fill it with copy_ before "
                "using the tensor; eager PyTorch on CPU segfaults here",
            )
        dtype = numpy_dtype(layout.dtype)
        if layout.numel == 0:
            return np.empty(layout.sizes, dtype=dtype)
        # Strided through raw items of the item's size, then read as the dtype: numpy's
        # as_strided cannot name some ml_dtypes types (float8_e5m2) in its array interface, and
        # numpy has no 16-byte unsigned integer to carry a complex128.
        carrier = np.dtype(f"V{dtype.itemsize}")
        flat = self.storage.buffer[: layout.extent_elements() * dtype.itemsize].view(carrier)
        return np.lib.stride_tricks.as_strided(
            flat[layout.offset :],
            shape=layout.sizes,
            strides=tuple(s * dtype.itemsize for s in layout.strides),
            writeable=writeable,
        ).view(dtype)

    def check_readable(self) -> None:
        """SpecViolation unless the layout reads within the storage
        (`r[memory.access-in-bounds]`)."""
        self._array_view(writeable=False)

    def read(self) -> np.ndarray:
        """A copy of the tensor's values."""
        return self._lazy(_widened(np.array(self._array_view(writeable=False), copy=True)))

    def _lazy(self, values: np.ndarray) -> np.ndarray:
        """r[memory.layout.conj-neg]: the stored values conjugated and negated as the layout
        says; each is its own inverse, so the same turns values to write into stored ones."""
        if self.layout.conj:
            values = np.conjugate(values)
        return np.negative(values) if self.layout.neg else values

    def write(self, values: np.ndarray, *, fresh: bool = False) -> None:
        """Store `values` (broadcast, cast to the tensor's dtype) through the layout; `fresh`: the
        tensor is an op's new output, which may overlap itself (`r[ops.fresh-output]`)."""
        if self.layout.has_internal_overlap() and not fresh:
            # r[aliasing.inplace.no-overlapping-write]: eager's error, in eager's words.
            raise RuntimeError(
                "unsupported operation: more than one element of the written-to tensor refers to "
                "a single memory location. Please clone() the tensor before performing the "
                "operation."
            )
        view = self._array_view(writeable=True)
        stored = _narrowed(self._lazy(np.asarray(values)), view.dtype)
        view[...] = np.broadcast_to(stored, view.shape)


@define(eq=False)
class SparseCoo:
    """r[ops.aten-values.sparse-gradient]: the sparse COO value an ATen kernel gave: its indices
    and its values, each a strided tensor on a storage of its own, and its sizes."""

    indices: Tensor
    values: Tensor
    sizes: tuple[int, ...] = field(converter=tuple)
    #: Whether the kernel said its indices are sorted without duplicates (it says so of few).
    coalesced: bool = False

    @property
    def parts(self) -> tuple[Tensor, Tensor]:
        return (self.indices, self.values)

    @property
    def layout(self) -> Layout:
        """The strided layout PyTorch's meta kernel gives the value, which graphs traced on it
        (a derivative rule, the sum of two gradients) see."""
        return Layout.contiguous(self.values.dtype, self.sizes)
