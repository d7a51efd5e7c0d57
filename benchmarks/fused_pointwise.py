"""Pointwise chains: torch eager, the traced aten graph, and the same graph after `fuse_pointwise`.

Run on demand: `.venv/bin/python benchmarks/fused_pointwise.py`. All numbers come from one
process, side by side (median of repeated calls after a warm-up that also compiles kernels).
On CUDA the fused graph launches one Triton kernel per chain. On CPU it runs the chain's torch
ops one by one (the CPU path), so the fused column measures only the overhead of the fused call,
not a kernel.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from aotspec.fast.fusion import fuse_pointwise

NUMEL = 1 << 20


def gelu_like(x, w):
    return (x * w).sin().relu() * 0.5 + x


def pack_unpack(x, w):
    """A bfloat16 saved-tensor hook pair's round trip, after a product."""
    return (x * w).to(torch.bfloat16).to(torch.float32)


def bfloat16_chain(x, w):
    return ((x * w + 1) / 3 - x).relu()


def _time(fn, inputs, device: torch.device, repeats: int = 30) -> float:
    def call():
        fn(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize()

    call()  # warm-up: compiles the Triton kernels
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    torch.set_num_threads(1)  # stable numbers on a small shared machine (see call_time.py)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cases = {
        "mul-sin-relu-mul-add f32": (gelu_like, torch.float32),
        "pack-unpack f32->bf16->f32": (pack_unpack, torch.float32),
        "mul-add-div-sub-relu bf16": (bfloat16_chain, torch.bfloat16),
    }
    path = "Triton kernels" if device.type == "cuda" else "torch ops (CPU path: no kernel)"
    print(f"{NUMEL} elements on {device}; the fused graph runs {path}")
    print(f"{'':30}{'eager ms':>10}{'graph ms':>10}{'fused ms':>10}{'x eager':>9}")
    for name, (fn, dtype) in cases.items():
        generator = torch.Generator().manual_seed(0)
        inputs = [torch.randn(NUMEL, generator=generator).to(device, dtype) for _ in range(2)]
        graph = make_fx(fn, tracing_mode="fake")(*inputs)
        fused = fuse_pointwise(graph, use_triton=device.type == "cuda")
        eager, traced, fused_time = (_time(f, inputs, device) for f in (fn, graph, fused))
        print(
            f"{name:30}{eager * 1e3:>10.3f}{traced * 1e3:>10.3f}{fused_time * 1e3:>10.3f}"
            f"{fused_time / eager:>9.2f}"
        )


if __name__ == "__main__":
    main()
