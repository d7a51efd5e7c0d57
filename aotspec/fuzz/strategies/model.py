"""The generators' symbolic model of a program's tensors, and the views they draw.

A `Model` follows every tensor object (storage, sizes, strides, offset) and every storage (bytes
now, bytes when full) while a program is drawn, and answers what eager PyTorch accepts next:
what is readable, writable, may be read while writing what. Layouts of views and pointwise
results come from PyTorch's meta kernels (they may differ from eager only in strides that
address nothing, which validity never depends on).

Generates views: `draw_view` draws a view op that eager accepts on a layout, its arguments, and
the layouts of its results (`as_strided`-based views only of tensors in bounds of their storage,
as eager's setStorage check raises otherwise; `view` and viewable `reshape` of any tensor); and
`draw_relayout` an in-place metadata op (`t_`, `as_strided_`, ...) that eager accepts on a tensor
in bounds of its storage, its arguments, and the layout it leaves.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import torch
from attrs import define, field, frozen
from hypothesis import strategies as st

from .program import OPS
from .sampling import sampled_from

ITEMSIZE = 4  # every tensor here is float32
#: The constants both generators draw as a scalar operand.
SCALARS = [2.0, -1.0, 0.5, 3.0, 0.0]
#: Non-finite constants, drawn apart and less often (see `draw_scalar`).
SPECIAL_SCALARS = [-math.inf, math.inf, math.nan]
#: clamp's bounds at the edges: min > max (max everywhere), infinite, one of them only.
EDGE_CLAMPS = [(1.0, -1.0), (0.5, 0.0), (-math.inf, 0.5), (-1.0, math.inf), (math.inf, None)]


def draw_scalar(draw) -> float:
    """One of SCALARS, or one time in eight a non-finite one."""
    if draw(sampled_from([False] * 7 + [True])):
        return draw(sampled_from(SPECIAL_SCALARS))
    return draw(sampled_from(SCALARS))


@frozen
class Strided:
    """Sizes, strides (in elements) and storage offset of a float32 tensor."""

    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @classmethod
    def contiguous(cls, sizes) -> Strided:
        return cls.of(torch.empty(sizes, device="meta"))

    @classmethod
    def of(cls, t: torch.Tensor) -> Strided:
        return cls(tuple(t.shape), tuple(t.stride()), t.storage_offset())

    # cached: the draws ask them of the same layouts again and again
    @functools.cached_property
    def numel(self) -> int:
        return math.prod(self.sizes)

    @functools.cached_property
    def extent_bytes(self) -> int:
        if self.numel == 0:
            return 0
        steps = zip(self.sizes, self.strides, strict=True)
        return (self.offset + sum((n - 1) * s for n, s in steps) + 1) * ITEMSIZE

    def meta(self) -> torch.Tensor:
        """A meta tensor with this layout, for PyTorch's own shape and stride rules."""
        room = torch.empty(max(self.extent_bytes // ITEMSIZE, 1), device="meta")
        return room.as_strided(self.sizes, self.strides, self.offset)

    def footprint(self) -> np.ndarray:
        """The storage elements this layout reads, one per element (repeats if overlapping)."""
        addresses = np.array(self.offset)
        for n, s in zip(self.sizes, self.strides, strict=True):
            addresses = addresses[..., None] + np.arange(n) * s
        return addresses.ravel()

    def overlaps_itself(self) -> bool:
        return _overlaps_itself(self)


@functools.lru_cache(maxsize=4096)
def _overlaps_itself(lay: Strided) -> bool:
    """Whether two elements of `lay` share an address; cached, as the draws of a campaign ask it
    of the same few layouts thousands of times."""
    footprint = lay.footprint()
    return np.unique(footprint).size != footprint.size


@define
class _Storage:
    full: int  # bytes while allocated
    nbytes: int  # bytes now: `full`, or 0 after a resize to zero
    # The rest is for programs with backward (`grad_programs`); a storage there is one view
    # family, so these hold for every tensor on it.
    caller: bool = False  # an argument's storage
    requires_grad: bool = False
    #: Autograd saved a tensor on it for the backward: writing it now makes eager's backward
    #: raise ("modified by an inplace operation"), so nothing writes it any more.
    saved: bool = False
    positive: bool = False  # every value on it is > 0 (log and fractional powers may read it)
    #: Distinct argument objects on it that require grad: a write under torch.no_grad() into an
    #: argument's storage needs at least one, whose contents the written values become, each
    #: for reads through it (r[autograd.no-grad-input-writes.identity]).
    grad_args: int = 0
    #: Distinct argument objects on it: a write that gives it a history needs exactly one
    #: (r[autograd.input-writes.aliased]), or all of them views of one base, none detached and
    #: none relaid out (r[autograd.input-writes.synthetic-base]).
    args: int = 0
    #: Distinct argument objects on it that are detached aliases (no `._base`).
    detached_args: int = 0
    #: An in-place metadata op changed the layout of a tensor on it.
    relaid: bool = False
    #: An argument storage of a leaf that requires grad: eager forbids writing it, or a view of
    #: it, with grad mode on.
    leaf: bool = False


@define
class _Object:
    """A tensor object: `set_` changes its storage and layout for every name bound to it."""

    storage: int
    lay: Strided
    param: bool = False  # an object the caller passed
    rebound: bool = False  # set_ or an in-place metadata op moved it (storage or layout)
    detached: bool = False  # made from a detach()ed alias: requires no grad, whatever its storage
    no_grad_view: bool = False  # a view made under torch.no_grad() (grad programs)
    #: Grad programs: made before a write gave its storage its first history. Eager keeps such
    #: a view's history unset until something reads it, and an in-place op with grad mode on
    #: then takes it for a leaf that requires grad and raises; no such op is drawn.
    stale: bool = False


@define
class Model:
    storages: list[_Storage] = field(factory=list)
    objects: list[_Object] = field(factory=list)
    names: dict[str, int] = field(factory=dict)  # variable -> object
    counter: itertools.count = field(factory=itertools.count)
    #: Draw only what `aotspec.compile` accepts (specs/storage-resize.md, "In compiled programs").
    compiled: bool = False
    #: Boolean masks of programs with backward (for `where`), by name: their layouts (a
    #: comparison lays its result out in its input's order, which `where` then follows).
    masks: dict[str, Strided] = field(factory=dict)
    #: The caller's grad mode (programs with backward): under torch.no_grad() no in-place
    #: metadata op changes a tensor that requires grad (r[autograd.no-grad-metadata]).
    grad_enabled: bool = True

    def new_storage(self, nbytes: int, **flags) -> int:
        self.storages.append(_Storage(nbytes, nbytes, **flags))
        return len(self.storages) - 1

    def bind(self, name: str, storage: int, lay: Strided, param: bool = False) -> None:
        self.objects.append(_Object(storage, lay, param))
        self.names[name] = len(self.objects) - 1

    def new_name(self) -> str:
        return f"v{next(self.counter)}"

    def obj(self, v: str) -> _Object:
        return self.objects[self.names[v]]

    def lay(self, v: str) -> Strided:
        return self.obj(v).lay

    def storage(self, v: str) -> _Storage:
        return self.storages[self.obj(v).storage]

    def in_bounds(self, v: str) -> bool:
        """Readable: between instructions a storage is full and holds values, or has 0 bytes."""
        return self.lay(v).extent_bytes <= self.storage(v).nbytes

    def readable(self, v: str) -> bool:
        return self.in_bounds(v)

    def writable(self, v: str) -> bool:
        return self.in_bounds(v) and not self.lay(v).overlaps_itself()

    def may_read_while_writing(self, src: str, dst: str) -> bool:
        """Eager's overlap rule, made strict: disjoint memory, or exactly dst's layout."""
        a, b = self.obj(src), self.obj(dst)
        if a.storage != b.storage or a.lay == b.lay:
            return True
        return np.intersect1d(a.lay.footprint(), b.lay.footprint()).size == 0

    def covers_storage(self, v: str) -> bool:
        """Writing `v` overwrites every byte of its storage when full."""
        lay, s = self.lay(v), self.storage(v)
        return (
            lay.numel * ITEMSIZE == s.full
            and lay.extent_bytes <= s.full
            and not lay.overlaps_itself()
        )

    def readable_names(self) -> list[str]:
        return [v for v in self.names if self.readable(v)]


@functools.lru_cache(maxsize=4096)
def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return tuple(torch.broadcast_shapes(tuple(shape), tuple(target))) == tuple(target)
    except RuntimeError:
        return False


@functools.lru_cache(maxsize=4096)
def broadcastable(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    try:
        torch.broadcast_shapes(tuple(a), tuple(b))
    except RuntimeError:
        return False
    return True


def copy_sources(model: Model, dst: str) -> list[str]:
    """Readable tensors that broadcast to dst's shape and that eager lets us read into dst."""
    shape = model.lay(dst).sizes
    return [
        v
        for v in model.readable_names()
        if _broadcasts_to(model.lay(v).sizes, shape) and model.may_read_while_writing(v, dst)
    ]


def _shapes_of(numel: int) -> list[tuple[int, ...]]:
    """Shapes of rank 1 to 3 holding `numel` elements."""
    if numel == 0:
        return [(0,), (1, 0), (0, 2)]
    divisors = [d for d in range(1, numel + 1) if numel % d == 0]
    shapes = [(numel,)]
    shapes += [(d, numel // d) for d in divisors]
    pairs = itertools.product(divisors, divisors)
    shapes += [(a, b, numel // (a * b)) for a, b in pairs if numel % (a * b) == 0]
    return shapes


# ---------------------------------------------------------------- drawing views


def view_ops(lay: Strided, in_bounds: bool) -> list[str]:
    """View ops that eager accepts on this tensor: as_strided-based ones need it in bounds."""
    ops = ["view", "reshape"]
    if not in_bounds:
        return ops
    ndim = len(lay.sizes)
    ops += ["unsqueeze", "expand"]
    if ndim <= 2:
        ops.append("t")
    if ndim >= 1:
        ops += ["slice", "split"]
        if any(n > 0 for n in lay.sizes):
            ops.append("select")
    if ndim >= 2:
        ops += ["transpose", "permute"]
    return ops


@functools.cache
def viewable(lay: Strided, shape) -> bool:
    try:
        lay.meta().view(shape)
    except RuntimeError:
        return False
    return True


def draw_view_args(draw, op: str, lay: Strided, may_copy: bool) -> tuple:
    sizes, ndim = lay.sizes, len(lay.sizes)
    dim = st.integers(0, max(ndim - 1, 0))
    if op in ("view", "reshape"):
        shapes = _shapes_of(lay.numel)
        if op == "view" or not may_copy:
            # reshape copies (so reads) when no view exists.
            shapes = [s for s in shapes if viewable(lay, s)]
        if not shapes:  # rank above 3 and nothing else viewable: flatten a size-1 dim away
            shapes = [tuple(n for n in sizes if n != 1) or (1,)]
        return (draw(sampled_from(shapes)),)
    if op == "t":
        return ()
    if op == "transpose":
        return (draw(dim), draw(dim))
    if op == "permute":
        return (tuple(draw(st.permutations(range(ndim)))),)
    if op == "slice":
        d = draw(dim)
        start = draw(st.integers(0, sizes[d]))
        stop = draw(st.integers(start, sizes[d]))
        return (d, start, stop, draw(st.integers(1, 3)))
    if op == "select":
        d = draw(sampled_from([d for d in range(ndim) if sizes[d] > 0]))
        return (d, draw(st.integers(-sizes[d], sizes[d] - 1)))
    if op == "unsqueeze":
        return (draw(st.integers(-ndim - 1, ndim)),)
    if op == "expand":
        grown = tuple(draw(sampled_from([1, 2, 3])) if n == 1 else n for n in sizes)
        lead = draw(st.lists(sampled_from([1, 2]), max_size=1))
        return (tuple(lead) + grown,)
    if op == "split":
        d = draw(dim)
        return (draw(st.integers(1, max(sizes[d], 1))), d)
    raise AssertionError(f"not a view op: {op}")


def apply_view(op: str, lay: Strided, args: tuple) -> list[Strided]:
    return list(_view_layouts(op, lay, args))


@functools.lru_cache(maxsize=4096, typed=True)
def _view_layouts(op: str, lay: Strided, args: tuple) -> tuple[Strided, ...]:
    """The layouts of the results of view op `op` on a tensor laid out as `lay`, by PyTorch's
    meta kernels; remembered, as programs take the same views of a few layouts again and again
    (and the same layout objects make the same `sampled_from` strategy)."""
    result = OPS[op].run(lay.meta(), *args)
    results = result if isinstance(result, tuple) else (result,)
    return tuple(Strided.of(t) for t in results)


def draw_view(draw, lay: Strided, in_bounds: bool, may_copy: bool):
    """A view op applicable to `lay`, its arguments, and the layouts of its results."""
    op = draw(sampled_from(view_ops(lay, in_bounds)))
    args = draw_view_args(draw, op, lay, may_copy=may_copy)
    return op, args, apply_view(op, lay, args)


# ---------------------------------------------------------------- in-place metadata ops

#: In-place metadata ops, each with the view op whose layout it gives (as_strided_: see below).
RELAYOUTS = {
    "t_": "t",
    "transpose_": "transpose",
    "swapdims_": "transpose",
    "unsqueeze_": "unsqueeze",
    "squeeze_": "squeeze",
    "as_strided_": None,
}


def relayout_ops(lay: Strided) -> list[str]:
    """The in-place metadata ops eager accepts on a tensor in bounds of its storage."""
    ndim = len(lay.sizes)
    ops = ["unsqueeze_", "squeeze_", "as_strided_", "resize_"]
    if ndim <= 2:
        ops.append("t_")
    if ndim >= 2:
        ops += ["transpose_", "swapdims_"]
    return ops


def draw_relayout(draw, op: str, lay: Strided, storage_bytes: int) -> tuple[tuple, Strided]:
    """The arguments of `x.op(...)` on a tensor laid out as `lay`, in bounds of its storage of
    `storage_bytes`, and the layout it leaves x in. as_strided_ takes the layout of a view of the
    whole storage seen as one dim, so it stays in bounds."""
    ndim = len(lay.sizes)
    if op == "as_strided_":
        whole = Strided.contiguous((storage_bytes // ITEMSIZE,))
        _, _, results = draw_view(draw, whole, in_bounds=True, may_copy=False)
        new = draw(sampled_from(results))
        return (new.sizes, new.strides, new.offset), new
    if op == "resize_":
        # r[aliasing.resize.relayout]: contiguous from the offset, within the storage (growing it
        # would leave bytes eager does not initialize)
        room = max(storage_bytes // ITEMSIZE - lay.offset, 0)
        sizes = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
        sizes = sizes if math.prod(sizes) <= room else (room,)
        new = Strided(sizes, Strided.contiguous(sizes).strides, lay.offset)
        return (sizes,), new
    if op == "squeeze_":
        dims = [(d,) for d in range(ndim)] + [(tuple(range(ndim)),)] * (ndim > 0)
        args = draw(sampled_from([(), *dims]))
    else:
        args = draw_view_args(draw, RELAYOUTS[op], lay, may_copy=False)
    (new,) = apply_view(RELAYOUTS[op], lay, args)
    return args, new
