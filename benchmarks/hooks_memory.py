"""Peak bytes of a 16-layer chain with a bfloat16 pack hook, on the reference's ledgers.

Run on demand: `.venv/bin/python benchmarks/hooks_memory.py`. One process, side by side:
- no hooks;
- a bfloat16 pack hook placed as the spec says, right after each saved value's last forward use
  (`r[hooks.place.pack-after-last-use]`);
- the same hook placed at the end of the forward, as PyTorch 2.13 does.
Each line gives the forward's peak (the caller's inputs included), the bytes the forward leaves
for the backward (outputs and saved values, and the inputs the caller holds), and the backward's
peak (saved values, tangents and the backward's own values).
"""

from __future__ import annotations

import os

import torch

# The reference computes with numpy: one BLAS thread keeps its timing steady on a loaded 2-core
# machine.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import aotspec

LAYERS, BATCH, WIDTH = 16, 512, 256


def chain(x, *weights):
    for w in weights:
        x = torch.tanh(x @ w)
    return x.sum()


def pack_bf16(x):
    return x.to(torch.bfloat16)


def unpack_f32(x):
    return x.to(torch.float32)


def _inputs():
    torch.manual_seed(0)
    return [torch.randn(BATCH, WIDTH)] + [
        (torch.randn(WIDTH, WIDTH) * WIDTH**-0.5).requires_grad_() for _ in range(LAYERS)
    ]


def measure(hooks: bool, placement: str = "last-use") -> dict[str, int]:
    inputs = _inputs()
    compiled = aotspec.compile(chain, backend="reference", hook_placement=placement)
    if hooks:
        with torch.autograd.graph.saved_tensors_hooks(pack_bf16, unpack_f32):
            loss = compiled(*inputs)
    else:
        loss = compiled(*inputs)
    loss.backward()
    run = compiled.last_run
    forward, backward = run.ledger, run.backward_ledger
    return {
        "forward peak": forward.peak_bytes,
        "left for backward": forward.live_bytes,
        "backward peak": backward.peak_bytes,
    }


def main() -> None:
    rows = {
        "no hooks": measure(hooks=False),
        "bf16 pack at last use (aotspec)": measure(hooks=True),
        "bf16 pack at forward end (2.13)": measure(hooks=True, placement="forward-end"),
    }
    print(
        f"{LAYERS}-layer tanh chain, batch {BATCH}, width {WIDTH}, float32; "
        "reference ledgers, bytes"
    )
    columns = list(rows["no hooks"])
    print(f"{'':34}" + "".join(f"{c:>25}" for c in columns))
    for name, row in rows.items():
        print(f"{name:34}" + "".join(f"{row[c]:>25,}" for c in columns))
    base = rows["no hooks"]
    for name in list(rows)[1:]:
        ratios = "".join(f"{rows[name][c] / base[c]:>25.3f}" for c in columns)
        print(f"{name + ' / no hooks':34}{ratios}")


if __name__ == "__main__":
    main()
