"""Where one training step's time goes through `aotspec.compile(step, backend="fast")`.

Run on demand: `.venv/bin/python benchmarks/call_breakdown.py [--rounds N]`. One process, one
intra-op thread; each round runs torch eager, torch.compile aot_eager, torch.compile aotspec,
aotspec fast as it is, and aotspec fast with timing wrappers around its phases, one after another
(contenders alternated), and the table prints medians over the rounds in microseconds.
"dynamo aotspec" is the step through `torch.compile(step, backend="aotspec")` (fast), Dynamo's
guards and frame included.

The phases are timed by wrapping, from here, the functions the call goes through (the library holds
no timing code):

- guard + lift: `Lifter.lift` (r[capture.lift]: the tensors the step reaches, found at each
  call);
- flatten: `_flatten` (the pytree of the arguments);
- input facts / key: `input_facts` and `bases_key` (what the guard compares);
- other key work: the rest of `CompiledFunction.__call__` before the runtime runs;
- forward graph: the generated forward function;
- epilogue + outputs: the runtime's run less the forward graph (autograd.Function plumbing, the
  epilogue, wrapping outputs);
- backward graph: the generated backward function;
- autograd engine: `loss.backward()` less the backward graph.

The wrappers cost a little themselves: compare "fast call" (unwrapped) with the phases' sum.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import torch

import aotspec
import aotspec.api as api
from aotspec.fast import runtime as fast_runtime


def _mlp() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    layers = []
    for _ in range(5):
        layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers), torch.randn(16, 64)


def _transformer() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    return layer, torch.randn(4, 8, 32)


class _Phases:
    """Accumulates nanoseconds per phase while installed."""

    def __init__(self) -> None:
        self.ns: dict[str, int] = defaultdict(int)
        self._originals: list[tuple[object, str, object]] = []

    def _wrap(self, owner, name: str, phase: str) -> None:
        original = getattr(owner, name)
        ns = self.ns

        def timed(*args, **kwargs):
            start = time.perf_counter_ns()
            try:
                return original(*args, **kwargs)
            finally:
                ns[phase] += time.perf_counter_ns() - start

        self._originals.append((owner, name, original))
        setattr(owner, name, timed)

    def install(self) -> None:
        self._wrap(api.Lifter, "lift", "guard + lift")
        self._wrap(api, "_flatten", "flatten")
        self._wrap(api, "input_facts", "input facts / key")
        self._wrap(api, "bases_key", "input facts / key")
        self._wrap(api._FastRuntime, "run", "runtime run")
        self._wrap(fast_runtime._FastGraphs, "forward", "forward graph")
        self._wrap(fast_runtime._FastGraphs, "backward", "backward graph")

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)
        self._originals.clear()


def _timed_step(step, x) -> tuple[int, int]:
    start = time.perf_counter_ns()
    loss = step(x)
    middle = time.perf_counter_ns()
    loss.backward()
    return middle - start, time.perf_counter_ns() - middle


def _bench(name: str, model: torch.nn.Module, x: torch.Tensor, rounds: int) -> None:
    def step(x):
        return model(x).pow(2).mean()

    fast = aotspec.compile(step, backend="fast")
    aot_eager = torch.compile(step, backend="aot_eager")
    dynamo_fast = torch.compile(step, backend="aotspec")
    for contender in (step, aot_eager, dynamo_fast, fast, fast):  # warm-up, compiles
        contender(x).backward()
    model.zero_grad(set_to_none=True)

    samples: dict[str, list[float]] = defaultdict(list)
    phases = _Phases()
    for _ in range(rounds):
        contenders = (
            ("eager", step),
            ("aot_eager", aot_eager),
            ("dynamo aotspec", dynamo_fast),
            ("fast", fast),
        )
        for label, contender in contenders:
            forward, backward = _timed_step(contender, x)
            samples[f"{label} step"].append((forward + backward) / 1e3)
        samples["fast call"].append(forward / 1e3)
        samples["fast backward()"].append(backward / 1e3)
        phases.ns.clear()
        phases.install()
        try:
            forward, backward = _timed_step(fast, x)
        finally:
            phases.uninstall()
        ns = phases.ns
        before_run = forward - ns["runtime run"]
        samples["  guard + lift"].append(ns["guard + lift"] / 1e3)
        samples["  flatten"].append(ns["flatten"] / 1e3)
        samples["  input facts / key"].append(ns["input facts / key"] / 1e3)
        samples["  other key work"].append(
            (before_run - ns["guard + lift"] - ns["flatten"] - ns["input facts / key"]) / 1e3
        )
        samples["  forward graph"].append(ns["forward graph"] / 1e3)
        samples["  epilogue + outputs"].append((ns["runtime run"] - ns["forward graph"]) / 1e3)
        samples["  backward graph"].append(ns["backward graph"] / 1e3)
        samples["  autograd engine"].append((backward - ns["backward graph"]) / 1e3)
        model.zero_grad(set_to_none=True)

    medians = {label: statistics.median(values) for label, values in samples.items()}
    eager, aot = medians["eager step"], medians["aot_eager step"]
    print(f"\n{name}: medians of {rounds} rounds, {torch.get_num_threads()} thread")
    print(f"{'':26}{'us':>10}{'x eager':>9}{'x aot_eager':>13}")
    for label, value in medians.items():
        print(f"{label:26}{value:>10.1f}{value / eager:>9.2f}{value / aot:>13.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    rounds = parser.parse_args().rounds
    # One intra-op thread: on a shared machine a second OpenMP thread makes timings swing.
    torch.set_num_threads(1)
    _bench("MLP: 5 x (Linear(64, 64) + ReLU), batch 16", *_mlp(), rounds)
    _bench("TransformerEncoderLayer(32, 4, 64), batch 4 x 8", *_transformer(), rounds)


if __name__ == "__main__":
    main()
