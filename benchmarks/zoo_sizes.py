"""The model zoo trained at several sizes under `torch.compile(..., dynamic=True)`: values,
memory, plans compiled and time, aotspec against eager and aot_eager.

Run on demand: `.venv/bin/python benchmarks/zoo_sizes.py` (`-k NAME` keeps the models whose
name contains NAME; `--backend reference` runs aotspec's reference backend instead of fast).
Each model of `examples/zoo.py` trains one step at its own batch, then at another batch size,
then (where it has a sequence) at another sequence length (`at_size`), in that order, three
ways, each on its own copy of the model: eager, aot_eager and aotspec, both compiled with
`dynamic=True`. At each size the table says whether aotspec's loss, gradients and buffers are
eager's (`torch.testing.assert_close`), and the fast backend's bytes after the forward and
backward peak against eager's (`aotspec.tracker.step_memory`, on a second step at that size).
The last columns are what a user waits for: the seconds of the first steps at every size, which
compile, for aot_eager and for aotspec (alternated: aot_eager's sizes, then aotspec's), and how
many plans aotspec compiled for them.

`--loop` times the training loop of issue 27 instead: an embedding, a
`TransformerEncoderLayer(32, 4, 64, batch_first=True)` and a linear head, batch 4, sequence
lengths 8 to 23, one step each, on aot_eager and aotspec, with `dynamic=True` and with Dynamo's
automatic dynamic shapes (`--rounds N`, contenders alternated, the median shown, of the wall
clock and of the process's CPU time, which a shared machine disturbs less), against eager's
losses and gradients at every step.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.utils._pytree as pytree
from rich.console import Console
from rich.table import Table

import aotspec
from aotspec.examples.zoo import MODELS, SIZED_DIMS, at_size
from aotspec.tracker import step_memory


@contextlib.contextmanager
def plans_counted():
    """Inside, `aotspec.compile` keeps every compiled function it makes; yields that list (each
    one's `compilations` is the number of plans it compiled)."""
    made = []
    original = aotspec.compile

    def counting(*args, **kwargs):
        made.append(original(*args, **kwargs))
        return made[-1]

    aotspec.compile = counting
    try:
        yield made
    finally:
        aotspec.compile = original


def sizes_of(name: str, inputs) -> list[dict]:
    """The sizes model `name` trains at: its own batch, another batch size, another length."""
    dims = SIZED_DIMS[name]
    leaves = pytree.tree_leaves(inputs)
    batch = next(t.shape[d] for t, d in zip(leaves, dims.batch, strict=True) if d is not None)
    sizes = [{}, {"batch": batch + 3}]
    if dims.length:
        length = next(
            t.shape[d] for t, d in zip(leaves, dims.length, strict=False) if d is not None
        )
        sizes.append({"length": length - 3})
    return sizes


def _step(module, call, inputs):
    module.zero_grad(set_to_none=True)
    torch.manual_seed(5)  # dropout's draws
    with torch._dynamo.config.patch(allow_rnn=True):
        loss = call(*inputs)
    loss.backward()
    grads = {k: p.grad for k, p in module.named_parameters()}
    return loss.detach(), grads, {k: b.clone() for k, b in module.named_buffers()}


def _agrees(actual, expected) -> str:
    try:
        torch.testing.assert_close(actual, expected)
    except AssertionError as error:
        return f"[red]differs: {str(error).splitlines()[0]}"
    return "[green]yes"


def _memory(module, call, inputs) -> tuple[int, int]:
    module.zero_grad(set_to_none=True)
    torch.manual_seed(5)
    with torch._dynamo.config.patch(allow_rnn=True):
        return step_memory(lambda: call(*inputs), *pytree.tree_leaves(inputs))


def measure(name: str, backend: str) -> list[dict]:
    """One row per size of model `name`: agreement with eager, memory, and (on the first row)
    the compile steps' seconds and aotspec's plans."""
    torch.manual_seed(0)
    module, inputs = MODELS[name]()
    batches = [at_size(name, inputs, **size) for size in sizes_of(name, inputs)]
    torch._dynamo.reset()
    eager = copy.deepcopy(module)
    aot_eager, ours = copy.deepcopy(module), copy.deepcopy(module)
    aot_eager_call = torch.compile(aot_eager, backend="aot_eager", dynamic=True)
    ours_call = torch.compile(
        ours, backend="aotspec", dynamic=True, options={"backend": backend}
    )
    start = time.perf_counter()
    try:
        for batch in batches:
            _step(aot_eager, aot_eager_call, batch)
        aot_eager_seconds = time.perf_counter() - start
    except Exception as error:  # the table says how aot_eager failed; aotspec still runs
        aot_eager_seconds = f"[red]{type(error).__name__}"
    with plans_counted() as made:
        start = time.perf_counter()
        results = [_step(ours, ours_call, batch) for batch in batches]
        ours_seconds = time.perf_counter() - start
    # eager takes the same steps in the same order first (batch norm's running statistics
    # follow the steps), then the memory of a further step at each size is measured
    expected = [_step(eager, eager, batch) for batch in batches]
    rows = [
        {"size": _size_name(size, batch, name), "agrees": _agrees(result, eager_result)}
        for size, batch, result, eager_result in zip(
            sizes_of(name, inputs), batches, results, expected, strict=True
        )
    ]
    if backend == "fast":
        for row, batch in zip(rows, batches, strict=True):
            row["memory"] = (_memory(ours, ours_call, batch), _memory(eager, eager, batch))
    rows[0]["seconds"] = (aot_eager_seconds, ours_seconds)
    rows[0]["plans"] = sum(compiled.compilations for compiled in made)
    return rows


def _size_name(size: dict, batch, name: str) -> str:
    leaves = pytree.tree_leaves(batch)
    dims = SIZED_DIMS[name]
    b = next(t.shape[d] for t, d in zip(leaves, dims.batch, strict=True) if d is not None)
    described = f"batch {b}"
    if dims.length:
        n = next(t.shape[d] for t, d in zip(leaves, dims.length, strict=False) if d is not None)
        described += f", length {n}"
    return described + ("" if size else " (its own)")


def _seconds(seconds: float | str) -> str:
    return seconds if isinstance(seconds, str) else f"{seconds:.2f}"


def _memory_cell(row: dict) -> str:
    if "memory" not in row:
        return "-"
    (ours_forward, ours_peak), (eager_forward, eager_peak) = row["memory"]
    colour = "green" if ours_forward <= eager_forward and ours_peak <= eager_peak else "red"
    return (
        f"[{colour}]{ours_forward:,} / {eager_forward:,} · {ours_peak:,} / {eager_peak:,}"
    )


def zoo(pattern: str, backend: str) -> None:
    table = Table(title=f"The zoo at several sizes, dynamic=True (aotspec {backend})")
    for column in ("model", "size", "eager's values", "memory: after forward · peak (aotspec / "
                   "eager, bytes)", "first steps: aot_eager s", "aotspec s", "aotspec plans"):
        table.add_column(column)
    for name in MODELS:
        if pattern not in name:
            continue
        try:
            rows = measure(name, backend)
        except Exception as error:  # the table shows which model failed, and how
            table.add_row(name, f"[red]{type(error).__name__}: {error}"[:200])
            continue
        for k, row in enumerate(rows):
            seconds = row.get("seconds")
            table.add_row(
                name if k == 0 else "",
                row["size"],
                row["agrees"],
                _memory_cell(row),
                _seconds(seconds[0]) if seconds else "",
                f"{seconds[1]:.2f}" if seconds else "",
                str(row["plans"]) if "plans" in row else "",
            )
    Console(width=160).print(table)


class _Sequences(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(100, 32)
        self.layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
        self.head = torch.nn.Linear(32, 100)

    def forward(self, tokens):
        logits = self.head(self.layer(self.embedding(tokens)))
        targets = tokens[:, 1:].flatten()
        return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), targets)


def loop_once(contender: str, dynamic: bool | None) -> dict:
    """One run of the 16-length loop through `torch.compile(backend=contender)` (`aot_eager`,
    or `aotspec:BACKEND`), in this fresh process: its seconds, aotspec's plans, and whether
    its losses and gradients are eager's."""
    torch.manual_seed(0)
    module = _Sequences()
    batches = [torch.randint(0, 100, (4, length)) for length in range(8, 24)]
    eager_steps = [_step(module, module, (batch,))[:2] for batch in batches]
    name, _, backend = contender.partition(":")
    options = {"options": {"backend": backend}} if backend else {}
    call = torch.compile(copy.deepcopy(module), backend=name, dynamic=dynamic, **options)
    with plans_counted() as made:
        start, cpu_start = time.perf_counter(), time.process_time()
        steps = [_step(call._orig_mod, call, (batch,))[:2] for batch in batches]
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    plans = str(sum(c.compilations for c in made)) if made else "-"
    agrees = _agrees(steps, eager_steps)  # each step's loss and every gradient
    return {"seconds": seconds, "cpu": cpu, "plans": plans, "agrees": agrees}


def loop(backend: str, rounds: int) -> None:
    """The 16-length loop: seconds for all its steps, per contender, each run in a fresh
    process as a user's script runs (Dynamo remembers, within a process, which sizes it made
    dynamic); rounds alternate the contenders and the median is shown. Under `dynamic=True`
    and under Dynamo's automatic dynamic shapes, with aotspec's plans."""
    table = Table(title=f"16 steps, sequence lengths 8 to 23: median of {rounds} rounds")
    columns = ("contender", "dynamic", "seconds", "rounds", "CPU seconds", "plans")
    for column in (*columns, "eager's losses and gradients"):
        table.add_column(column)
    contenders = ["aot_eager", f"aotspec:{backend}"]
    for dynamic in (True, None):
        runs: dict[str, list[dict]] = {name: [] for name in contenders}
        for _ in range(rounds):
            for contender in contenders:
                command = [sys.executable, __file__, "--loop-once", contender]
                command += ["--dynamic"] if dynamic else []
                output = subprocess.run(command, capture_output=True, text=True, check=True)
                runs[contender].append(json.loads(output.stdout.splitlines()[-1]))
        for contender in contenders:
            seconds = [run["seconds"] for run in runs[contender]]
            each = " ".join(f"{s:.2f}" for s in seconds)
            cpu = _median([run["cpu"] for run in runs[contender]])
            last = runs[contender][-1]
            shown = "True" if dynamic else "automatic"
            median = _median(seconds)
            table.add_row(contender, shown, median, each, cpu, last["plans"], last["agrees"])
    Console(width=160).print(table)


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only models whose name contains this")
    parser.add_argument("--backend", default="fast", choices=aotspec.api.BACKENDS)
    parser.add_argument("--loop", action="store_true", help="time issue 27's 16-length loop")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --loop (median shown)")
    parser.add_argument("--loop-once", metavar="CONTENDER", help=argparse.SUPPRESS)
    parser.add_argument("--dynamic", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    if arguments.loop_once:
        print(json.dumps(loop_once(arguments.loop_once, True if arguments.dynamic else None)))
    elif arguments.loop:
        loop(arguments.backend, arguments.rounds)
    else:
        zoo(arguments.k, arguments.backend)


if __name__ == "__main__":
    main()
