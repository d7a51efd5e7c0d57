"""The generators' model of layouts agrees with eager PyTorch: a program they believe valid (a
`view` of what they think is contiguous, say) is one eager accepts."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from aotspec.fuzz.strategies.grad import _g_where
from aotspec.fuzz.strategies.model import Model, Strided


@given(st.data())
def test_where_on_a_mask_of_a_transposed_value_is_laid_out_as_eager_lays_it(data):
    """A comparison lays its mask out in its input's order, and `where` follows the mask: the
    model once took every mask for contiguous, thought where's result contiguous and viewed it
    where eager raises (fuzz seed 21, program 69)."""
    model = Model()
    storage = model.new_storage(6 * 4, caller=True)
    model.bind("x", storage, Strided((3, 2), (1, 3)), param=True)
    compare, where = _g_where(data.draw, model)
    x = torch.zeros(2, 3).t()
    mask = getattr(x, compare.op)(0.0)
    assert model.lay(where.outs[0]).strides == torch.where(mask, x, x).stride()
