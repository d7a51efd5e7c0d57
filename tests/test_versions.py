"""One test per difference between torch releases that `aotspec/versions.py` handles."""

from __future__ import annotations

import torch

from aotspec import versions

aten = torch.ops.aten


def test_make_fx_keeping_detach_records_detach():
    """torch 2.14 and later decompose detach to alias when make_fx is given no table."""
    traced = versions.make_fx_keeping_detach(lambda x: x.detach() * x, tracing_mode="fake")(
        torch.ones(3, requires_grad=True)
    )
    targets = [node.target for node in traced.graph.nodes if node.op == "call_function"]
    assert [aten.detach.default, aten.mul.Tensor] == targets
