"""Composite ops capture decomposes itself, where PyTorch's decomposition reads tensor values to
decide what the arguments' shapes and numbers already decide (`specs/capture.md`,
`r[capture.data-dependent.decompositions]`), and `*_like` constructors of a tensor with no
elements, which PyTorch's fake kernels lay out otherwise than eager
(`r[ops.fresh-output.like-empty]`).

Each is the op's eager arithmetic, op for op where the values depend on it, with the decision
taken at capture. A case it does not decide that way (weighted `cov`, whose weights are values;
complex `cov`, left to PyTorch) returns NotImplemented, and PyTorch's own decomposition runs,
refused as it was.

Conventions: `x` the op's input, `n` a number of observations or elements.
"""

from __future__ import annotations

import itertools

import torch


def combinations(x, r=2, with_replacement=False):
    """`torch.combinations`: the r-tuples of `x`'s elements, in lexicographic order of their
    positions, gathered by positions listed at capture (PyTorch's decomposition selects them
    by a mask of position comparisons, `masked_select`)."""
    if x.dim() != 1 or r <= 0:
        return NotImplemented  # eager's error, or its empty result for r = 0
    if with_replacement:
        positions = list(itertools.combinations_with_replacement(range(x.shape[0]), r))
    else:
        positions = list(itertools.combinations(range(x.shape[0]), r))
    index = torch.tensor(positions, dtype=torch.int64, device=x.device).reshape(-1, r)
    return x[index]


def _unweighted(x, correction, fweights, aweights) -> bool:
    """Whether `cov`'s normalization is a number known at capture: no weights, and more
    observations than the correction (else eager warns and divides by zero)."""
    if fweights is not None or aweights is not None or x.dim() > 2 or x.dtype == torch.bool:
        return False
    if x.is_complex():
        return False  # left to PyTorch's decomposition (its imaginary parts are not ours)
    n = x.shape[-1] if x.dim() == 2 else x.numel()
    return n - correction > 0


def cov(x, correction=1, fweights=None, aweights=None):
    """`torch.cov` of real values without weights: variables are rows, observations columns;
    each row is centred on its mean and the products summed by `mm`, divided by
    `n - correction`."""
    if not _unweighted(x, correction, fweights, aweights):
        return NotImplemented
    rows = x if x.dim() == 2 else x.view(1, -1)
    n = rows.shape[1]
    centred = rows - (rows.sum(1) / n).unsqueeze(1)
    products = torch.mm(centred, centred.t())
    return torch.true_divide(products, n - correction).squeeze()


def corrcoef(x):
    """`torch.corrcoef`: `cov`'s matrix scaled by each variable's standard deviation on both
    sides, clipped to [-1, 1] (a single variable's is cov / cov)."""
    if x.dim() > 2 or not _unweighted(x, 1, None, None):
        return NotImplemented
    c = cov(x)
    if c.dim() == 0:
        return c / c
    deviation = torch.sqrt(c.diagonal())
    c = c / deviation.view(-1, 1) / deviation.view(1, -1)
    return c.clip(-1, 1)


def ctc_loss(
    log_probs,
    targets,
    input_lengths,
    target_lengths,
    blank=0,
    reduction="mean",
    zero_infinity=False,
):
    """`ctc_loss` with the mean reduction (`F.ctc_loss`'s "mean", `torch.ctc_loss`'s 1): each
    sequence's loss divided by its target length clamped to at least 1, then the mean, an op
    on the lengths as given (PyTorch's composite copies them out as numbers). Other reductions
    are PyTorch's own, which read the lengths as `r[capture.data-dependent.input-values]` says."""
    if reduction not in ("mean", 1):
        return NotImplemented
    losses = torch.nn.functional.ctc_loss(
        log_probs, targets, input_lengths, target_lengths, blank, "none", zero_infinity
    )
    if not isinstance(target_lengths, torch.Tensor):
        target_lengths = torch.tensor(target_lengths, device=losses.device)
    return (losses / target_lengths.to(torch.int64).clamp_min(1)).mean()


def _like_nothing(numbers: tuple[int, ...]):
    """A `*_like` of a tensor with no elements, which takes one of `numbers` numbers after the
    tensor (a fill value, bounds): nothing to fill or draw, laid out with the tensor's strides, as
    eager copies them; anything else is PyTorch's to run, and to refuse."""

    def like(x, *args, dtype=None, device=None, requires_grad=False, **kwargs):
        memory_format = kwargs.pop("memory_format", torch.preserve_format)
        kwargs.pop("generator", None)  # eager draws nothing from it
        given = len(args) + sum(kwargs.pop(name, None) is not None for name in _NUMBER_NAMES)
        if x.numel() != 0 or memory_format is not torch.preserve_format:
            return NotImplemented
        if kwargs or given not in numbers:
            return NotImplemented
        dtype = x.dtype if dtype is None else dtype
        device = x.device if device is None else device
        # r[ops.fresh-output.like-empty]
        result = torch.empty_strided(x.shape, x.stride(), dtype=dtype, device=device)
        return result.requires_grad_(requires_grad)

    return like


_NUMBER_NAMES = ("fill_value", "low", "high")


#: By function name (`torch.cov` and `Tensor.cov` alike): capture's decomposition.
DECOMPOSITIONS = {
    "combinations": combinations,
    "cov": cov,
    "corrcoef": corrcoef,
    "ctc_loss": ctc_loss,
    **dict.fromkeys(("empty_like", "zeros_like", "ones_like"), _like_nothing((0,))),
    **dict.fromkeys(("rand_like", "randn_like"), _like_nothing((0,))),
    "full_like": _like_nothing((1,)),
    "randint_like": _like_nothing((1, 2)),
}
