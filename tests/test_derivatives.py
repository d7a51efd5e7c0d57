"""Every derivative rule against torch.autograd (`r[autograd.derivative-rules]`).

A rule is checked on float64 samples (and a few mixed-dtype ones): the real op runs on inputs
that require grad, `torch.autograd.grad` pulls a seeded random output gradient back, and the
rule, given the same output gradient, must give the same input gradients (None exactly where
autograd gives none), each with its argument's shape and dtype. Samples cover broadcasting,
keepdim, ties for max/min/amax, NaN, non-contiguous and offset inputs, multi-output ops with a
missing output gradient, and overlapping as_strided layouts.

Each rule is also traced on fake tensors: the backward graph must use only compute and view ops
of the table, and the reference running it (`aotspec.reference.run`) must agree with the rule run
on real tensors. Every compute and view op of the table needs a rule or a nondifferentiable
declaration, and a declared op's outputs must not require grad in PyTorch either.

Conventions: `op` is an OpOverload; `make` makes seeded float64 tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.utils._pytree as pytree
from attrs import field, frozen
from torch.fx.experimental.proxy_tensor import make_fx

from aotspec.reference import run
from aotspec.reference.collectives import COLLECTIVES, WAIT
from aotspec.reference.optable import (
    DERIVATIVES,
    NONDIFFERENTIABLE,
    OP_TABLE,
    OpKind,
    bind,
    qualified_name,
)

aten = torch.ops.aten
F64 = torch.float64
F32 = torch.float32
NAN = math.nan


# ---------------------------------------------------------------- samples


@frozen
class Sample:
    """One call `op(*args, **kwargs)`; the outputs at `no_grad_outputs` get no gradient (None)."""

    args: tuple
    kwargs: dict = field(factory=dict)
    no_grad_outputs: tuple[int, ...] = ()


def sample(*args, no_grad_outputs=(), **kwargs) -> Sample:
    return Sample(args, kwargs, no_grad_outputs)


_GENERATOR = torch.Generator().manual_seed(29)


def make(shape, layout="contiguous", *, dtype=F64, positive=False, nonzero=False):
    """Seeded values of `shape`: contiguous, transposed (dims reversed in memory), or sliced
    (every other element of a longer last dim, from the second: gaps and a storage offset)."""
    shape = tuple(shape)
    base_shape = {
        "contiguous": shape,
        "transposed": shape[::-1],
        "sliced": (*shape[:-1], 2 * shape[-1] + 1) if shape else shape,
    }[layout]
    values = 2 * torch.randn(base_shape, generator=_GENERATOR, dtype=F64)
    if positive:
        values = values.abs() + 0.25
    if nonzero:
        values = torch.where(values.abs() < 0.25, 1.0, values)
    base = values.to(dtype)
    if layout == "transposed":
        return base.permute(*reversed(range(base.dim())))
    return base[..., 1::2] if layout == "sliced" else base


def tensor(values, dtype=F64):
    return torch.tensor(values, dtype=dtype)


def unary(**domain) -> list[Sample]:
    return [
        sample(make((3, 4), **domain)),
        sample(make((2, 3, 4), "transposed", **domain)),
        sample(make((4, 3), "sliced", **domain)),
        sample(make((), **domain)),
        sample(make((0, 3), **domain)),
    ]


def binary(**domain) -> list[Sample]:
    """Broadcasting both ways, layouts, a 0-dim operand, mixed dtypes, a size-0 operand."""
    return [
        sample(make((3, 4)), make((3, 4), "transposed", **domain)),
        sample(make((4, 1)), make((1, 3), "sliced", **domain)),
        sample(make((2, 3)), make((), **domain)),
        sample(make((3,), dtype=F32), make((2, 3), **domain)),
        sample(make((0, 3)), make((3,), **domain)),
    ]


#: Ties (zeros of both signs among them) and a NaN, for the ops whose gradient picks elements.
TIES = tensor([[1.0, 3.0, 3.0, -1.0], [2.0, 2.0, 0.0, -0.0], [NAN, 1.0, 5.0, 1.0]])
#: Values at the kinks of abs, relu, sign and rounding: zeros of both signs, halves, NaN.
KINKS = tensor([-1.5, -0.0, 0.0, 0.5, 2.5, NAN])


def extremes() -> list[Sample]:
    return [
        sample(make((3, 4)), [1]),
        sample(TIES[:2], [1]),
        sample(TIES[:2], [0], True),
        sample(TIES[:2], []),
        sample(TIES, [-1]),
        sample(make((2, 3, 4), "transposed"), [0, 2], True),
        sample(make(()), [0]),
    ]


def variances() -> list[Sample]:
    return [
        sample(make((3, 5)), [1]),
        sample(make((2, 3, 4), "transposed"), [0, -1], correction=0, keepdim=True),
        sample(make((4, 3), "sliced"), None, correction=2),
        sample(make((3, 4))),
        # One element per group with correction 1: 2 / (n - correction) is inf.
        sample(make((1, 4)), [0]),
        sample(make(()), None),
        # A constant row: std is 0 there, and so is its gradient (not inf).
        sample(tensor([[1.0, 1.0, 1.0], [0.0, 2.0, 4.0]]), [1]),
        # An empty dim list reduces every dim, but PyTorch's backward takes n = 1 (inf).
        sample(make((2, 3)), []),
    ]


def quotients(mode_samples: Callable[[str | None], Sample]) -> list[Sample]:
    return [mode_samples(mode) for mode in ("trunc", "floor", None)]


FLOAT_MATH = {
    aten.exp.default: {},
    aten.exp2.default: {},
    aten.expm1.default: {},
    aten.sin.default: {},
    aten.cos.default: {},
    aten.tan.default: {},
    aten.tanh.default: {},
    aten.sigmoid.default: {},
    aten.erf.default: {},
    aten.neg.default: {},
    aten.log.default: {"positive": True},
    aten.log2.default: {"positive": True},
    aten.log10.default: {"positive": True},
    aten.log1p.default: {"positive": True},
    aten.sqrt.default: {"positive": True},
    aten.rsqrt.default: {"positive": True},
    aten.reciprocal.default: {"nonzero": True},
}
KINKED = [
    aten.abs.default,
    aten.relu.default,
    aten.sign.default,
    aten.floor.default,
    aten.ceil.default,
    aten.trunc.default,
    aten.round.default,
]

SAMPLES: dict[torch._ops.OpOverload, list[Sample]] = {
    # Pointwise unary.
    **{op: unary(**domain) for op, domain in FLOAT_MATH.items()},
    **{op: [*unary(), sample(KINKS)] for op in KINKED},
    # Pointwise binary; a few Tensor overloads also take a number for `other`.
    aten.add.Tensor: [
        *binary(),
        sample(make((2, 3)), make((3,)), alpha=2.5),
        sample(make((3,)), 2.0),
    ],
    aten.sub.Tensor: [*binary(), sample(make((2, 3)), make((2, 1)), alpha=-3)],
    aten.add.Scalar: [sample(make((3, 4), "transposed"), 2.0, 1.5)],
    aten.sub.Scalar: [sample(make((3, 4), "sliced"), 2.0, 3)],
    aten.mul.Tensor: [*binary(), sample(make((3, 2), "sliced"), 1.5)],
    aten.mul.Scalar: [sample(make((3, 4), "transposed"), -2.5)],
    aten.div.Tensor: [*binary(nonzero=True), sample(make((3, 2)), 4.0)],
    aten.div.Scalar: [sample(make((3, 4), "sliced"), -0.5)],
    aten.div.Tensor_mode: quotients(
        lambda mode: sample(make((3, 4)), make((4,), "sliced", nonzero=True), rounding_mode=mode)
    ),
    aten.div.Scalar_mode: quotients(
        lambda mode: sample(make((3, 4), "transposed"), 1.5, rounding_mode=mode)
    ),
    aten.remainder.Tensor: binary(nonzero=True),
    aten.remainder.Scalar: [sample(make((3, 4), "sliced"), 1.5)],
    aten.pow.Tensor_Scalar: [
        sample(make((3, 4), positive=True), 0.5),
        sample(make((3, 4), "transposed"), 2),
        # An exponent of 0 gives zeros, not 0 * x ** -1 (NaN at 0).
        sample(tensor([0.0, -1.0, 2.0]), 0),
        sample(tensor([0.0, -1.0, 2.0]), 3),
        sample(make((2, 2), positive=True), -1.5),
    ],
    aten.pow.Tensor_Tensor: [
        sample(make((3, 4), positive=True), make((3, 4), "transposed")),
        sample(make((4, 1), positive=True), make((3,), "sliced")),
        # 0 ** e at e = 0, e > 0 and e < 0, and an exponent of 0 at a positive base.
        sample(tensor([0.0, 0.0, 0.0, 2.0]), tensor([0.0, 2.0, -1.0, 0.0])),
        sample(make((2, 3), positive=True, dtype=F32), make((3,))),
    ],
    aten.pow.Scalar: [
        sample(2.0, make((3, 4), "transposed")),
        sample(0.0, tensor([-1.0, 0.0, 2.0])),
        sample(-2.0, tensor([-1.0, 2.0, 0.5])),
        sample(3, make((2, 2), "sliced")),
    ],
    aten.maximum.default: [*binary(), sample(TIES, TIES.flip(1))],
    aten.minimum.default: [*binary(), sample(TIES, TIES.flip(1))],
    aten.clamp.default: [
        sample(make((3, 5)), -0.5, 0.5),
        sample(make((2, 3, 4), "transposed"), None, 0.5),
        sample(make((4, 3), "sliced"), -0.5, None),
        # min > max gives max everywhere.
        sample(make((3, 4)), 0.5, -0.5),
        # At the bounds, and NaN.
        sample(tensor([-0.5, 0.5, 0.0, NAN, 3.0]), -0.5, 0.5),
    ],
    aten.clamp.Tensor: [
        sample(make((3, 5)), make((3, 5), "transposed"), make((5,)) + 1),
        # Some low > high.
        sample(make((3, 4)), make((4,)), make((3, 1))),
        sample(make((2, 3), "sliced"), None, make(())),
        sample(make((4, 1)), make((1, 3)), None),
        sample(tensor([-1.0, 1.0, NAN, 0.0]), tensor([-1.0, 0, 0, 1]), tensor([1.0, 1, 1, -1])),
    ],
    aten.clamp_min.default: [
        sample(make((3, 5)), 0.5),
        sample(tensor([0.5, -1.0, NAN, 2.0]), 0.5),
    ],
    aten.clamp_max.default: [
        sample(make((3, 5), "sliced"), 0.5),
        sample(tensor([0.5, -1.0, NAN, 2.0]), 0.5),
    ],
    aten.where.self: [
        sample(make((3, 4)) > 0, make((3, 4), "transposed"), make((3, 4))),
        sample(make((4, 1)) > 0, make((1, 3)), make((4, 3), "sliced")),
        sample(make(()) > 0, make((2, 2)), make(())),
        sample(make((4,)) > 0, make((4,), dtype=F32), make((4,))),
    ],
    aten.threshold_backward.default: [
        sample(make((3, 5)), make((3, 5), "transposed"), 0.0),
        sample(make((4, 3), "sliced"), tensor([[0.0, 1.5, 2.0]] * 4), 1.5),
    ],
    # Copies and casts.
    aten._to_copy.default: [
        sample(make((3, 4), "transposed", dtype=F32), dtype=F64),
        sample(make((4, 3), "sliced"), dtype=F32),
        sample(make((2, 3))),
    ],
    aten.clone.default: [
        sample(make((2, 3, 4), "transposed")),
        sample(make((4, 3), "sliced"), memory_format=torch.contiguous_format),
    ],
    aten.lift_fresh_copy.default: [sample(make((3, 4), "sliced"))],
    aten.copy.default: [
        sample(make((3, 4)), make((3, 4), "transposed")),
        sample(make((3, 4)), make((4,), dtype=F32)),
        sample(make((2, 3), "transposed"), make((2, 1), "sliced")),
    ],
    aten.cat.default: [
        sample([make((2, 3)), make((4, 3), "sliced")]),
        sample([make((2, 3), "transposed"), make((2, 1))], -1),
        # Legacy rule: a 1-D empty tensor is skipped whatever the other shapes, also for the
        # dim's wrapping.
        sample([make((2, 3)), make((0,)), make((2, 2))], 1),
        sample([make((0,)), make((2, 3)), make((2, 2))], -1),
        sample([make((3,), dtype=F32), make((2,))]),
    ],
    aten.as_strided_scatter.default: [
        sample(make((10,)), make((2, 2)), (2, 2), (4, 1), 1),
        sample(make((3, 4)), make((2, 3), "transposed"), (2, 3), (1, 2), 0),
        sample(make((6,)), make((3,), "sliced"), (3,), (2,), None),
    ],
    aten.index.Tensor: [
        sample(make((6,)), [tensor([0, 2, 2, 5], torch.int64)]),
        sample(make((3, 4), "transposed"), [None, tensor([3, 1, 3], torch.int64)]),
    ],
    aten.index_put.default: [
        sample(make((6,)), [tensor([0, 2, 2, 5], torch.int64)], make((4,)), True),
        sample(make((6,)), [tensor([1, 4], torch.int64)], make((2,)), False),
        sample(make((3, 4), "transposed"), [tensor([0, 2, 0], torch.int64)], make((4,)), True),
        sample(make((3, 4)), [None, tensor([3, 1], torch.int64)], make((3, 1)), False),
        # boolean masks (r[ops.derivatives.index-put-mask]): values broadcast, or one per position
        sample(make((3, 4)), [tensor([True, False, True], torch.bool)], make((4,)), False),
        sample(
            make((6,)),
            [tensor([True, False, True, True, False, False], torch.bool)],
            make(()),
            True,
        ),
        sample(
            make((2, 3), "transposed"),
            [tensor([[True, False, True], [False, True, False]], torch.bool)],
            make((3,)),
            False,
        ),
        sample(
            make((3, 4)),
            [None, tensor([False, True, True, False], torch.bool)],
            make((3, 1)),
            False,
        ),
    ],
    # r[ops.derivatives.index-fill-value]: an index naming a position twice sums it once
    aten.index_fill.int_Tensor: [
        sample(make((3, 4)), 0, tensor([2, 0, 2], torch.int64), make(())),
        sample(make((3, 4), "transposed"), 1, tensor([3, 1], torch.int64), make(())),
        sample(make(()), 0, tensor([0], torch.int64), make(())),
    ],
    # Matmuls.
    aten.mm.default: [
        sample(make((3, 4)), make((4, 5))),
        sample(make((3, 4), "transposed"), make((4, 5), "sliced")),
        sample(make((3, 0)), make((0, 5))),
    ],
    aten.bmm.default: [
        sample(make((2, 3, 4)), make((2, 4, 5))),
        sample(make((2, 3, 4), "transposed"), make((2, 4, 5), "sliced")),
    ],
    aten.addmm.default: [
        sample(make((5,)), make((3, 4)), make((4, 5))),
        sample(
            make((3, 5), "transposed"), make((3, 4), "sliced"), make((4, 5)), beta=0.5, alpha=2.5
        ),
        sample(make((1, 5)), make((3, 4)), make((4, 5)), beta=0),
    ],
    # Reductions.
    aten.sum.default: [
        sample(make((3, 4), "transposed")),
        sample(make(())),
        sample(make((3,), dtype=F32), dtype=F64),
    ],
    aten.sum.dim_IntList: [
        sample(make((3, 5)), [1]),
        sample(make((2, 3, 4), "transposed"), [0, -1], True),
        sample(make((4, 3), "sliced"), []),
        sample(make((4, 3)), None, True),
        sample(make(()), [0]),
        sample(make((2, 3), dtype=F32), [0], dtype=F64),
    ],
    aten.mean.default: [sample(make((3, 4), "sliced")), sample(make(())), sample(make((0, 2)))],
    aten.mean.dim: [
        sample(make((3, 5)), [1]),
        sample(make((2, 3, 4), "transposed"), [0, -1], True),
        sample(make((4, 3), "sliced"), []),
        sample(make(()), [0], True),
        sample(make((2, 3), dtype=F32), [1], dtype=F64),
    ],
    aten.amax.default: extremes(),
    aten.amin.default: extremes(),
    **{
        op: [sample(make((3, 4), "transposed")), sample(make(())), sample(TIES[:2]), sample(TIES)]
        for op in [aten.max.default, aten.min.default]
    },
    aten.var.correction: variances(),
    aten.std.correction: variances(),
    aten.var_mean.correction: [
        *variances(),
        sample(make((3, 5)), [1], no_grad_outputs=(0,)),
        sample(make((3, 5)), [0], keepdim=True, no_grad_outputs=(1,)),
    ],
    # Normalizations.
    **{
        op: [
            sample(make((3, 5)), -1, False),
            sample(make((2, 3, 4), "transposed"), 1, False),
            sample(make((4, 3), "sliced"), 0, False),
            sample(make(()), 0, False),
            sample(make((0, 4)), -1, False),
        ]
        for op in [aten._softmax.default, aten._log_softmax.default]
    },
    # Their backward ops: (grad_output, output, dim, input_dtype), the output the forward op's.
    **{
        backward: [
            sample(make((3, 5)), forward(make((3, 5)), -1, False), -1, F64),
            sample(make((2, 3, 4), "transposed"), forward(make((2, 3, 4)), 1, False), 1, F64),
            sample(make(()), forward(make(()), 0, False), 0, F64),
            sample(
                make((4, 3), "sliced", dtype=F32),
                forward(make((4, 3), dtype=F32), 0, False),
                0,
                F32,
            ),
        ]
        for forward, backward in [
            (aten._softmax, aten._softmax_backward_data.default),
            (aten._log_softmax, aten._log_softmax_backward_data.default),
        ]
    },
    # An ATen-valued op with a rule of the reference's (r[ops.aten-mutations.batch-norm]):
    # training mode (the running statistics unread), then eval mode.
    aten._native_batch_norm_legit_functional.default: [
        sample(
            make((4, 3, 2)),
            make((3,)),
            make((3,), "sliced"),
            make((3,)),
            make((3,), positive=True),
            True,
            0.1,
            1e-5,
            no_grad_outputs=(1, 2, 3, 4),
        ),
        sample(
            make((5, 2), "transposed"),
            None,
            None,
            make((2,)),
            make((2,), positive=True),
            True,
            0.3,
            1e-3,
            no_grad_outputs=(1, 2, 3, 4),
        ),
        sample(
            make((4, 3)),
            make((3,)),
            make((3,)),
            make((3,)),
            make((3,), positive=True),
            False,
            0.1,
            1e-5,
            no_grad_outputs=(1, 2, 3, 4),
        ),
    ],
    # Views.
    aten.view.default: [
        sample(make((3, 4)), [4, 3]),
        sample(make((2, 3, 4), "transposed"), [2, 1, 3, 2, 2]),
    ],
    aten._unsafe_view.default: [sample(make((3, 4)), [2, 6]), sample(make(()), [1, 1])],
    aten.alias.default: [sample(make((3, 4), "sliced"))],
    WAIT: [sample(make((3, 4), "sliced"))],
    aten.t.default: [sample(make((3, 5))), sample(make((4,))), sample(make((4, 3), "sliced"))],
    aten.transpose.int: [sample(make((2, 3, 4)), 0, 2), sample(make((3, 4), "sliced"), -1, 0)],
    aten.permute.default: [
        sample(make((2, 3, 4)), [2, 0, 1]),
        sample(make((2, 3, 4), "transposed"), [-1, 0, 1]),
    ],
    aten.expand.default: [
        sample(make((3, 1)), [3, 4]),
        sample(make((3, 1)), [2, -1, 5]),
        sample(make(()), [2, 3]),
        sample(make((2, 3), "sliced"), [4, 2, 3]),
    ],
    aten.slice.Tensor: [
        sample(make((5, 4)), 0, 1, 4),
        sample(make((5, 4)), 1, -3, None, 2),
        sample(make((5, 4), "transposed"), 0, None, None, 3),
        sample(make((5, 4)), 0, 10, 20),
    ],
    aten.select.int: [
        sample(make((5, 4)), 0, 2),
        sample(make((5, 4), "transposed"), -1, -1),
        sample(make((3,)), 0, 1),
    ],
    aten.unsqueeze.default: [
        sample(make((3, 4)), -1),
        sample(make(()), 0),
        sample(make((2, 3), "transposed"), 1),
    ],
    aten.squeeze.default: [sample(make((3, 1, 4, 1))), sample(make((1, 2, 1), "transposed"))],
    aten.squeeze.dim: [
        sample(make((3, 1, 4)), 1),
        sample(make((3, 1, 4)), 0),
        sample(make(()), 0),
    ],
    aten.squeeze.dims: [
        sample(make((3, 1, 1, 2)), [1, -2]),
        sample(make((1, 3, 1), "sliced"), [0, 1]),
    ],
    aten.split_with_sizes.default: [
        sample(make((5, 4)), [2, 3]),
        sample(make((5, 4), "transposed"), [1, 1, 2], 1, no_grad_outputs=(1,)),
        sample(make((3, 5), "sliced"), [0, 5], -1),
    ],
    aten.split.Tensor: [
        sample(make((5, 4)), 2, no_grad_outputs=(0, 2)),
        sample(make((5, 4), "transposed"), 3, 1),
    ],
    aten.unbind.int: [
        sample(make((3, 4))),
        sample(make((3, 4), "transposed"), 1, no_grad_outputs=(2,)),
    ],
    aten.as_strided.default: [
        sample(make((3, 4)), [2, 2], [1, 2]),
        sample(make((3, 4)), [3], [4], 1),
        sample(make((4, 3), "sliced"), [2, 3], [1, 2]),
        # The output reads locations more than once: their gradients add up.
        sample(make((3, 4)), [3, 3], [1, 1]),
        sample(make((2, 3)), [2, 2], [0, 1]),
        # Elements of the input share locations: they split the gradient.
        sample(make((3, 1)).expand(3, 4), [2, 2], [1, 1]),
        sample(make((2, 3)), [0, 2], [1, 1]),
        sample(make((2, 3)), [], []),
        # The output reads every location once, in order: grad itself is the buffer.
        sample(make((12,)), [3, 4], [4, 1], 0),
        sample(make((3, 4), "sliced"), [2, 4], [4, 1]),
        sample(make((4, 3), "transposed"), [12], [1], 0),
    ],
    # Ops that overwrite all of x: a zero gradient.
    aten.fill.Scalar: [sample(make((3, 4), "transposed"), 2.0)],
    aten.zero.default: [sample(make((4, 3), "sliced"))],
}


def _write_through_window(x, src, size, stride, storage_offset):
    out = x.clone(memory_format=torch.contiguous_format)
    out.as_strided(size, stride, storage_offset).copy_(src)
    return out


def _batch_norm_with_constant_statistics(x, weight, bias, mean, var, *options):
    return aten._native_batch_norm_legit_functional(
        x, weight, bias, mean.detach(), var.detach(), *options
    )


#: Ops whose autograd formula is missing or wrong: an equivalent composite gives the oracle.
ORACLES: dict[torch._ops.OpOverload, Callable] = {
    # The functional copy appears only in functionalized graphs: differentiate copy_ on a copy.
    aten.copy.default: lambda x, src, non_blocking=False: x.clone().copy_(src),
    # PyTorch's formula for as_strided_scatter's self keeps the window instead of zeroing it:
    # differentiate the write through a window of a contiguous copy.
    aten.as_strided_scatter.default: _write_through_window,
    # No formula for the running statistics, whose new values the op returns: autograd refuses
    # them as inputs that require grad.
    aten._native_batch_norm_legit_functional.default: _batch_norm_with_constant_statistics,
}


# ---------------------------------------------------------------- checking


def _requires_grad(value) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _as_leaf(value):
    # detach() keeps the layout (strides, offset), so the rule sees the input the op saw.
    return value.detach().requires_grad_() if _requires_grad(value) else value


def _detached(value):
    return value.detach() if isinstance(value, torch.Tensor) else value


def _outputs(value) -> list:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _grad_outputs(outputs: list, s: Sample, seed: int) -> list:
    generator = torch.Generator().manual_seed(seed)
    return [
        torch.randn(o.shape, generator=generator, dtype=F64).to(o.dtype)
        if o.is_floating_point() and i not in s.no_grad_outputs
        else None
        for i, o in enumerate(outputs)
    ]


def _rule_arguments(op, s: Sample, out, grads: list) -> tuple:
    """The rule's arguments: output gradient(s), the op's output(s), its bound arguments."""
    args, kwargs = pytree.tree_map(_detached, (s.args, s.kwargs))
    if isinstance(out, (tuple, list)):
        return (tuple(grads), tuple(o.detach() for o in out), *bind(op._schema, args, kwargs))
    return (grads[0], out.detach(), *bind(op._schema, args, kwargs))


def _pairs(bound: list, grads: tuple):
    """(argument, its gradient) for every argument; a list argument (cat's) element by element."""
    for argument, grad in zip(bound, grads, strict=True):
        if isinstance(argument, (list, tuple)):
            yield from zip(argument, grad or [None] * len(argument), strict=True)
        else:
            yield argument, grad


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        layout = f"strides {value.stride()} offset {value.storage_offset()}"
        return f"{dtype}{list(value.shape)} {layout}"
    if isinstance(value, list):
        return f"[{', '.join(map(_describe, value))}]"
    return repr(value)


def check(op, s: Sample, seed: int) -> None:
    args, kwargs = pytree.tree_map(_as_leaf, (s.args, s.kwargs))
    out = ORACLES.get(op, op)(*args, **kwargs)
    grads = _grad_outputs(_outputs(out), s, seed)
    leaves = [leaf for leaf in pytree.tree_leaves((args, kwargs)) if _requires_grad(leaf)]
    pulled = [(o, g) for o, g in zip(_outputs(out), grads, strict=True) if g is not None]
    expected = torch.autograd.grad(
        [o for o, _ in pulled], leaves, [g for _, g in pulled], allow_unused=True
    )
    expected_of = {id(leaf): grad for leaf, grad in zip(leaves, expected, strict=True)}
    with torch.no_grad():
        actual = DERIVATIVES[op](*_rule_arguments(op, s, out, grads))
    assert len(op._schema.arguments) == len(actual), "one entry per schema argument"
    keywords = [f"{k}={_describe(v)}" for k, v in s.kwargs.items()]
    call = ", ".join([*map(_describe, s.args), *keywords])
    for i, (argument, actual_grad) in enumerate(_pairs(bind(op._schema, args, kwargs), actual)):
        where = f"gradient {i} of {qualified_name(op)}({call})"
        if expected_of.get(id(argument)) is None:
            assert actual_grad is None, f"{where}: autograd gives none"
            continue
        assert actual_grad is not None, f"{where}: autograd gives one"
        torch.testing.assert_close(
            actual_grad, expected_of[id(argument)], equal_nan=True, msg=lambda m: f"{where}: {m}"
        )


CASES = [(op, i) for op, samples in SAMPLES.items() for i in range(len(samples))]
CASE_IDS = [f"{qualified_name(op)}-{i}" for op, i in CASES]


@pytest.mark.parametrize(("op", "index"), CASES, ids=CASE_IDS)
def test_rule_matches_autograd(op, index):
    """The rule gives the input gradients torch.autograd gives, for the same output gradient."""
    check(op, SAMPLES[op][index], seed=index)


FLOOR_DIVIDE = [aten.floor_divide.default, aten.floor_divide.Scalar]


@pytest.mark.parametrize("op", FLOOR_DIVIDE, ids=qualified_name)
def test_floor_divide_backward_raises_like_autograd(op):
    """PyTorch registers no formula: the output requires grad, and backward through it raises."""
    x = make((3, 4)).requires_grad_()
    y = make((4,), nonzero=True) if op is aten.floor_divide.default else 1.5
    out = op(x, y)
    assert out.requires_grad
    message = "derivative for aten::floor_divide is not implemented"
    with pytest.raises(RuntimeError, match=message):
        torch.autograd.grad(out, x, torch.ones_like(out))
    with pytest.raises(RuntimeError, match=message):
        DERIVATIVES[op](torch.ones_like(out), out.detach(), x.detach(), y)


def test_copy_casts_the_gradient_before_summing_it():
    """copy_'s backward casts grad to src's dtype, then sums it to src's shape, so float32
    rounding happens per element: 1 + 0.4 ulp + 0.4 ulp stays 1, where summing first rounds up."""
    ulp = 2.0**-23
    grad = tensor([1.0, 0.4 * ulp, 0.4 * ulp])
    x, src = make((3,)), make((1,), dtype=F32).requires_grad_()
    (expected,) = torch.autograd.grad(x.clone().copy_(src), src, grad)
    _, actual, _ = DERIVATIVES[aten.copy.default](grad, x, x, src.detach(), False)
    assert [1.0] == expected.tolist() == actual.tolist()


def test_every_compute_and_view_op_has_a_derivative():
    """Each compute or view op of the table has a rule or is declared nondifferentiable."""
    missing = [
        entry.name
        for op, entry in OP_TABLE.items()
        if entry.kind in (OpKind.COMPUTE, OpKind.VIEW)
        and op not in DERIVATIVES
        and op not in NONDIFFERENTIABLE
    ]
    assert [] == missing, f"no derivative rule and not nondifferentiable(...): {missing}"


def test_every_rule_has_samples():
    untested = {op for op in DERIVATIVES if op not in SAMPLES}
    # the collectives' rules are checked against eager on two ranks (test_collectives.py)
    assert {*FLOOR_DIVIDE, *COLLECTIVES} == untested


# ---------------------------------------------------------------- nondifferentiable ops

COMPARISONS = [
    getattr(getattr(aten, name), overload)
    for name in ("eq", "ne", "lt", "le", "gt", "ge")
    for overload in ("Tensor", "Scalar")
]
#: Nondifferentiable ops with a floating-point input, on a sample that requires grad.
NONDIFFERENTIABLE_SAMPLES: dict[torch._ops.OpOverload, Sample] = {
    aten.logical_and.default: sample(make((3, 4)), make((4,))),
    aten.logical_or.default: sample(make((3, 4)), make((4,))),
    **{
        op: sample(make((3, 4)), make((4,)) if op._overloadname == "Tensor" else 0.5)
        for op in COMPARISONS
    },
    **{
        op: sample(make((3, 4), "transposed"))
        for op in [
            aten.isnan.default,
            aten.logical_not.default,
            aten.zeros_like.default,
            aten.empty_like.default,
            aten.ones_like.default,
            aten.detach.default,
        ]
    },
    aten.full_like.default: sample(make((3, 4)), 2.0),
    aten.new_zeros.default: sample(make((3, 4)), [2, 3]),
    aten.new_empty.default: sample(make((3, 4)), [2, 3]),
    aten.new_ones.default: sample(make((3, 4)), [2, 3]),
    aten.new_full.default: sample(make((3, 4)), [2, 3], 2.0),
}
#: Nondifferentiable ops that take no floating-point tensor: creation from sizes, bitwise ops.
NO_FLOAT_INPUT = {
    aten.zeros.default,
    aten.empty.memory_format,
    aten.empty_strided.default,
    aten.ones.default,
    aten.full.default,
    aten.scalar_tensor.default,
    aten.arange.default,
    aten.arange.start,
    aten.arange.start_step,
    aten.bitwise_not.default,
    *(getattr(aten, f"bitwise_{name}").Tensor for name in ("and", "or", "xor")),
    *(getattr(aten, f"bitwise_{name}").Scalar for name in ("and", "or", "xor")),
}


@pytest.mark.parametrize("op", list(NONDIFFERENTIABLE_SAMPLES), ids=qualified_name)
def test_nondifferentiable_outputs_do_not_require_grad(op):
    """PyTorch agrees: on inputs that require grad, the op's outputs do not."""
    s = NONDIFFERENTIABLE_SAMPLES[op]
    args, kwargs = pytree.tree_map(_as_leaf, (s.args, s.kwargs))
    assert [] == [o for o in _outputs(op(*args, **kwargs)) if o.requires_grad]


def test_every_nondifferentiable_op_is_checked():
    unchecked = NONDIFFERENTIABLE - set(NONDIFFERENTIABLE_SAMPLES) - NO_FLOAT_INPUT
    assert set() == {qualified_name(op) for op in unchecked}


# ---------------------------------------------------------------- backward graphs on the reference


def _rule_case(op, index):
    s = SAMPLES[op][index]
    out = ORACLES.get(op, op)(*s.args, **s.kwargs)
    return _rule_arguments(op, s, out, _grad_outputs(_outputs(out), s, seed=index))


def _traced_ops(op, arguments) -> set[str]:
    """The ops of the rule's graph, traced on fakes with no decomposition table (as the joint
    graph is traced), so composite ops would show up as they are."""
    leaves, spec = pytree.tree_flatten(arguments)
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]

    def rule(*flat):
        it = iter(flat)
        rebuilt = [next(it) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        return DERIVATIVES[op](*pytree.tree_unflatten(rebuilt, spec))

    graph = make_fx(rule, tracing_mode="fake")(*tensors).graph
    return {
        qualified_name(node.target)
        for node in graph.nodes
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
    }


PURE_OPS = {e.name for e in OP_TABLE.values() if e.kind in (OpKind.COMPUTE, OpKind.VIEW)}


@pytest.mark.parametrize(("op", "index"), CASES, ids=CASE_IDS)
def test_rule_traces_to_compute_and_view_ops(op, index):
    """A rule's backward graph uses only compute and view ops of the table: no in-place op, no
    effect, no op the reference lacks. The rule of an ATen-valued op may call ATen-valued ops
    (`r[ops.aten-values]`): eager's backward ops."""
    traced = _traced_ops(op, _rule_case(op, index))
    if op not in OP_TABLE:
        traced = {name for name in traced if name in OP_TABLE_NAMES}
    assert set() == traced - PURE_OPS


OP_TABLE_NAMES = {entry.name for entry in OP_TABLE.values()}


@pytest.mark.parametrize(("op", "index"), CASES, ids=CASE_IDS)
def test_rule_runs_on_the_reference(op, index):
    """Captured and run on the reference, the rule gives the gradients it gives on real tensors."""
    arguments = _rule_case(op, index)
    expected = DERIVATIVES[op](*arguments)
    result = run(DERIVATIVES[op], *arguments)
    actual_leaves, actual_spec = pytree.tree_flatten(result.outputs)
    expected_leaves, expected_spec = pytree.tree_flatten(expected)
    assert expected_spec == actual_spec
    for actual, wanted in zip(actual_leaves, expected_leaves, strict=True):
        torch.testing.assert_close(actual, wanted, equal_nan=True)


def test_as_strided_backward_takes_an_expanded_gradient_whole():
    """sum's gradient comes expanded (strides 0): it must be copied, not viewed, before the
    input reads its locations (a view would read past the one element it holds)."""
    from aotspec.reference.ops import as_strided_backward

    x = torch.randn(2, 2, generator=_GENERATOR, dtype=F64)
    grad = torch.tensor(3.0, dtype=F64).expand(2, 2)
    x_grad = as_strided_backward(grad, None, x, [2, 2], [2, 1], 0)[0]
    torch.testing.assert_close(x_grad, torch.full((2, 2), 3.0, dtype=F64))
