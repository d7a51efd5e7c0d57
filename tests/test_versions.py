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


class _Doubled(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return 2 * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


def test_custom_function_apply_owner_sees_every_apply():
    """torch 2.14 made `Function.apply` autograd's C apply, which `_SingleLevelFunction` no
    longer sees."""
    owner = versions.custom_function_apply_owner()
    original = owner.__dict__.get("apply")
    seen = []
    owner.apply = classmethod(lambda cls, *args: seen.append(cls))
    try:
        _Doubled.apply(torch.ones(2, requires_grad=True))
    finally:
        if original is None:
            del owner.apply
        else:
            owner.apply = original
    assert [_Doubled] == seen


def test_checkpoint_generator_replaced_sees_each_checkpoint():
    """torch 2.14 made checkpoint call `_checkpoint_without_reentrant_generator_impl`, with
    another signature, in place of `_checkpoint_without_reentrant_generator`."""
    seen = []

    def region(context_fn):
        seen.append(context_fn)
        yield

    x = torch.ones(2, requires_grad=True)
    with versions.checkpoint_generator_replaced(region):
        out = torch.utils.checkpoint.checkpoint(torch.sin, x, use_reentrant=False)
    assert [torch.utils.checkpoint.noop_context_fn] == seen
    assert torch.equal(torch.sin(x), out)
