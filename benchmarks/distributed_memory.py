"""Memory per rank of fully sharded training on two gloo ranks: eager, aotspec, aot_eager.

Run on demand: `.venv/bin/python benchmarks/distributed_memory.py`. Two workloads, each trained
one warm step and then measured for one step on each rank, three ways:

- "FSDP2 block": a pre-norm transformer block (attention and MLP, width 256), each sub-block and
  the block sharded by FSDP2's `fully_shard`; run eagerly, under
  `torch.compile(backend="aotspec")` (fast backend) and under `torch.compile(backend="aot_eager")`.
  FSDP2's hooks gather and free the parameters outside the compiled regions.
- "SimpleFSDP": `examples/simple_fsdp.py`, 8 layers of 512x512 whose weights each layer
  all-gathers inside its own call; `layer_forward` run eagerly, as `aotspec.compile`d (fast
  backend), and under `torch.compile(backend="aot_eager")`; and, for comparison, the same model
  as `nn.Linear` layers each sharded by FSDP2 and run eagerly ("eager FSDP2").

Per rank, with `aotspec.tracker.MemoryTracker` on real tensors (the input, every parameter or
shard and every weight storage tracked; what the step makes is seen as it is made):
- bytes alive once the forward returned (parameters, the input, and what autograd keeps);
- the backward's peak;
- the largest gathered set: the most bytes the forward held at once in storages of a gathered
  size: a whole parameter's, or a whole FSDP2 unit's all-gather buffer (the widths are chosen so
  that no activation has such a size; gradients, which do, come only in the backward).

Each configuration runs in a group of its own (`aotspec.conformance.ranks`), so a crash ends
only its own ranks and is reported as its result: PyTorch 2.13's `aot_eager` fails on
SimpleFSDP's gather into a zero-byte storage (docs/torch-2.13.md section 7.3).
"""

from __future__ import annotations

import os
import warnings

import torch
from torch import nn

from aotspec.conformance.ranks import RanksFailed, run_on_ranks
from aotspec.examples.transformer import Block
from aotspec.tracker import MemoryTracker

DIM, HEADS, SEQ, BLOCK_BATCH = 256, 4, 24, 2
LAYERS, WIDTH, BATCH = 8, 512, 64
#: Per workload, how it runs: FSDP2 eagerly, SimpleFSDP's layer eagerly, compiled by aotspec's
#: fast backend, compiled by aot_eager.
MODES = {
    "FSDP2 block": ("eager FSDP2", "aotspec fast", "aot_eager"),
    "SimpleFSDP": ("eager FSDP2", "eager", "aotspec fast", "aot_eager"),
}


# ---------------------------------------------------------------- FSDP2 block


def _fsdp2_block(mode: str):
    """The sharded block, the function a step calls, the tensors to track, the gathered sizes."""
    from torch.distributed.fsdp import fully_shard

    warnings.filterwarnings("ignore", "FSDP2-wrapped module")  # a Linear's output is a view
    torch.manual_seed(0)
    block = Block(DIM, HEADS)
    units = [block.attn, block.mlp]
    sizes = {p.numel() * p.element_size() for p in block.parameters()}
    sizes |= {sum(p.numel() * p.element_size() for p in unit.parameters()) for unit in units}
    for unit in [*units, block]:
        fully_shard(unit)
    if mode == "eager FSDP2":
        run = block
    elif mode == "aot_eager":
        run = torch.compile(block, backend="aot_eager")
    else:
        run = torch.compile(block, backend="aotspec", options={"backend": "fast"})
    shards = [p.to_local() for p in block.parameters()]
    x = torch.randn(BLOCK_BATCH, SEQ, DIM)
    return lambda: run(x).square().mean(), [x, *shards], sizes


# ---------------------------------------------------------------- SimpleFSDP


def _simple_fsdp(mode: str):
    import torch.distributed as dist

    from aotspec.examples.simple_fsdp import SimpleFSDP, layer_forward

    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(WIDTH, WIDTH, generator=generator) * WIDTH**-0.5 for _ in range(LAYERS)]
    x = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(1 + dist.get_rank()))
    if mode == "eager FSDP2":
        return _fsdp2_chain(weights, x)
    model = SimpleFSDP(weights, backend="fast")
    if mode == "eager":
        model.compiled = layer_forward
    elif mode == "aot_eager":
        model.compiled = torch.compile(layer_forward, backend="aot_eager")
    tracked = [x, *model.parameters(), *[layer.weight for layer in model.layers]]
    return lambda: model(x).square().mean(), tracked, {WIDTH * WIDTH * 4}


def _fsdp2_chain(weights: list[torch.Tensor], x: torch.Tensor):
    """The same model as nn.Linear layers with tanh between them, each sharded by FSDP2."""
    from torch.distributed.fsdp import fully_shard

    layers = []
    for weight in weights:
        linear = nn.Linear(WIDTH, WIDTH, bias=False)
        with torch.no_grad():
            linear.weight.copy_(weight)
        layers += [linear, nn.Tanh()]
    model = nn.Sequential(*layers[:-1])
    for linear in model[::2]:
        fully_shard(linear)
    fully_shard(model)
    shards = [p.to_local() for p in model.parameters()]
    return lambda: model(x).square().mean(), [x, *shards], {WIDTH * WIDTH * 4}


# ---------------------------------------------------------------- one measured step


def _measure(workload: str, mode: str) -> dict:
    """On one rank: a warm step, then one measured step."""
    torch.set_num_threads(1)
    step, tracked, gathered_sizes = WORKLOADS[workload](mode)
    step().backward()
    tracker = MemoryTracker()
    tracker.track(*tracked)
    with tracker:
        loss = step()
        forward_returned = tracker.mark("forward returned")
        after_forward = tracker.live_bytes
        tracker.reset_peak()
        loss.backward()
        backward_peak = tracker.peak_bytes
    return {
        "alive after forward": after_forward,
        "backward peak": backward_peak,
        "largest gathered set": _largest_gathered(tracker, forward_returned, gathered_sizes),
    }


def _largest_gathered(tracker: MemoryTracker, until_step: int, sizes: set[int]) -> int:
    """The most bytes held at once, up to `until_step`, in storages of a gathered size (after
    each event, as the tracker's peak: an op's new storages come before the frees after it)."""
    nbytes: dict[int, int] = {}
    most = 0
    for event in tracker.events:
        if event.step > until_step:
            break
        nbytes[event.storage] = event.nbytes
        most = max(most, sum(n for n in nbytes.values() if n in sizes))
    return most


WORKLOADS = {"FSDP2 block": _fsdp2_block, "SimpleFSDP": _simple_fsdp}


def main() -> None:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    keys = ("alive after forward", "backward peak", "largest gathered set")
    print("bytes per rank on 2 gloo ranks (CPU), one measured step after a warm one")
    print(f"{'':34}" + "".join(f"{k:>22}" for k in keys))
    for workload in WORKLOADS:
        for mode in MODES[workload]:
            try:
                ranks = run_on_ranks(_measure, workload, mode, timeout=600)
            except RanksFailed as failed:
                print(f"{workload + ', ' + mode:34}  failed: {_first_line(failed)}")
                continue
            for rank, row in enumerate(ranks):
                cells = "".join(f"{row[k]:>22,}" for k in keys)
                print(f"{f'{workload}, {mode}, rank {rank}':34}{cells}")


def _first_line(failed: RanksFailed) -> str:
    lines = [line for line in str(failed).splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "died" in line]
    return (errors or lines)[-1][:160]


if __name__ == "__main__":
    main()
