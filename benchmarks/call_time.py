"""Call time of an MLP training step: torch eager, aotspec fast, aotspec reference, aot_eager.

Run on demand: `.venv/bin/python benchmarks/call_time.py`. All numbers come from one process,
measured side by side (median of repeated calls, after a warm-up that also compiles), and ratios
are printed against torch eager.
"""

from __future__ import annotations

import os
import statistics
import time

# The reference computes with numpy: one BLAS thread keeps its timing steady on a loaded 2-core
# machine.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch

import aotspec

BATCH, WIDTH, LAYERS = 64, 256, 4


def mlp_step(x, *weights):
    for w in weights[:-1]:
        x = torch.relu(x @ w.t())
    return (x @ weights[-1].t()).pow(2).mean()


def _inputs():
    torch.manual_seed(0)
    return [torch.randn(BATCH, WIDTH)] + [
        (torch.randn(WIDTH, WIDTH) * WIDTH**-0.5).requires_grad_() for _ in range(LAYERS)
    ]


def _time(step, inputs, repeats: int) -> tuple[float, float]:
    start = time.perf_counter()
    step(*inputs).backward()  # first call: compiles where the step compiles
    first = time.perf_counter() - start
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step(*inputs).backward()
        samples.append(time.perf_counter() - start)
    return first, statistics.median(samples)


def main() -> None:
    # One intra-op thread: on a 2-core machine with anything else running, OpenMP's second thread
    # makes every backend's timing swing by an order of magnitude.
    torch.set_num_threads(1)
    inputs = _inputs()
    steps = {
        "torch eager": (mlp_step, 50),
        "aotspec fast": (aotspec.compile(mlp_step, backend="fast"), 50),
        "torch.compile aot_eager": (torch.compile(mlp_step, backend="aot_eager"), 50),
        "aotspec reference": (aotspec.compile(mlp_step, backend="reference"), 5),
    }
    results = {name: _time(step, inputs, repeats) for name, (step, repeats) in steps.items()}
    eager = results["torch eager"][1]
    print(
        f"MLP training step: {LAYERS} layers, batch {BATCH}, width {WIDTH}, float32, "
        f"{torch.get_num_threads()} threads"
    )
    print(f"{'':26}{'first call ms':>15}{'call ms':>10}{'x eager':>9}")
    for name, (first, call) in results.items():
        print(f"{name:26}{first * 1e3:>15.1f}{call * 1e3:>10.3f}{call / eager:>9.2f}")


if __name__ == "__main__":
    main()
