"""How long aotspec takes to compile a model's training step, beside aot_eager's AOTAutograd.

Run on demand: `.venv/bin/python benchmarks/compile_time.py [-k NAME] [--rounds N]`. Dynamo is
left out of both: each model of `examples/zoo.py` is captured by Dynamo once (a backend that
keeps the graph and its example inputs), and then, on that same graph, in turns:

- aot_eager: `torch._dynamo.backends.debugging.aot_eager(graph, example_inputs)`, which traces the
  joint graph, partitions it and wraps it (AOTAutograd's whole compile; its compilers are no-ops);
- aotspec: the first call of `aotspec_backend(graph, example_inputs)` (fast backend), which
  captures the graph to aten, functionalizes, differentiates and partitions it, and generates
  code, less the time a second call of the same function takes (what running the step costs).

Medians over the rounds (default 3), the contenders alternated; seconds, and aotspec / aot_eager.
Each compile is timed as `timeit` times: the garbage collector runs before it, not during.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import statistics
import time

import torch
from rich.console import Console
from rich.table import Table
from torch._dynamo.backends.debugging import aot_eager

from aotspec.dynamo import aotspec_backend
from aotspec.examples.zoo import MODELS


def _dynamo_graph(name: str):
    """Model `name`'s one Dynamo graph of its forward (the zoo's steps have one), with the
    example inputs Dynamo gave it and the real inputs of a call."""
    torch.manual_seed(0)
    module, inputs = MODELS[name]()
    captured = []

    def keep(graph_module, example_inputs):
        captured.append((graph_module, example_inputs))
        return graph_module.forward

    torch._dynamo.reset()
    with torch._dynamo.config.patch(allow_rnn=True):
        torch.compile(module, backend=keep)(*inputs)
    if len(captured) != 1:
        raise RuntimeError(f"{name}: Dynamo made {len(captured)} graphs, not one")
    graph_module, example_inputs = captured[0]
    real = [t.detach().clone().requires_grad_(t.requires_grad) for t in example_inputs]
    return graph_module, example_inputs, real


@contextlib.contextmanager
def _without_collection():
    """As `timeit` times: the cyclic garbage collector runs before, not during (a collection
    of everything earlier rounds left landed in one contender's time, 0.25-0.4 s)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _aot_eager_compile(graph_module, example_inputs) -> float:
    graph_module = copy.deepcopy(graph_module)
    with _without_collection():
        start = time.perf_counter()
        aot_eager(graph_module, example_inputs)
        return time.perf_counter() - start


def _aotspec_compile(graph_module, example_inputs, inputs) -> float:
    graph_module = copy.deepcopy(graph_module)
    with _without_collection():
        start = time.perf_counter()
        compiled = aotspec_backend(graph_module, example_inputs)
        compiled(*inputs)
        first = time.perf_counter() - start
        start = time.perf_counter()
        compiled(*inputs)
        return first - (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only models whose name contains this")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    table = Table(title="compile time, Dynamo excluded (seconds, medians)")
    for column in ("model", "aot_eager", "aotspec fast", "aotspec / aot_eager"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for name in MODELS:
        if args.k not in name:
            continue
        try:
            graph_module, example_inputs, inputs = _dynamo_graph(name)
        except Exception as error:  # noqa: BLE001  (the table says which model, and why)
            table.add_row(name, type(error).__name__, "", "")
            continue
        aot, ours = [], []
        for _ in range(args.rounds):
            aot.append(_aot_eager_compile(graph_module, example_inputs))
            ours.append(_aotspec_compile(graph_module, example_inputs, inputs))
        aot_s, ours_s = statistics.median(aot), statistics.median(ours)
        table.add_row(name, f"{aot_s:.2f}", f"{ours_s:.2f}", f"{ours_s / aot_s:.2f}")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
