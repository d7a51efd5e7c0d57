"""SimpleFSDP (`examples/simple_fsdp.py`) on two gloo ranks: each layer all-gathers its weight
inside the compiled function, into the weight's zero-byte storage, and the all-gather's
derivative reduce-scatters the weight's gradient into the shards (`specs/collectives.md`).

- Losses and gradients equal single-process eager training of the unsharded model, over several
  SGD steps, on both backends.
- At most one layer is gathered at a time: the reference's ledger of each layer's call holds that
  layer's weight (twice, while it is copied, as in eager) and, once the call returns, nothing of
  it; on real tensors, through a whole step, the backward's regathers hold one layer at a time.

The ranks are processes this test spawns (`aotspec.conformance.ranks`); a rank that hangs fails
the test after its time limit.
"""

from __future__ import annotations

import pytest
import torch

from aotspec.conformance.ranks import run_on_ranks
from aotspec.examples.simple_fsdp import SimpleFSDP, unsharded_forward
from aotspec.tracker import MemoryTracker

#: (rows, columns) of each layer's weight, rows split between the ranks.
SHAPES = [(16, 8), (24, 16), (4, 24)]
BATCH, STEPS, RANKS = 5, 3, 2
BACKENDS = ["reference", "fast"]


def _weights() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=generator) * shape[1] ** -0.5 for shape in SHAPES]


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch of a step (inputs, targets); rank r takes rows r*BATCH to (r+1)*BATCH."""
    generator = torch.Generator().manual_seed(100 + step)
    x = torch.randn(RANKS * BATCH, SHAPES[0][1], generator=generator)
    return x, torch.randn(RANKS * BATCH, SHAPES[-1][0], generator=generator)


def _loss(y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The mean over the whole batch of the squared error: each rank's part of the sum."""
    return (y - target).square().sum() / (RANKS * BATCH)


def _unsharded_training() -> dict:
    """The reference answer: eager SGD on the whole weights and the whole batch, one process."""
    weights = [w.clone().requires_grad_() for w in _weights()]
    optimizer = torch.optim.SGD(weights, lr=0.1)
    losses, grads = [], []
    for step in range(STEPS):
        x, target = _batch(step)
        loss = _loss(unsharded_forward(weights, x), target)
        loss.backward()
        losses.append(loss.detach())
        grads.append([w.grad.clone() for w in weights])
        optimizer.step()
        optimizer.zero_grad()
    return {"losses": losses, "grads": grads}


def _sharded_training(backend: str) -> dict:
    """On one rank: SGD on SimpleFSDP's shards; each step's loss (summed over the ranks) and the
    shards' gradients."""
    import torch.distributed as dist

    rank = dist.get_rank()
    model = SimpleFSDP(_weights(), backend=backend)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    mine = slice(rank * BATCH, (rank + 1) * BATCH)
    losses, grads = [], []
    for step in range(STEPS):
        x, target = _batch(step)
        loss = _loss(model(x[mine]), target[mine])
        loss.backward()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total)
        grads.append([shard.grad.clone() for shard in model.parameters()])
        optimizer.step()
        optimizer.zero_grad()
    return {"losses": losses, "grads": grads}


def _ledgers_of_layer_calls() -> list[dict]:
    """On one rank, the reference backend: per layer call, the bytes of its inputs, output and
    weight, the peak of its ledger and the bytes alive when it returned."""
    import torch.distributed as dist

    rank = dist.get_rank()
    model = SimpleFSDP(_weights(), backend="reference")
    x = _batch(0)[0][rank * BATCH : (rank + 1) * BATCH].clone()  # a storage of its own
    found = []
    for k, layer in enumerate(model.layers):
        y = layer(x, model.compiled, last=k == len(SHAPES) - 1)
        ledger = model.compiled.last_run.ledger
        found.append(
            {
                "inputs": _nbytes(x) + _nbytes(layer.shard),
                "output": _nbytes(y),
                "weight": _nbytes(layer.weight),
                "peak": ledger.peak_bytes,
                "after": ledger.probes[-1].live_bytes,
            }
        )
        x = y
    return found


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _gathered_layers_through_a_step() -> dict:
    """On one rank, the fast backend on real tensors: how many layers' weight storages held
    bytes at once, over the forward and over a whole step."""
    import torch.distributed as dist

    rank = dist.get_rank()
    model = SimpleFSDP(_weights(), backend="fast")
    x, target = _batch(0)
    mine = slice(rank * BATCH, (rank + 1) * BATCH)
    model(x[mine])  # compiles
    tracker = MemoryTracker()
    weights = set(tracker.track(*[layer.weight for layer in model.layers]))
    with tracker:
        loss = _loss(model(x[mine]), target[mine])
        forward_returned = tracker.mark("forward returned")
        loss.backward()
    # The tracker sees resizes between ops, at the step of the next op: count after each step.
    sizes: dict[int, int] = {}
    gathered_after: dict[int, int] = {}
    for event in tracker.events:
        if event.storage in weights:
            sizes[event.storage] = event.nbytes
        gathered_after[event.step] = sum(nbytes > 0 for nbytes in sizes.values())
    return {
        "forward": max(n for step, n in gathered_after.items() if step <= forward_returned),
        "step": max(gathered_after.values()),
        "regathered": len(sizes),
    }


def _everything() -> dict:
    return {
        "unsharded": _unsharded_training(),
        **{backend: _sharded_training(backend) for backend in BACKENDS},
        "ledgers": _ledgers_of_layer_calls(),
        "gathered": _gathered_layers_through_a_step(),
    }


@pytest.fixture(scope="module")
def ranks():
    """What each rank found: one spawned group for every test of this module."""
    return run_on_ranks(_everything, timeout=120)


@pytest.mark.parametrize("backend", BACKENDS)
def test_simple_fsdp_trains_as_the_unsharded_model(ranks, backend):
    for rank, found in enumerate(ranks):
        expected, got = found["unsharded"], found[backend]
        torch.testing.assert_close(
            got["losses"], expected["losses"], msg=lambda m: f"rank {rank} losses: {m}"
        )
        for step in range(STEPS):
            for k, (shard_grad, full) in enumerate(
                zip(got["grads"][step], expected["grads"][step], strict=True)
            ):
                # the rank's rows of the whole weight's gradient
                torch.testing.assert_close(
                    shard_grad,
                    full.chunk(RANKS)[rank],
                    msg=lambda m: f"rank {rank} step {step} layer {k}: {m}",
                )


def test_a_layer_call_holds_its_weight_only_while_it_runs(ranks):
    """r[autograd.saved-inputs.final-contents]: the peak of a layer's call is its inputs, the
    all-gathered weight and its copy in the weight's storage (one layer, as in eager); when the
    call returns only the inputs and the output are alive: autograd saved the layer's input, and
    the backward reads the weight from its storage."""
    for found in ranks:
        for call in found["ledgers"]:
            assert call["peak"] == call["inputs"] + 2 * call["weight"]
            assert call["after"] == call["inputs"] + call["output"]


def test_at_most_one_layer_is_gathered_at_a_time(ranks):
    """On real tensors (fast backend), through a forward and backward: the forward gathers into
    fresh values and leaves every weight's storage empty; the backward regathers one layer's
    storage at a time, each layer once."""
    for found in ranks:
        assert {"forward": 0, "step": 1, "regathered": len(SHAPES)} == found["gathered"]
