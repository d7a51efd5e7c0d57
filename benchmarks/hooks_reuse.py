"""Step time of a training loop that makes its saved-tensor hooks anew at every step.

Run on demand: `.venv/bin/python benchmarks/hooks_reuse.py`. One process, the contenders
alternated round by round, medians reported. Each step runs a compiled 4-layer MLP forward and
backward on the fast backend:
- under `torch.autograd.graph.save_on_cpu()` made per step (new hook functions every step), and
  under one `save_on_cpu()` made once and entered at every step;
- under inline bfloat16 lambdas made per step, and under one bfloat16 pair made once;
- eager PyTorch under the reused bfloat16 pair, for scale.
Hooks made anew compute what the reused ones compute, so the compiled plan is reused
(`r[hooks.compiled.respecialize]`); before that rule compared hooks by identity, every step
compiled again.
"""

from __future__ import annotations

import statistics
import time

import torch
from rich.console import Console
from rich.table import Table

import aotspec

LAYERS, BATCH, WIDTH, STEPS, ROUNDS = 4, 64, 256, 20, 11


def mlp(x, *weights):
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


def _save_on_cpu():
    return torch.autograd.graph.save_on_cpu()


_ONE_SAVE_ON_CPU = torch.autograd.graph.save_on_cpu()


def _save_on_cpu_reused():
    return _ONE_SAVE_ON_CPU


def _inline_lambdas():
    return torch.autograd.graph.saved_tensors_hooks(
        lambda x: x.to(torch.bfloat16), lambda x: x.to(torch.float32)
    )


def _reused():
    return torch.autograd.graph.saved_tensors_hooks(pack_bf16, unpack_f32)


def _loop(step, make_hooks, inputs) -> float:
    """Median seconds per step over STEPS steps."""
    times = []
    for _ in range(STEPS):
        start = time.perf_counter()
        with make_hooks():
            loss = step(*inputs)
        loss.backward()
        times.append(time.perf_counter() - start)
        for w in inputs[1:]:
            w.grad = None
    return statistics.median(times)


def main() -> None:
    torch.set_num_threads(1)
    inputs = _inputs()
    compiled = aotspec.compile(mlp, backend="fast")
    contenders = {
        "fast, save_on_cpu() per step": (compiled, _save_on_cpu),
        "fast, one save_on_cpu() reused": (compiled, _save_on_cpu_reused),
        "fast, bf16 lambdas per step": (compiled, _inline_lambdas),
        "fast, one bf16 pair reused": (compiled, _reused),
        "eager, one bf16 pair reused": (mlp, _reused),
    }
    for step, make_hooks in contenders.values():  # warm-up: compile each specialization once
        _loop(step, make_hooks, inputs)
    results: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(ROUNDS):
        for name, (step, make_hooks) in contenders.items():
            results[name].append(_loop(step, make_hooks, inputs))
    baseline = {
        "fast, save_on_cpu() per step": "fast, one save_on_cpu() reused",
        "fast, bf16 lambdas per step": "fast, one bf16 pair reused",
    }
    table = Table(title=f"{LAYERS}-layer MLP, batch {BATCH}, width {WIDTH}: ms per step")
    table.add_column("loop")
    table.add_column("median ms", justify="right")
    table.add_column("x the same hooks reused", justify="right")
    for name, times in results.items():
        median = statistics.median(times)
        ratio = median / statistics.median(results[baseline[name]]) if name in baseline else None
        table.add_row(name, f"{median * 1e3:.3f}", "" if ratio is None else f"{ratio:.2f}")
    Console().print(table)
    print(f"compilations of the compiled step: {compiled.compilations}")


if __name__ == "__main__":
    main()
