"""The reference op table's entries: value rules in numpy, view rules on layouts.

Conventions: `x`, `y` are numpy arrays (the op's `self` and `other`), `layout` is the input's
Layout, `dims` a list of dimensions. Rules follow the aten schema's argument order; arguments that
do not change the values (layout, device, pin_memory, memory_format) are named `*_` and ignored,
because fresh outputs take their dtype and strides from the captured meta value
(`r[ops.fresh-output]`).

Beside each compute or view rule sits its derivative (`r[autograd.derivative-rules]`): a
vector-Jacobian product `rule(grad, out, *args)` in torch ops, following PyTorch's
tools/autograd/derivatives.yaml and torch/csrc/autograd/FunctionsManual.cpp, or a declaration that
the op's outputs carry no gradient. Derivatives use only ops of this table, so tracing one on fake
tensors gives a backward graph the reference runs; they never write to a tensor.

Rules for `copy_`, `set_` and `resize_storage_bytes_` live in `reference/effects.py`.
"""

from __future__ import annotations

import cmath
import math
import operator
import sys

import numpy as np
import torch

from aotspec.errors import UnsupportedError

from .aten import run_aten
from .optable import (
    aten_valued,
    compute,
    derivative,
    inplace,
    nondifferentiable,
    size_op,
    view,
)
from .storage import REDUCED_FLOATS, Layout, contiguous_strides, numpy_dtype

aten = torch.ops.aten


def _dim(dim: int, ndim: int) -> int:
    """Wrap a possibly negative dim; a 0-dim tensor accepts 0 and -1, like PyTorch."""
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], "
            f"but got {dim})"
        )
    return dim % rank


def _axes(dims, ndim: int):
    """Reduction axes for numpy: None (every dim) for an empty or missing dim list or a 0-dim x."""
    if dims is None or len(dims) == 0 or ndim == 0:
        return None
    return tuple(sorted({_dim(d, ndim) for d in dims}))


# ---------------------------------------------------------------- derivative helpers


def _sum_to_shape(grad, shape):
    """`grad` summed over the dims that broadcasting to its shape added or stretched from 1."""
    lead = grad.dim() - len(shape)
    stretched = [d for d in range(lead, grad.dim()) if shape[d - lead] == 1 and grad.shape[d] != 1]
    dims = [*range(lead), *stretched]
    if dims:
        grad = grad.sum(dims, keepdim=True)
    return grad.reshape(shape) if lead else grad


def _grad_like(grad, x):
    """`grad` as the gradient of argument `x`: summed to x's shape, then cast to x's dtype.

    The autograd engine does this to every gradient (validate_outputs in
    torch/csrc/autograd/engine.cpp). None where `x` is a number or a tensor whose dtype carries no
    gradient (integers, bool).
    """
    if not isinstance(x, torch.Tensor) or not (x.is_floating_point() or x.is_complex()):
        return None
    if grad.is_complex() and not x.is_complex():
        grad = torch.real(grad)  # r[ops.complex.real-input-grad]
    grad = _sum_to_shape(grad, x.shape)
    return grad if grad.dtype == x.dtype else grad.to(x.dtype)


def _conj(t):
    """r[ops.complex.conjugate-grad]: the conjugate where eager's formula takes `.conj()`; a real
    tensor or number is its own conjugate. A fresh tensor (conj_physical), as eager's lazy
    conjugate view is resolved by the next op anyway."""
    if not isinstance(t, torch.Tensor):
        return t.conjugate()
    return aten.conj_physical(t) if t.is_complex() else t


def _scaled(grad, factor):
    """maybe_multiply: `grad * factor`, skipped when the factor is 1."""
    return grad if factor == 1 else grad * factor


def _scaled_conj(grad, factor):
    """maybe_multiply(grad, factor.conj()): a complex scale enters a gradient conjugated
    (`r[ops.complex.conjugate-grad]`)."""
    return _scaled(grad, factor.conjugate())


def _unreduce(t, dims, ndim: int, keepdim: bool):
    """`t`, reduced from an ndim-dim tensor over `dims`, with the reduced dims back as size 1.

    A reduction over every dim (dims None or empty) needs nothing: its 0-dim result broadcasts.
    """
    if keepdim or not dims or ndim == 0:
        return t
    for d in sorted({_dim(d, ndim) for d in dims}):
        t = t.unsqueeze(d)
    return t


def _views_into_zeros(grads, x, windows):
    """The gradient of `x` from the gradients of views of it: zeros with each gradient written
    where its view reads. `windows` are the views' layouts on a contiguous `x`; a None gradient
    (an output nobody used) stays zero.
    """
    result = next(g for g in grads if g is not None).new_zeros(x.shape)
    for grad, window in zip(grads, windows, strict=True):
        if grad is not None:
            result = aten.as_strided_scatter(
                result, grad, window.sizes, window.strides, window.offset
            )
    return result


def _contiguous_layout(x) -> Layout:
    return Layout.contiguous(x.dtype, x.shape)


# ---------------------------------------------------------------- pointwise unary

_erf = np.frompyfunc(math.erf, 1, 1)


def _floating(x):
    """A float function's argument: integers and bools become the default float dtype first."""
    if x.dtype.kind not in "biu":
        return x
    # r[ops.int-to-float]: eager promotes them before its kernel runs (True is 1.0), where numpy's
    # own promotion would compute a bool or a one-byte integer in float16.
    return x.astype(np.float64 if torch.get_default_dtype() == torch.float64 else np.float32)


@compute(aten.abs.default)
def abs_(x):
    return np.abs(x)


@derivative(aten.abs.default)
def abs_backward(grad, out, x):
    # abs's formula is grad * sgn(x): x / |x| for a complex x (0 at 0), sign(x) for a real one.
    sign = torch.sgn(x) if x.is_complex() else torch.sign(x)
    return (_grad_like(grad * sign, x),)


@compute(aten.neg.default)
def neg(x):
    return np.negative(x)


@derivative(aten.neg.default)
def neg_backward(grad, out, x):
    return (_grad_like(-grad, x),)


@compute(aten.exp.default)
def exp(x):
    return np.exp(_floating(x))


@derivative(aten.exp.default)
def exp_backward(grad, out, x):
    return (_grad_like(grad * _conj(out), x),)


@compute(aten.log.default)
def log(x):
    return np.log(_floating(x))


@derivative(aten.log.default)
def log_backward(grad, out, x):
    return (_grad_like(grad / _conj(x), x),)


@compute(aten.log1p.default)
def log1p(x):
    return np.log1p(_floating(x))


@derivative(aten.log1p.default)
def log1p_backward(grad, out, x):
    return (_grad_like(grad / _conj(x + 1), x),)


@compute(aten.expm1.default)
def expm1(x):
    return np.expm1(_floating(x))


@derivative(aten.expm1.default)
def expm1_backward(grad, out, x):
    return (_grad_like(grad * (_conj(out) + 1), x),)


@compute(aten.log2.default)
def log2(x):
    return np.log2(_floating(x))


@derivative(aten.log2.default)
def log2_backward(grad, out, x):
    return (_grad_like(grad / (_conj(x) * 0.6931471805599453), x),)


@compute(aten.log10.default)
def log10(x):
    return np.log10(_floating(x))


@derivative(aten.log10.default)
def log10_backward(grad, out, x):
    return (_grad_like(grad / (_conj(x) * 2.3025850929940456), x),)


@compute(aten.exp2.default)
def exp2(x):
    return np.exp2(_floating(x))


@derivative(aten.exp2.default)
def exp2_backward(grad, out, x):
    return (_grad_like(grad * _conj(out) * math.log(2), x),)


@compute(aten.sin.default)
def sin(x):
    return np.sin(_floating(x))


@derivative(aten.sin.default)
def sin_backward(grad, out, x):
    return (_grad_like(grad * _conj(torch.cos(x)), x),)


@compute(aten.cos.default)
def cos(x):
    return np.cos(_floating(x))


@derivative(aten.cos.default)
def cos_backward(grad, out, x):
    return (_grad_like(grad * -_conj(torch.sin(x)), x),)


@compute(aten.tan.default)
def tan(x):
    return np.tan(_floating(x))


@derivative(aten.tan.default)
def tan_backward(grad, out, x):
    return (_grad_like(grad * _conj(1 + out.pow(2)), x),)


@compute(aten.tanh.default)
def tanh(x):
    return np.tanh(_floating(x))


@derivative(aten.tanh.default)
def tanh_backward(grad, out, x):
    # 1 - out * out, written without aten.rsub, which is not in the table.
    return (_grad_like(grad * _conj(-(out * out) + 1), x),)


@compute(aten.sigmoid.default)
def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-_floating(x)))


@derivative(aten.sigmoid.default)
def sigmoid_backward(grad, out, x):
    # grad * (1 - out) * out, written without aten.rsub, which is not in the table.
    return (_grad_like(grad * _conj((-out + 1) * out), x),)


@compute(aten.relu.default)
def relu(x):
    # PyTorch's relu is clamp_min(x, 0), which keeps NaN; np.maximum does too.
    return np.maximum(x, 0)


@derivative(aten.relu.default)
def relu_backward(grad, out, x):
    # Zero where the output is <= 0, so the gradient at 0 is 0 and a NaN output passes it.
    return (_grad_like(aten.threshold_backward(grad, out, 0), x),)


@compute(aten.sqrt.default)
def sqrt(x):
    return np.sqrt(_floating(x))


@derivative(aten.sqrt.default)
def sqrt_backward(grad, out, x):
    return (_grad_like(grad / (2 * _conj(out)), x),)


@compute(aten.rsqrt.default)
def rsqrt(x):
    return 1.0 / np.sqrt(_floating(x))


@derivative(aten.rsqrt.default)
def rsqrt_backward(grad, out, x):
    return (_grad_like(-0.5 * grad * _conj(out.pow(3)), x),)


@compute(aten.reciprocal.default)
def reciprocal(x):
    return 1.0 / _floating(x)


@derivative(aten.reciprocal.default)
def reciprocal_backward(grad, out, x):
    return (_grad_like(-grad * _conj(out * out), x),)


@compute(aten.erf.default)
def erf(x):
    return np.asarray(_erf(x), dtype=np.float64)


@derivative(aten.erf.default)
def erf_backward(grad, out, x):
    return (_grad_like(2.0 / math.sqrt(math.pi) * torch.exp(-x.pow(2)) * grad, x),)


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


@derivative(
    aten.sign.default,
    aten.floor.default,
    aten.ceil.default,
    aten.trunc.default,
    aten.round.default,
)
def zero_backward(grad, out, x):
    # Locally constant in x. PyTorch's formula is zeros_like(grad), not non_differentiable: the
    # output requires grad, and x gets a zero gradient (not none).
    return (_grad_like(torch.zeros_like(grad), x),)


@compute(aten.isnan.default)
def isnan(x):
    return np.isnan(x)


@compute(aten.logical_not.default)
def logical_not(x):
    return np.logical_not(x)


@compute(aten.bitwise_not.default)
def bitwise_not(x):
    return np.invert(x)


nondifferentiable(aten.isnan.default, aten.logical_not.default, aten.bitwise_not.default)


# ---------------------------------------------------------------- pointwise binary


@compute(aten.add.Tensor, aten.add.Scalar)
def add(x, y, alpha):
    return x + alpha * y if alpha != 1 else x + y


@derivative(aten.add.Tensor, aten.add.Scalar)
def add_backward(grad, out, x, y, alpha):
    return _grad_like(grad, x), _grad_like(_scaled_conj(grad, alpha), y), None


@compute(aten.sub.Tensor, aten.sub.Scalar)
def sub(x, y, alpha):
    return x - alpha * y if alpha != 1 else x - y


@derivative(aten.sub.Tensor, aten.sub.Scalar)
def sub_backward(grad, out, x, y, alpha):
    return _grad_like(grad, x), _grad_like(_scaled_conj(-grad, alpha), y), None


@compute(aten.mul.Tensor, aten.mul.Scalar)
def mul(x, y):
    return x * y


@derivative(aten.mul.Tensor, aten.mul.Scalar)
def mul_backward(grad, out, x, y):
    return _grad_like(grad * _conj(y), x), _grad_like(grad * _conj(x), y)


@compute(aten.div.Tensor, aten.div.Scalar)
def div(x, y):
    return np.true_divide(x, y)


@derivative(aten.div.Tensor, aten.div.Scalar)
def div_backward(grad, out, x, y):
    return _grad_like(grad / _conj(y), x), _grad_like(-grad * _conj((x / y) / y), y)


@compute(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(x, y, rounding_mode):
    # r[ops.opmath] holds for trunc too, although PyTorch's CPU kernel rounds a float16 or
    # bfloat16 quotient to the dtype before truncating it (float64 agrees with the reference).
    if rounding_mode == "floor":
        return floor_divide(x, y)
    quotient = np.true_divide(x, y)
    return np.trunc(quotient) if rounding_mode == "trunc" else quotient


@derivative(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode_backward(grad, out, x, y, rounding_mode):
    if rounding_mode is None:
        return (*div_backward(grad, out, x, y), None)
    # A rounded quotient is piecewise constant: zero gradients (zeros_like(grad)), as for floor.
    zeros = torch.zeros_like(grad)
    return _grad_like(zeros, x), _grad_like(zeros, y), None


@compute(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(x, y):
    # Not floor(x / y): like Python's //, PyTorch (div_floor_floating) and numpy derive the
    # quotient from fmod, so 1.0 // 0.1 is 9.0 although 1.0 / 0.1 rounds to 10.0.
    return np.floor_divide(x, y)


@derivative(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide_backward(grad, out, x, y):
    # derivatives.yaml has no entry: the output requires grad, and a backward through it raises
    # (in eager, and when AOTAutograd traces the joint graph).
    raise RuntimeError("derivative for aten::floor_divide is not implemented")


@compute(aten.remainder.Tensor, aten.remainder.Scalar)
def remainder(x, y):
    # Python's %: the result takes the sign of y, in PyTorch as in numpy.
    return np.remainder(x, y)


@derivative(aten.remainder.Tensor, aten.remainder.Scalar)
def remainder_backward(grad, out, x, y):
    # x % y is x - floor(x / y) * y, with the floor piecewise constant.
    return _grad_like(grad, x), _grad_like(-grad * torch.div(x, y, rounding_mode="floor"), y)


@compute(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar)
def pow_(x, exponent):
    return np.power(x, exponent)


@derivative(aten.pow.Tensor_Scalar)
def pow_tensor_scalar_backward(grad, out, x, exponent):
    if exponent == 0:
        return _grad_like(torch.zeros_like(grad), x), None
    exponent = float(exponent)
    return _grad_like(grad * _conj(exponent * x.pow(exponent - 1)), x), None


def _log(base: float | complex) -> float | complex:
    """C++'s std::log of a number: -inf at 0 and NaN below, where math.log raises."""
    if isinstance(base, complex) and base != 0:
        return cmath.log(base)
    if base > 0:
        return math.log(base)
    return -math.inf if base == 0 else math.nan


@derivative(aten.pow.Tensor_Tensor)
def pow_tensor_tensor_backward(grad, out, x, exponent):
    # FunctionsManual.cpp pow_backward_self and pow_backward_exponent: an exponent of 0 passes no
    # gradient to x, and d(x**e)/de is taken as 0 where x == 0 and e >= 0.
    # Both conjugated for complex operands (r[ops.complex.conjugate-grad]).
    dx = torch.where(exponent == 0.0, 0.0, grad * _conj(exponent * x.pow(exponent - 1)))
    at_zero = torch.logical_and(x == 0, _nonnegative(exponent))
    de = grad * torch.where(at_zero, 0.0, _conj(out * x.to(out.dtype).log()))
    return _grad_like(dx, x), _grad_like(de, exponent)


def _nonnegative(exponent):
    """pow_backward_exponent's test of an exponent: >= 0, or real and >= 0 for a complex one."""
    if not exponent.is_complex():
        return exponent >= 0
    return torch.logical_and(torch.imag(exponent) == 0, torch.real(exponent) >= 0)


@derivative(aten.pow.Scalar)
def pow_scalar_backward(grad, out, base, exponent):
    log_base = _conj(out * _log(base))
    if base == 0:
        log_base = torch.where(_nonnegative(exponent), 0.0, log_base)
    return None, _grad_like(grad * log_base, exponent)


@compute(aten.maximum.default)
def maximum(x, y):
    return np.maximum(x, y)


@derivative(aten.maximum.default)
def maximum_backward(grad, out, x, y):
    # A tie splits the gradient in half; where either is NaN, both get all of it.
    shared = torch.where(x == y, grad / 2, grad)
    x_grad = torch.where(x < y, 0.0, shared)
    return _grad_like(x_grad, x), _grad_like(torch.where(x > y, 0.0, shared), y)


@compute(aten.minimum.default)
def minimum(x, y):
    return np.minimum(x, y)


@derivative(aten.minimum.default)
def minimum_backward(grad, out, x, y):
    shared = torch.where(x == y, grad / 2, grad)
    x_grad = torch.where(x > y, 0.0, shared)
    return _grad_like(x_grad, x), _grad_like(torch.where(x < y, 0.0, shared), y)


@compute(aten.clamp.default, aten.clamp.Tensor)
def clamp(x, low, high):
    # PyTorch applies min then max, so min > max gives max everywhere.
    if low is not None:
        x = np.maximum(x, low)
    if high is not None:
        x = np.minimum(x, high)
    return x


def _clamp_self_grad(grad, x, low, high):
    # FunctionsManual.cpp clamp_backward: the gradient passes where low <= x <= high, bounds
    # included (subgradient 1), and stops at NaN.
    if low is not None:
        grad = torch.where(x >= low, grad, 0.0)
    if high is not None:
        grad = torch.where(x <= high, grad, 0.0)
    return grad


@derivative(aten.clamp.default)
def clamp_backward(grad, out, x, low, high):
    return _grad_like(_clamp_self_grad(grad, x, low, high), x), None, None


@derivative(aten.clamp.Tensor)
def clamp_tensor_backward(grad, out, x, low, high):
    # clamp_backward_min_max: a bound gets the gradient where clamp returned it; with low > high,
    # clamp returns high, so low gets nothing there.
    to_low = None if low is None else x < low
    to_high = None if high is None else x > high
    if low is not None and high is not None:
        to_low = torch.logical_and(to_low, low < high)
        to_high = torch.logical_or(to_high, high < low)
    return (
        _grad_like(_clamp_self_grad(grad, x, low, high), x),
        None if low is None else _grad_like(torch.where(to_low, grad, 0.0), low),
        None if high is None else _grad_like(torch.where(to_high, grad, 0.0), high),
    )


@compute(aten.clamp_min.default)
def clamp_min(x, low):
    return np.maximum(x, low)


@derivative(aten.clamp_min.default)
def clamp_min_backward(grad, out, x, low):
    return _grad_like(_clamp_self_grad(grad, x, low, None), x), None


@compute(aten.clamp_max.default)
def clamp_max(x, high):
    return np.minimum(x, high)


@derivative(aten.clamp_max.default)
def clamp_max_backward(grad, out, x, high):
    return _grad_like(_clamp_self_grad(grad, x, None, high), x), None


@compute(aten.where.self)
def where(condition, x, y):
    return np.where(condition.astype(bool), x, y)


@derivative(aten.where.self)
def where_backward(grad, out, condition, x, y):
    x_grad = torch.where(condition, grad, 0.0)
    return None, _grad_like(x_grad, x), _grad_like(torch.where(condition, 0.0, grad), y)


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


nondifferentiable(
    aten.logical_and.default,
    aten.logical_or.default,
    aten.bitwise_and.Tensor,
    aten.bitwise_and.Scalar,
    aten.bitwise_or.Tensor,
    aten.bitwise_or.Scalar,
    aten.bitwise_xor.Tensor,
    aten.bitwise_xor.Scalar,
)


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


nondifferentiable(
    aten.eq.Tensor,
    aten.eq.Scalar,
    aten.ne.Tensor,
    aten.ne.Scalar,
    aten.lt.Tensor,
    aten.lt.Scalar,
    aten.le.Tensor,
    aten.le.Scalar,
    aten.gt.Tensor,
    aten.gt.Scalar,
    aten.ge.Tensor,
    aten.ge.Scalar,
)


@compute(aten.threshold_backward.default)
def threshold_backward(grad, x, threshold):
    return np.where(x <= threshold, np.zeros_like(grad), grad)


@derivative(aten.threshold_backward.default)
def threshold_backward_backward(grad, out, grad_output, x, threshold):
    grad_output_grad = aten.threshold_backward(grad, x, threshold)
    return _grad_like(grad_output_grad, grad_output), _grad_like(torch.zeros_like(grad), x), None


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


@derivative(aten._to_copy.default)
def pass_backward(grad, out, x, *options):
    # The gradient passes unchanged, then _grad_like sums it to x's shape (expand) and casts it
    # to x's dtype (_to_copy). A cast to an integer or bool dtype has no gradient at all
    # (derivatives.yaml: output_differentiability), as for any output of such a dtype.
    return (_grad_like(grad, x), *(None for _ in options))


@compute(aten.clone.default, aten.lift_fresh_copy.default)
def clone(x, *_):
    return x


derivative(aten.clone.default, aten.lift_fresh_copy.default)(pass_backward)


@compute(aten.copy.default)
def copy(x, src, non_blocking):
    return np.broadcast_to(src, x.shape)


@derivative(aten.copy.default)
def copy_backward(grad, out, x, src, non_blocking):
    # copy_'s CopyBackwards (torch/csrc/autograd/functions/tensor.cpp): x gets zeros, src the
    # gradient cast to its dtype first, then summed to its shape. (Eager has no formula for the
    # functional copy; it only appears in functionalized graphs.)
    if grad.is_complex() and not src.is_complex():
        grad = torch.real(grad)  # r[ops.complex.real-input-grad]
    return _grad_like(torch.zeros_like(grad), x), _grad_like(grad.to(src.dtype), src), None


@compute(aten.cat.default)
def cat(tensors, dim):
    # Legacy rule kept by PyTorch: 1-D empty tensors are skipped whatever their shape.
    kept = [t for t in tensors if not (t.ndim == 1 and t.size == 0)]
    if not kept:
        return tensors[0]
    return np.concatenate(kept, axis=_dim(dim, kept[0].ndim))


@derivative(aten.cat.default)
def cat_backward(grad, out, tensors, dim):
    # FunctionsManual.cpp cat_tensors_backward: each input's slice of grad; a skipped 1-D empty
    # input gets an empty gradient.
    kept = [t for t in tensors if not (t.dim() == 1 and t.shape[0] == 0)]
    dim = _dim(dim, kept[0].dim()) if kept else 0
    grads, start = [], 0
    for t in tensors:
        if t.dim() == 1 and t.shape[0] == 0:
            grads.append(_grad_like(grad.new_zeros((0,)), t))
        else:
            grads.append(_grad_like(grad.narrow(dim, start, t.shape[dim]), t))
            start += t.shape[dim]
    return grads, None


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


@derivative(aten.as_strided_scatter.default)
def as_strided_scatter_backward(grad, out, x, src, size, stride, storage_offset):
    # Through the same window of a contiguous copy: x's gradient is grad with the window zeroed
    # (its values were overwritten), src's is grad read through the window. PyTorch 2.13's formula
    # for x instead keeps only the window (as_strided_scatter_backward in FunctionsManual.cpp).
    flat = grad.clone(memory_format=torch.contiguous_format)
    # r[ops.as-strided-scatter.derivative]
    x_grad = aten.as_strided_scatter(flat, grad.new_zeros(size), size, stride, storage_offset)
    src_grad = flat.as_strided(size, stride, storage_offset)
    return _grad_like(x_grad, x), _grad_like(src_grad, src), None, None, None


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


@compute(aten.index.Tensor)
def index(x, indices):
    # Advanced indexing, numpy's rules, which PyTorch follows: a None index keeps its dim whole.
    return x[tuple(slice(None) if i is None else i for i in indices)]


@derivative(aten.index.Tensor)
def index_backward(grad, out, x, indices):
    # Each element read goes back to where it was read from; an element read twice gets both.
    x_grad = aten.index_put(grad.new_zeros(x.shape), indices, grad, True)
    return _grad_like(x_grad, x), None


@derivative(aten.index_put.default)
def index_put_backward(grad, out, x, indices, values, accumulate):
    # Overwritten positions pass nothing to x; values get grad read at the indices (summed where
    # they were broadcast).
    x_grad = grad if accumulate else aten.index_put(grad, indices, torch.zeros_like(values))
    if all(i is None or i.dtype in (torch.bool, torch.uint8) for i in indices):
        # r[ops.derivatives.index-put-mask]
        values_grad = _gathered_at_masks(grad, indices, values)
    else:
        values_grad = aten.index.Tensor(grad, indices)
    return _grad_like(x_grad, x), None, _grad_like(values_grad, values), None


def _gathered_at_masks(grad, indices, values):
    """grad summed, for each element of `values`, over the positions index_put wrote it to at
    boolean masks, which select each position once: the sizes are values', not the masks'."""
    n = values.numel()
    written_from = aten.index_put(
        torch.full(grad.shape, n, dtype=torch.int64, device=grad.device),
        indices,
        torch.arange(n, device=grad.device).view(values.shape),
    )
    positions = [written_from.reshape(-1)]
    sums = aten.index_put(grad.new_zeros(n + 1), positions, grad.reshape(-1), True)
    return sums[:n].view(values.shape)


@derivative(aten.index_fill.int_Tensor)
def index_fill_backward(grad, out, x, dim, index, value):
    # Filled positions pass nothing to x; value gets grad summed where it was written.
    # r[ops.derivatives.index-fill-value]: each filled position once, however often the index
    # names it, by a mask of the filled positions rather than eager's distinct indices
    kept = torch.ones_like(grad, dtype=torch.bool).index_fill(dim, index, False)
    value_grad = torch.where(kept, 0, grad).sum()
    return _grad_like(grad.index_fill(dim, index, 0), x), None, None, _grad_like(value_grad, value)


# ---------------------------------------------------------------- matmuls


@compute(aten.mm.default, aten.bmm.default)
def matmul(x, y):
    return np.matmul(x, y)


@derivative(aten.mm.default)
def mm_backward(grad, out, x, y):
    # The gradient of a column-major operand (a transposed weight) is computed column-major, as
    # eager's mm_mat1_backward/mm_mat2_backward do: the weight's gradient then has its layout.
    grad_x = _conj(y).mm(grad.t()).t() if _column_major(x) else grad.mm(_conj(y.t()))
    grad_y = grad.t().mm(_conj(x)).t() if _column_major(y) else _conj(x.t()).mm(grad)
    return _grad_like(grad_x, x), _grad_like(grad_y, y)


def _column_major(t) -> bool:
    return t.stride(0) == 1 and t.stride(1) == t.shape[0] and t.shape[1] > 1


@derivative(aten.bmm.default)
def bmm_backward(grad, out, x, y):
    grad_x = grad.bmm(_conj(y.transpose(1, 2)))
    return _grad_like(grad_x, x), _grad_like(_conj(x.transpose(1, 2)).bmm(grad), y)


@compute(aten.addmm.default)
def addmm(bias, x, y, beta, alpha):
    product = np.matmul(x, y)
    # With beta == 0 the bias is ignored, NaNs included.
    return alpha * product if beta == 0 else beta * bias + alpha * product


@derivative(aten.addmm.default)
def addmm_backward(grad, out, bias, x, y, beta, alpha):
    # The bias gets grad * beta even when beta == 0 (zeros, or NaN where grad is not finite).
    # A column-major operand (F.linear's transposed weight) gets its gradient column-major, as
    # in mm_backward, so the weight's gradient has the weight's layout.
    grad_x = _conj(y).mm(grad.t()).t() if _column_major(x) else grad.mm(_conj(y.t()))
    grad_y = grad.t().mm(_conj(x)).t() if _column_major(y) else _conj(x.t()).mm(grad)
    return (
        _grad_like(_scaled_conj(grad, beta), bias),
        _grad_like(_scaled_conj(grad_x, alpha), x),
        _grad_like(_scaled_conj(grad_y, alpha), y),
        None,
        None,
    )


# ---------------------------------------------------------------- reductions


def _accumulate(x, dtype):
    """`x` in the reduction's `dtype=` argument, its accumulation type (r[ops.opmath])."""
    if dtype is None:
        return x
    return x.astype(np.float32 if dtype in REDUCED_FLOATS else numpy_dtype(dtype))


@compute(aten.sum.default)
def sum_all(x, dtype):
    return np.sum(_accumulate(x, dtype))


@derivative(aten.sum.default)
def sum_all_backward(grad, out, x, dtype):
    return _grad_like(grad.expand(x.shape), x), None


@compute(aten.sum.dim_IntList)
def sum_dims(x, dims, keepdim, dtype):
    axes = _axes(dims, x.ndim)
    return np.sum(_accumulate(x, dtype), axis=axes, keepdims=keepdim and x.ndim > 0)


@derivative(aten.sum.dim_IntList)
def sum_dims_backward(grad, out, x, dims, keepdim, dtype):
    return _grad_like(_unreduce(grad, dims, x.dim(), keepdim).expand(x.shape), x), None, None, None


def _count(x, axes) -> int:
    """How many elements each reduction over `axes` sees."""
    return x.size if axes is None else math.prod(x.shape[a] for a in axes)


def _mean(x, dims, keepdim):
    # The sum over the count, not np.mean, which warns on an empty slice where PyTorch quietly
    # gives NaN.
    axes = _axes(dims, x.ndim)
    return np.sum(x, axis=axes, keepdims=keepdim and x.ndim > 0) / _count(x, axes)


def _mean_backward(grad, x, dims, keepdim):
    # FunctionsManual.cpp mean_backward: the count is x's numel for a reduction over every dim.
    count = x.numel() if not dims else _safe_size(x.shape, dims)
    return _unreduce(grad, dims, x.dim(), keepdim).expand(x.shape) / count


def _safe_size(sizes, dims) -> int:
    """FunctionsManual.cpp _safe_size: how many elements a reduction over `dims` sees, or 1."""
    if len(sizes) == 0:
        return 1
    return math.prod(sizes[_dim(d, len(sizes))] for d in dims)


@compute(aten.mean.default)
def mean_all(x, dtype):
    return _mean(_accumulate(x, dtype), None, False)


@derivative(aten.mean.default)
def mean_all_backward(grad, out, x, dtype):
    return _grad_like(_mean_backward(grad, x, None, False), x), None


@compute(aten.mean.dim)
def mean_dims(x, dims, keepdim, dtype):
    return _mean(_accumulate(x, dtype), dims, keepdim)


@derivative(aten.mean.dim)
def mean_dims_backward(grad, out, x, dims, keepdim, dtype):
    return _grad_like(_mean_backward(grad, x, dims, keepdim), x), None, None, None


@compute(aten.amax.default)
def amax(x, dims, keepdim):
    return np.max(x, axis=_axes(dims, x.ndim), keepdims=keepdim and x.ndim > 0)


@compute(aten.amin.default)
def amin(x, dims, keepdim):
    return np.min(x, axis=_axes(dims, x.ndim), keepdims=keepdim and x.ndim > 0)


@derivative(aten.amax.default, aten.amin.default)
def amax_backward(grad, out, x, dims, keepdim):
    # FunctionsManual.cpp scale_grad_by_count: tied extremes share the gradient equally. A NaN
    # extreme matches nothing, so its slice gets (grad / 0) * 0, NaN.
    hits = _unreduce(out, dims, x.dim(), keepdim) == x
    share = _unreduce(grad, dims, x.dim(), keepdim) / hits.sum(dims, keepdim=True)
    return _grad_like(share * hits, x), None, None


@compute(aten.max.default)
def max_all(x):
    return np.max(x)


@compute(aten.min.default)
def min_all(x):
    return np.min(x)


@derivative(aten.max.default, aten.min.default)
def max_all_backward(grad, out, x):
    # FunctionsManual.cpp evenly_distribute_backward: tied extremes share the gradient equally,
    # and a NaN extreme shares it among the NaNs.
    hits = torch.logical_or(x == out, torch.logical_and(torch.isnan(x), torch.isnan(out)))
    return (_grad_like(torch.where(hits, grad / hits.sum(), 0.0), x),)


# r[ops.aten-values.variance]: ATen's kernel gives the values, the derivatives below are the
# table's, reading what eager's formulas read.
aten_valued(run_aten, aten.var.correction, aten.std.correction, aten.var_mean.correction)


def _correction(correction) -> float:
    return 1 if correction is None else correction


def _var_backward(grad, x, dims, correction, keepdim):
    # FunctionsManual.cpp var_backward: 2 / (n - correction) * grad * (x - mean). An empty dim
    # list is taken as n = 1 there (not as every dim, as the forward does), so its gradient is
    # inf or NaN; this follows PyTorch.
    correction = _correction(correction)
    if x.dim() == 0 or dims is None:
        dof = x.numel() - correction
        if dof <= 0:
            # 2 / dof is infinite: inf * 0 is NaN where x is the mean, inf elsewhere.
            return grad * torch.where(x == x.mean(), math.nan, math.inf)
        return (2.0 / dof) * grad * (x - x.mean())
    dof = _safe_size(x.shape, dims) - correction
    scale = 2.0 / dof if dof != 0 else math.inf
    grad = _unreduce(grad, dims, x.dim(), keepdim)
    return scale * grad * (x - x.mean(dims, keepdim=True))


@derivative(aten.var.correction)
def var_backward(grad, out, x, dims, correction, keepdim):
    return _grad_like(_var_backward(grad, x, dims, correction, keepdim), x), None, None, None


@derivative(aten.std.correction)
def std_backward(grad, out, x, dims, correction, keepdim):
    # std = sqrt(var); where std is 0 the gradient is 0, not inf (masked_fill in std_backward).
    var_grad = torch.where(out == 0, 0.0, grad / (out * 2))
    return _grad_like(_var_backward(var_grad, x, dims, correction, keepdim), x), None, None, None


@derivative(aten.var_mean.correction)
def var_mean_backward(grads, outs, x, dims, correction, keepdim):
    # Either output's gradient may be missing (None); the rule runs when one is there.
    var_grad, mean_grad = grads
    x_grad = None if var_grad is None else _var_backward(var_grad, x, dims, correction, keepdim)
    if mean_grad is not None:
        from_mean = _mean_backward(mean_grad, x, dims, keepdim)
        x_grad = from_mean if x_grad is None else x_grad + from_mean
    return _grad_like(x_grad, x), None, None, None


# ---------------------------------------------------------------- normalizations
# First-class entries, not decompositions, so that autograd saves what eager saves
# (`r[hooks.eager.saved-set]`): softmax and log_softmax their result, not the intermediates of a
# decomposition. Their backward ops are entries too, so each backward is one node, as in eager.
# layer_norm is ATen-valued (`r[ops.aten-values]`): its values are the CPU kernel's, bit for bit.


def _refuse_half_to_float(op: str, half_to_float: bool) -> None:
    """r[ops.table]: `half_to_float=True` is a CUDA-only form; PyTorch's CPU kernels refuse it
    too."""
    if half_to_float:
        raise UnsupportedError(
            f"op aten.{op}.default with half_to_float=True is not in the reference op table",
            rule="ops.table",
            fix=f"pass dtype=torch.float32 to torch.{op.removeprefix('_')} instead",
        )


def _minus_max(x, axis: int):
    """`x` less its maximum along `axis`, the shift that keeps exp from overflowing. A slice of
    -inf only gives NaN (-inf - -inf), as in PyTorch; an empty slice gives an empty result."""
    return x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)


@compute(aten._softmax.default)
def softmax(x, dim, half_to_float):
    _refuse_half_to_float("_softmax", half_to_float)
    rows = np.atleast_1d(x)  # a 0-dim x is one slice of one element
    exps = np.exp(_minus_max(rows, _dim(dim, x.ndim)))
    return (exps / np.sum(exps, axis=_dim(dim, x.ndim), keepdims=True)).reshape(x.shape)


@derivative(aten._softmax.default)
def softmax_backward(grad, out, x, dim, half_to_float):
    # derivatives.yaml: _softmax_backward_data(grad, result, dim, self.scalar_type()), which reads
    # the result only.
    return aten._softmax_backward_data(grad, out, dim, x.dtype), None, None


@compute(aten._softmax_backward_data.default)
def softmax_backward_data(grad, out, dim, input_dtype):
    # `input_dtype` sets only the output's dtype, which the meta kernel gives
    # (r[ops.fresh-output]).
    rows, axis = np.atleast_1d(out), _dim(dim, out.ndim)
    grads = np.atleast_1d(grad)
    return (rows * (grads - np.sum(grads * rows, axis=axis, keepdims=True))).reshape(out.shape)


@derivative(aten._softmax_backward_data.default)
def softmax_backward_data_backward(grad, out, grad_output, output, dim, input_dtype):
    # derivatives.yaml: _softmax_backward_data again for grad_output, softmax_double_backward for
    # output.
    grad_output_grad = aten._softmax_backward_data(grad, output, dim, input_dtype)
    output_grad = (
        grad_output * grad
        - (output * grad_output).sum(dim, keepdim=True) * grad
        - grad_output * (output * grad).sum(dim, keepdim=True)
    )
    return _grad_like(grad_output_grad, grad_output), _grad_like(output_grad, output), None, None


@compute(aten._log_softmax.default)
def log_softmax(x, dim, half_to_float):
    _refuse_half_to_float("_log_softmax", half_to_float)
    rows = np.atleast_1d(x)
    shifted = _minus_max(rows, _dim(dim, x.ndim))
    log_sums = np.log(np.sum(np.exp(shifted), axis=_dim(dim, x.ndim), keepdims=True))
    return (shifted - log_sums).reshape(x.shape)


@derivative(aten._log_softmax.default)
def log_softmax_backward(grad, out, x, dim, half_to_float):
    # derivatives.yaml: _log_softmax_backward_data(grad, result, dim, self.scalar_type()), which
    # reads the result only.
    return aten._log_softmax_backward_data(grad, out, dim, x.dtype), None, None


@compute(aten._log_softmax_backward_data.default)
def log_softmax_backward_data(grad, out, dim, input_dtype):
    rows, axis = np.atleast_1d(out), _dim(dim, out.ndim)
    grads = np.atleast_1d(grad)
    return (grads - np.exp(rows) * np.sum(grads, axis=axis, keepdims=True)).reshape(out.shape)


@derivative(aten._log_softmax_backward_data.default)
def log_softmax_backward_data_backward(grad, out, grad_output, output, dim, input_dtype):
    # derivatives.yaml's two formulas, for grad_output and for output.
    probabilities = torch.exp(output)
    grad_output_grad = grad - (grad * probabilities).sum(dim, keepdim=True)
    output_grad = -grad_output.sum(dim, keepdim=True) * probabilities * grad
    return _grad_like(grad_output_grad, grad_output), _grad_like(output_grad, output), None, None


# ---------------------------------------------------------------- creation
# Bytes of `empty*` are unspecified; the reference zero-fills them and no conforming program
# reads them.


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


nondifferentiable(
    aten.zeros.default,
    aten.empty.memory_format,
    aten.empty_strided.default,
    aten.ones.default,
    aten.full.default,
    aten.scalar_tensor.default,
    aten.arange.default,
    aten.arange.start,
    aten.arange.start_step,
)


@compute(aten.zeros_like.default, aten.empty_like.default, aten.zero.default)
def zeros_like(x, *_):
    return np.zeros(x.shape)


# *_like ops read only x's metadata, so they carry no gradient; zero and fill overwrite x's values
# and pass a zero gradient (zeros_like(grad) in derivatives.yaml).
nondifferentiable(aten.zeros_like.default, aten.empty_like.default)
derivative(aten.zero.default)(zero_backward)


@compute(aten.ones_like.default)
def ones_like(x, *_):
    return np.ones(x.shape)


nondifferentiable(aten.ones_like.default)


@compute(aten.full_like.default, aten.fill.Scalar)
def full_like(x, fill_value, *_):
    return np.full(x.shape, fill_value)


nondifferentiable(aten.full_like.default)


@derivative(aten.fill.Scalar)
def fill_backward(grad, out, x, value):
    return (*zero_backward(grad, out, x), None)


@compute(aten.new_zeros.default, aten.new_empty.default)
def new_zeros(x, size, *_):
    return np.zeros(size)


@compute(aten.new_ones.default)
def new_ones(x, size, *_):
    return np.ones(size)


@compute(aten.new_full.default)
def new_full(x, size, fill_value, *_):
    return np.full(size, fill_value)


nondifferentiable(
    aten.new_zeros.default, aten.new_empty.default, aten.new_ones.default, aten.new_full.default
)


# ---------------------------------------------------------------- in-place variants
# r[aliasing.inplace.writes-through]: x.op_(...) computes op(x, ...) and writes it into x's
# storage.

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
# r[aliasing.view.shares-storage]: each rule maps the input's layout to the output's; no bytes
# move.


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


@derivative(aten.view.default, aten._unsafe_view.default)
def reshape_backward(grad, out, x, *args):
    # For every view that keeps the elements in order (view, squeeze, unsqueeze).
    return (_grad_like(grad.reshape(x.shape), x), *(None for _ in args))


@view(aten.alias.default, aten.detach.default)
def alias(layout: Layout):
    return layout


derivative(aten.alias.default)(pass_backward)
nondifferentiable(aten.detach.default)


@view(aten.t.default)
def t(layout: Layout):
    if len(layout.sizes) < 2:
        return layout
    return transpose(layout, 0, 1)


@derivative(aten.t.default)
def t_backward(grad, out, x):
    return (_grad_like(grad.t(), x),)


@view(aten.transpose.int)
def transpose(layout: Layout, dim0, dim1):
    ndim = len(layout.sizes)
    if ndim == 0:
        return layout
    dim0, dim1 = _dim(dim0, ndim), _dim(dim1, ndim)
    return permute(layout, [dim1 if d == dim0 else dim0 if d == dim1 else d for d in range(ndim)])


@derivative(aten.transpose.int)
def transpose_backward(grad, out, x, dim0, dim1):
    return _grad_like(grad.transpose(dim0, dim1), x), None, None


@view(aten.permute.default)
def permute(layout: Layout, dims):
    dims = [_dim(d, len(layout.sizes)) for d in dims]
    sizes = tuple(layout.sizes[d] for d in dims)
    strides = tuple(layout.strides[d] for d in dims)
    return Layout(layout.dtype, sizes, strides, layout.offset)


@derivative(aten.permute.default)
def permute_backward(grad, out, x, dims):
    inverse = [0] * len(dims)
    for i, d in enumerate(dims):
        inverse[_dim(d, len(dims))] = i
    return _grad_like(grad.permute(inverse), x), None


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


# The gradient of an expand is grad summed back to x's shape, as _grad_like does for every rule.
derivative(aten.expand.default)(pass_backward)


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


@derivative(aten.slice.Tensor)
def slice_backward(grad, out, x, dim, start, end, step):
    window = slice_(_contiguous_layout(x), dim, start, end, step)
    return _grad_like(_views_into_zeros([grad], x, [window]), x), None, None, None, None


@view(aten.select.int)
def select(layout: Layout, dim, index):
    dim = _dim(dim, len(layout.sizes))
    size = layout.sizes[dim]
    if not -size <= index < size:
        raise IndexError(
            f"select(): index {index} out of range for tensor of size {layout.sizes} "
            f"at dimension {dim}"
        )
    index %= size
    sizes = layout.sizes[:dim] + layout.sizes[dim + 1 :]
    strides = layout.strides[:dim] + layout.strides[dim + 1 :]
    return Layout(layout.dtype, sizes, strides, layout.offset + index * layout.strides[dim])


@derivative(aten.select.int)
def select_backward(grad, out, x, dim, index):
    window = select(_contiguous_layout(x), dim, index)
    return _grad_like(_views_into_zeros([grad], x, [window]), x), None, None


@view(aten.unsqueeze.default)
def unsqueeze(layout: Layout, dim):
    ndim = len(layout.sizes)
    dim = _dim(dim, ndim + 1)
    # ATen: the new dim's stride is the stride the dim after it would step over (1 at the end).
    stride = layout.sizes[dim] * layout.strides[dim] if dim < ndim else 1
    sizes = layout.sizes[:dim] + (1,) + layout.sizes[dim:]
    strides = layout.strides[:dim] + (stride,) + layout.strides[dim:]
    return Layout(layout.dtype, sizes, strides, layout.offset)


derivative(aten.unsqueeze.default)(reshape_backward)


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


derivative(aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims)(reshape_backward)


@view(aten.split_with_sizes.default)
def split_with_sizes(layout: Layout, split_sizes, dim):
    starts = np.cumsum([0, *split_sizes])
    bounds = zip(starts[:-1], starts[1:], strict=True)
    return tuple(slice_(layout, dim, int(a), int(b), 1) for a, b in bounds)


@derivative(aten.split_with_sizes.default)
def split_with_sizes_backward(grads, outs, x, split_sizes, dim):
    windows = split_with_sizes(_contiguous_layout(x), split_sizes, dim)
    return _grad_like(_pieces_joined(grads, windows, dim), x), None, None


def _pieces_joined(grads, windows, dim):
    """The gradient of a tensor split along `dim` into pieces laid out as `windows`: the pieces'
    gradients joined along `dim`, zeros for a piece nobody used, as eager's derivative of
    split_with_sizes: one `cat`, where writing each into zeros would copy the whole tensor once
    per piece."""
    like = next(g for g in grads if g is not None)
    pieces = [
        grad if grad is not None else like.new_zeros(window.sizes)
        for grad, window in zip(grads, windows, strict=True)
    ]
    return aten.cat(pieces, dim)


@view(aten.split.Tensor)
def split(layout: Layout, split_size, dim):
    size = layout.sizes[_dim(dim, len(layout.sizes))]
    chunks = max(1, -(-size // split_size)) if split_size else 1
    sizes = [min(split_size, size - i * split_size) for i in range(chunks)]
    return split_with_sizes(layout, sizes, dim)


@derivative(aten.split.Tensor)
def split_backward(grads, outs, x, split_size, dim):
    windows = split(_contiguous_layout(x), split_size, dim)
    return _grad_like(_pieces_joined(grads, windows, dim), x), None, None


@view(aten.unbind.int)
def unbind(layout: Layout, dim):
    size = layout.sizes[_dim(dim, len(layout.sizes))]
    return tuple(select(layout, dim, i) for i in range(size))


@derivative(aten.unbind.int)
def unbind_backward(grads, outs, x, dim):
    windows = unbind(_contiguous_layout(x), dim)
    return _grad_like(_views_into_zeros(grads, x, windows), x), None


@view(aten.as_strided.default)
def as_strided(layout: Layout, size, stride, storage_offset):
    # The offset is absolute within the storage, not relative to the input's offset.
    offset = layout.offset if storage_offset is None else storage_offset
    return Layout(layout.dtype, size, stride, offset)


def _may_overlap(layout: Layout) -> bool:
    """FunctionsManual.cpp _maybe_overlapping_memory: False only if no two elements share a
    location. Dims in increasing stride order; each stride must step past all the dims before it.
    """
    reach = 0
    for size, stride in sorted(zip(layout.sizes, layout.strides, strict=True), key=lambda p: p[1]):
        if size == 1:
            continue
        if stride <= reach:
            return True
        reach += stride * (size - 1)
    return False


@derivative(aten.as_strided.default)
def as_strided_backward(grad, out, x, size, stride, storage_offset):
    # FunctionsManual.cpp as_strided_backward: a zero buffer stands for the storage both layouts
    # read (from the lower of their offsets). grad is added at the locations the output reads, so
    # a location it reads twice gets both; then x reads its own locations, and a location that
    # several elements of x share is split evenly among them.
    inputs = Layout.of(x)
    output = as_strided(inputs, size, stride, storage_offset)
    if inputs.numel == 0 or output.numel == 0:
        return _grad_like(grad.new_zeros(x.shape), x), None, None, None
    base = min(inputs.offset, output.offset)
    length = max(inputs.extent_elements(), output.extent_elements()) - base
    locations = torch.arange(length, device=grad.device)

    def read(layout: Layout):
        return locations.as_strided(layout.sizes, layout.strides, layout.offset - base).reshape(-1)

    if (
        output.offset == base
        and output.numel == length
        and output.strides == contiguous_strides(output.sizes)
    ):
        # the output reads every location once, in order: grad is the buffer (no zeros, no scatter;
        # the backward of reading a parameter's whole storage, FSDP's pattern)
        buffer = grad.contiguous().view(-1)  # an expanded grad (sum's) is copied, not viewed
    elif _may_overlap(output):
        buffer = aten.index_put(grad.new_zeros(length), [read(output)], grad.reshape(-1), True)
    else:  # each location read once: a plain scatter, no index arithmetic
        window = (output.sizes, output.strides, output.offset - base)
        buffer = aten.as_strided_scatter(grad.new_zeros(length), grad, *window)
    if _may_overlap(inputs):
        shared = read(inputs)
        ones = torch.ones_like(shared, dtype=grad.dtype)
        count = aten.index_put(grad.new_zeros(length), [shared], ones, True)
        buffer = buffer / count
    # as_strided's offset counts from the start of the buffer's storage, not of the buffer
    x_grad = buffer.as_strided(
        inputs.sizes, inputs.strides, buffer.storage_offset() + inputs.offset - base
    )
    return _grad_like(x_grad, x), None, None, None


# ---------------------------------------------------------------- sizes
# r[sizes.symbolic.arithmetic]: a symbolic plan's graphs compute sizes as the program's Python
# did: a size op reads a number of a tensor's layout, an arithmetic op is Python's own.


@size_op(aten.sym_size.int)
def sym_size(x, dim: int) -> int:
    return x.layout.sizes[dim]


@size_op(aten.sym_stride.int)
def sym_stride(x, dim: int) -> int:
    return x.layout.strides[dim]


@size_op(aten.sym_numel.default)
def sym_numel(x) -> int:
    return x.layout.numel


@size_op(aten.sym_storage_offset.default)
def sym_storage_offset(x) -> int:
    return x.layout.offset


#: The operations on sizes that tracing records as they are (`operator.mul`, `torch.sym_max`).
SIZE_ARITHMETIC = (
    *(getattr(operator, name) for name in ("add", "sub", "mul", "floordiv", "mod", "neg")),
    *(getattr(operator, name) for name in ("truediv", "pow", "eq", "ne", "lt", "le", "gt", "ge")),
    torch.sym_max,
    torch.sym_min,
    torch.sym_float,
    torch.sym_not,
    torch.sym_sum,
)
for arithmetic in SIZE_ARITHMETIC:
    size_op(arithmetic)(arithmetic)
