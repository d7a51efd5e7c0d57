"""FSDP's parameter pattern with autograd: each layer gathers its parameter into the parameter's
own storage under torch.no_grad(), uses it, and frees the storage again; the backward gathers it
once more before it reads it (`r[autograd.no-grad-input-writes]`, `r[autograd.saved-inputs]`).

Expected values come from eager PyTorch running the same function on its own copies; memory is
compared with eager's on real tensors with `MemoryTracker`."""

from __future__ import annotations

import pytest
import torch

import aotspec
from aotspec.errors import SpecViolation
from aotspec.tracker import MemoryTracker

resize_storage_bytes_ = torch.ops.inductor.resize_storage_bytes_
WIDTH = 8
LAYER_BYTES = WIDTH * WIDTH * 4


def gather(w, shard):
    resize_storage_bytes_(w, shard.numel() * shard.element_size())
    with torch.no_grad():
        w.copy_(shard)


def two_layers(x, w1, w2, g1, g2):
    gather(w1, g1)
    h = torch.relu(x @ w1)
    resize_storage_bytes_(w1, 0)
    gather(w2, g2)
    y = h @ w2
    resize_storage_bytes_(w2, 0)
    return y


def regather(w, g):
    """FSDP's pre-backward all-gather: new bytes, the version left alone."""
    w.untyped_storage().resize_(g.numel() * g.element_size())
    with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(w):
        w.copy_(g)


def world():
    torch.manual_seed(0)
    x = torch.randn(4, WIDTH, requires_grad=True)
    params = []
    for _ in range(2):
        w = torch.nn.Parameter(torch.empty(WIDTH, WIDTH))
        w.untyped_storage().resize_(0)
        params.append(w)
    shards = [torch.randn(WIDTH, WIDTH), torch.randn(WIDTH, WIDTH)]
    return x, params, shards


def run(fn, *, backward=True):
    x, (w1, w2), (g1, g2) = world()
    y = fn(x, w1, w2, g1, g2)
    after_forward = (w1.untyped_storage().nbytes(), w2.untyped_storage().nbytes())
    if backward:
        regather(w2, g2)
        regather(w1, g1)
        y.sum().backward()
    return y.detach(), x.grad, w1.grad, w2.grad, after_forward, (w1._version, w2._version)


def _compiled(backend: str):
    if backend.startswith("dynamo-"):
        # Dynamo's graph through the same plan; PyTorch 2.13's aot_eager fails on this program
        # (benchmarks/fsdp_memory.py)
        torch._dynamo.reset()
        return torch.compile(
            two_layers, backend="aotspec", fullgraph=True, options={"backend": backend[7:]}
        )
    return aotspec.compile(two_layers, backend=backend)


@pytest.mark.parametrize("backend", ["reference", "fast", "dynamo-fast", "dynamo-reference"])
def test_gradients_reach_the_gathered_parameters_as_in_eager(backend):
    expected = run(two_layers)
    got = run(_compiled(backend))
    for name, want, have in zip(
        ["y", "x.grad", "w1.grad", "w2.grad"], expected[:4], got[:4], strict=True
    ):
        torch.testing.assert_close(have, want, msg=f"{name} differs from eager")
    assert got[4] == expected[4] == (0, 0)  # resharded after the forward
    assert got[5] == expected[5]  # one version per gather, as eager's copy_ gives


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_backward_before_the_regather_raises_rather_than_reading_freed_memory(backend):
    x, (w1, w2), (g1, g2) = world()
    y = aotspec.compile(two_layers, backend=backend)(x, w1, w2, g1, g2)
    with pytest.raises(SpecViolation, match=r"autograd\.saved-inputs\.in-bounds"):
        y.sum().backward()


def test_a_grad_mode_write_into_a_parameter_is_still_rejected():
    def writes_with_grad(x, w):
        w.mul_(2)  # not under no_grad: eager raises for a leaf
        return x @ w

    x, (w, _), (g, _) = world()
    regather(w, g)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        aotspec.compile(writes_with_grad, backend="fast")(x, w)


def live_bytes_after_forward(fn) -> tuple[int, int]:
    """Bytes alive once the forward returned (autograd's saved tensors included), and its peak."""
    x, (w1, w2), (g1, g2) = world()
    tracker = MemoryTracker()
    tracker.track(x, w1, w2, g1, g2)
    with tracker:
        y = fn(x, w1, w2, g1, g2)
        tracker.mark("forward returned")
    assert y.requires_grad
    return tracker.live_bytes, tracker.peak_bytes


def test_the_forward_keeps_no_gathered_parameter_for_the_backward():
    """r[autograd.saved-inputs]: the backward reads the parameter itself, so the forward leaves
    exactly what eager leaves: the activations, not a copy of either gathered parameter."""
    eager_live, _ = live_bytes_after_forward(two_layers)
    fast_live, _ = live_bytes_after_forward(aotspec.compile(two_layers, backend="fast"))
    assert fast_live == eager_live
    inputs_and_output = 2 * 4 * WIDTH * 4 + 2 * LAYER_BYTES  # x, y, the two shards
    assert fast_live < inputs_and_output + LAYER_BYTES  # not even one gathered layer kept
