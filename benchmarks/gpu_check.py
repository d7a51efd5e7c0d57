"""Everything only a GPU can show, in one command, into one JSON and one markdown table.

    python3 -m pip install --no-deps --no-build-isolation -e .
    python3 benchmarks/gpu_check.py --out DIR

(`benchmarks/gpu_check.sh DIR` runs both.) Sections, each in a process of its own (started
afresh on CUDA; on --cpu forked from the first, which imported torch and aotspec once) with a
share of the time budget (`--budget-s`, 420 s by default), so that one that crashes, hangs or
fails is recorded as such and the others still run; what a section measured before it stopped
is kept, and a section the budget no longer allows is recorded as skipped:

- `environment`: Python, torch, Triton, the GPU;
- `triton_tests`: tests/test_triton.py with its kernels on the GPU for real
  (AOTSPEC_TEST_DEVICE=cuda, no interpreter), the number of kernel launches;
- `fused_pointwise`: the chains of benchmarks/fused_pointwise.py fused, bytes moved per second
  against the same GPU's device-to-device copy;
- `memory`: each zoo model's training step (examples/zoo.py) on eager and on the fast backend:
  the bytes alive after the forward and the backward's peak from `MemoryTracker` beside
  `torch.cuda.memory_allocated()` and `max_memory_allocated()` of the same step;
- `memory_viz`: a training step's export by `aotspec/memory_viz.py` (the reference's ledgers)
  beside `torch.cuda.memory._snapshot()` of the same step on the fast backend;
- `conformance`: the conformance suite on the fast backend with CUDA tensors;
- `step_time`: each zoo model's step on eager, aot_eager, aotspec fast and inductor, timed
  with CUDA events, the contenders taking turns, medians.

DIR receives `gpu_check.json`, `gpu_check.md` and the two memory snapshots (rewritten after
each section). `--cpu` runs the same sections on CPU tensors with Triton's interpreter
(TRITON_INTERPRET=1, AOTSPEC_TRITON=1), on small sizes and a few models and cases, without
inductor: tests/test_gpu_check.py runs it, so that the script keeps working between GPU runs.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent

#: The sections in the order they run, each with its share of the budget (cheap and telling
#: first; inductor's compiles, the slowest, last).
SECTIONS = {
    "environment": 0.05,
    "triton_tests": 0.22,
    "fused_pointwise": 0.08,
    "memory": 0.15,
    "memory_viz": 0.07,
    "conformance": 0.22,
    "step_time": 0.30,
}
#: Seconds a section's process gets beyond its share to start and to write what it has.
GRACE_S = 15.0
#: What --cpu keeps small.
CPU_MODELS = ("mlp", "gpt-block")
CPU_CASES = 6
CPU_TRITON_TESTS = "test_one_kernel_replaces_the_chain or test_compiled_function_runs"


# ---------------------------------------------------------------- the parent: run each section


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for the JSON, markdown, pickles")
    parser.add_argument("--budget-s", type=float, default=420.0, help="total seconds (420)")
    parser.add_argument("--cpu", action="store_true", help="CPU tensors, Triton's interpreter")
    parser.add_argument(
        "--start",
        choices=["fork", "spawn"],
        help="how section processes start (default: fork on --cpu, spawn on CUDA)",
    )
    args = parser.parse_args()
    # A process forked from one that started CUDA cannot use it, and what an import may start
    # (Triton's driver, say) is not ours to vouch for: on CUDA each section starts afresh.
    start = args.start or ("fork" if args.cpu else "spawn")
    if args.cpu:
        os.environ.update(TRITON_INTERPRET="1", AOTSPEC_TRITON="1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    deadline = started + args.budget_s
    if start == "fork":
        _preload()
    report = {"mode": "cpu" if args.cpu else "cuda", "budget_s": args.budget_s, "sections": {}}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as parts:
        for name, share in SECTIONS.items():
            left = deadline - time.monotonic()
            if left < 10 + GRACE_S:
                report["sections"][name] = {
                    "status": "skipped",
                    "note": f"the budget of {args.budget_s:g} s was spent",
                }
            else:
                # A section killed at its deadline gets GRACE_S more to go: the budget holds both.
                seconds = min(left - GRACE_S, max(share * args.budget_s, 10.0))
                child = (name, Path(parts), out, time.time() + seconds, args.cpu, start)
                report["sections"][name] = _run_child(*child)
            report["seconds"] = round(time.monotonic() - started, 1)
            _write(report, out)
            print(f"{name}: {report['sections'][name]['status']}", flush=True)
    return 0


def _preload() -> None:
    """Import what the sections use once, here, so that each section's process, forked from
    this one, starts at once. Nothing here runs an op: a process forked after torch started its
    thread pool (or CUDA) can hang. So not the conformance cases, which compute at import."""
    import fused_pointwise  # noqa: F401
    import torch._dynamo  # noqa: F401
    import zoo  # noqa: F401
    from torch.fx.experimental.proxy_tensor import make_fx  # noqa: F401

    import aotspec.examples.zoo  # noqa: F401
    import aotspec.tracker  # noqa: F401


def _run_child(name: str, parts: Path, out: Path, until: float, cpu: bool, start: str) -> dict:
    """Run section `name` in a process of its own until `until` (wall clock), and a little
    grace; its result, with how it ended if it did not end well."""
    part, log = parts / f"{name}.json", parts / f"{name}.log"
    context = multiprocessing.get_context(start)
    child = context.Process(target=_section_process, args=(name, part, log, until, cpu, out))
    started = time.monotonic()
    child.start()
    child.join(max(until - time.time(), 1.0) + GRACE_S)
    status = None
    if child.is_alive():
        child.kill()
        child.join()
        status = "timed out"
    elif child.exitcode != 0:
        status = f"crashed (exit code {child.exitcode})"
    result = json.loads(part.read_text()) if part.exists() else {}
    if status is not None:
        result["status"] = status
        result["log_tail"] = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    result.setdefault("status", "crashed (no result written)")
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def _write(report: dict, out: Path) -> None:
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "gpu_check.md").write_text(markdown(report))


# ---------------------------------------------------------------- a section's process


class Part:
    """What a section measured so far, written to its file at each `save` (a section killed at
    its deadline keeps what it saved)."""

    def __init__(self, path: Path, until: float, cpu: bool, out: Path):
        self.path, self.until, self.cpu, self.out = path, until, cpu, out
        self.data: dict = {"status": "running"}

    def left(self) -> float:
        return self.until - time.time()

    def save(self) -> None:
        self.path.write_text(json.dumps(self.data, indent=2, default=str))


def _section_process(name: str, path: Path, log: Path, until: float, cpu: bool, out: Path):
    """A section's process: its output goes to `log`, what it measured to `path`."""
    with open(log, "w") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
    part = Part(path, until, cpu, out)
    part.save()
    try:
        SECTION_FUNCTIONS[name](part)
        if part.data["status"] == "running":
            part.data["status"] = "ok"
    except Exception as error:  # the report shows which section failed, and how
        part.data["status"] = "failed"
        part.data["error"] = f"{type(error).__name__}: {error}"
        part.data["traceback"] = traceback.format_exc()[-4000:]
    part.save()


def _device(part: Part):
    return torch.device("cpu" if part.cpu else "cuda")


def _synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _out_of_time(part: Part, what: str, margin: float = 5.0) -> bool:
    """True, with a note, when the section's time is (nearly) spent before `what`."""
    if part.left() > margin:
        return False
    part.data.setdefault("skipped", []).append(what)
    part.data["note"] = "the section's share of the budget was spent: see `skipped`"
    return True


def environment(part: Part) -> None:
    import platform

    import aotspec.versions

    data = part.data
    data["python"] = platform.python_version()
    data["torch"] = torch.__version__
    data["torch_cuda"] = torch.version.cuda
    try:
        import triton

        data["triton"] = triton.__version__
    except ImportError as missing:
        data["triton"] = f"not installed ({missing})"
    data["supported_torch"] = aotspec.versions.SUPPORTED_TORCH
    data["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        data["gpu"] = properties.name
        data["capability"] = f"{properties.major}.{properties.minor}"
        data["gpu_memory_gib"] = round(properties.total_memory / 2**30, 1)
    data["cpus"] = os.cpu_count()
    for name in ("TRITON_INTERPRET", "AOTSPEC_TRITON", "AOTSPEC_TEST_DEVICE"):
        data[name] = os.environ.get(name)
    if not part.cpu and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device: run with --cpu on a machine without a GPU")


def triton_tests(part: Part) -> None:
    """tests/test_triton.py in this process, its kernels on the GPU (the interpreter on --cpu)."""
    import pytest

    if not part.cpu:
        os.environ["AOTSPEC_TEST_DEVICE"] = "cuda"
        os.environ.pop("TRITON_INTERPRET", None)
    from aotspec.fast import triton_kernels

    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failures = part.data["failures"] = []
    part.data["counts"] = counts

    class Collect:
        def pytest_runtest_logreport(self, report):
            if report.when == "call" or report.outcome != "passed":
                if report.when != "call" and report.outcome == "passed":
                    return
                counts[report.outcome] = counts.get(report.outcome, 0) + 1
                if report.outcome == "failed":
                    failures.append(
                        {"test": report.nodeid, "error": str(report.longrepr)[-1500:]}
                    )
                part.data["launches"] = sum(triton_kernels.LAUNCHES.values())
                part.save()

        def pytest_runtest_protocol(self, item, nextitem):
            if part.left() < 5:
                item.session.shouldstop = "the section's share of the budget was spent"
                part.data["note"] = "stopped early: the section's share of the budget was spent"

    arguments = [str(ROOT / "tests" / "test_triton.py"), "-q", "-p", "no:cacheprovider"]
    if part.cpu:
        arguments += ["-k", CPU_TRITON_TESTS]
    started = time.monotonic()
    exit_code = pytest.main(arguments, plugins=[Collect()])
    part.data["pytest_exit_code"] = int(exit_code)
    part.data["seconds_in_tests"] = round(time.monotonic() - started, 1)
    part.data["launches"] = sum(triton_kernels.LAUNCHES.values())
    part.data["launches_by_kernel"] = dict(triton_kernels.LAUNCHES.most_common(20))
    part.data["device"] = "cpu (interpreter)" if part.cpu else "cuda"
    if counts["failed"] or counts["passed"] == 0:
        part.data["status"] = "failed"


def _time_calls(call, device, repeats: int) -> float:
    """Median seconds of `call()`, after one warm-up call (which builds the kernels)."""
    call()
    _synchronize(device)
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            started = time.perf_counter()
            call()
            samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def fused_pointwise(part: Part) -> None:
    from fused_pointwise import bfloat16_chain, gelu_like, pack_unpack
    from torch.fx.experimental.proxy_tensor import make_fx

    from aotspec.fast import triton_kernels
    from aotspec.fast.fusion import fuse_pointwise

    device = _device(part)
    numel = 1 << 12 if part.cpu else 1 << 24
    repeats = 3 if part.cpu else 50
    part.data["numel"] = numel
    source = torch.empty(numel * 4, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    copy = _time_calls(lambda: target.copy_(source), device, repeats)
    copy_rate = 2 * source.numel() / copy  # read once, written once
    part.data["copy_bytes_per_s"] = copy_rate
    rows = part.data["chains"] = []
    cases = {
        "mul-sin-relu-mul-add f32": (gelu_like, torch.float32),
        "pack-unpack f32->bf16->f32": (pack_unpack, torch.float32),
        "mul-add-div-sub-relu bf16": (bfloat16_chain, torch.bfloat16),
    }
    for name, (fn, dtype) in cases.items():
        generator = torch.Generator().manual_seed(0)
        inputs = [torch.randn(numel, generator=generator).to(device, dtype) for _ in range(2)]
        graph = make_fx(fn, tracing_mode="fake")(*inputs)
        fused = fuse_pointwise(graph, use_triton=True)
        before = sum(triton_kernels.LAUNCHES.values())
        expected = fn(*inputs)
        torch.testing.assert_close(fused(*inputs), expected, equal_nan=True)
        launched = sum(triton_kernels.LAUNCHES.values()) - before
        eager = _time_calls(lambda fn=fn: fn(*inputs), device, repeats)
        fused_time = _time_calls(lambda fused=fused: fused(*inputs), device, repeats)
        # What a fused kernel must move at least: each input read once, the output written once.
        moved = sum(t.nbytes for t in inputs) + expected.nbytes
        rows.append(
            {
                "chain": name,
                "kernels_launched_per_call": launched,
                "eager_s": eager,
                "fused_s": fused_time,
                "bytes_moved": moved,
                "fused_bytes_per_s": moved / fused_time,
                "fraction_of_copy_rate": moved / fused_time / copy_rate,
                "fused_over_eager": fused_time / eager,
            }
        )
        part.save()


def _zoo(part: Part) -> dict:
    from aotspec.examples.zoo import MODELS

    if part.cpu:
        return {name: MODELS[name] for name in CPU_MODELS}
    return MODELS


def _on(device, module, inputs):
    """`module` and its inputs on `device`, tensors inside tuples too (the LSTM's state)."""
    moved = torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), inputs)
    return module.to(device), tuple(moved)


def _step_accounts(contender, inputs, device) -> dict:
    """One warm step's bytes, by the tracker and (on CUDA) by the caching allocator, both
    counting from just before the step: the forward's alive bytes and the backward's peak."""
    from aotspec.tracker import MemoryTracker

    cuda = device.type == "cuda"
    contender.module.zero_grad(set_to_none=True)  # before the baseline: frees last step's grads
    _synchronize(device)
    base = torch.cuda.memory_allocated() if cuda else 0
    tracker = MemoryTracker()
    with tracker:
        loss = contender.step(inputs)
        tracker.sweep()
        after = tracker.live_bytes
        _synchronize(device)
        if cuda:
            cuda_after = torch.cuda.memory_allocated() - base
            torch.cuda.reset_peak_memory_stats()
        tracker.reset_peak()
        loss.backward()
        del loss
        _synchronize(device)
    account = {"tracker_after_forward": after, "tracker_backward_peak": tracker.peak_bytes}
    if cuda:
        account["cuda_after_forward"] = cuda_after
        account["cuda_backward_peak"] = torch.cuda.max_memory_allocated() - base
    return account


def memory(part: Part) -> None:
    from zoo import CONTENDERS, Contender

    device = _device(part)
    rows = part.data["models"] = {}
    for name, build in _zoo(part).items():
        if _out_of_time(part, name):
            break
        try:
            torch.manual_seed(0)
            module, inputs = _on(device, *build())
            torch._dynamo.reset()
            row = rows[name] = {}
            for contender_name in ("eager", "aotspec fast"):
                contender = Contender(module, CONTENDERS[contender_name][0])
                contender.step(inputs).backward()  # compiles; allocates what is kept
                row[contender_name] = _step_accounts(contender, inputs, device)
                del contender
        except Exception as error:  # one model's failure is its row's, not the section's
            rows[name] = {"error": f"{type(error).__name__}: {str(error)[:500]}"}
        part.save()


def _viz_step(x, w1, w2, target):
    h = torch.tanh(x @ w1)
    return ((h @ w2 - target) ** 2).mean()


def _viz_arguments(device):
    generator = torch.Generator().manual_seed(0)

    def tensor(*shape, grad=False):
        return torch.randn(*shape, generator=generator).to(device).requires_grad_(grad)

    return tensor(64, 256), tensor(256, 512, grad=True), tensor(512, 16, grad=True), tensor(64, 16)


def _trace_account(trace: list[dict]) -> dict:
    """Allocations, bytes allocated and the peak of bytes alive, from a snapshot's trace."""
    alive = peak = allocations = allocated = 0
    for entry in trace:
        if entry["action"] == "alloc":
            allocations += 1
            allocated += entry["size"]
            alive += entry["size"]
            peak = max(peak, alive)
        elif entry["action"] == "free_completed":
            alive -= entry["size"]
    return {"allocations": allocations, "bytes_allocated": allocated, "peak_bytes": peak}


def memory_viz(part: Part) -> None:
    """The same training step: its reference ledgers exported by aotspec.memory_viz, and the
    caching allocator's own snapshot of it on the fast backend."""
    import pickle

    import aotspec
    from aotspec.memory_viz import snapshot

    compiled = aotspec.compile(_viz_step, backend="reference")
    arguments = _viz_arguments("cpu")
    compiled(*arguments).backward()
    (plan,) = compiled.plans.values()
    run = compiled.last_run
    graphs = [("forward", plan.forward.graph, run.ledger)]
    if run.backward_ledger is not None:
        graphs.append(("backward", plan.backward.graph, run.backward_ledger))
    ours = snapshot(graphs)
    (part.out / "aotspec_memory_viz.pickle").write_bytes(pickle.dumps(ours))
    part.data["aotspec"] = {
        name: _trace_account(trace)
        for (name, _, _), trace in zip(graphs, ours["device_traces"], strict=True)
    }
    part.data["aotspec"]["ledger_peak_bytes"] = {
        "forward": run.ledger.peak_bytes,
        "backward": run.backward_ledger.peak_bytes if run.backward_ledger else None,
    }
    part.save()
    if part.cpu:
        part.data["cuda"] = "no CUDA on --cpu: only aotspec's export was written"
        return
    fast = aotspec.compile(_viz_step, backend="fast")
    arguments = _viz_arguments("cuda")
    fast(*arguments).backward()  # warm: kernels built, cuBLAS's workspace allocated
    for t in arguments:
        t.grad = None
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    try:
        loss = fast(*arguments)
        torch.cuda.synchronize()
        forward_entries = len(torch.cuda.memory._snapshot()["device_traces"][0])
        loss.backward()
        del loss
        torch.cuda.synchronize()
        theirs = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    (part.out / "cuda_memory_snapshot.pickle").write_bytes(pickle.dumps(theirs))
    trace = theirs["device_traces"][0]
    part.data["cuda"] = {
        "forward": _trace_account(trace[:forward_entries]),
        "backward": _trace_account(trace[forward_entries:]),
    }


def conformance(part: Part) -> None:
    from aotspec.conformance.cases import ALL_CASES
    from aotspec.conformance.runner import run_cases

    cases = [case for case in ALL_CASES if case.ranks == 1]
    if part.cpu:
        cases = cases[:CPU_CASES]
    device = "cpu" if part.cpu else "cuda"
    counts: dict[str, int] = {}
    failures = part.data["failures"] = []
    part.data.update(counts=counts, cases=len(cases), device=device, backend="fast")

    class OutOfTime(Exception):
        pass

    def collect(result) -> None:
        counts[result.status] = counts.get(result.status, 0) + 1
        if result.status in ("fail", "crash"):
            failures.append(
                {"case": result.case.name, "status": result.status, "messages": result.messages}
            )
        part.save()
        if part.left() < 5:
            raise OutOfTime

    jobs = 1 if part.cpu else min(8, os.cpu_count() or 1)
    try:
        run_cases(cases, ["fast"], jobs=jobs, timeout=60.0, on_result=collect, device=device)
    except OutOfTime:
        part.data["note"] = "stopped early: the section's share of the budget was spent"
    if failures:
        part.data["status"] = "failed"


def step_time(part: Part) -> None:
    from zoo import CONTENDERS, Contender

    device = _device(part)
    names = ["eager", "aot_eager", "aotspec fast"] + ([] if part.cpu else ["inductor"])
    repeats = 3 if part.cpu else 20
    timer = "perf_counter" if part.cpu else "CUDA events"
    part.data.update(contenders=names, repeats=repeats, timer=timer)
    if part.cpu:
        part.data["note"] = "inductor left out on --cpu (its C++ compiles take minutes)"
    rows = part.data["models"] = {}
    for name, build in _zoo(part).items():
        if _out_of_time(part, name, margin=30.0):
            break
        row = rows[name] = {"compile_s": {}, "median_s": {}, "errors": {}}
        try:
            torch.manual_seed(0)
            module, inputs = _on(device, *build())
            torch._dynamo.reset()
            contenders = {}
            for contender_name in names:
                started = time.perf_counter()
                try:
                    contender = Contender(module, CONTENDERS[contender_name][0])
                    contender.step(inputs).backward()
                    _synchronize(device)
                    contenders[contender_name] = contender
                except Exception as error:  # the row shows which contender failed, and how
                    row["errors"][contender_name] = f"{type(error).__name__}: {str(error)[:300]}"
                row["compile_s"][contender_name] = round(time.perf_counter() - started, 2)
            row["median_s"] = _alternated(contenders, inputs, device, repeats)
        except Exception as error:
            row["error"] = f"{type(error).__name__}: {str(error)[:500]}"
        part.save()


def _alternated(contenders: dict, inputs, device, repeats: int) -> dict[str, float]:
    """Median seconds of a forward and backward per contender, the contenders taking turns."""
    samples: dict[str, list] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, contender in contenders.items():
            if device.type == "cuda":
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                contender.step(inputs).backward()
                end.record()
                samples[name].append((start, end))
            else:
                started = time.perf_counter()
                contender.step(inputs).backward()
                samples[name].append(time.perf_counter() - started)
    _synchronize(device)
    if device.type == "cuda":
        return {
            name: statistics.median(start.elapsed_time(end) / 1e3 for start, end in pairs)
            for name, pairs in samples.items()
        }
    return {name: statistics.median(times) for name, times in samples.items()}


SECTION_FUNCTIONS = {
    "environment": environment,
    "triton_tests": triton_tests,
    "fused_pointwise": fused_pointwise,
    "memory": memory,
    "memory_viz": memory_viz,
    "conformance": conformance,
    "step_time": step_time,
}


# ---------------------------------------------------------------- the markdown


def markdown(report: dict) -> str:
    lines = [f"# GPU check ({report['mode']})", ""]
    lines.append(f"{report.get('seconds', 0)} s of a budget of {report['budget_s']:g} s.")
    lines.append("")
    lines += ["| section | status | seconds | note |", "| --- | --- | --- | --- |"]
    for name, section in report["sections"].items():
        note = section.get("note") or section.get("error") or ""
        lines.append(
            f"| {name} | {section['status']} | {section.get('seconds', '')} | {_cell(note)} |"
        )
    sections = report["sections"]
    for name, render in RENDERERS.items():
        if name in sections and sections[name]["status"] != "skipped":
            lines += ["", f"## {name}", ""]
            try:
                lines += render(sections[name])
            except Exception as error:  # a section that stopped half-way lacks some fields
                lines.append(f"(cannot show: {type(error).__name__}: {error})")
            if "log_tail" in sections[name]:
                lines += ["", "```", sections[name]["log_tail"][-1500:], "```"]
    return "\n".join(lines) + "\n"


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:300]


def _environment_md(section: dict) -> list[str]:
    keys = ("python", "torch", "torch_cuda", "triton", "gpu", "capability", "gpu_memory_gib")
    return [f"- {key}: {section.get(key)}" for key in keys]


def _triton_md(section: dict) -> list[str]:
    lines = [
        f"{section.get('counts')} on {section.get('device')}; "
        f"{section.get('launches')} kernel launches.",
    ]
    for failure in section.get("failures", [])[:20]:
        lines.append(f"- FAILED {failure['test']}: {_cell(failure['error'][-300:])}")
    return lines


def _fused_md(section: dict) -> list[str]:
    lines = [
        f"{section['numel']} elements; device-to-device copy: "
        f"{section['copy_bytes_per_s'] / 1e9:.1f} GB/s.",
        "",
        "| chain | kernels/call | eager ms | fused ms | fused GB/s | of copy rate |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in section["chains"]:
        lines.append(
            f"| {row['chain']} | {row['kernels_launched_per_call']} | {row['eager_s'] * 1e3:.3f}"
            f" | {row['fused_s'] * 1e3:.3f} | {row['fused_bytes_per_s'] / 1e9:.1f}"
            f" | {row['fraction_of_copy_rate']:.2f} |"
        )
    return lines


def _memory_md(section: dict) -> list[str]:
    lines = [
        "Bytes from just before the step: alive after the forward / the backward's peak.",
        "",
        "| model | contender | tracker | CUDA allocator | tracker / CUDA |",
        "| --- | --- | --- | --- | --- |",
    ]
    for model, row in section["models"].items():
        if "error" in row:
            lines.append(f"| {model} | | {_cell(row['error'])} | | |")
            continue
        for contender, account in row.items():
            after, peak = account["tracker_after_forward"], account["tracker_backward_peak"]
            tracker = f"{after:,} / {peak:,}"
            cuda, ratio = "", ""
            if "cuda_after_forward" in account:
                cuda = f"{account['cuda_after_forward']:,} / {account['cuda_backward_peak']:,}"
                ratio = " / ".join(
                    f"{a / b:.2f}" if b else "-"
                    for a, b in (
                        (account["tracker_after_forward"], account["cuda_after_forward"]),
                        (account["tracker_backward_peak"], account["cuda_backward_peak"]),
                    )
                )
            lines.append(f"| {model} | {contender} | {tracker} | {cuda} | {ratio} |")
    return lines


def _memory_viz_md(section: dict) -> list[str]:
    lines = [f"- aotspec's export (reference ledgers): {section.get('aotspec')}"]
    # No snapshot when the fast step raised before it (the section's error says why).
    theirs = section.get("cuda", "none: the step on the fast backend did not complete")
    lines.append(f"- torch.cuda.memory._snapshot() on the fast backend: {theirs}")
    return lines


def _conformance_md(section: dict) -> list[str]:
    counts, cases, device = section.get("counts"), section.get("cases"), section.get("device")
    lines = [f"{counts} of {cases} cases on {device}."]
    for failure in section.get("failures", [])[:40]:
        lines.append(
            f"- {failure['status'].upper()} {failure['case']}: {_cell(failure['messages'][:1])}"
        )
    return lines


def _step_time_md(section: dict) -> list[str]:
    names = section["contenders"]
    lines = [
        f"Median of {section['repeats']} steps ({section['timer']}), ms; compile seconds below.",
        "",
        "| model | " + " | ".join(names) + " |",
        "| --- |" + " --- |" * len(names),
    ]
    for model, row in section["models"].items():
        cells = []
        for name in names:
            if name in row.get("errors", {}):
                cells.append(_cell(row["errors"][name][:80]))
            elif name in row.get("median_s", {}):
                eager = row["median_s"].get("eager")
                ratio = f" ({row['median_s'][name] / eager:.2f}x)" if eager else ""
                cells.append(f"{row['median_s'][name] * 1e3:.2f}{ratio}")
            else:
                cells.append(row.get("error", "")[:80])
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    lines.append("")
    for model, row in section["models"].items():
        lines.append(f"- {model} compile s: {row.get('compile_s')}")
    return lines


RENDERERS = {
    "environment": _environment_md,
    "triton_tests": _triton_md,
    "fused_pointwise": _fused_md,
    "memory": _memory_md,
    "memory_viz": _memory_viz_md,
    "conformance": _conformance_md,
    "step_time": _step_time_md,
}


if __name__ == "__main__":
    sys.exit(main())
