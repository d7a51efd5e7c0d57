"""The model zoo's training steps on eager, aot_eager, aotspec and inductor: time and memory.

Run on demand: `.venv/bin/python benchmarks/zoo.py` (a few minutes on 2 cores; `--no-inductor`
leaves inductor out, `-k NAME` keeps the models whose name contains NAME, `--repeats N` sets the
timed calls per contender). Each model of `examples/zoo.py` (the `models` extra brings resnet18,
GPT2 and BERT) trains one step at a time, forward and backward, run five ways in one process:
eager; `torch.compile(backend="aot_eager")`; `torch.compile(backend="aotspec")` on the fast and
on the reference backend; and `torch.compile()` (inductor). Each contender has its own copy of
the model (the same weights) and compiles in its first warm-up step; Dynamo runs with `allow_rnn`,
so that it captures the GRU and the LSTM.

1. Step time, on one intra-op thread: each contender takes one step in turn (the order rotating
   from turn to turn), so that a load that comes and goes on a shared machine slows them alike,
   and a contender's ratio to eager is the median over the turns of its step's time over eager's
   step of the same turn (eager's column: the median of its steps). A step's time is the CPU
   time of this thread (`time.thread_time`), which leaves out the time other processes hold
   the cores: on the CPU, with one intra-op thread, the forward and the backward both run on
   it. A timed step is the call and `backward()`: the gradients' reset and the dropout seed
   come before the clock starts (`torch.manual_seed` alone costs about 0.2 ms on a CPU build,
   formatting a stack for each lazily initialized device, which would add to every contender
   alike and shrink the ratios). Each contender takes three untimed steps first. The reference
   backend, slow by design, takes a fifth of the steps.
2. Memory on real tensors (`aotspec.tracker.MemoryTracker`; the weights, the buffers and the
   batch are not counted): the bytes alive once the forward returned (what the backward will
   read), and the backward's peak (from there to the end of `backward()`). Inductor's generated
   code allocates its buffers without the dispatcher, where the tracker cannot see them, so it
   has no memory column; the reference backend's memory is its ledger's (`aotspec memory`).

A contender that fails prints its error's type in its cells.
"""

from __future__ import annotations

import os

# One BLAS thread for numpy (the reference backend's kernels), set before numpy loads, and one
# intra-op thread for torch (main): threads that spin against other load on a 2-core machine
# make step times swing.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import copy  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from aotspec.examples.zoo import MODELS  # noqa: E402
from aotspec.tracker import step_memory  # noqa: E402

#: The contenders: how each compiles a module (None: eager), and the share of the timed steps it
#: takes.
CONTENDERS = {
    "eager": (None, 1),
    "aot_eager": ({"backend": "aot_eager"}, 1),
    "aotspec fast": ({"backend": "aotspec", "options": {"backend": "fast"}}, 1),
    "aotspec reference": ({"backend": "aotspec", "options": {"backend": "reference"}}, 5),
    "inductor": ({"backend": "inductor"}, 1),
}
#: The contenders whose memory the tracker sees.
MEASURED = ("eager", "aot_eager", "aotspec fast")


class Contender:
    """One way to run a model's training step, on a copy of the model of its own."""

    def __init__(self, module: torch.nn.Module, compile_with: dict | None):
        self.module = copy.deepcopy(module)
        self.call = (
            self.module if compile_with is None else torch.compile(self.module, **compile_with)
        )
        self.error: Exception | None = None

    def prepare(self) -> None:
        """What comes before a step and is not timed: the gradients reset, the dropout seed."""
        self.module.zero_grad(set_to_none=True)
        torch.manual_seed(5)  # dropout's draws

    def forward(self, inputs) -> torch.Tensor:
        """The forward alone, what a timed step runs before its backward."""
        with torch._dynamo.config.patch(allow_rnn=True):
            return self.call(*inputs)

    def step(self, inputs) -> torch.Tensor:
        """One forward; the caller runs the backward."""
        self.prepare()
        return self.forward(inputs)


#: Untimed steps per contender: the first compiles, the others let the allocator settle.
WARM_STEPS = 3


def _warm(contenders: dict[str, Contender], inputs) -> None:
    """The untimed first steps; a contender that fails keeps its error."""
    for contender in contenders.values():
        try:
            for _ in range(WARM_STEPS):
                contender.step(inputs).backward()
        except Exception as error:  # the table shows which contender failed, and how
            contender.error = error


def _step_times(contenders: dict[str, Contender], inputs, repeats: int) -> dict[str, float]:
    """Eager's median seconds of a forward and backward, and each other contender's median
    ratio to eager's step of the same turn, the contenders taking turns."""
    names = [name for name, c in contenders.items() if not c.error]
    eager: list[float] = []
    ratios: dict[str, list[float]] = {name: [] for name in names if name != "eager"}
    for turn in range(repeats):
        times = {}
        for name in names[turn % len(names) :] + names[: turn % len(names)]:
            if turn % CONTENDERS[name][1]:
                continue
            contender = contenders[name]
            contender.prepare()
            start = time.thread_time()
            contender.forward(inputs).backward()
            times[name] = time.thread_time() - start
        eager.append(times["eager"])
        for name in ratios.keys() & times.keys():
            ratios[name].append(times[name] / times["eager"])
    return {
        "eager": statistics.median(eager),
        **{name: statistics.median(values) for name, values in ratios.items()},
    }


def _memory(contender: Contender, inputs) -> tuple[int, int]:
    """Bytes alive after the forward, and the backward's peak, of one warm step."""
    return step_memory(lambda: contender.step(inputs))


def measure(name: str, contender_names: list[str], repeats: int) -> dict:
    """Step times and memory of model `name` for each contender, or the error it raised."""
    torch.manual_seed(0)
    module, inputs = MODELS[name]()
    torch._dynamo.reset()
    contenders = {c: Contender(module, CONTENDERS[c][0]) for c in contender_names}
    _warm(contenders, inputs)
    times = _step_times(contenders, inputs, repeats)
    memory = {
        c: _memory(contenders[c], inputs)
        for c in MEASURED
        if c in contenders and not contenders[c].error
    }
    errors = {
        c: type(contender.error).__name__ for c, contender in contenders.items() if contender.error
    }
    parameters = sum(p.numel() for p in module.parameters())
    return {"times": times, "memory": memory, "errors": errors, "parameters": parameters}


def _ratio(result: dict, contender: str) -> str:
    if contender in result["errors"]:
        return result["errors"][contender]
    return f"{result['times'][contender]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only models whose name contains this")
    parser.add_argument("--repeats", type=int, default=20, help="timed steps per contender")
    parser.add_argument("--no-inductor", action="store_true", help="leave inductor out")
    args = parser.parse_args()
    torch.set_num_threads(1)
    contender_names = [c for c in CONTENDERS if not (args.no_inductor and c == "inductor")]
    results = {}
    console = Console(width=140)
    for name in MODELS:
        if args.k not in name:
            continue
        try:
            results[name] = measure(name, contender_names, args.repeats)
        except ModuleNotFoundError as missing:  # the models extra is not installed
            console.print(f"{name}: skipped, {missing.name} is not installed")
            continue
        console.print(f"{name}: done")

    times = Table(
        title="Training step time: eager's median, and each contender's median ratio to eager's"
    )
    times.add_column("model")
    times.add_column("parameters", justify="right")
    times.add_column("eager ms", justify="right")
    for contender in contender_names[1:]:
        times.add_column(f"{contender} / eager", justify="right")
    for name, result in results.items():
        times.add_row(
            name,
            f"{result['parameters']:,}",
            f"{result['times']['eager'] * 1e3:.2f}",
            *(_ratio(result, contender) for contender in contender_names[1:]),
        )
    console.print(times)

    memory = Table(
        title="Bytes alive after the forward / backward peak (weights, buffers, batch not counted)"
    )
    memory.add_column("model")
    for contender in MEASURED:
        memory.add_column(f"{contender}", justify="right")
    memory.add_column("fast / eager", justify="right")
    for name, result in results.items():
        cells = []
        for contender in MEASURED:
            if contender in result["errors"]:
                cells.append(result["errors"][contender])
            else:
                after, peak = result["memory"][contender]
                cells.append(f"{after:,} / {peak:,}")
        if "aotspec fast" in result["memory"]:
            (after, peak), (eager_after, eager_peak) = (
                result["memory"]["aotspec fast"],
                result["memory"]["eager"],
            )
            cells.append(f"{after / eager_after:.3f} / {peak / eager_peak:.3f}")
        else:
            cells.append("")
        memory.add_row(name, *cells)
    console.print(memory)
    console.print(
        f"{args.repeats} turns of timed steps (aotspec reference: one in "
        f"{CONTENDERS['aotspec reference'][1]}), one process, one intra-op thread"
    )


if __name__ == "__main__":
    main()
