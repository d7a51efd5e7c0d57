"""What activation checkpointing saves: bytes a training step's forward leaves for the backward.

Run on demand: `.venv/bin/python benchmarks/checkpoint_memory.py`. One process, side by side, on
real tensors with `aotspec.tracker.MemoryTracker` (the model's weights and the input are not
counted): eight residual MLP blocks, each run directly or under
`torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`, in eager PyTorch, on aotspec's
fast backend (`aotspec.compile` and `torch.compile(backend="aotspec")`) and under
`torch.compile(backend="aot_eager")`. With checkpointing the forward keeps only each block's
input (`r[checkpoint.saved]`) and the backward recomputes the rest (`r[checkpoint.recompute]`).
"""

from __future__ import annotations

import torch
from rich.console import Console
from rich.table import Table

import aotspec
from aotspec.tracker import step_memory

BLOCKS, BATCH, WIDTH, HIDDEN = 8, 64, 256, 1024


class Blocks(torch.nn.Module):
    def __init__(self, checkpointed: bool):
        super().__init__()
        torch.manual_seed(0)
        self.checkpointed = checkpointed
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(
                torch.nn.Linear(WIDTH, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, WIDTH)
            )
            for _ in range(BLOCKS)
        )

    def forward(self, x):
        for block in self.blocks:
            if self.checkpointed:
                x = x + torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = x + block(x)
        return x.pow(2).sum()


def _measure(make_step, checkpointed: bool) -> tuple[int, int]:
    """(bytes alive when the forward returns, backward peak) of one warm step."""
    model = Blocks(checkpointed)
    step = make_step(model)
    x = torch.randn(BATCH, WIDTH)
    step(x).backward()  # warm-up: compiles outside the tracker
    model.zero_grad(set_to_none=True)
    return step_memory(lambda: step(x))


CONTENDERS = {
    "eager": lambda model: model,
    "aotspec fast (aotspec.compile)": lambda model: aotspec.compile(model, backend="fast"),
    "aotspec fast (torch.compile)": lambda model: torch.compile(
        model, backend="aotspec", options={"backend": "fast"}
    ),
    "aot_eager (torch.compile)": lambda model: torch.compile(model, backend="aot_eager"),
}


def main() -> None:
    torch.set_num_threads(1)
    table = Table(
        title=f"{BLOCKS} residual MLP blocks ({WIDTH} -> {HIDDEN} -> {WIDTH}), batch {BATCH}: "
        "bytes on real tensors, weights and input not counted"
    )
    for column in ("", "after forward", "backward peak"):
        table.add_column(column, justify="right" if column else "left")
    table.add_column("after forward, checkpointed / not", justify="right")
    for name, make_step in CONTENDERS.items():
        torch._dynamo.reset()
        plain = _measure(make_step, checkpointed=False)
        checkpointed = _measure(make_step, checkpointed=True)
        table.add_row(f"{name}, no checkpointing", f"{plain[0]:,}", f"{plain[1]:,}", "")
        table.add_row(
            f"{name}, checkpointed",
            f"{checkpointed[0]:,}",
            f"{checkpointed[1]:,}",
            f"{checkpointed[0] / plain[0]:.3f}",
        )
    Console(width=150).print(table)


if __name__ == "__main__":
    main()
