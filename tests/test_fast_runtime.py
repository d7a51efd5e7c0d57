"""The fast backend's runtime (`fast/runtime.py`) where a plan's values share storages: which
outputs it version-checks before the backward, against the reference's ledger."""

from __future__ import annotations

import pytest
import torch

import aotspec
from aotspec.errors import SpecViolation

BACKENDS = ["reference", "fast"]


def _exp_viewed(x):
    y = x.exp()  # exp's backward reads its result
    return y.view(2, 2)


def _exp_split_unsafely(x):
    y = x.exp()
    first, _ = torch.ops.aten.unsafe_split.Tensor(y, 2)  # views its schema does not declare
    return first


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("program", [_exp_viewed, _exp_split_unsafely])
def test_an_output_on_a_saved_values_storage_written_before_the_backward_raises(backend, program):
    """r[autograd.saved-outputs.version]: the output lies on the storage of a value the
    backward reads (a view of it, or a result of an op whose schema hides that it is one); a
    write into it between the call and the backward raises before any gradient is computed."""
    x = torch.tensor([0.0, 1.0, 2.0, 3.0], requires_grad=True)
    out = aotspec.compile(program, backend=backend)(x)
    with torch.no_grad():
        out.add_(1)
    with pytest.raises(SpecViolation, match="modified by an inplace operation"):
        out.sum().backward()
    assert x.grad is None
