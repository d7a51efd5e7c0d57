"""Throughput of `aotspec fuzz`: programs judged per second per worker, isolation included.

Run on demand: `.venv/bin/python benchmarks/fuzz_throughput.py [BACKEND] [PROGRAMS]` (default
`fast`, 200). It runs campaigns (seed 0) with one worker process in a temporary directory,
exactly as `aotspec fuzz --jobs 1` does: drawing each program, judging it against eager PyTorch
and, on `fast`, the reference's memory facts, in a worker that survives crashes. The clock
starts when the first WARM_UP programs are judged, so the worker's start and the first
compilations are not in it.
`--repeat N` (default 3) times the same programs N times and gives the median (the machine may
be shared), of the rate and, where /proc tells, of the worker's CPU time a program (on a shared
machine the rate counts other processes' turns on the core too); per-kind counts follow.

`--phases` says where the time goes instead: the same programs judged in this process, with
the CPU time of each stage of the pipeline (drawing, the eager oracle, the reference's capture,
functionalization, autograd and hooks passes, its run, the fast backend's code and run, the
comparisons) and of the garbage collector's passes, per program, largest first, and the fx graph
nodes each stage made (a traced op, placeholder or output, or a node copied into a new graph):
a trace's cost is a fixed part (converting its inputs to fakes) and a part per node. What the
warm-up left is frozen out of the collector's way first, as a worker does after its first task.
"""

from __future__ import annotations

import argparse
import collections
import functools
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch.fx

from aotspec.fuzz.campaign import Campaign

WARM_UP = 10


def _descendants_cpu_seconds() -> float | None:
    """CPU seconds (user and system) of this process's descendants alive now (the fork server
    and the worker), from /proc; None where there is no /proc."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    parents, ticks = {}, {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid = int(stat.parent.name)
        parents[pid] = int(fields[1])
        ticks[pid] = int(fields[11]) + int(fields[12])
    ours, found = {os.getpid()}, True
    while found:
        found = False
        for pid, parent in parents.items():
            if parent in ours and pid not in ours:
                ours.add(pid)
                found = True
    ours.discard(os.getpid())
    return sum(ticks[pid] for pid in ours) / os.sysconf("SC_CLK_TCK")


def _rate(backend: str, programs: int) -> tuple[float, float | None, collections.Counter]:
    """One campaign of WARM_UP + `programs` programs on one worker, clocked from the warm-up's
    last result to the last one: the same worker throughout, as in `aotspec fuzz` (a second
    campaign would start a worker of its own, and its start and first compilations with it).
    Returns programs a second, the worker's CPU seconds a program (None without /proc: on a
    shared machine the wall clock counts other processes' time too) and the kinds judged."""
    results: list[float] = []
    cpu: list[float | None] = []

    def on_result(*_) -> None:
        results.append(time.monotonic())
        if len(results) in (WARM_UP, WARM_UP + programs):
            cpu.append(_descendants_cpu_seconds())

    with tempfile.TemporaryDirectory() as scratch:
        campaign = Campaign(backend, Path(scratch), seed=0, jobs=1, on_result=on_result)
        campaign.start(resume=False)
        campaign.run(programs=WARM_UP + programs, budget=None)
        lines = (Path(scratch) / "results.jsonl").read_text().splitlines()[WARM_UP:]
    seconds = results[-1] - results[WARM_UP - 1]
    cpu_each = None if None in cpu else (cpu[1] - cpu[0]) / programs
    kinds = collections.Counter(json.loads(line)["kind"] for line in lines)
    return programs / seconds, cpu_each, kinds


def throughput(backend: str, programs: int, repeat: int) -> None:
    rates, cpus = [], []
    for _ in range(repeat):
        rate, cpu, kinds = _rate(backend, programs)
        rates.append(rate)
        cpus.append(cpu)
        each = "" if cpu is None else f", {cpu * 1000:.1f} ms of the worker's CPU a program"
        print(f"{backend}: {programs} programs with 1 worker: {rate:.1f} programs/s{each}")
    print(
        f"{backend}: median of {repeat}: {statistics.median(rates):.1f} programs/s per core "
        "(isolation included)"
    )
    if None not in cpus:
        cpu = statistics.median(cpus)
        print(
            f"{backend}: median of {repeat}: {cpu * 1000:.1f} ms of CPU a program, "
            f"{1 / cpu:.1f} programs a CPU second"
        )
    print("programs by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))


# ---------------------------------------------------------------- --phases


class _Stages:
    """CPU time per stage (this thread's: the machine may be shared), each stage's own (what
    the stages inside it took is theirs), and the fx nodes each stage made."""

    def __init__(self):
        self.seconds: collections.Counter[str] = collections.Counter()
        self.nodes: collections.Counter[str] = collections.Counter()
        self._inner: list[float] = []
        self._running: list[str] = []
        self._collection_start = 0.0

    def wrap(self, owner, attribute: str, stage: str) -> None:
        original = getattr(owner, attribute)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            start = time.thread_time()
            self._inner.append(0.0)
            self._running.append(stage)
            try:
                return original(*args, **kwargs)
            finally:
                self._running.pop()
                spent = time.thread_time() - start
                self.seconds[stage] += spent - self._inner.pop()
                if self._inner:
                    self._inner[-1] += spent

        setattr(owner, attribute, timed)

    def count_nodes(self) -> None:
        """Count each fx node made towards the innermost stage running."""
        original = torch.fx.Graph.create_node

        @functools.wraps(original)
        def counted(graph, *args, **kwargs):
            if self._running:
                self.nodes[self._running[-1]] += 1
            return original(graph, *args, **kwargs)

        torch.fx.Graph.create_node = counted

    def collection(self, phase: str, info: dict) -> None:
        """A `gc.callbacks` entry: a collection's time is a stage of its own, not part of the
        stage it interrupted."""
        if phase == "start":
            self._collection_start = time.thread_time()
            return
        spent = time.thread_time() - self._collection_start
        self.seconds["garbage collection"] += spent
        if self._inner:
            self._inner[-1] += spent


def phases(backend: str, programs: int) -> None:
    from aotspec.fast import runtime as fast_runtime
    from aotspec.fuzz import judge

    plan = sys.modules["aotspec.reference.pipeline"]
    api = sys.modules["aotspec.api"]
    stages = _Stages()
    for owner, attribute, stage in [
        (judge, "draw_at", "draw the program (hypothesis)"),
        (judge, "_eager", "eager oracle"),
        (plan, "capture", "reference: capture (make_fx)"),
        (plan, "functionalize", "reference: functionalize (make_fx)"),
        (plan, "differentiate", "reference: autograd (make_fx)"),
        (plan, "inline_hooks", "reference: saved-tensor hooks"),
        (api, "build_plan", "reference: rest of the plan"),
        (judge, "run_reference", "reference: run, ledgers"),
        (fast_runtime.FastPlan, "of", "fast: generate code"),
        (judge, "run_fast", "fast: run, tracker"),
        (judge, "compare", "compare with eager"),
        (judge, "numerically_explained", "float64 rerun"),
        (judge, "memory_differences", "compare memory facts"),
        (judge, "check_index", "the rest"),
    ]:
        stages.wrap(owner, attribute, stage)
    stages.count_nodes()
    for index in range(WARM_UP):
        judge.check_index(backend, 0, index)
    gc.collect()
    gc.freeze()  # as aotspec/workers.py does after a worker's first task
    gc.callbacks.append(stages.collection)
    stages.seconds.clear()
    stages.nodes.clear()
    start = time.thread_time()
    for index in range(WARM_UP, WARM_UP + programs):
        judge.check_index(backend, 0, index)
    total = time.thread_time() - start
    print(f"{backend}, in this process: {total / programs * 1000:.1f} ms of CPU a program")
    print(f"{'stage':40} {'ms/program':>10} {'share':>6} {'nodes/program':>14}")
    for stage, seconds in stages.seconds.most_common():
        nodes = stages.nodes[stage] / programs
        print(f"{stage:40} {seconds / programs * 1000:10.1f} {seconds / total:6.0%} {nodes:14.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("backend", nargs="?", default="fast")
    parser.add_argument("programs", nargs="?", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--phases", action="store_true", help="time each stage, in-process")
    options = parser.parse_args()
    if options.phases:
        phases(options.backend, options.programs)
    else:
        throughput(options.backend, options.programs, options.repeat)


if __name__ == "__main__":
    main()
