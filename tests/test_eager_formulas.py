"""ATen-valued ops whose eager derivatives need care, compiled on both backends against eager.

Three classes of op, each swept on a float64 sample per op (`r[ops.aten-derivatives]`):

- `FORMULA_WRITES`: ops whose formula in PyTorch's derivatives.yaml writes into tensors it made
  itself (`copy_` into a view of `new_zeros`, `fill_` or `mul_` of a diagonal, `masked_fill_`,
  `logical_or_`, `tril_`, ...): replayed as written, the writes were lost or refused
  (`r[ops.aten-derivatives.functional]`). A test checks that each sample's traced formula writes.
- `WRITES_STATE`: ops that write state their backward reads (rrelu's noise, batch norm's running
  statistics: `r[ops.aten-mutations.state]`, `r[ops.aten-mutations.batch-norm]`).
- `NONDIFFERENTIABLE_OUTPUTS`: ops with outputs eager gives no gradient (indices, saved
  statistics, a factorization's pivots: `r[autograd.requires-grad.op-outputs]`).

Each sample's outputs, their requires_grad, the gradients of seeded random cotangents, and the
tensors it writes must be eager's.

Conventions: a `Sample` is a function of tensors that require grad (the other tensors it reads
are constants of its closure) and those tensors; `make` makes seeded float64 tensors.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from attrs import frozen
from torch.fx.experimental.proxy_tensor import make_fx

import aotspec

aten = torch.ops.aten
_generator = torch.Generator().manual_seed(23)


def make(*shape, low=-2.0, high=2.0) -> torch.Tensor:
    return torch.rand(shape, generator=_generator, dtype=torch.float64) * (high - low) + low


def _symmetric(n: int) -> torch.Tensor:
    a = make(n, n)
    return a + a.T


@frozen
class Sample:
    fn: Callable
    inputs: tuple[torch.Tensor, ...]
    #: Tensors passed after the inputs that require no grad (running statistics), which the
    #: call may write.
    buffers: tuple[torch.Tensor, ...] = ()
    #: The seed of the default generator before the call, for a random op.
    seed: int | None = None


_INDEX = torch.tensor([0, 2, 0])
_SCATTER_INDEX = torch.tensor([[0, 1, 2, 0], [2, 0, 1, 1], [0, 2, 2, 1]])
_HOLES = make(3, 4)
_HOLES[1, 2] = 0.0  # cumprod's formula masks the zeros

FORMULA_WRITES = {
    "as_strided_copy": Sample(lambda x: torch.as_strided_copy(x, (2,), (2,), 1), (make(4),)),
    "linalg_qr": Sample(torch.linalg.qr, (make(5, 5),)),
    "_linalg_svd": Sample(lambda a: torch.linalg.svd(a, full_matrices=False), (make(3, 2),)),
    "_linalg_eigh": Sample(torch.linalg.eigh, (_symmetric(3),)),
    "linalg_vector_norm": Sample(lambda x: torch.linalg.vector_norm(x, 3.0, dim=1), (make(3, 4),)),
    "norm.ScalarOpt_dim": Sample(F.pairwise_distance, (make(3, 4), make(3, 4))),
    "dist": Sample(lambda x, y: torch.dist(x, y, 3.0), (make(3, 4), make(3, 4))),
    "renorm": Sample(lambda x: torch.renorm(x, 2.0, 0, 1.0), (make(3, 4),)),
    "copysign": Sample(torch.copysign, (make(3, 4), make(3, 4))),
    "cumprod": Sample(lambda x: torch.cumprod(x, 1), (_HOLES,)),
    "fmax": Sample(torch.fmax, (make(3, 4), make(3, 4))),
    "fmin": Sample(torch.fmin, (make(3, 4), make(3, 4))),
    "median": Sample(torch.median, (make(3, 5),)),
    "nanmedian": Sample(torch.nanmedian, (make(3, 5),)),
    "mvlgamma": Sample(lambda x: torch.mvlgamma(x, 2), (make(3, 4, low=1.0, high=3.0),)),
    "atanh": Sample(torch.atanh, (make(3, 4, low=-0.9, high=0.9),)),
    "addcdiv": Sample(
        lambda x, y, z: torch.addcdiv(x, y, z, value=0.5),
        (make(3, 4), make(3, 4), make(3, 4, low=0.5, high=2.0)),
    ),
    "std_mean": Sample(lambda x: torch.std_mean(x, 1), (make(3, 4),)),
    "scatter_reduce": Sample(
        lambda x, src: x.scatter_reduce(0, _SCATTER_INDEX, src, "mean"), (make(3, 4), make(3, 4))
    ),
    "index_reduce": Sample(
        lambda x, src: x.index_reduce(0, _INDEX, src, "mean"), (make(3, 4), make(3, 4))
    ),
    "linalg_householder_product": Sample(
        torch.linalg.householder_product, (make(4, 3), make(3, low=0.5, high=1.5))
    ),
    "ormqr": Sample(torch.ormqr, (make(3, 3), make(3, low=0.5, high=1.5), make(3, 2))),
    "native_group_norm": Sample(
        # its mean and rstd carry gradients too, through the formula's in-place writes
        lambda x, w, b: aten.native_group_norm(x, w, b, 2, 4, 3, 2, 1e-5),
        (make(2, 4, 3), make(4), make(4)),
    ),
    "binary_cross_entropy": Sample(
        F.binary_cross_entropy, (make(4, low=0.1, high=0.9), make(4, low=0.1, high=0.9))
    ),
}


def _batch_norm(op, *flags):
    """`op` of an input, weight and bias that require grad, and running statistics it may
    write, the caller's."""

    def fn(x, weight, bias, running_mean, running_var):
        return op(x, weight, bias, running_mean, running_var, *flags)

    inputs = (make(4, 3), make(3), make(3, low=0.5, high=1.5))
    return Sample(fn, inputs, buffers=(make(3), make(3, low=0.5, high=1.5)))


WRITES_STATE = {
    "rrelu_with_noise": Sample(
        lambda x: F.rrelu(x, 0.1, 0.9, training=True), (make(3, 4),), seed=3
    ),
    "_batch_norm_with_update": _batch_norm(aten._batch_norm_with_update, 0.25, 1e-5),
    "_native_batch_norm_legit-training": _batch_norm(
        aten._native_batch_norm_legit, True, 0.25, 1e-5
    ),
    "_native_batch_norm_legit-eval": _batch_norm(aten._native_batch_norm_legit, False, 0.25, 1e-5),
    "native_batch_norm-training": _batch_norm(aten.native_batch_norm, True, 0.25, 1e-5),
    "native_batch_norm-eval": _batch_norm(aten.native_batch_norm, False, 0.25, 1e-5),
}

_CLASSES = torch.tensor([0, 2, 1])

NONDIFFERENTIABLE_OUTPUTS = {
    "native_layer_norm": Sample(
        lambda x, w: aten.native_layer_norm(x, [4], w, None, 1e-5), (make(3, 4), make(4))
    ),
    "max.dim": Sample(lambda x: torch.max(x, 1), (make(3, 4),)),
    "min.dim": Sample(lambda x: torch.min(x, 1), (make(3, 4),)),
    "sort": Sample(lambda x: torch.sort(x, 1), (make(3, 4),)),
    "topk": Sample(lambda x: torch.topk(x, 2), (make(3, 4),)),
    "kthvalue": Sample(lambda x: torch.kthvalue(x, 2), (make(3, 4),)),
    "mode": Sample(lambda x: torch.mode(x, 1), (make(3, 4),)),
    "median.dim": Sample(lambda x: torch.median(x, 1), (make(3, 5),)),
    "cummax": Sample(lambda x: torch.cummax(x, 1), (make(3, 4),)),
    "frexp": Sample(torch.frexp, (make(3, 4),)),
    "adaptive_max_pool2d": Sample(
        lambda x: F.adaptive_max_pool2d(x, 2, return_indices=True), (make(1, 2, 4, 4),)
    ),
    "max_pool2d_with_indices": Sample(
        lambda x: F.max_pool2d(x, 2, return_indices=True), (make(1, 2, 4, 4),)
    ),
    "log_sigmoid_forward": Sample(lambda x: aten.log_sigmoid_forward(x), (make(3, 4),)),
    "nll_loss_forward": Sample(
        lambda x: aten.nll_loss_forward(x, _CLASSES, None, 1, -100), (make(3, 4),)
    ),
    "_linalg_det": Sample(lambda a: aten._linalg_det(a), (make(3, 3),)),
    "linalg_inv_ex": Sample(torch.linalg.inv_ex, (make(3, 3) + 3 * torch.eye(3),)),
    "linalg_lu_factor_ex": Sample(torch.linalg.lu_factor_ex, (make(3, 3),)),
}

SAMPLES = {
    **{f"writes:{name}": s for name, s in FORMULA_WRITES.items()},
    **{f"state:{name}": s for name, s in WRITES_STATE.items()},
    **{f"outputs:{name}": s for name, s in NONDIFFERENTIABLE_OUTPUTS.items()},
}


def _run(fn, sample: Sample):
    """The outputs, their requires_grad flags, the inputs' gradients of seeded cotangents, and
    the buffers after the backward."""
    inputs = [t.clone().requires_grad_() for t in sample.inputs]
    buffers = [t.clone() for t in sample.buffers]
    if sample.seed is not None:
        torch.manual_seed(sample.seed)
    result = fn(*inputs, *buffers)
    outputs = [o for o in pytree.tree_leaves(result) if isinstance(o, torch.Tensor)]
    flags = [o.requires_grad for o in outputs]
    cotangents = torch.Generator().manual_seed(5)
    pairs = [
        (o, torch.randn(o.shape, generator=cotangents, dtype=o.dtype))
        for o in outputs
        if o.requires_grad
    ]
    grads = torch.autograd.grad(
        [o for o, _ in pairs], inputs, [c for _, c in pairs], allow_unused=True
    )
    return [o.detach() for o in outputs], flags, list(grads), buffers


@pytest.mark.parametrize("backend", ["reference", "fast"])
@pytest.mark.parametrize("name", list(SAMPLES))
def test_compiled_agrees_with_eager(name, backend):
    sample = SAMPLES[name]
    expected = _run(sample.fn, sample)
    outputs, flags, grads, buffers = _run(aotspec.compile(sample.fn, backend=backend), sample)
    assert expected[1] == flags, "requires_grad of each output"
    torch.testing.assert_close(outputs, expected[0], equal_nan=True)
    torch.testing.assert_close(grads, expected[2], equal_nan=True)
    torch.testing.assert_close(buffers, expected[3])


def _writes_in_place(sample: Sample) -> set[str]:
    """The in-place ops of eager's backward of `sample`, traced on fake tensors."""

    def backward(*inputs):
        inputs = [t.detach().requires_grad_() for t in inputs]
        outputs = [o for o in pytree.tree_leaves(sample.fn(*inputs)) if o.requires_grad]
        return torch.autograd.grad(outputs, inputs, [torch.ones_like(o) for o in outputs])

    traced = make_fx(backward, tracing_mode="fake", _allow_non_fake_inputs=True)
    graph = traced(*sample.inputs).graph
    return {
        str(node.target)
        for node in graph.nodes
        if isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable
    }


@pytest.mark.parametrize("name", list(FORMULA_WRITES))
def test_formula_writes_in_place(name):
    """Each sample of FORMULA_WRITES is of that class: its eager backward writes in place."""
    assert _writes_in_place(FORMULA_WRITES[name])
