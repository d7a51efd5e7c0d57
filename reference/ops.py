"""The reference op table's entries: value rules in numpy, view rules on layouts.

Conventions: `x`, `y` are numpy arrays (the op's `self` and `other`), `layout` is the input's Layout,
`dims` a list of dimensions. Rules follow the aten schema's argument order; arguments that do not
change the values (layout, device, pin_memory, memory_format) are named `*_` and ignored, because
fresh outputs take their dtype and strides from the captured meta value (`r[ops.fresh-output]`).

Rules for `copy_`, `set_` and `resize_storage_bytes_` live in `reference/effects.py`.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import torch

from .optable import compute, inplace, view
from .storage import REDUCED_FLOATS, Layout, contiguous_strides, numpy_dtype

aten = torch.ops.aten


def _dim(dim: int, ndim: int) -> int:
    """Wrap a possibly negative dim; a 0-dim tensor accepts 0 and -1, like PyTorch."""
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    return dim % rank


def _axes(dims, ndim: int):
    """Reduction axes for numpy: None (every dim) for an empty or missing dim list or a 0-dim x."""
    if dims is None or len(dims) == 0 or ndim == 0:
        return None
    return tuple(sorted({_dim(d, ndim) for d in dims}))


# ---------------------------------------------------------------- pointwise unary

_erf = np.frompyfunc(math.erf, 1, 1)


@compute(aten.abs.default)
def abs_(x):
    return np.abs(x)


@compute(aten.neg.default)
def neg(x):
    return np.negative(x)


@compute(aten.exp.default)
def exp(x):
    return np.exp(x)


@compute(aten.log.default)
def log(x):
    return np.log(x)


@compute(aten.log1p.default)
def log1p(x):
    return np.log1p(x)


@compute(aten.expm1.default)
def expm1(x):
    return np.expm1(x)


@compute(aten.log2.default)
def log2(x):
    return np.log2(x)


@compute(aten.log10.default)
def log10(x):
    return np.log10(x)


@compute(aten.exp2.default)
def exp2(x):
    return np.exp2(x)


@compute(aten.sin.default)
def sin(x):
    return np.sin(x)


@compute(aten.cos.default)
def cos(x):
    return np.cos(x)


@compute(aten.tan.default)
def tan(x):
    return np.tan(x)


@compute(aten.tanh.default)
def tanh(x):
    return np.tanh(x)


@compute(aten.sigmoid.default)
def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


@compute(aten.relu.default)
def relu(x):
    # PyTorch's relu is clamp_min(x, 0), which keeps NaN; np.maximum does too.
    return np.maximum(x, 0)


@compute(aten.sqrt.default)
def sqrt(x):
    return np.sqrt(x)


@compute(aten.rsqrt.default)
def rsqrt(x):
    return 1.0 / np.sqrt(x)


@compute(aten.reciprocal.default)
def reciprocal(x):
    return 1.0 / x


@compute(aten.erf.default)
def erf(x):
    return np.asarray(_erf(x), dtype=np.float64)


@compute(aten.sign.default)
def sign(x):
    # PyTorch computes (0 < x) - (x < 0), so sign(NaN) is 0 where np.sign gives NaN.
    return np.greater(x, 0).astype(np.int8) - np.less(x, 0).astype(np.int8)


@compute(aten.floor.default)
def floor(x):
    return np.floor(x)


@compute(aten.ceil.default)
def ceil(x):
    return np.ceil(x)


@compute(aten.trunc.default)
def trunc(x):
    return np.trunc(x)


@compute(aten.round.default)
def round_(x):
    # Halves round to even, in PyTorch (nearbyint) as in numpy.
    return np.round(x)


@compute(aten.isnan.default)
def isnan(x):
    return np.isnan(x)


@compute(aten.logical_not.default)
def logical_not(x):
    return np.logical_not(x)


@compute(aten.bitwise_not.default)
def bitwise_not(x):
    return np.invert(x)


# ---------------------------------------------------------------- pointwise binary


@compute(aten.add.Tensor, aten.add.Scalar)
def add(x, y, alpha):
    return x + alpha * y if alpha != 1 else x + y


@compute(aten.sub.Tensor, aten.sub.Scalar)
def sub(x, y, alpha):
    return x - alpha * y if alpha != 1 else x - y


@compute(aten.mul.Tensor, aten.mul.Scalar)
def mul(x, y):
    return x * y


@compute(aten.div.Tensor, aten.div.Scalar)
def div(x, y):
    return np.true_divide(x, y)


@compute(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(x, y, rounding_mode):
    # r[ops.opmath] holds for trunc too, although PyTorch's CPU kernel rounds a float16 or
    # bfloat16 quotient to the dtype before truncating it (float64 agrees with the reference).
    if rounding_mode == "floor":
        return floor_divide(x, y)
    quotient = np.true_divide(x, y)
    return np.trunc(quotient) if rounding_mode == "trunc" else quotient


@compute(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(x, y):
    # Not floor(x / y): like Python's //, PyTorch (div_floor_floating) and numpy derive the
    # quotient from fmod, so 1.0 // 0.1 is 9.0 although 1.0 / 0.1 rounds to 10.0.
    return np.floor_divide(x, y)


@compute(aten.remainder.Tensor, aten.remainder.Scalar)
def remainder(x, y):
    # Python's %: the result takes the sign of y, in PyTorch as in numpy.
    return np.remainder(x, y)


@compute(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar)
def pow_(x, exponent):
    return np.power(x, exponent)


@compute(aten.maximum.default)
def maximum(x, y):
    return np.maximum(x, y)


@compute(aten.minimum.default)
def minimum(x, y):
    return np.minimum(x, y)


@compute(aten.clamp.default, aten.clamp.Tensor)
def clamp(x, low, high):
    # PyTorch applies min then max, so min > max gives max everywhere.
    if low is not None:
        x = np.maximum(x, low)
    if high is not None:
        x = np.minimum(x, high)
    return x


@compute(aten.clamp_min.default)
def clamp_min(x, low):
    return np.maximum(x, low)


@compute(aten.clamp_max.default)
def clamp_max(x, high):
    return np.minimum(x, high)


@compute(aten.where.self)
def where(condition, x, y):
    return np.where(condition.astype(bool), x, y)


@compute(aten.logical_and.default)
def logical_and(x, y):
    return np.logical_and(x, y)


@compute(aten.logical_or.default)
def logical_or(x, y):
    return np.logical_or(x, y)


@compute(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar)
def bitwise_and(x, y):
    return np.bitwise_and(x, y)


@compute(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar)
def bitwise_or(x, y):
    return np.bitwise_or(x, y)


@compute(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar)
def bitwise_xor(x, y):
    return np.bitwise_xor(x, y)


@compute(aten.eq.Tensor, aten.eq.Scalar)
def eq(x, y):
    return np.equal(x, y)


@compute(aten.ne.Tensor, aten.ne.Scalar)
def ne(x, y):
    return np.not_equal(x, y)


@compute(aten.lt.Tensor, aten.lt.Scalar)
def lt(x, y):
    return np.less(x, y)


@compute(aten.le.Tensor, aten.le.Scalar)
def le(x, y):
    return np.less_equal(x, y)


@compute(aten.gt.Tensor, aten.gt.Scalar)
def gt(x, y):
    return np.greater(x, y)


@compute(aten.ge.Tensor, aten.ge.Scalar)
def ge(x, y):
    return np.greater_equal(x, y)


@compute(aten.threshold_backward.default)
def threshold_backward(grad, x, threshold):
    return np.where(x <= threshold, np.zeros_like(grad), grad)


# ---------------------------------------------------------------- copies and casts


@compute(aten._to_copy.default)
def to_copy(x, dtype, *_):
    # The cast itself is the final rounding to the meta dtype (r[ops.fresh-output]), with two
    # PyTorch conversion rules numpy's cast lacks: reduced floats are converted from float32
    # (c10::Half(float)), so a float64 value rounds twice; and float8_e4m3fn saturates at its
    # largest finite value, infinities included, where numpy gives NaN.
    if dtype in REDUCED_FLOATS:
        x = x.astype(np.float32)
    if dtype == torch.float8_e4m3fn:
        x = np.clip(x, -448.0, 448.0)
    return x


@compute(aten.clone.default, aten.lift_fresh_copy.default)
def clone(x, *_):
    return x


@compute(aten.copy.default)
def copy(x, src, non_blocking):
    return np.broadcast_to(src, x.shape)


@compute(aten.cat.default)
def cat(tensors, dim):
    # Legacy rule kept by PyTorch: 1-D empty tensors are skipped whatever their shape.
    kept = [t for t in tensors if not (t.ndim == 1 and t.size == 0)]
    if not kept:
        return tensors[0]
    return np.concatenate(kept, axis=_dim(dim, kept[0].ndim))


@compute(aten.as_strided_scatter.default)
def as_strided_scatter(x, src, size, stride, storage_offset):
    # A copy of x (contiguous, as its clone is) with src written where as_strided(copy, size,
    # stride, storage_offset) reads: how functionalization expresses a write through a layout.
    out = np.array(x, copy=True, order="C")
    flat = out.reshape(-1)
    itemsize = flat.dtype.itemsize
    offset = 0 if storage_offset is None else storage_offset
    window = np.lib.stride_tricks.as_strided(flat[offset:], size, [s * itemsize for s in stride])
    window[...] = src
    return out


@compute(aten.index_put.default)
def index_put(x, indices, values, accumulate):
    # With accumulate, repeated indices add up (np.add.at), which a plain assignment would not.
    out = np.array(x, copy=True)
    index = tuple(slice(None) if i is None else i for i in indices)
    if accumulate:
        np.add.at(out, index, values)
    else:
        out[index] = values
    return out


# ---------------------------------------------------------------- matmuls


@compute(aten.mm.default, aten.bmm.default)
def matmul(x, y):
    return np.matmul(x, y)


@compute(aten.addmm.default)
def addmm(bias, x, y, beta, alpha):
    product = np.matmul(x, y)
    # With beta == 0 the bias is ignored, NaNs included.
    return alpha * product if beta == 0 else beta * bias + alpha * product


# ---------------------------------------------------------------- reductions


def _accumulate(x, dtype):
    """`x` in the reduction's `dtype=` argument, its accumulation type (r[ops.opmath])."""
    if dtype is None:
        return x
    return x.astype(np.float32 if dtype in REDUCED_FLOATS else numpy_dtype(dtype))


@compute(aten.sum.default)
def sum_all(x, dtype):
    return np.sum(_accumulate(x, dtype))


@compute(aten.sum.dim_IntList)
def sum_dims(x, dims, keepdim, dtype):
    axes = _axes(dims, x.ndim)
    return np.sum(_accumulate(x, dtype), axis=axes, keepdims=keepdim and x.ndim > 0)


def _count(x, axes) -> int:
    """How many elements each reduction over `axes` sees."""
    return x.size if axes is None else math.prod(x.shape[a] for a in axes)


def _mean(x, dims, keepdim):
    # The sum over the count, not np.mean, which warns on an empty slice where PyTorch quietly
    # gives NaN.
    axes = _axes(dims, x.ndim)
    return np.sum(x, axis=axes, keepdims=keepdim and x.ndim > 0) / _count(x, axes)


@compute(aten.mean.default)
def mean_all(x, dtype):
    return _mean(_accumulate(x, dtype), None, False)


@compute(aten.mean.dim)
def mean_dims(x, dims, keepdim, dtype):
    return _mean(_accumulate(x, dtype), dims, keepdim)


@compute(aten.amax.default)
def amax(x, dims, keepdim):
    return np.max(x, axis=_axes(dims, x.ndim), keepdims=keepdim and x.ndim > 0)


@compute(aten.amin.default)
def amin(x, dims, keepdim):
    return np.min(x, axis=_axes(dims, x.ndim), keepdims=keepdim and x.ndim > 0)


@compute(aten.max.default)
def max_all(x):
    return np.max(x)


@compute(aten.min.default)
def min_all(x):
    return np.min(x)


def _correction(correction) -> float:
    return 1 if correction is None else correction


@compute(aten.var.correction)
def var(x, dims, correction, keepdim):
    # Two passes, like np.var; n - correction <= 0 divides by 0 (inf or NaN) as in PyTorch.
    axes = _axes(dims, x.ndim)
    deviations = x - _mean(x, dims, True)
    squares = np.sum(deviations * deviations, axis=axes, keepdims=keepdim and x.ndim > 0)
    return squares / max(_count(x, axes) - _correction(correction), 0)


@compute(aten.std.correction)
def std(x, dims, correction, keepdim):
    return np.sqrt(var(x, dims, correction, keepdim))


@compute(aten.var_mean.correction)
def var_mean(x, dims, correction, keepdim):
    return var(x, dims, correction, keepdim), _mean(x, dims, keepdim)


# ---------------------------------------------------------------- creation
# Bytes of `empty*` are unspecified; the reference zero-fills them and no conforming program reads them.


@compute(aten.zeros.default, aten.empty.memory_format)
def zeros(size, *_):
    return np.zeros(size)


@compute(aten.empty_strided.default)
def empty_strided(size, stride, *_):
    return np.zeros(size)


@compute(aten.ones.default)
def ones(size, *_):
    return np.ones(size)


@compute(aten.full.default)
def full(size, fill_value, *_):
    return np.full(size, fill_value)


@compute(aten.scalar_tensor.default)
def scalar_tensor(value, *_):
    return np.array(value)


@compute(aten.arange.default)
def arange(end, *_):
    return np.arange(end)


@compute(aten.arange.start)
def arange_start(start, end, *_):
    return np.arange(start, end)


@compute(aten.arange.start_step)
def arange_start_step(start, end, step, *_):
    return np.arange(start, end, step)


@compute(aten.zeros_like.default, aten.empty_like.default, aten.zero.default)
def zeros_like(x, *_):
    return np.zeros(x.shape)


@compute(aten.ones_like.default)
def ones_like(x, *_):
    return np.ones(x.shape)


@compute(aten.full_like.default, aten.fill.Scalar)
def full_like(x, fill_value, *_):
    return np.full(x.shape, fill_value)


@compute(aten.new_zeros.default, aten.new_empty.default)
def new_zeros(x, size, *_):
    return np.zeros(size)


@compute(aten.new_ones.default)
def new_ones(x, size, *_):
    return np.ones(size)


@compute(aten.new_full.default)
def new_full(x, size, fill_value, *_):
    return np.full(size, fill_value)


# ---------------------------------------------------------------- in-place variants
# r[aliasing.inplace.writes-through]: x.op_(...) computes op(x, ...) and writes it into x's storage.

#: (in-place overload, functional overload whose values it writes), for the table and the tests.
IN_PLACE_VARIANTS = (
    (aten.add_.Tensor, aten.add.Tensor),
    (aten.add_.Scalar, aten.add.Scalar),
    (aten.sub_.Tensor, aten.sub.Tensor),
    (aten.sub_.Scalar, aten.sub.Scalar),
    (aten.mul_.Tensor, aten.mul.Tensor),
    (aten.mul_.Scalar, aten.mul.Scalar),
    (aten.div_.Tensor, aten.div.Tensor),
    (aten.div_.Scalar, aten.div.Scalar),
    (aten.div_.Tensor_mode, aten.div.Tensor_mode),
    (aten.div_.Scalar_mode, aten.div.Scalar_mode),
    (aten.floor_divide_.Tensor, aten.floor_divide.default),
    (aten.floor_divide_.Scalar, aten.floor_divide.Scalar),
    (aten.remainder_.Tensor, aten.remainder.Tensor),
    (aten.remainder_.Scalar, aten.remainder.Scalar),
    (aten.pow_.Scalar, aten.pow.Tensor_Scalar),
    (aten.pow_.Tensor, aten.pow.Tensor_Tensor),
    (aten.neg_.default, aten.neg.default),
    (aten.abs_.default, aten.abs.default),
    (aten.exp_.default, aten.exp.default),
    (aten.log_.default, aten.log.default),
    (aten.log1p_.default, aten.log1p.default),
    (aten.expm1_.default, aten.expm1.default),
    (aten.sin_.default, aten.sin.default),
    (aten.cos_.default, aten.cos.default),
    (aten.tanh_.default, aten.tanh.default),
    (aten.sigmoid_.default, aten.sigmoid.default),
    (aten.relu_.default, aten.relu.default),
    (aten.sqrt_.default, aten.sqrt.default),
    (aten.rsqrt_.default, aten.rsqrt.default),
    (aten.reciprocal_.default, aten.reciprocal.default),
    (aten.erf_.default, aten.erf.default),
    (aten.floor_.default, aten.floor.default),
    (aten.ceil_.default, aten.ceil.default),
    (aten.trunc_.default, aten.trunc.default),
    (aten.round_.default, aten.round.default),
    (aten.clamp_.default, aten.clamp.default),
    (aten.clamp_.Tensor, aten.clamp.Tensor),
    (aten.clamp_min_.default, aten.clamp_min.default),
    (aten.clamp_max_.default, aten.clamp_max.default),
    (aten.logical_not_.default, aten.logical_not.default),
    (aten.bitwise_and_.Tensor, aten.bitwise_and.Tensor),
    (aten.bitwise_or_.Tensor, aten.bitwise_or.Tensor),
    (aten.fill_.Scalar, aten.fill.Scalar),
    (aten.zero_.default, aten.zero.default),
)
for _inplace, _functional in IN_PLACE_VARIANTS:
    inplace(_inplace, _functional)


# ---------------------------------------------------------------- views
# r[aliasing.view.shares-storage]: each rule maps the input's layout to the output's; no bytes move.


def _view_strides(sizes, strides, new_sizes):
    """Strides that read `new_sizes` from the same elements in the same order, or None.

    This is ATen's computeStride (TensorUtils.cpp): split the old dims into contiguous chunks and
    require every new dim to fall inside one chunk.
    """
    if math.prod(sizes) == 0 or len(sizes) == 0:
        return contiguous_strides(new_sizes)
    new_strides = [0] * len(new_sizes)
    view_d = len(new_sizes) - 1
    chunk_base_stride = strides[-1]
    tensor_numel = 1
    view_numel = 1
    for tensor_d in reversed(range(len(sizes))):
        tensor_numel *= sizes[tensor_d]
        chunk_ends = tensor_d == 0 or (
            sizes[tensor_d - 1] != 1 and strides[tensor_d - 1] != tensor_numel * chunk_base_stride
        )
        if chunk_ends:
            while view_d >= 0 and (view_numel < tensor_numel or new_sizes[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base_stride
                view_numel *= new_sizes[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = strides[tensor_d - 1]
                tensor_numel = 1
                view_numel = 1
    return tuple(new_strides) if view_d == -1 else None


def _infer_size(size, numel: int) -> tuple[int, ...]:
    size = list(size)
    if -1 in size:
        known = math.prod(s for s in size if s != -1)
        size[size.index(-1)] = numel // known if known else 0
    return tuple(size)


@view(aten.view.default, aten._unsafe_view.default)
def view_(layout: Layout, size):
    # _unsafe_view is view without autograd's view tracking: it still shares the storage.
    new_sizes = _infer_size(size, layout.numel)
    new_strides = _view_strides(layout.sizes, layout.strides, new_sizes)
    if new_strides is None:
        raise RuntimeError(
            "view size is not compatible with input tensor's size and stride (at least one "
            "dimension spans across two contiguous subspaces). Use .reshape(...) instead."
        )
    return Layout(layout.dtype, new_sizes, new_strides, layout.offset)


@view(aten.alias.default, aten.detach.default)
def alias(layout: Layout):
    return layout


@view(aten.t.default)
def t(layout: Layout):
    if len(layout.sizes) < 2:
        return layout
    return transpose(layout, 0, 1)


@view(aten.transpose.int)
def transpose(layout: Layout, dim0, dim1):
    ndim = len(layout.sizes)
    if ndim == 0:
        return layout
    dim0, dim1 = _dim(dim0, ndim), _dim(dim1, ndim)
    return permute(layout, [dim1 if d == dim0 else dim0 if d == dim1 else d for d in range(ndim)])


@view(aten.permute.default)
def permute(layout: Layout, dims):
    dims = [_dim(d, len(layout.sizes)) for d in dims]
    sizes = tuple(layout.sizes[d] for d in dims)
    strides = tuple(layout.strides[d] for d in dims)
    return Layout(layout.dtype, sizes, strides, layout.offset)


@view(aten.expand.default)
def expand(layout: Layout, size, implicit):
    # ATen's inferExpandGeometry, from the last dim back: an expanded dim (size 1 to n) reads one
    # element again and again (stride 0); a new leading dim of size 1 steps over the dim after it.
    lead = len(size) - len(layout.sizes)
    sizes, strides = [0] * len(size), [0] * len(size)
    for i in reversed(range(len(size))):
        if i >= lead:
            old_size, stride = layout.sizes[i - lead], layout.strides[i - lead]
        else:
            old_size = 1
            stride = sizes[i + 1] * strides[i + 1] if i + 1 < len(size) else 0
        target = old_size if size[i] == -1 else size[i]
        sizes[i], strides[i] = target, stride if target == old_size else 0
    return Layout(layout.dtype, sizes, strides, layout.offset)


@view(aten.slice.Tensor)
def slice_(layout: Layout, dim, start, end, step):
    dim = _dim(dim, len(layout.sizes))
    size = layout.sizes[dim]
    start = 0 if start is None else start
    end = sys.maxsize if end is None else end
    start = min(max(start + size if start < 0 else start, 0), size)
    end = min(max(end + size if end < 0 else end, start), size)
    sizes = list(layout.sizes)
    strides = list(layout.strides)
    sizes[dim] = (end - start + step - 1) // step
    strides[dim] = layout.strides[dim] * step
    return Layout(layout.dtype, sizes, strides, layout.offset + start * layout.strides[dim])


@view(aten.select.int)
def select(layout: Layout, dim, index):
    dim = _dim(dim, len(layout.sizes))
    size = layout.sizes[dim]
    if not -size <= index < size:
        raise IndexError(f"select(): index {index} out of range for tensor of size {layout.sizes} at dimension {dim}")
    index %= size
    sizes = layout.sizes[:dim] + layout.sizes[dim + 1 :]
    strides = layout.strides[:dim] + layout.strides[dim + 1 :]
    return Layout(layout.dtype, sizes, strides, layout.offset + index * layout.strides[dim])


@view(aten.unsqueeze.default)
def unsqueeze(layout: Layout, dim):
    ndim = len(layout.sizes)
    dim = _dim(dim, ndim + 1)
    # ATen: the new dim's stride is the stride the dim after it would step over (1 at the end).
    stride = layout.sizes[dim] * layout.strides[dim] if dim < ndim else 1
    sizes = layout.sizes[:dim] + (1,) + layout.sizes[dim:]
    strides = layout.strides[:dim] + (stride,) + layout.strides[dim:]
    return Layout(layout.dtype, sizes, strides, layout.offset)


def _squeeze(layout: Layout, dims) -> Layout:
    keep = [d for d in range(len(layout.sizes)) if not (d in dims and layout.sizes[d] == 1)]
    sizes = tuple(layout.sizes[d] for d in keep)
    strides = tuple(layout.strides[d] for d in keep)
    return Layout(layout.dtype, sizes, strides, layout.offset)


@view(aten.squeeze.default)
def squeeze_all(layout: Layout):
    return _squeeze(layout, set(range(len(layout.sizes))))


@view(aten.squeeze.dim)
def squeeze_dim(layout: Layout, dim):
    if len(layout.sizes) == 0:
        return layout
    return _squeeze(layout, {_dim(dim, len(layout.sizes))})


@view(aten.squeeze.dims)
def squeeze_dims(layout: Layout, dims):
    if len(layout.sizes) == 0:
        return layout
    return _squeeze(layout, {_dim(d, len(layout.sizes)) for d in dims})


@view(aten.split_with_sizes.default)
def split_with_sizes(layout: Layout, split_sizes, dim):
    starts = np.cumsum([0, *split_sizes])
    return tuple(slice_(layout, dim, int(a), int(b), 1) for a, b in zip(starts[:-1], starts[1:]))


@view(aten.split.Tensor)
def split(layout: Layout, split_size, dim):
    size = layout.sizes[_dim(dim, len(layout.sizes))]
    chunks = max(1, -(-size // split_size)) if split_size else 1
    sizes = [min(split_size, size - i * split_size) for i in range(chunks)]
    return split_with_sizes(layout, sizes, dim)


@view(aten.unbind.int)
def unbind(layout: Layout, dim):
    size = layout.sizes[_dim(dim, len(layout.sizes))]
    return tuple(select(layout, dim, i) for i in range(size))


@view(aten.as_strided.default)
def as_strided(layout: Layout, size, stride, storage_offset):
    # The offset is absolute within the storage, not relative to the input's offset.
    offset = layout.offset if storage_offset is None else storage_offset
    return Layout(layout.dtype, size, stride, offset)
