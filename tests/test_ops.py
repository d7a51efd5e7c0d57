"""Every op table entry against eager PyTorch, OpInfo-style (`specs/ops.md`).

Each entry has sample inputs: seeded values, irregular shapes, 0-dim and size-0 tensors where the
op takes them, transposed and sliced (non-contiguous, offset) tensors, and Python scalars.
A sample runs through `aotspec.reference.run` and through eager PyTorch on twin copies of its
inputs; the two must agree on every output and on every input afterwards (dtype, sizes, strides,
offset, storage size, values with `torch.testing.assert_close` defaults) and on which tensors share
a storage (`aotspec.conformance.observe`).
Casts must agree exactly: a conversion rounds one way only.
Where eager PyTorch and the spec knowingly differ (META_STRIDES, OPMATH_ORACLE), the sample is
held to the spec's rule instead, computed with PyTorch.

Beyond single ops: every composite op that capture decomposes, a 2-layer MLP and an attention
block run against eager, and an op outside the table is refused at capture (`r[ops.table]`).

Conventions: `op` is an OpOverload, `make` a Make (seeded tensors of the dtype under test).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable
from functools import partial
from itertools import islice

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from attrs import define, field, frozen
from torch._subclasses import FakeTensorMode

import aotspec
from aotspec import UnsupportedError
from aotspec.conformance.observe import differences, observe
from aotspec.reference import run
from aotspec.reference.aten import mutation_decompositions
from aotspec.reference.boundary import storage_from_torch
from aotspec.reference.collectives import COLLECTIVES, WAIT
from aotspec.reference.ops import IN_PLACE_VARIANTS
from aotspec.reference.optable import OP_TABLE, OpKind, lookup, qualified_name
from aotspec.reference.storage import Layout, Tensor
from aotspec.versions import add_note

aten = torch.ops.aten

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
NUMERIC = (*FLOATS, torch.int64)
ALL = (*NUMERIC, torch.bool)
#: One dtype per kind of value (float, reduced float, integer, bool), and per item size, for ops
#: whose values do not depend on the dtype's precision: views, creation, comparisons.
KINDS = (torch.float32, torch.float16, torch.int64, torch.bool)
NUMERIC_KINDS = KINDS[:3]
CAST_TARGETS = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.int64,
    torch.bool,
)


# ---------------------------------------------------------------- samples


@frozen
class Sample:
    """The arguments of one call: `op(*args, **kwargs)`."""

    args: tuple
    kwargs: dict = field(factory=dict)

    def __str__(self) -> str:
        parts = [_describe(a) for a in self.args]
        parts += [f"{k}={_describe(v)}" for k, v in self.kwargs.items()]
        return f"({', '.join(parts)})"


def sample(*args, **kwargs) -> Sample:
    return Sample(args, kwargs)


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        layout = f"strides {value.stride()} offset {value.storage_offset()}"
        return f"{dtype}{list(value.shape)} {layout}"
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        return f"[{', '.join(_describe(v) for v in value)}]"
    return repr(value)


#: How to lay out a tensor of `shape`: the base tensor's shape, and the view of it to return.
_LAYOUTS: dict[str, tuple[Callable, Callable]] = {
    "contiguous": (lambda shape: shape, lambda t: t),
    # Dims reversed in memory: dense but not contiguous.
    "transposed": (lambda shape: shape[::-1], lambda t: t.permute(*reversed(range(t.dim())))),
    # Every other element of a longer last dim, from the second: gaps and a storage offset.
    "sliced": (lambda shape: (*shape[:-1], 2 * shape[-1] + 1), lambda t: t[..., 1::2]),
}


@define
class Make:
    """Seeded sample tensors of one dtype: `make((3, 4), "transposed")`."""

    dtype: torch.dtype
    generator: torch.Generator = field(factory=lambda: torch.Generator().manual_seed(17))

    def __call__(self, shape, layout="contiguous", *, dtype=None, nonzero=False, nonneg=False):
        dtype = self.dtype if dtype is None else dtype
        base_shape, view_of = _LAYOUTS[layout]
        base_sizes = base_shape(tuple(shape))
        values = 3 * torch.randn(base_sizes, generator=self.generator, dtype=torch.float64)
        if nonneg:
            values = values.abs()
        if nonzero:
            values = torch.where(values.abs() < 0.5, 1.0, values)
        if dtype == torch.bool:
            base = values > 0
        elif dtype.is_complex:
            imag = 3 * torch.randn(base_sizes, generator=self.generator, dtype=torch.float64)
            base = torch.complex(values, imag).to(dtype)
        elif dtype.is_floating_point:
            base = values.to(dtype)
        else:
            base = values.round().to(dtype)
        return view_of(base)

    def special(self) -> torch.Tensor:
        """NaN, infinities, signed zeros, halves (round to even), tiny and large values."""
        values = [math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, -2.5, 3.5, 1e-8, 1000.0, -1000.0]
        return torch.tensor(values, dtype=self.dtype)

    def scalar(self):
        """A Python number of the dtype's kind."""
        if self.dtype == torch.bool:
            return True
        return 2.5 if self.dtype.is_floating_point else 3

    @property
    def other(self) -> torch.dtype:
        """A dtype that promotes with this one."""
        return torch.float32 if self.dtype in (torch.int64, torch.bool) else torch.int64


def unary(make: Make) -> Iterable[Sample]:
    yield sample(make(()))
    yield sample(make((0, 4)))
    yield sample(make((2, 3, 4), "transposed"))
    yield sample(make((4, 3), "sliced"))
    if make.dtype.is_floating_point:
        yield sample(make.special())


def wait_samples(make: Make) -> Iterable[Sample]:
    """Dense tensors, as collectives return them (wait_tensor refuses others:
    test_wait_refuses_a_layout_its_meta_kernel_does_not_keep)."""
    yield sample(make(()))
    yield sample(make((0, 4)))
    yield sample(make((2, 3, 4), "transposed"))


def hard_quotients(make: Make) -> Sample:
    """Divisions whose rounded quotient misleads, and signs that tell floor from trunc.

    In float32 and float64, 1.0 / 0.1 rounds up to 10.0, yet 1.0 // 0.1 is 9.0.
    """
    if make.dtype.is_floating_point:
        dividends, divisors = [1.0, -1.0, 0.7, 3.0], [0.1, 0.1, 0.1, -0.3]
    else:
        dividends, divisors = [7, -7, 7, -7], [2, 2, -2, -2]
    return sample(*(torch.tensor(values, dtype=make.dtype) for values in (dividends, divisors)))


def binary(make: Make, *, nonzero=False, scalar=False, other_dtype=None) -> Iterable[Sample]:
    """nonzero: a divisor, with no zero in it and hard quotients among the samples."""
    other = partial(make, nonzero=nonzero)
    yield sample(make((3, 5)), other((3, 5), "transposed"))
    yield sample(make((4, 1)), other((1, 3), "sliced"))
    yield sample(make((2, 3)), other(()))
    yield sample(make((0, 3)), other((3,)))
    yield sample(make((4,)), other((4,), dtype=other_dtype or make.other))
    if nonzero:
        yield hard_quotients(make)
    if scalar:
        # A few Tensor overloads also take a Python number for `other` (`x * 2` records this).
        yield sample(make((3, 4), "sliced"), make.scalar())


def with_scalar(make: Make, *, integral=False) -> Iterable[Sample]:
    yield sample(make((3, 5)), make.scalar())
    yield sample(make(()), -2)
    yield sample(make((0, 4)), make.scalar())
    yield sample(make((2, 3, 4), "transposed"), 6 if integral else 0.5)


def divide_mode(make: Make, *, scalar=False) -> Iterable[Sample]:
    divisor = partial(make, nonzero=True)
    for mode in ("trunc", "floor", None):
        if scalar:
            other = -1.5 if make.dtype.is_floating_point else -2
            yield sample(make((3, 5), "transposed"), other, rounding_mode=mode)
        else:
            yield sample(*hard_quotients(make).args, rounding_mode=mode)
            yield sample(make((3, 5)), divisor((3, 5), "transposed"), rounding_mode=mode)
            yield sample(make((3, 5)), divisor((5,), "sliced"), rounding_mode=mode)
            yield sample(make(()), divisor((2, 1)), rounding_mode=mode)


def pow_tensor_scalar(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 5)), 2)
    yield sample(make(()), 3)
    yield sample(make((0, 4)), 2)
    yield sample(make((2, 3, 4), "transposed"), 0.5)
    yield sample(make((4, 3), "sliced"), -1.5)


def pow_tensor_tensor(make: Make) -> Iterable[Sample]:
    # Integers to negative integer powers are an error: integer exponents are >= 0.
    nonneg = not make.dtype.is_floating_point
    yield sample(make((3, 5), nonneg=True), make((3, 5), "transposed", nonneg=nonneg))
    yield sample(make((4, 1)), make((3,), nonneg=nonneg))
    yield sample(make(()), make((2, 2), "sliced", nonneg=nonneg))


def pow_scalar_tensor(make: Make) -> Iterable[Sample]:
    nonneg = not make.dtype.is_floating_point
    yield sample(2, make((3, 5), nonneg=nonneg))
    yield sample(1.5, make((2, 3), "transposed", nonneg=nonneg))
    yield sample(-2, make((), nonneg=nonneg))


def clamp_samples(make: Make) -> Iterable[Sample]:
    low, high = (-0.5, 0.5) if make.dtype.is_floating_point else (-1, 2)
    yield sample(make((3, 5)), low, high)
    yield sample(make((2, 3, 4), "transposed"), None, high)
    # min > max gives max everywhere.
    yield sample(make((4, 3), "sliced"), high, low)
    yield sample(make(()), low, None)
    yield sample(make((0, 4)), low, high)
    if make.dtype.is_floating_point:
        yield sample(make.special(), low, high)


def clamp_tensor(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 5)), make((3, 5), "transposed"), make((5,)))
    yield sample(make((2, 3), "sliced"), None, make(()))
    yield sample(make((4, 1)), make((1, 3)), None)


def clamp_bound(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 5)), make.scalar())
    yield sample(make((2, 3, 4), "transposed"), -1)
    yield sample(make(()), 0)
    yield sample(make((0, 4)), 1)
    if make.dtype.is_floating_point:
        yield sample(make.special(), 0.0)


def where_samples(make: Make) -> Iterable[Sample]:
    condition = partial(make, dtype=torch.bool)
    yield sample(condition((3, 5)), make((3, 5), "transposed"), make((3, 5)))
    yield sample(condition((4, 1)), make((1, 3)), make((4, 3), "sliced"))
    yield sample(condition(()), make((2, 2)), make(()))
    yield sample(condition((0, 3)), make((3,)), make((0, 1)))
    yield sample(condition((4,)), make((4,)), make((4,), dtype=make.other))


def threshold_backward_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 5)), make((3, 5), "transposed"), 0.0)
    yield sample(make((4, 3), "sliced"), make((4, 3)), 1.5)
    yield sample(make(()), make(()), 0)
    yield sample(make((11,)), make.special(), 0.0)


#: Just above a tie of float16 (then bfloat16, float8_e4m3fn, float8_e5m2) at 1.0, by less than
#: float32 keeps: converted through float32 (PyTorch), they round down to 1.0; directly, up.
DOUBLE_ROUNDING = [1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40, 1 + 2**-4 + 2**-40, 1 + 2**-3 + 2**-40]


def cast_samples(make: Make) -> Iterable[Sample]:
    for target in CAST_TARGETS:
        yield sample(make((3, 5)), dtype=target)
        yield sample(make((2, 3, 4), "transposed"), dtype=target)
        # NaN and infinities to an integer are undefined behaviour in C++: no oracle to match.
        if make.dtype.is_floating_point and target != torch.int64:
            yield sample(make.special(), dtype=target)
        if make.dtype == torch.float64:
            yield sample(torch.tensor(DOUBLE_ROUNDING, dtype=make.dtype), dtype=target)
    yield sample(make((4, 3), "sliced"))
    yield sample(make(()), dtype=make.other)


def clone_samples(make: Make) -> Iterable[Sample]:
    yield from unary(make)
    yield sample(make((2, 3, 4), "transposed"), memory_format=torch.contiguous_format)


def copy_samples(make: Make, *, offset_target=True) -> Iterable[Sample]:
    yield sample(make((3, 5)), make((3, 5), "transposed"))
    yield sample(make((3, 5), "transposed"), make((1, 5)))
    yield sample(make(()), make(()))
    yield sample(make((0, 4)), make((4,)))
    target = make((4, 3), "sliced" if offset_target else "transposed")
    yield sample(target, make((4, 3), dtype=make.other))


def as_strided_scatter_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((10,)), make((2, 2)), (2, 2), (4, 1), 1)
    yield sample(make((3, 4)), make((2, 3), "transposed"), (2, 3), (1, 2), 0)
    yield sample(make((6,)), make((0, 2)), (0, 2), (2, 1), None)


def index_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((6,)), [torch.tensor([0, 2, 2, 5])])
    yield sample(make((3, 4), "transposed"), [None, torch.tensor([3, 1])])
    yield sample(make((3, 4)), [torch.tensor([2, 0]), torch.tensor([1, 3])])


def index_put_samples(make: Make) -> Iterable[Sample]:
    positions = torch.tensor([0, 2, 2, 5])
    yield sample(make((6,)), [positions], make((4,)), True)
    yield sample(make((6,)), [torch.tensor([1, 4])], make((2,)), False)
    yield sample(make((3, 4)), [torch.tensor([0, 2, 0])], make((3, 4)), True)


def cat_samples(make: Make) -> Iterable[Sample]:
    yield sample([make((2, 3)), make((4, 3), "sliced")])
    yield sample([make((2, 3), "transposed"), make((2, 1))], -1)
    # Legacy rule: a 1-D empty tensor is skipped whatever the other shapes.
    yield sample([make((2, 3)), make((0,)), make((2, 2))], 1)
    yield sample([make((0, 3)), make((2, 3))])
    yield sample([make((3,)), make((2,), dtype=make.other)])


def mm_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 4)), make((4, 5)))
    yield sample(make((3, 4), "transposed"), make((4, 5), "sliced"))
    yield sample(make((3, 0)), make((0, 5)))
    yield sample(make((0, 4)), make((4, 2)))
    yield sample(make((1, 1)), make((1, 1)))


def bmm_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((2, 3, 4)), make((2, 4, 5)))
    yield sample(make((2, 3, 4), "transposed"), make((2, 4, 5), "sliced"))
    yield sample(make((0, 2, 3)), make((0, 3, 1)))
    yield sample(make((2, 3, 0)), make((2, 0, 4)))


def addmm_samples(make: Make) -> Iterable[Sample]:
    alpha, beta = (2.5, 0.5) if make.dtype.is_floating_point else (2, 3)
    yield sample(make((5,)), make((3, 4)), make((4, 5)))
    yield sample(
        make((3, 5), "transposed"), make((3, 4), "sliced"), make((4, 5)), beta=beta, alpha=alpha
    )
    yield sample(make(()), make((2, 0)), make((0, 3)), alpha=alpha)
    if make.dtype.is_floating_point:
        # beta == 0 ignores the bias, NaN included.
        nan_bias = torch.full((1, 5), math.nan, dtype=make.dtype)
        yield sample(nan_bias, make((3, 4)), make((4, 5)), beta=0)


def reduce_all(make: Make, *, empty=True) -> Iterable[Sample]:
    yield sample(make((3, 5)))
    yield sample(make(()))
    yield sample(make((2, 3, 4), "transposed"))
    yield sample(make((4, 3), "sliced"))
    if empty:
        yield sample(make((0, 4)))


def cancelling(make: Make) -> torch.Tensor:
    """2**25 + 1 - 2**25: 1 in float64, 0 when accumulated in float32."""
    return torch.tensor([2.0**25, 1.0, -(2.0**25)]).to(make.dtype)


def reduce_all_with_dtype(make: Make) -> Iterable[Sample]:
    yield from reduce_all(make)
    yield sample(cancelling(make), dtype=torch.float64)


def reduce_dims(make: Make, *, empty_dim=True, dtype_arg=False) -> Iterable[Sample]:
    yield sample(make((3, 5)), [1])
    yield sample(make((2, 3, 4), "transposed"), [0, -1], True)
    yield sample(make((4, 3), "sliced"), [])
    yield sample(make(()), [0], True)
    yield sample(make((0, 4)), [1])
    if empty_dim:
        yield sample(make((0, 4)), [0])
    if dtype_arg:
        yield sample(cancelling(make), [0], dtype=torch.float64)


def var_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 5)), [1])
    yield sample(make((2, 3, 4), "transposed"), [0, -1], correction=0, keepdim=True)
    yield sample(make((4, 3), "sliced"), None, correction=2)
    # One element per group and correction 1: 0 / 0 is NaN.
    yield sample(make(()), None)
    yield sample(make((1, 4)), [0])


# Normalizations.


def softmax_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 5)), -1, False)
    yield sample(make((2, 3, 4), "transposed"), 1, False)
    yield sample(make((4, 3), "sliced"), 0, False)
    yield sample(make(()), 0, False)
    yield sample(make((0, 4)), -1, False)
    yield sample(make((0, 4)), 0, False)
    # Slices of -inf only (NaN), one finite among -inf, and a spread that overflows exp unshifted.
    inf = math.inf
    extremes = [[-inf, -inf, -inf], [-inf, 0.0, 1.0], [100.0, -100.0, 0.0]]
    yield sample(torch.tensor(extremes, dtype=make.dtype), -1, False)


def layer_norm_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 5)), [5], make((5,)), make((5,)), 1e-5)
    yield sample(make((2, 3, 4), "transposed"), [3, 4], make((3, 4)), make((3, 4), "sliced"), 1e-5)
    yield sample(make((4, 6), "sliced"), [6], None, None, 1e-5)
    yield sample(make((2, 3, 4)), [4], make((4,), "sliced"), None, 0.1)
    yield sample(make((5,)), [5], None, make((5,)), 1e-5)
    yield sample(make((0, 4)), [4], make((4,)), make((4,)), 1e-5)
    # A constant row: its variance is 0, and eps alone sets rstd.
    yield sample(torch.ones(2, 3, dtype=make.dtype), [3], None, None, 1e-5)


def softmax_backward_samples(forward, make: Make) -> Iterable[Sample]:
    """(grad, output, dim, input_dtype), the output `forward`'s on a sample input."""
    for shape, layout, dim in [
        ((3, 5), "contiguous", -1),
        ((2, 3, 4), "transposed", 1),
        ((4, 3), "sliced", 0),
        ((), "contiguous", 0),
        ((0, 4), "contiguous", -1),
    ]:
        yield sample(make(shape, layout), forward(make(shape), dim, False), dim, make.dtype)


def layer_norm_backward_samples(make: Make) -> Iterable[Sample]:
    """(grad, input, normalized_shape, mean, rstd, weight, bias, output_mask) from layer_norm's
    samples, asking for a gradient of each tensor argument there is, then for fewer."""
    for x, normalized_shape, weight, bias, eps in (one.args for one in layer_norm_samples(make)):
        _, mean, rstd = aten.native_layer_norm(x, normalized_shape, weight, bias, eps)
        mask = [True, weight is not None, bias is not None]
        yield sample(make(x.shape), x, normalized_shape, mean, rstd, weight, bias, mask)
    x, weight, bias = make((2, 3, 4), "transposed"), make((4,)), make((4,))
    _, mean, rstd = aten.native_layer_norm(x, [4], weight, bias, 1e-5)
    yield sample(make((2, 3, 4)), x, [4], mean, rstd, weight, bias, [False, True, False])
    yield sample(make((2, 3, 4), "sliced"), x, [4], mean, rstd, weight, bias, [True, False, True])


def sizes(make: Make) -> Iterable[Sample]:
    yield sample([2, 3], dtype=make.dtype)
    yield sample([], dtype=make.dtype)
    yield sample([0, 3], dtype=make.dtype)


def full_samples(make: Make) -> Iterable[Sample]:
    yield sample([2, 3], make.scalar(), dtype=make.dtype)
    yield sample([], -1, dtype=make.dtype)
    yield sample([0, 3], make.scalar(), dtype=make.dtype)


def scalar_tensor_samples(make: Make) -> Iterable[Sample]:
    yield sample(make.scalar(), dtype=make.dtype)
    yield sample(-2, dtype=make.dtype)


def empty_strided_samples(make: Make) -> Iterable[Sample]:
    yield sample([2, 3], [1, 2], dtype=make.dtype)
    yield sample([3, 0], [1, 3], dtype=make.dtype)


def arange_end(make: Make) -> Iterable[Sample]:
    yield sample(5, dtype=make.dtype)
    yield sample(0, dtype=make.dtype)
    if make.dtype.is_floating_point:
        yield sample(2.5, dtype=make.dtype)


def arange_start(make: Make) -> Iterable[Sample]:
    yield sample(2, 7, dtype=make.dtype)
    yield sample(-3, 3, dtype=make.dtype)
    yield sample(5, 5, dtype=make.dtype)


def arange_start_step(make: Make) -> Iterable[Sample]:
    yield sample(0, 10, 3, dtype=make.dtype)
    yield sample(10, 0, -3, dtype=make.dtype)
    if make.dtype.is_floating_point:
        yield sample(0, 1, 0.1, dtype=make.dtype)
        yield sample(-1.5, 1.5, 0.25, dtype=make.dtype)


def like(make: Make, *fill) -> Iterable[Sample]:
    # *_like keeps a dense input's strides (memory_format=preserve_format).
    yield sample(make((3, 5)), *fill)
    yield sample(make((2, 3, 4), "transposed"), *fill)
    yield sample(make((4, 3), "sliced"), *fill)
    yield sample(make(()), *fill)
    yield sample(make((0, 4)), *fill)
    yield sample(make((2, 3), "transposed"), *fill, dtype=make.other)


def full_like_samples(make: Make) -> Iterable[Sample]:
    yield from like(make, make.scalar())


def fill_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 5)), make.scalar())
    yield sample(make((2, 3, 4), "transposed"), -1)
    yield sample(make((4, 3), "sliced"), make.scalar())
    yield sample(make(()), 0)
    yield sample(make((0, 4)), 1)


def zero_samples(make: Make) -> Iterable[Sample]:
    yield from unary(make)


def new_samples(make: Make, *fill) -> Iterable[Sample]:
    yield sample(make((3, 5)), [2, 3], *fill)
    yield sample(make((2, 3), "transposed"), [], *fill)
    yield sample(make((4, 3), "sliced"), [0, 2], *fill, dtype=make.other)


# Views: each sample is a valid view of its input.


def view_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 4)), [4, 3])
    yield sample(make((2, 3, 4)), [-1])
    yield sample(make((2, 3, 4), "transposed"), [2, 1, 3, 2, 2])
    yield sample(make((6, 4), "sliced"), [3, 2, 2, 2])
    yield sample(make(()), [1, 1])
    yield sample(make((1,)), [])
    yield sample(make((0, 4)), [4, 0, 3])
    # Not sampled: a size-0 tensor viewed as its own shape, where eager keeps the old strides
    # but the meta kernel (and so the reference) gives contiguous ones.


def t_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 5)))
    yield sample(make((4, 3), "sliced"))
    yield sample(make((5,)))
    yield sample(make(()))
    yield sample(make((0, 2)))


def transpose_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((2, 3, 4)), 0, 2)
    yield sample(make((3, 4), "sliced"), -1, 0)
    yield sample(make(()), 0, -1)
    yield sample(make((0, 3)), 0, 1)


def permute_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((2, 3, 4)), [2, 0, 1])
    yield sample(make((2, 3, 4), "transposed"), [-1, 0, 1])
    yield sample(make((3, 4), "sliced"), [1, 0])
    yield sample(make(()), [])
    yield sample(make((0, 3)), [1, 0])


def expand_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 1)), [3, 4])
    yield sample(make((3, 1)), [2, -1, 5])
    yield sample(make(()), [2, 3])
    yield sample(make((1, 3), "transposed"), [0, 3])
    yield sample(make((2, 3), "sliced"), [4, 2, 3])


def slice_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((5, 4)), 0, 1, 4, 1)
    yield sample(make((5, 4)), 1, -3, None, 2)
    yield sample(make((5, 4), "transposed"), 0, None, None, 3)
    yield sample(make((4, 5), "sliced"), -1, 2, 100, 1)
    # Out of range: clamped to an empty slice.
    yield sample(make((5, 4)), 0, 10, 20, 1)
    yield sample(make((5, 4)), 1, 3, 1, 1)


def select_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((5, 4)), 0, 2)
    yield sample(make((5, 4), "transposed"), -1, -1)
    yield sample(make((4, 5), "sliced"), 1, 3)
    yield sample(make((3,)), 0, 1)
    yield sample(make((2, 0)), 0, 1)


def unsqueeze_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 4)), 0)
    yield sample(make((3, 4)), -1)
    yield sample(make((2, 3), "transposed"), 1)
    yield sample(make((4, 3), "sliced"), 2)
    yield sample(make(()), 0)
    yield sample(make((0, 2)), 1)


def squeeze_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 1, 4, 1)))
    yield sample(make((1, 2, 1), "transposed"))
    yield sample(make(()))
    yield sample(make((0, 1)))


def squeeze_dim_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 1, 4)), 1)
    yield sample(make((3, 1, 4)), 0)
    yield sample(make((1, 3), "sliced"), -2)
    yield sample(make(()), 0)


def squeeze_dims_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 1, 1, 2)), [1, -2])
    yield sample(make((1, 3, 1), "transposed"), [0, 1])
    yield sample(make(()), [0])
    yield sample(make((0, 1)), [0, 1])


def split_with_sizes_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((5, 4)), [2, 3])
    yield sample(make((5, 4), "transposed"), [1, 1, 2], 1)
    yield sample(make((3, 5), "sliced"), [0, 5], -1)


def split_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((5, 4)), 2)
    yield sample(make((5, 4), "transposed"), 3, 1)
    yield sample(make((3, 5), "sliced"), 5, -1)
    yield sample(make((0, 4)), 2)


def unbind_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 4)), 0)
    yield sample(make((3, 4), "transposed"), 1)
    yield sample(make((2, 3), "sliced"), -1)
    yield sample(make((0, 2)), 1)


def as_strided_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 4)), [2, 2], [1, 2])
    yield sample(make((3, 4)), [3], [4], 1)
    # No storage_offset: the input's own offset.
    yield sample(make((4, 3), "sliced"), [2, 3], [1, 2])
    yield sample(make((2, 3)), [2, 2], [0, 1])
    yield sample(make((2, 3)), [], [])


def detach__samples(make: Make) -> Iterable[Sample]:
    # Eager refuses detach_ on a view: tensors of their own only.
    yield sample(make((3, 5)))
    yield sample(make(()))
    yield sample(make((0, 2)))


# Effects act on storages.


def set_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 5)), make((4, 3), "sliced"))
    yield sample(make(()), make((0, 3)))
    yield sample(make((2, 3), "transposed"), make((4,)))


def resize_storage_bytes_samples(make: Make) -> Iterable[Sample]:
    itemsize = torch.empty((), dtype=make.dtype).element_size()
    yield sample(make((3, 5)), 0)
    # Growing keeps the old bytes; the new ones are unspecified, and no sample reads them.
    yield sample(make((2, 3), "transposed"), 20 * itemsize)
    yield sample(make((4, 3), "sliced"), 3 * itemsize)


@frozen
class OpSamples:
    """Which dtypes an op is tested in, and its sample inputs for one dtype."""

    dtypes: tuple[torch.dtype, ...]
    samples: Callable[[Make], Iterable[Sample]]
    #: False for ops whose output bytes are unspecified (`empty*`): only layouts are compared.
    values: bool = True
    #: Values must match bit for bit (a conversion rounds one way only), not just be close.
    exact: bool = False


FLOAT_MATH = [
    aten.exp.default,
    aten.exp2.default,
    aten.log.default,
    aten.log2.default,
    aten.log10.default,
    aten.log1p.default,
    aten.expm1.default,
    aten.sin.default,
    aten.cos.default,
    aten.tan.default,
    aten.tanh.default,
    aten.sigmoid.default,
    aten.sqrt.default,
    aten.rsqrt.default,
    aten.reciprocal.default,
    aten.erf.default,
]
BINARY = [
    aten.maximum.default,
    aten.minimum.default,
    aten.logical_and.default,
    aten.logical_or.default,
]
WITH_SCALAR = [aten.add.Scalar, aten.mul.Scalar, aten.sub.Scalar, aten.div.Scalar]
COMPARISONS = [
    getattr(getattr(aten, name), overload)
    for name in ("eq", "ne", "lt", "le", "gt", "ge")
    for overload in ("Tensor", "Scalar")
]

SAMPLES: dict[torch._ops.OpOverload, OpSamples] = {
    # Pointwise unary: integers and bools promote to the default float in FLOAT_MATH
    # (r[ops.int-to-float]; numpy computes a bool or a uint8 in float16).
    **{op: OpSamples((*ALL, torch.uint8), unary) for op in FLOAT_MATH},
    **{
        op: OpSamples(NUMERIC, unary)
        for op in [
            aten.abs.default,
            aten.neg.default,
            aten.sign.default,
            aten.relu.default,
            aten.floor.default,
            aten.ceil.default,
            aten.trunc.default,
            aten.round.default,
        ]
    },
    **{op: OpSamples(ALL, unary) for op in [aten.isnan.default, aten.logical_not.default]},
    aten.bitwise_not.default: OpSamples((torch.int64, torch.bool), unary),
    # Pointwise binary.
    **{op: OpSamples(ALL, binary) for op in BINARY},
    aten.add.Tensor: OpSamples(ALL, partial(binary, scalar=True)),
    aten.mul.Tensor: OpSamples(ALL, partial(binary, scalar=True)),
    aten.sub.Tensor: OpSamples(NUMERIC, partial(binary, scalar=True)),
    aten.div.Tensor: OpSamples(NUMERIC, partial(binary, scalar=True)),
    **{op: OpSamples(NUMERIC, with_scalar) for op in WITH_SCALAR},
    aten.div.Tensor_mode: OpSamples(NUMERIC, divide_mode),
    aten.div.Scalar_mode: OpSamples(NUMERIC, partial(divide_mode, scalar=True)),
    aten.floor_divide.default: OpSamples(NUMERIC, partial(binary, nonzero=True, scalar=True)),
    aten.floor_divide.Scalar: OpSamples(NUMERIC, with_scalar),
    aten.remainder.Tensor: OpSamples(NUMERIC, partial(binary, nonzero=True)),
    aten.remainder.Scalar: OpSamples(NUMERIC, with_scalar),
    aten.pow.Tensor_Scalar: OpSamples(NUMERIC, pow_tensor_scalar),
    aten.pow.Tensor_Tensor: OpSamples(NUMERIC, pow_tensor_tensor),
    aten.pow.Scalar: OpSamples(NUMERIC, pow_scalar_tensor),
    aten.clamp.default: OpSamples(NUMERIC, clamp_samples),
    aten.clamp.Tensor: OpSamples(NUMERIC, clamp_tensor),
    aten.clamp_min.default: OpSamples(NUMERIC, clamp_bound),
    aten.clamp_max.default: OpSamples(NUMERIC, clamp_bound),
    aten.where.self: OpSamples(ALL, where_samples),
    **{
        op: OpSamples((torch.int64, torch.bool), partial(binary, other_dtype=torch.uint8))
        for op in [aten.bitwise_and.Tensor, aten.bitwise_or.Tensor, aten.bitwise_xor.Tensor]
    },
    **{
        op: OpSamples((torch.int64, torch.bool), partial(with_scalar, integral=True))
        for op in [aten.bitwise_and.Scalar, aten.bitwise_or.Scalar, aten.bitwise_xor.Scalar]
    },
    **{
        op: OpSamples(KINDS, binary if op._overloadname == "Tensor" else with_scalar)
        for op in COMPARISONS
    },
    aten.threshold_backward.default: OpSamples(FLOATS, threshold_backward_samples),
    # Copies and casts.
    aten._to_copy.default: OpSamples(ALL, cast_samples, exact=True),
    aten.clone.default: OpSamples(ALL, clone_samples),
    aten.lift_fresh_copy.default: OpSamples(ALL, unary),
    # Not on a target with a storage offset: eager's output keeps the offset, and so does
    # FakeTensorMode's first call, but its cached calls give offset 0, so the layout that capture
    # records depends on what the process traced before (PyTorch 2.13).
    aten.copy.default: OpSamples(ALL, partial(copy_samples, offset_target=False)),
    aten.cat.default: OpSamples(ALL, cat_samples),
    aten.as_strided_scatter.default: OpSamples(FLOATS, as_strided_scatter_samples),
    aten.index_put.default: OpSamples(FLOATS, index_put_samples),
    aten.index.Tensor: OpSamples(ALL, index_samples),
    # Matmuls.
    aten.mm.default: OpSamples(NUMERIC, mm_samples),
    aten.bmm.default: OpSamples(NUMERIC, bmm_samples),
    aten.addmm.default: OpSamples(NUMERIC, addmm_samples),
    # Reductions.
    aten.sum.default: OpSamples(ALL, reduce_all_with_dtype),
    aten.sum.dim_IntList: OpSamples(ALL, partial(reduce_dims, dtype_arg=True)),
    aten.mean.default: OpSamples(FLOATS, reduce_all_with_dtype),
    aten.mean.dim: OpSamples(FLOATS, partial(reduce_dims, dtype_arg=True)),
    aten.amax.default: OpSamples(ALL, partial(reduce_dims, empty_dim=False)),
    aten.amin.default: OpSamples(ALL, partial(reduce_dims, empty_dim=False)),
    aten.max.default: OpSamples(ALL, partial(reduce_all, empty=False)),
    aten.min.default: OpSamples(ALL, partial(reduce_all, empty=False)),
    aten.var.correction: OpSamples(FLOATS, var_samples),
    aten.std.correction: OpSamples(FLOATS, var_samples),
    aten.var_mean.correction: OpSamples(FLOATS, var_samples),
    # Normalizations.
    aten._softmax.default: OpSamples(FLOATS, softmax_samples),
    aten._log_softmax.default: OpSamples(FLOATS, softmax_samples),
    aten._softmax_backward_data.default: OpSamples(
        FLOATS, partial(softmax_backward_samples, aten._softmax)
    ),
    aten._log_softmax_backward_data.default: OpSamples(
        FLOATS, partial(softmax_backward_samples, aten._log_softmax)
    ),
    # Creation.
    aten.zeros.default: OpSamples(KINDS, sizes),
    aten.ones.default: OpSamples(KINDS, sizes),
    aten.empty.memory_format: OpSamples(KINDS, sizes, values=False),
    aten.empty_strided.default: OpSamples(KINDS, empty_strided_samples, values=False),
    aten.full.default: OpSamples(KINDS, full_samples),
    aten.scalar_tensor.default: OpSamples(KINDS, scalar_tensor_samples),
    aten.arange.default: OpSamples(NUMERIC_KINDS, arange_end),
    aten.arange.start: OpSamples(NUMERIC_KINDS, arange_start),
    aten.arange.start_step: OpSamples(NUMERIC_KINDS, arange_start_step),
    aten.zeros_like.default: OpSamples(KINDS, like),
    aten.ones_like.default: OpSamples(KINDS, like),
    aten.empty_like.default: OpSamples(KINDS, like, values=False),
    aten.full_like.default: OpSamples(KINDS, full_like_samples),
    aten.fill.Scalar: OpSamples(KINDS, fill_samples),
    aten.zero.default: OpSamples(KINDS, zero_samples),
    aten.new_zeros.default: OpSamples(KINDS, new_samples),
    aten.new_ones.default: OpSamples(KINDS, new_samples),
    aten.new_empty.default: OpSamples(KINDS, new_samples, values=False),
    aten.new_full.default: OpSamples(KINDS, lambda make: new_samples(make, make.scalar())),
    # Views.
    aten.view.default: OpSamples(KINDS, view_samples),
    aten._unsafe_view.default: OpSamples(KINDS, view_samples),
    aten.alias.default: OpSamples(KINDS, unary),
    aten.detach.default: OpSamples(KINDS, unary),
    # r[collectives.wait]: waiting needs no group; the collectives run on two ranks instead
    # (tests/test_collectives.py).
    WAIT: OpSamples(KINDS, wait_samples),
    aten.t.default: OpSamples(KINDS, t_samples),
    aten.transpose.int: OpSamples(KINDS, transpose_samples),
    aten.permute.default: OpSamples(KINDS, permute_samples),
    aten.expand.default: OpSamples(KINDS, expand_samples),
    aten.slice.Tensor: OpSamples(KINDS, slice_samples),
    aten.select.int: OpSamples(KINDS, select_samples),
    aten.unsqueeze.default: OpSamples(KINDS, unsqueeze_samples),
    aten.squeeze.default: OpSamples(KINDS, squeeze_samples),
    aten.squeeze.dim: OpSamples(KINDS, squeeze_dim_samples),
    aten.squeeze.dims: OpSamples(KINDS, squeeze_dims_samples),
    aten.split_with_sizes.default: OpSamples(KINDS, split_with_sizes_samples),
    aten.split.Tensor: OpSamples(KINDS, split_samples),
    aten.unbind.int: OpSamples(KINDS, unbind_samples),
    aten.as_strided.default: OpSamples(KINDS, as_strided_samples),
    # In-place metadata ops: their view op's samples, relaying out the input on its storage.
    aten.t_.default: OpSamples(KINDS, t_samples),
    aten.transpose_.default: OpSamples(KINDS, transpose_samples),
    aten.unsqueeze_.default: OpSamples(KINDS, unsqueeze_samples),
    aten.squeeze_.default: OpSamples(KINDS, squeeze_samples),
    aten.squeeze_.dim: OpSamples(KINDS, squeeze_dim_samples),
    aten.squeeze_.dims: OpSamples(KINDS, squeeze_dims_samples),
    aten.as_strided_.default: OpSamples(KINDS, as_strided_samples),
    aten.detach_.default: OpSamples(KINDS, detach__samples),
    # Effects.
    aten.copy_.default: OpSamples(ALL, copy_samples),
    aten.set_.source_Tensor: OpSamples(KINDS, set_samples),
    torch.ops.inductor.resize_storage_bytes_.default: OpSamples(
        KINDS, resize_storage_bytes_samples
    ),
}


def _fits_in_place(functional, sample: Sample) -> bool:
    """True when the functional op's result can be written into the sample's first argument."""
    target = sample.args[0]
    if not isinstance(target, torch.Tensor):
        return False
    result = functional(*sample.args, **sample.kwargs)
    return result.shape == target.shape and torch.can_cast(result.dtype, target.dtype)


def in_place(functional) -> OpSamples:
    """`x.op_(...)`: the functional op's samples whose result fits into `x`.

    An integer `x` takes no float result, so ops that promote integers are tested on floats.
    """
    spec = SAMPLES[functional]
    promotes = functional in FLOAT_MATH or functional in (aten.div.Tensor, aten.div.Scalar)
    # The write into `x` casts like any write: one float, one integer and one bool dtype suffice.
    kinds = (torch.float32,) if promotes else (torch.float32, torch.int64, torch.bool)
    dtypes = tuple(d for d in kinds if d in spec.dtypes)

    def samples(make):
        # The first few that fit: the functional op's test has seen all of them.
        return islice((s for s in spec.samples(make) if _fits_in_place(functional, s)), 3)

    return OpSamples(dtypes, samples)


SAMPLES |= {op: in_place(functional) for op, functional in IN_PLACE_VARIANTS}


# ---------------------------------------------------------------- checking samples


def twin(value):
    """A copy of every tensor in `value` on a storage of its own, with the very same layout."""

    def copy(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage().clone()
        return torch.empty(0, dtype=t.dtype).set_(storage, t.storage_offset(), t.shape, t.stride())

    return pytree.tree_map_only(torch.Tensor, copy, value)


def _tensors(value) -> list[torch.Tensor]:
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def _others(value) -> list:
    return [leaf for leaf in pytree.tree_leaves(value) if not isinstance(leaf, torch.Tensor)]


def _world(inputs, outputs) -> dict[str, torch.Tensor]:
    world = {f"in{i}": t for i, t in enumerate(_tensors(inputs))}
    world |= {f"out{i}": t for i, t in enumerate(_tensors(outputs))}
    return world


def _identities(inputs, outputs) -> list[int | None]:
    """For each output, the index of the input it is (the same object), or None."""
    ins = _tensors(inputs)
    return [next((i for i, t in enumerate(ins) if t is out), None) for out in _tensors(outputs)]


def _call(op, sample: Sample, inputs):
    return op(*inputs, **sample.kwargs)


#: r[collectives.wait]: wait_tensor's output is a view of its input, a new tensor object; eager
#: returns the input object itself when it does not require grad (specs/collectives.md's note).
NEW_OBJECT = frozenset({WAIT})

#: Ops whose eager kernel and meta kernel disagree on output strides when an operand is
#: transposed: eager gives a contiguous output, the meta kernel the operand's dim order.
#: r[ops.fresh-output] follows the meta kernel, so these are held to its strides.
META_STRIDES = frozenset(
    {
        aten.floor_divide.default,
        aten.div.Tensor_mode,
        aten.pow.Scalar,
        aten._log_softmax_backward_data.default,
        # eval mode on a transposed input: eager gives a contiguous output
        aten.native_batch_norm.default,
    }
)


def _with_meta_strides(op, sample: Sample, expected):
    """Eager's outputs, copied to the strides PyTorch's meta kernel gives for the same call."""
    with FakeTensorMode() as mode:
        fake = _call(op, sample, pytree.tree_map_only(torch.Tensor, mode.from_tensor, sample.args))

    def relayout(value: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
        return torch.empty_strided(value.shape, meta.stride(), dtype=value.dtype).copy_(value)

    return pytree.tree_map(relayout, expected, fake)


#: Ops whose eager CPU kernels round an intermediate to float16 or bfloat16: trunc division
#: truncates the quotient after rounding it to the dtype, so 3.0 / -0.3 in float16 (-9.998 in
#: float32 and float64) truncates to -10, log_softmax's output near 0 loses bits (-0.00584
#: for -0.00552 in float16), and layer_norm's backward sums the weight's gradient over rows in the
#: dtype (-1.375 for -1.387 in bfloat16). The reference keeps r[ops.opmath], which agrees with
#: float64 here, and is held to it: the same call on float32 copies, rounded once.
OPMATH_ORACLE = frozenset(
    {
        aten.div.Tensor_mode,
        aten.div.Scalar_mode,
        aten.div_.Tensor_mode,
        aten.div_.Scalar_mode,
        aten._log_softmax.default,
        aten.native_layer_norm_backward.default,
    }
)


def _round_once_from_float32(op, sample: Sample, expected_inputs, expected) -> None:
    """Overwrite eager's values with those of the call on float32 copies, rounded once."""

    def widen(t: torch.Tensor) -> torch.Tensor:
        return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t

    wide_inputs = pytree.tree_map_only(torch.Tensor, widen, twin(sample.args))
    wide = _call(op, sample, wide_inputs)
    narrow = _tensors((expected_inputs, expected))
    for target, value in zip(narrow, _tensors((wide_inputs, wide)), strict=True):
        target.copy_(value)


def _run_all(op, samples: list[Sample], inputs: list):
    """All samples on the reference in one captured program: one capture per test."""

    def call_all(inputs):
        return [_call(op, one, args) for one, args in zip(samples, inputs, strict=True)]

    try:
        return run(call_all, inputs)
    except Exception:
        for one in samples:  # find the sample that fails alone, and name it
            try:
                run(partial(_call, op, one), twin(one.args))
            except Exception as error:
                add_note(error, f"sample: {qualified_name(op)}{one}")
                raise
        raise


def check_samples(op, samples: list[Sample], spec: OpSamples) -> None:
    actual_inputs = [twin(one.args) for one in samples]
    result = _run_all(op, samples, actual_inputs)
    if op not in mutation_decompositions():  # those are captured as their functional variant
        assert op in {node.target for node in result.program.graph.nodes}, "op not in the graph"
    for one, inputs, outputs in zip(samples, actual_inputs, result.outputs, strict=True):
        expected_inputs = twin(one.args)
        expected = _call(op, one, expected_inputs)
        if op in META_STRIDES:
            expected = _with_meta_strides(op, one, expected)
        if op in OPMATH_ORACLE:
            _round_once_from_float32(op, one, expected_inputs, expected)
        where = f"{qualified_name(op)}{one}"
        check_sample(op, spec, where, (expected_inputs, expected), (inputs, outputs))


def check_sample(op, spec: OpSamples, where: str, expected, actual) -> None:
    """One sample's (inputs afterwards, outputs): eager's, then the reference's."""
    assert _others(expected[1]) == _others(actual[1]), where
    mismatches = differences(observe(_world(*expected)), observe(_world(*actual)))
    if not spec.values:
        # Unspecified bytes: the outputs' layouts must agree, their values need not.
        mismatches = [m for m in mismatches if not (m.startswith("out") and " values: " in m)]
    assert [] == mismatches, where
    if op not in NEW_OBJECT:
        assert _identities(*expected) == _identities(*actual), where
    if spec.exact:
        for want, got in zip(_tensors(expected[1]), _tensors(actual[1]), strict=True):
            torch.testing.assert_close(
                got, want, rtol=0, atol=0, equal_nan=True, msg=lambda detail: f"{where}\n{detail}"
            )
    if _is_view(op):
        base = actual[0][0].untyped_storage()._cdata
        assert all(base == out.untyped_storage()._cdata for out in _tensors(actual[1])), where


def _is_view(op) -> bool:
    if op in OP_TABLE:
        return OP_TABLE[op].kind is OpKind.VIEW
    return not op._schema.is_mutable and lookup(op, "a sample").kind is OpKind.VIEW


# ---------------------------------------------------------------- tests


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


CASES = [(op, dtype) for op, spec in SAMPLES.items() for dtype in spec.dtypes]


@pytest.mark.parametrize(
    ("op", "dtype"),
    CASES,
    ids=[f"{qualified_name(op)}-{_dtype_name(dtype)}" for op, dtype in CASES],
)
def test_op_matches_eager(op, dtype):
    """Every sample of the op, run on the reference, leaves what eager PyTorch leaves."""
    spec = SAMPLES[op]
    samples = list(spec.samples(Make(dtype)))
    assert samples, f"{qualified_name(op)} has no sample for {dtype}"
    check_samples(op, samples, spec)


def test_every_table_entry_has_samples():
    """A new op table entry needs samples in some dtype; samples of ops not in it are stale.
    Size ops compute numbers, not tensors: `test_size_ops_read_numbers_as_torch_does`."""
    tested = {op for op, _ in CASES} | COLLECTIVES  # sampled on two ranks: test_collectives.py
    tested |= {op for op, entry in OP_TABLE.items() if entry.kind is OpKind.SIZE}
    missing = sorted(OP_TABLE[op].name for op in OP_TABLE.keys() - tested)
    stale = sorted(qualified_name(op) for op in SAMPLES.keys() - OP_TABLE.keys())
    assert ([], []) == (missing, stale), "add samples for the missing ops to SAMPLES"


def test_size_ops_read_numbers_as_torch_does():
    """r[sizes.symbolic.arithmetic]: on a reference tensor, each size op reads the number the
    aten op reads of the torch tensor it stands for (a view with an offset and a transpose)."""
    t = torch.arange(60.0).reshape(3, 4, 5).transpose(0, 2)[1:]
    cell = Tensor(storage_from_torch(t.untyped_storage()), Layout.of(t))
    for dim in range(t.dim()):
        assert OP_TABLE[aten.sym_size.int].rule(cell, dim) == aten.sym_size.int(t, dim)
        assert OP_TABLE[aten.sym_stride.int].rule(cell, dim) == aten.sym_stride.int(t, dim)
    assert OP_TABLE[aten.sym_numel.default].rule(cell) == aten.sym_numel(t)
    assert OP_TABLE[aten.sym_storage_offset.default].rule(cell) == aten.sym_storage_offset(t)


# ---------------------------------------------------------------- ATen-valued ops
# Ops outside the table get ATen's values, and their aliasing, writes and saved values from their
# schema and eager's derivative formula (specs/ops.md): the ops real models stop at without them.


def convolution_samples(make: Make) -> Iterable[Sample]:
    yield sample(
        make((2, 3, 5, 5)),
        make((4, 3, 3, 3)),
        make((4,)),
        [1, 1],
        [1, 1],
        [1, 1],
        False,
        [0, 0],
        1,
    )
    # strided, dilated, grouped, no bias, a transposed input
    yield sample(
        make((2, 4, 6, 5), "transposed"),
        make((4, 2, 3, 2)),
        None,
        [2, 1],
        [0, 1],
        [1, 2],
        False,
        [0, 0],
        2,
    )
    # a transposed 1-d convolution with output padding
    yield sample(make((1, 2, 7)), make((2, 3, 3)), make((3,)), [2], [1], [1], True, [1], 1)


def batch_norm_samples(make: Make) -> Iterable[Sample]:
    """Training mode writes the running statistics; eval mode reads them; none at all."""
    statistics = (torch.zeros(3, dtype=make.dtype), torch.ones(3, dtype=make.dtype))
    yield sample(make((4, 3, 2, 2)), make((3,)), make((3,)), *statistics, True, 0.1, 1e-5)
    mean, var = make((3,)), make((3,), nonneg=True) + 0.5
    yield sample(make((5, 3), "transposed"), None, None, mean, var, False, 0.1, 1e-5)
    yield sample(make((4, 3, 5)), make((3,)), None, None, None, True, 0.1, 1e-5)


def max_pool_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((2, 3, 6, 6)), [2, 2], [2, 2])
    yield sample(make((1, 2, 5, 7), "transposed"), [3, 3], [1, 2], [1, 1], [1, 1], True)


def embedding_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((10, 4)), torch.tensor([[1, 2, 3], [3, 3, 0]]))
    yield sample(make((6, 3), "sliced"), torch.tensor([5, 0, 2, 0]), 0)


def gather_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 4), "transposed"), 1, torch.tensor([[0, 3], [1, 1], [2, 0]]))
    yield sample(make((4, 2)), 0, torch.tensor([[3, 0], [3, 1]]))


def pad_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((2, 3)), [1, 2], 0.5)
    yield sample(make((3, 4), "transposed"), [-1, 1, 2, 0])


def tril_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((4, 4)))
    yield sample(make((3, 5), "transposed"), -1)
    yield sample(make((2, 3, 3), "sliced"), 1)


def attention_samples(make: Make) -> Iterable[Sample]:
    """The kernel takes contiguous operands (scaled_dot_product_attention gives it those)."""
    q, k, v = (make((2, 2, 4, 8)) for _ in range(3))
    yield sample(q, k, v, 0.0, True)
    yield sample(make((1, 2, 3, 4)), make((1, 2, 5, 4)), make((1, 2, 5, 4)))


def nll_loss_samples(make: Make) -> Iterable[Sample]:
    log_probabilities = torch.log_softmax(make((5, 7)), -1)
    targets = torch.tensor([1, 2, 3, 4, 6])
    for reduction in (0, 1, 2):
        yield sample(log_probabilities, targets, None, reduction, -100)
    yield sample(log_probabilities, targets, make((7,), nonneg=True), 1, 3)


def unsafe_split_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((5, 4)), 2)
    yield sample(make((5, 4), "transposed"), 3, 1)


def cumsum_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 4)), 1)
    yield sample(make((2, 3, 4), "transposed"), 0)
    yield sample(make((3,)), 0, dtype=torch.float64)


def diagonal_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((3, 4)))
    yield sample(make((3, 4), "transposed"), 1)
    yield sample(make((2, 3, 4), "sliced"), -1, 1, 2)


def safe_softmax_samples(make: Make) -> Iterable[Sample]:
    """Scaled dot product attention's softmax over masked scores (transformers' GPT2 and BERT,
    `nn.TransformerEncoderLayer`): a row masked whole gives zeros, not NaN."""
    scores = make((3, 5))
    masked = scores.masked_fill(
        torch.tensor([[False] * 4 + [True], [True] * 5, [False] * 5]), -math.inf
    )
    yield sample(masked, -1)
    yield sample(make((4, 3), "transposed"), 0)


def foreach_mul_samples(make: Make) -> Iterable[Sample]:
    yield sample([make((3,)), make((2, 2), "transposed")], 2.5)


def index_add_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((5, 3), "transposed"), 0, torch.tensor([0, 4, 0]), make((3, 3)), alpha=2)


def batch_norm_legit_samples(make: Make) -> Iterable[Sample]:
    statistics = (make((3,)), make((3,), nonneg=True) + 0.5)
    yield sample(make((4, 3, 2)), make((3,)), make((3,)), *statistics, True, 0.3, 1e-5)


def upsample_samples(make: Make) -> Iterable[Sample]:
    yield sample(make((1, 2, 3, 3)), [6, 6], False)
    yield sample(make((1, 1, 4, 5), "transposed"), [2, 3], True)


DIFFERENTIABLE = (torch.float32, torch.float64)
#: op -> its samples, and whether its gradients are checked too (functional ops only).
ATEN_SAMPLES: dict[torch._ops.OpOverload, tuple[Callable, bool]] = {
    aten.convolution.default: (convolution_samples, True),
    aten.native_batch_norm.default: (batch_norm_samples, True),
    aten.max_pool2d_with_indices.default: (max_pool_samples, True),
    aten.embedding.default: (embedding_samples, True),
    aten.gather.default: (gather_samples, True),
    aten.constant_pad_nd.default: (pad_samples, True),
    aten.tril.default: (tril_samples, True),
    aten._scaled_dot_product_flash_attention_for_cpu.default: (attention_samples, True),
    aten.nll_loss_forward.default: (nll_loss_samples, True),
    aten.unsafe_split.Tensor: (unsafe_split_samples, True),
    aten.cumsum.default: (cumsum_samples, True),
    aten.diagonal.default: (diagonal_samples, True),
    aten._safe_softmax.default: (safe_softmax_samples, True),
    aten.upsample_bilinear2d.default: (upsample_samples, True),
    aten._foreach_mul_.Scalar: (foreach_mul_samples, False),
    aten.index_add_.default: (index_add_samples, False),
    aten._native_batch_norm_legit.default: (batch_norm_legit_samples, False),
    # Its gradient is the backward op's. A gradient of the backward op (a double backward) is
    # not sampled: eager's own formula fails on a sample whose mask leaves gradients undefined.
    aten.native_layer_norm.default: (layer_norm_samples, True),
    aten.native_layer_norm_backward.default: (layer_norm_backward_samples, False),
}
ATEN_CASES = [(op, dtype) for op in ATEN_SAMPLES for dtype in DIFFERENTIABLE]
ATEN_IDS = [f"{qualified_name(op)}-{_dtype_name(dtype)}" for op, dtype in ATEN_CASES]


@pytest.mark.parametrize(("op", "dtype"), ATEN_CASES, ids=ATEN_IDS)
def test_aten_valued_op_matches_eager(op, dtype):
    """r[ops.aten-values], r[ops.aten-views], r[ops.aten-mutations]: every sample, run on the
    reference, leaves what eager leaves: outputs, which storages they share, and the arguments
    the op writes (batch norm's running statistics, out=, the tensors of _foreach_mul_)."""
    samples, _ = ATEN_SAMPLES[op]
    check_samples(op, list(samples(Make(dtype))), OpSamples(DIFFERENTIABLE, samples))


GRADIENT_CASES = [(op, dtype) for op, dtype in ATEN_CASES if ATEN_SAMPLES[op][1]]


#: Floating-point arguments that eager autograd refuses to differentiate.
NOT_DIFFERENTIABLE = {
    aten.native_batch_norm.default: {"running_mean", "running_var"},
    aten.nll_loss_forward.default: {"weight"},
}


def _gradients(call, op, one: Sample):
    """Outputs and the gradients of sum(sin(output)) over the floating-point arguments."""
    refused = NOT_DIFFERENTIABLE.get(op, set())
    args = list(twin(one.args))
    for k, (argument, value) in enumerate(zip(op._schema.arguments, args, strict=False)):
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            args[k] = value.detach().clone().requires_grad_(argument.name not in refused)
    outputs = call(lambda *a: _call(op, one, a), *args)
    differentiable = [o for o in _tensors(outputs) if o.requires_grad]
    leaves = [t for t in _tensors(args) if t.requires_grad]
    loss = sum(o.sin().sum() for o in differentiable)
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    return [o.detach() for o in _tensors(outputs)], grads


def _reference_compiled(fn, *args):
    return aotspec.compile(fn, backend="reference")(*args)


def _reference_eager(fn, *args):
    return run(fn, *args).outputs


@pytest.mark.parametrize(
    "runner", [_reference_compiled, _reference_eager], ids=["compiled", "eager"]
)
@pytest.mark.parametrize(
    ("op", "dtype"),
    GRADIENT_CASES,
    ids=[f"{qualified_name(op)}-{_dtype_name(d)}" for op, d in GRADIENT_CASES],
)
def test_aten_valued_op_gradients_match_eager(op, dtype, runner):
    """r[ops.aten-derivatives]: the gradients of each sample, compiled on the reference and run
    by its eager interpreter, are eager autograd's."""
    samples, _ = ATEN_SAMPLES[op]
    for one in samples(Make(dtype)):
        expected = _gradients(lambda fn, *args: fn(*args), op, one)
        actual = _gradients(runner, op, one)
        torch.testing.assert_close(
            actual, expected, msg=lambda m: f"{qualified_name(op)}{one}: {m}"
        )


# ---------------------------------------------------------------- complex operands

COMPLEX = (torch.complex64, torch.complex128)
#: Table ops that eager computes on complex tensors: their values come from ATen's kernels
#: (`r[ops.complex.aten-values]`), their gradients conjugate (`r[ops.complex.conjugate-grad]`).
COMPLEX_OPS = (
    aten.add.Tensor,
    aten.sub.Tensor,
    aten.mul.Tensor,
    aten.div.Tensor,
    aten.mm.default,
    aten.bmm.default,
    aten.addmm.default,
    aten.exp.default,
    aten.log.default,
    aten.sin.default,
    aten.cos.default,
    aten.tanh.default,
    aten.sqrt.default,
    aten.reciprocal.default,
    aten.neg.default,
    aten.abs.default,
    aten.sum.default,
    aten.view.default,
    aten.t.default,
    aten.clone.default,
)
COMPLEX_CASES = [(op, dtype) for op in COMPLEX_OPS for dtype in COMPLEX]
COMPLEX_IDS = [f"{qualified_name(op)}-{_dtype_name(dtype)}" for op, dtype in COMPLEX_CASES]


@pytest.mark.parametrize(("op", "dtype"), COMPLEX_CASES, ids=COMPLEX_IDS)
def test_op_on_complex_matches_eager(op, dtype):
    """Every sample of the op, on complex tensors, leaves what eager PyTorch leaves."""
    spec = SAMPLES[op]
    check_samples(op, list(spec.samples(Make(dtype))), spec)


def _complex_gradients(call, op, one: Sample):
    """The gradients of sum(|output|) over the complex arguments."""
    args = list(twin(one.args))
    for k, value in enumerate(args):
        if isinstance(value, torch.Tensor) and value.is_complex():
            args[k] = value.detach().clone().requires_grad_()
    outputs = call(lambda *a: _call(op, one, a), *args)
    leaves = [t for t in _tensors(args) if t.requires_grad]
    loss = sum(o.abs().sum() for o in _tensors(outputs) if o.requires_grad)
    return torch.autograd.grad(loss, leaves, allow_unused=True)


@pytest.mark.parametrize(
    "runner", [_reference_compiled, _reference_eager], ids=["compiled", "eager"]
)
@pytest.mark.parametrize(("op", "dtype"), COMPLEX_CASES, ids=COMPLEX_IDS)
def test_op_on_complex_gradients_match_eager(op, dtype, runner):
    """r[ops.complex.conjugate-grad]: gradients of complex arguments are eager's, conjugates
    included."""
    for one in SAMPLES[op].samples(Make(dtype)):
        if not any(isinstance(t, torch.Tensor) and t.numel() for t in _tensors(one.args)):
            continue
        expected = _complex_gradients(lambda fn, *args: fn(*args), op, one)
        actual = _complex_gradients(runner, op, one)
        torch.testing.assert_close(
            actual, expected, msg=lambda m: f"{qualified_name(op)}{one}: {m}"
        )


def test_aten_samples_are_aten_valued():
    """The ops above are outside the table: their values are ATen's."""
    assert [] == [qualified_name(op) for op in ATEN_SAMPLES if op in OP_TABLE]


# ---------------------------------------------------------------- end to end


def _largest_error(values, exact) -> float:
    pairs = zip(_tensors(values), _tensors(exact), strict=True)
    return max((value.double() - truth).abs().max().item() for value, truth in pairs)


def _assert_close_to_eager(fn, *args):
    """Outputs and inputs afterwards, by value.

    A program rounds at each op of its captured graph, eager sometimes inside one kernel: where the
    two disagree, the reference must be no further than eager from the program run in float64.
    """
    expected_inputs, actual_inputs = twin(args), twin(args)
    expected = fn(*expected_inputs)
    actual = run(fn, *actual_inputs).outputs
    try:
        torch.testing.assert_close(
            (actual_inputs, actual), (expected_inputs, expected), equal_nan=True
        )
    except AssertionError:
        exact_inputs = [t.double() for t in twin(args)]
        exact = (exact_inputs, fn(*exact_inputs))
        eager_error = _largest_error((expected_inputs, expected), exact)
        assert eager_error >= _largest_error((actual_inputs, actual), exact)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=_dtype_name)
def test_mlp_matches_eager(dtype):
    """A 2-layer MLP: F.linear (t + addmm), relu, sum."""
    make = Make(dtype)

    def mlp(x, w1, b1, w2, b2):
        hidden = F.relu(F.linear(x, w1, b1))
        return F.linear(hidden, w2, b2).sum()

    weights = (make((32, 16)), make((32,)), make((4, 32)), make((4,)))
    _assert_close_to_eager(mlp, make((8, 16)), *weights)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=_dtype_name)
def test_attention_block_matches_eager(dtype):
    """Single-head attention with a pre-norm and a residual: layer_norm, matmuls, softmax."""
    make = Make(dtype)
    dim = 8

    def attention(x, weight, bias, wq, wk, wv):
        h = F.layer_norm(x, (dim,), weight, bias)
        q, k, v = h @ wq.t(), h @ wk.t(), h @ wv.t()
        scores = q @ k.transpose(-2, -1) / math.sqrt(dim)
        return torch.softmax(scores, dim=-1) @ v + x

    norm = (make((dim,)), make((dim,)))
    projections = (make((dim, dim)), make((dim, dim)), make((dim, dim)))
    _assert_close_to_eager(attention, make((2, 5, dim)), *norm, *projections)


#: One user-level call per op with a kernel that capture used to decompose into table ops; each
#: is one ATen-valued op now (r[capture.aten-graph]), in-place forms its functional op and copy_.
KERNEL_USES = {
    aten.gelu: lambda x: (F.gelu(x), F.gelu(x, approximate="tanh")),
    aten.silu: F.silu,
    aten.stack: lambda x: torch.stack([x, 2 * x], 1),
    aten.addcmul: lambda x: torch.addcmul(x, x, x, value=0.5),
    aten.addcdiv: lambda x: torch.addcdiv(x, x, x.abs() + 1, value=2),
    aten.lerp: lambda x: (torch.lerp(x, 2 * x, 0.3), torch.lerp(x, -x, x.sigmoid())),
    aten.hardtanh: lambda x: F.hardtanh(x, -1.5, 0.5),
    aten.leaky_relu: lambda x: F.leaky_relu(x, 0.1),
    aten.softplus: lambda x: F.softplus(x, beta=2),
    aten.mv: lambda x: x.t().mv(x[0]),
    aten.dot: lambda x: x[0].dot(x[1]),
    aten.rsub: lambda x: torch.rsub(x, 1.5),
    aten.masked_fill: lambda x: x.masked_fill(x > 0, -1.0),
    aten.log_sigmoid_forward: F.logsigmoid,
    aten.elu: F.elu,
    aten.hardsigmoid: F.hardsigmoid,
    aten.hardswish: F.hardswish,
    aten.mish: F.mish,
    aten.logsumexp: lambda x: x.logsumexp(1),
    aten.mse_loss: lambda x: F.mse_loss(x, x.t().contiguous().view(x.shape)),
    aten.silu_: lambda x: F.silu(x, inplace=True),
    aten.masked_fill_: lambda x: x.masked_fill_(x < 0, 2.0),
    aten.leaky_relu_: lambda x: F.leaky_relu(x, 0.2, inplace=True),
    aten.hardtanh_: lambda x: F.hardtanh(x, inplace=True),
    aten.elu_: lambda x: F.elu(x, inplace=True),
    aten.hardsigmoid_: lambda x: F.hardsigmoid(x, inplace=True),
    aten.hardswish_: lambda x: F.hardswish(x, inplace=True),
    aten.mish_: lambda x: F.mish(x, inplace=True),
    aten.addcmul_: lambda x: x.addcmul_(x, x),
    aten.addcdiv_: lambda x: x.addcdiv_(x, x.abs() + 1),
    aten.lerp_: lambda x: x.lerp_(2 * x, 0.25),
}
KERNEL_CASES = [
    (packet, dtype) for packet in KERNEL_USES for dtype in (torch.float32, torch.float16)
]


@pytest.mark.parametrize(
    ("packet", "dtype"),
    KERNEL_CASES,
    ids=[f"aten.{packet.__name__}-{_dtype_name(dtype)}" for packet, dtype in KERNEL_CASES],
)
def test_op_with_a_kernel_runs_whole_and_matches_eager(packet, dtype):
    """The op (or, in place, its functional form) is one op of the captured graph, and the
    reference computes what eager computes."""
    use = KERNEL_USES[packet]
    x = Make(dtype)((5, 5), "transposed")
    functional = getattr(aten, packet.__name__.removesuffix("_"))
    targets = {node.target for node in run(use, twin(x)).program.graph.nodes}
    assert any(getattr(target, "overloadpacket", None) is functional for target in targets)
    _assert_close_to_eager(use, x)


# ---------------------------------------------------------------- outside the table


def test_op_outside_table_is_rejected_at_capture():
    """r[ops.table]: the error names the op and the user's line, and no input is touched."""

    def uses_prims_sin(x):
        x.add_(1)
        return torch.ops.prims.sin(x)

    x = torch.zeros(3)
    line = inspect.getsourcelines(uses_prims_sin)[1] + 2
    with pytest.raises(UnsupportedError, match=r"prims\.sin") as raised:
        run(uses_prims_sin, x)
    assert f"test_ops.py:{line}" in str(raised.value)
    assert "ops.table" == raised.value.rule
    torch.testing.assert_close(x, torch.zeros(3))


def test_aten_op_without_cpu_kernel_is_rejected_at_capture():
    """r[ops.aten-values]: an aten op with CUDA kernels only is refused before anything runs,
    naming the op and the user's line."""

    def uses_mm_dtype(x):
        x.add_(1)
        return torch.ops.aten.mm.dtype(x, x, torch.float32)

    x = torch.zeros(3, 3)
    line = inspect.getsourcelines(uses_mm_dtype)[1] + 2
    with pytest.raises(UnsupportedError, match=r"aten\.mm\.dtype .* has no CPU kernel") as raised:
        run(uses_mm_dtype, x)
    assert f"test_ops.py:{line}" in str(raised.value)
    assert "ops.aten-values" == raised.value.rule
    torch.testing.assert_close(x, torch.zeros(3, 3))


@pytest.mark.parametrize(
    "op", [aten._softmax.default, aten._log_softmax.default], ids=qualified_name
)
def test_half_to_float_is_refused(op):
    """r[ops.table]: half_to_float=True is a CUDA-only form, which PyTorch's CPU kernels refuse
    too."""
    with pytest.raises(UnsupportedError, match="half_to_float=True") as raised:
        run(lambda x: op(x, -1, True), Make(torch.float16)((3, 4)))
    assert "ops.table" == raised.value.rule


def test_every_unsupported_op_is_in_one_error():
    """r[ops.unsupported-all]: one error lists every op refused, with its line and rule, before
    anything runs; `aotspec.check` returns the same list without raising or running."""

    def two_unsupported(x):
        x.add_(1)
        y = torch.ops.prims.sin(x)
        return torch.ops.aten.mm.dtype(y, y, torch.float32)

    x = torch.zeros(2, 2)
    first = inspect.getsourcelines(two_unsupported)[1] + 2
    with pytest.raises(UnsupportedError, match="2 ops of the program are not supported") as raised:
        aotspec.compile(two_unsupported, backend="reference")(x)
    refusals = aotspec.check(two_unsupported, x)
    assert [e.rule for e in raised.value.refusals] == ["ops.table", "ops.aten-values"]
    assert [str(e) for e in raised.value.refusals] == [str(e) for e in refusals]
    assert f"test_ops.py:{first}" in str(refusals[0])
    assert f"test_ops.py:{first + 1}" in str(refusals[1])
    torch.testing.assert_close(x, torch.zeros(2, 2))


def _eigenvalues_and_eigenvector_real_parts(a):
    eigenvalues, eigenvectors = torch.linalg.eig(a)
    return eigenvalues.real, eigenvectors.real


@pytest.mark.parametrize("backend", ["reference", "fast"])
@pytest.mark.parametrize("reached", ["eigenvalues", "both"])
def test_eig_checks_the_phases_only_where_the_eigenvectors_get_a_gradient(backend, reached):
    """r[ops.aten-derivatives.value-checks.phases]: Re V depends on the eigenvectors' phases;
    eager's backward raises its check when V gets a gradient, and makes none when the backward
    reaches only the eigenvalues (the compiled backward then runs without the check's nodes)."""
    a = torch.tensor([[1.0, 2.0, 0.5], [-1.0, 0.5, 1.0], [0.25, -0.5, 2.0]])
    outcomes = []
    for fn in (
        _eigenvalues_and_eigenvector_real_parts,
        aotspec.compile(_eigenvalues_and_eigenvector_real_parts, backend=backend),
    ):
        leaf = a.clone().requires_grad_()
        values, vectors = fn(leaf)
        loss = values.sum() if reached == "eigenvalues" else values.sum() + vectors.sum()
        try:
            loss.backward()
            outcomes.append(leaf.grad)
        except RuntimeError as error:
            outcomes.append(str(error))
    eager, compiled = outcomes
    if reached == "both":
        assert isinstance(eager, str) and eager.startswith("linalg_eig_backward: The eigenvectors")
        assert eager == compiled
    else:
        torch.testing.assert_close(compiled, eager)


def test_check_lists_the_backwards_refusals_after_the_forwards():
    """r[ops.unsupported-all]: `aotspec.check` goes on past the ops capture refuses (prims.sin)
    to the backward, and lists what it refuses there too (complex svd's derivative, which checks
    values); compiling still stops at the first kind."""

    def refused_both_ways(x, w):
        y = torch.ops.prims.sin(x.detach())
        u, _, _ = torch.linalg.svd(w)
        return y + u.abs().sum()

    x = torch.ones(2, 2, requires_grad=True)
    w = torch.tensor([[1.0 + 1.0j, 2.0], [0.5j, -1.0]], requires_grad=True)
    first = inspect.getsourcelines(refused_both_ways)[1] + 1
    refusals = aotspec.check(refused_both_ways, x, w)
    assert ["ops.table", "ops.aten-derivatives.value-checks"] == [e.rule for e in refusals]
    assert f"test_ops.py:{first} " in refusals[0].problem
    assert "_linalg_svd" in refusals[1].problem
    with pytest.raises(UnsupportedError, match="prims.sin") as raised:
        aotspec.compile(refused_both_ways, backend="reference")(x, w)
    assert 1 == len(raised.value.refusals)
    assert x.grad is None and w.grad is None


def test_check_is_empty_for_a_program_that_compiles():
    def conv_step(x, w):
        return F.conv2d(x, w).relu().sum()

    assert [] == aotspec.check(conv_step, torch.randn(1, 2, 4, 4), torch.randn(3, 2, 3, 3))


def test_check_takes_a_module_and_runs_nothing():
    """A module's parameters and buffers are inputs, as Dynamo makes them; its running statistics
    stay as they are, since nothing runs."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    assert [] == aotspec.check(model, torch.randn(2, 3, 6, 6))
    assert 0 == model[1].num_batches_tracked.item()
    assert torch.equal(torch.zeros(4), model[1].running_mean)


_GLOBAL_MODEL = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())


def test_check_lifts_what_the_function_reads_as_compile_does():
    """A function reading a global module: its parameters are inputs, as `aotspec.compile`
    lifts them (`r[capture.lift]`), not tensors check cannot reach."""
    assert [] == aotspec.check(lambda x: _GLOBAL_MODEL(x).sum(), torch.randn(4, 8))
