"""Where one training step's time goes through `aotspec.compile(step, backend="fast")`.

Run on demand: `.venv/bin/python benchmarks/call_breakdown.py [--rounds N] [--zoo NAME ...]`.
One process, one intra-op thread; each round runs torch eager, torch.compile aot_eager,
torch.compile aotspec, aotspec fast as it is, and aotspec fast with timing wrappers around its
phases, one after another (contenders alternated), and the table prints medians over the rounds
in microseconds of this thread's CPU time (`time.thread_time_ns`: the time other processes hold
the cores is left out; a CPU step's forward and backward run on this thread).
"dynamo aotspec" is the step through `torch.compile(step, backend="aotspec")` (fast), Dynamo's
guards and frame included.

`--zoo NAME` breaks down a model of `examples/zoo.py` instead, as `benchmarks/zoo.py` runs it:
the module compiled by `torch.compile`, whose forward returns the loss; its phases are those of
the aotspec contender, through Dynamo, and "dynamo + guards" is its forward less aotspec's call.

The phases are timed by wrapping, from here, the functions the call goes through (the library holds
no timing code):

- guard + lift: `Lifter.lift` (r[capture.lift]: the tensors the step reaches, found at each
  call; none through Dynamo, whose flat graphs are called with their tensors,
  `CompiledFunction.call_held_first`);
- flatten: `_flatten` (the pytree of the arguments; none through Dynamo either);
- input facts / key: the check of the latest call's key (`_Latest.holds`: its context, then
  its tensor facts, by the function `aotspec/guard.py` generated), and `input_facts` and
  `bases_key` where the check misses (what the full key compares);
- other key work: the rest of `CompiledFunction.__call__` before the runtime runs;
- forward graph: the generated forward function (`GeneratedCode`, called by the skeleton or by
  the call written out for a plain plan, `fast/plain.py`);
- epilogue + outputs: the runtime's run less the forward graph (autograd.Function plumbing, the
  epilogue, wrapping outputs);
- backward graph: the generated backward function;
- autograd engine: `loss.backward()` less the backward graph.

The wrappers cost a little themselves: compare "fast call" (unwrapped) with the phases' sum.

Last, "dynamo aotspec" is split in two from one more step of it per round, with only the call of
the function the backend handed Dynamo timed (`aotspec.dynamo.CompiledGraph`): "dynamo's own" is
its forward less that call (Dynamo's guards on the frame, its wrappers, and the step's bytecode),
"aotspec through dynamo" is that call (the fast phases above, less the lift and the flatten,
which the Dynamo path does without).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections import defaultdict

import torch

import aotspec
import aotspec.api as api
import aotspec.dynamo as dynamo
from aotspec.fast import codegen


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

    def _wrap(self, owner, name: str, phase) -> None:
        """Times `owner.name` as `phase`, or as `phase(self_argument)` where it is a function."""
        original = getattr(owner, name)
        ns = self.ns

        def timed(*args, **kwargs):
            start = time.thread_time_ns()
            try:
                return original(*args, **kwargs)
            finally:
                ns[phase if type(phase) is str else phase(args[0])] += (
                    time.thread_time_ns() - start
                )

        self._originals.append((owner, name, original))
        setattr(owner, name, timed)

    def install_graph_call(self) -> None:
        """Times only the callable the aotspec backend handed Dynamo."""
        self._wrap(dynamo.CompiledGraph, "__call__", "aotspec call")

    def install(self) -> None:
        self._wrap(api.CompiledFunction, "__call__", "aotspec call")
        self._wrap(api.CompiledFunction, "call_held_first", "aotspec call")
        self._wrap(api.Lifter, "lift", "guard + lift")
        self._wrap(api, "_flatten", "flatten")
        self._wrap(api._Latest, "holds", "input facts / key")
        self._wrap(api, "input_facts", "input facts / key")
        self._wrap(api, "bases_key", "input facts / key")
        self._wrap(api._FastRuntime, "run", "runtime run")
        self._wrap(codegen.GeneratedCode, "__call__", _graph_phase)

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)
        self._originals.clear()


def _graph_phase(code: codegen.GeneratedCode) -> str:
    return f"{code.function.__name__} graph"  # the generated `forward` or `backward`


def _timed_step(step, inputs) -> tuple[int, int]:
    start = time.thread_time_ns()
    loss = step(*inputs)
    middle = time.thread_time_ns()
    loss.backward()
    return middle - start, time.thread_time_ns() - middle


def _bench(name: str, model: torch.nn.Module, x: torch.Tensor, rounds: int) -> None:
    def step(x):
        return model(x).pow(2).mean()

    # Every step shares this function's code, on which Dynamo keeps its compiles: a step compiled
    # after another would find the first's entry, recompile, and mark its sizes dynamic
    # (`automatic_dynamic_shapes`), which a user compiling one step never sees.
    torch._dynamo.reset()
    contenders = {
        "eager": step,
        "aot_eager": torch.compile(step, backend="aot_eager"),
        "dynamo aotspec": torch.compile(step, backend="aotspec"),
        "fast": aotspec.compile(step, backend="fast"),
    }
    _report(name, _measure(contenders, "fast", model.zero_grad, (x,), rounds), rounds)


def _bench_zoo(name: str, rounds: int) -> None:
    from aotspec.examples.zoo import MODELS

    torch.manual_seed(0)
    module, inputs = MODELS[name]()
    modules = [copy.deepcopy(module) for _ in range(3)]
    contenders = {
        "eager": modules[0],
        "aot_eager": torch.compile(modules[1], backend="aot_eager"),
        "dynamo aotspec": torch.compile(modules[2], backend="aotspec"),
    }

    def zero_grad(set_to_none: bool) -> None:
        for module in modules:
            module.zero_grad(set_to_none=set_to_none)

    with torch._dynamo.config.patch(allow_rnn=True):
        samples = _measure(contenders, "dynamo aotspec", zero_grad, inputs, rounds)
    _report(f"zoo {name}, through torch.compile", samples, rounds)


def _measure(contenders: dict, measured: str, zero_grad, inputs, rounds: int) -> dict:
    """Per round, each contender's step, then `measured`'s with its phases timed."""
    for contender in [*contenders.values(), contenders[measured]]:  # warm-up, compiles
        contender(*inputs).backward()
    zero_grad(set_to_none=True)
    samples: dict[str, list[float]] = defaultdict(list)
    phases = _Phases()
    for _ in range(rounds):
        for label, contender in contenders.items():
            forward, backward = _timed_step(contender, inputs)
            samples[f"{label} step"].append((forward + backward) / 1e3)
            if label == measured:
                samples[f"{measured} call"].append(forward / 1e3)
                samples[f"{measured} backward()"].append(backward / 1e3)
            zero_grad(set_to_none=True)
        phases.ns.clear()
        phases.install()
        try:
            forward, backward = _timed_step(contenders[measured], inputs)
        finally:
            phases.uninstall()
        ns = phases.ns
        if measured != "fast":
            samples["  dynamo + guards"].append((forward - ns["aotspec call"]) / 1e3)
            forward = ns["aotspec call"]
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
        zero_grad(set_to_none=True)
        if measured == "fast":
            _split_dynamo(contenders["dynamo aotspec"], inputs, samples, phases)
            zero_grad(set_to_none=True)
    return samples


def _split_dynamo(step, inputs, samples: dict, phases: _Phases) -> None:
    """One step of the Dynamo contender, its forward split into Dynamo's part and aotspec's."""
    phases.ns.clear()
    phases.install_graph_call()
    try:
        forward, _ = _timed_step(step, inputs)
    finally:
        phases.uninstall()
    ours = phases.ns["aotspec call"]
    samples["dynamo's own"].append((forward - ours) / 1e3)
    samples["aotspec through dynamo"].append(ours / 1e3)


def _report(name: str, samples: dict, rounds: int) -> None:
    medians = {label: statistics.median(values) for label, values in samples.items()}
    eager, aot = medians["eager step"], medians["aot_eager step"]
    print(f"\n{name}: medians of {rounds} rounds, {torch.get_num_threads()} thread")
    print(f"{'':26}{'us':>10}{'x eager':>9}{'x aot_eager':>13}")
    for label, value in medians.items():
        print(f"{label:26}{value:>10.1f}{value / eager:>9.2f}{value / aot:>13.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument(
        "--zoo", action="append", default=[], help="a model of examples/zoo.py instead"
    )
    args = parser.parse_args()
    # One intra-op thread: on a shared machine a second OpenMP thread makes timings swing.
    torch.set_num_threads(1)
    for name in args.zoo:
        _bench_zoo(name, args.rounds)
    if args.zoo:
        return
    _bench("MLP: 5 x (Linear(64, 64) + ReLU), batch 16", *_mlp(), args.rounds)
    _bench("TransformerEncoderLayer(32, 4, 64), batch 4 x 8", *_transformer(), args.rounds)


if __name__ == "__main__":
    main()
