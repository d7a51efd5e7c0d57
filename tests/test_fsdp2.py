"""FSDP2 (`torch.distributed.fsdp.fully_shard`) trains under `torch.compile(backend="aotspec")` on
two gloo ranks, with eager FSDP2's losses and gradients.

Dynamo leaves FSDP2's hooks (the all-gathers before a module runs, the reshards and
reduce-scatters after) out of its graphs and compiles the regions between them, which aotspec
runs: the attention's and the MLP's forwards, the block's residual adds. The ranks are processes
this test spawns (`aotspec.conformance.ranks`); a rank that hangs fails the test after its time
limit.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from aotspec.conformance.ranks import run_on_ranks
from aotspec.examples.transformer import Block

DIM, HEADS, STEPS = 16, 2, 3
BACKENDS = ["reference", "fast"]


def _train(compile_with: str | None) -> dict:
    """On one rank: `STEPS` AdamW steps of FSDP2 on the block, eager or compiled with aotspec's
    `compile_with` backend; each step's loss and full gradients (gathered from the shards)."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    # FSDP2 warns that a Linear's output is a view an in-place op could detach from its hooks;
    # the block makes none
    warnings.filterwarnings("ignore", "FSDP2-wrapped module")
    torch.manual_seed(0)  # the same block on every rank
    block = Block(DIM, HEADS)
    fully_shard(block.attn)
    fully_shard(block.mlp)
    fully_shard(block)
    optimizer = torch.optim.AdamW(block.parameters(), lr=0.01)
    model = block
    if compile_with is not None:
        torch._dynamo.reset()
        model = torch.compile(block, backend="aotspec", options={"backend": compile_with})
    generator = torch.Generator().manual_seed(1 + dist.get_rank())  # each rank its own data
    losses, grads = [], []
    for _ in range(STEPS):
        x = torch.randn(2, 5, DIM, generator=generator)
        loss = model(x).square().mean()
        loss.backward()
        losses.append(loss.detach())
        grads.append({name: p.grad.full_tensor() for name, p in block.named_parameters()})
        optimizer.step()
        optimizer.zero_grad()
    return {"losses": losses, "grads": grads, "graphs": _graphs_compiled()}


def _graphs_compiled() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def _train_all() -> dict:
    return {backend: _train(backend) for backend in [None, *BACKENDS]}


@pytest.fixture(scope="module")
def trained():
    """Each rank's training, eager and on both backends: one spawned group for all three."""
    return run_on_ranks(_train_all, timeout=150)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fsdp2_trains_under_torch_compile_as_in_eager(trained, backend):
    for rank, runs in enumerate(trained):
        eager, compiled = runs[None], runs[backend]
        assert compiled["graphs"] > 0, "Dynamo compiled nothing: the test would prove nothing"
        torch.testing.assert_close(
            compiled["losses"], eager["losses"], msg=lambda m: f"rank {rank} losses: {m}"
        )
        for step, (want, got) in enumerate(zip(eager["grads"], compiled["grads"], strict=True)):
            assert want.keys() == got.keys()
            for name in want:
                torch.testing.assert_close(
                    got[name], want[name], msg=lambda m: f"rank {rank} step {step} {name}: {m}"
                )
