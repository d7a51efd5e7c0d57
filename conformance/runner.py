"""The conformance runner: every case against named backends, and a pass/fail table per rule.

`run_case` runs one case in this process. `run_cases` runs many, each in a worker process of
`aotspec.workers` when `jobs` > 0, so that a backend's segfault, abort or hang becomes that
case's `crash` result, with its signal, and the run goes on.

`device` (default "cpu"): where a case's tensors live. On another device ("cuda") the case's
setup, call and backward run with it as torch's default device (`torch.set_default_device`),
so the tensors a case makes land there, and autocast is that device's; the tensors its setup
made elsewhere (clones of tensors made at import) are moved there, and values are compared on
the CPU. Cases of several ranks run on gloo's CPU tensors, and cases that hand their program a
CPU generator expect its draws: both are skipped on another device. A setup that raises fails
its case, and the run goes on.
"""

from __future__ import annotations

import contextlib
import re
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator

import torch
from attrs import evolve, frozen

from aotspec.rules import all_rules

from .backends import Backend, resolve
from .case import BackwardRaises, Case, Outcome, Raises
from .cases import ALL_CASES
from .observe import observe, world_of
from .ranks import RanksFailed, run_on_ranks

#: What a case's result may be. `xfail` and `xpass` come from a list of known failures: a
#: listed case that failed or crashed, and one that passed.
STATUSES = ("pass", "fail", "crash", "skip", "xfail", "xpass")
#: The statuses that fail a run.
FAILING = ("fail", "crash")


@frozen
class CaseResult:
    case: Case
    backend: str
    status: str  # one of STATUSES
    messages: tuple[str, ...]
    seconds: float = 0.0


#: Why a case of several ranks is skipped on a device other than the CPU.
RANKS_ON_CPU = "a case of several ranks runs on a gloo group, on CPU tensors only"
#: Why a case that passes a generator to its program is skipped on a device other than the CPU.
DRAWS_ON_CPU = "the case's expected draws are a CPU generator's; another device's differ"


def run_case(case: Case, backend: str | Backend, device: str = "cpu") -> CaseResult:
    """`case` on `backend`: here, or on every rank of a group spawned for it."""
    if isinstance(backend, str):
        backend = resolve(backend)
    if case.ranks > 1:
        if torch.device(device).type != "cpu":
            return CaseResult(case, backend.name, "skip", (RANKS_ON_CPU,))
        return run_in_group([case], [backend.name])[0]
    return run_here(case, backend, device)


def run_here(case: Case, backend: str | Backend, device: str = "cpu") -> CaseResult:
    """`case` on `backend`, in this process (one rank of a group, for a case of `ranks` > 1)."""
    if isinstance(backend, str):
        backend = resolve(backend)
    start = time.monotonic()
    with _on_device(device):
        result = _run(case, backend, torch.device(device))
    return evolve(result, seconds=time.monotonic() - start)


@contextlib.contextmanager
def _on_device(device: str):
    """Factories make tensors on `device` inside (nothing changes for the CPU)."""
    if torch.device(device).type == "cpu":
        yield
        return
    before = torch.get_default_device()
    torch.set_default_device(device)
    try:
        yield
    finally:
        torch.set_default_device(before)


def _moved(world: dict, device: torch.device, keep: tuple[str, ...] = ()) -> dict:
    """`world` with its tensors on `device`, but those named in `keep`: a setup that clones a
    tensor made at import makes it on the CPU whatever the default device. Tensors that shared a
    storage share the moved one, at their own layouts, and leaves stay leaves, requiring grad as
    they did."""
    storages: dict[int, torch.UntypedStorage] = {}
    moved = {}
    for name, value in world.items():
        if not isinstance(value, torch.Tensor) or value.device.type == device.type or name in keep:
            moved[name] = value
            continue
        if value.grad_fn is not None:
            raise ValueError(f"{name} has a history: make it on the default device in the setup")
        storage = value.untyped_storage()
        if storage._cdata not in storages:
            whole = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
            storages[storage._cdata] = whole.to(device).untyped_storage()
        on_device = torch.empty(0, dtype=value.dtype, device=device).set_(
            storages[storage._cdata], value.storage_offset(), value.shape, value.stride()
        )
        moved[name] = on_device.requires_grad_(value.requires_grad)
    return moved


def _run(case: Case, backend: Backend, device: torch.device) -> CaseResult:
    """`case` on `backend`: started once, then called once per size of the case (once if it has
    none), each call on a fresh world and judged by the expectations of its size; the failures
    of every call, each named by its size."""
    reason = backend.skip_reason(case)
    if reason is not None:
        return CaseResult(case, backend.name, "skip", (reason,))
    try:
        call = backend.start(case)
    except Exception as raised:  # noqa: BLE001  (a compiler that fails to start fails the case)
        return CaseResult(case, backend.name, "fail", (f"starting raised {describe(raised)}",))
    failures, unobservable = [], 0
    for size in case.sizes or (None,):
        at = "" if size is None else f"at size {size}: "
        try:
            world = _moved(case.world(size), device, keep=case.on_cpu)
        except Exception as raised:  # noqa: BLE001  (one case's broken setup is its failure)
            failures.append(f"{at}the setup raised {describe(raised)}")
            continue
        if device.type != "cpu" and any(isinstance(v, torch.Generator) for v in world.values()):
            return CaseResult(case, backend.name, "skip", (DRAWS_ON_CPU,))
        outcome = _called(case, call, world, device)
        messages, not_observed = _judged(outcome, case.expectations(size))
        failures.extend(at + message for message in messages)
        unobservable += not_observed
    if failures:
        return CaseResult(case, backend.name, "fail", tuple(failures))
    note = (
        (f"{unobservable} memory expectation(s) not observable without a ledger",)
        if unobservable
        else ()
    )
    return CaseResult(case, backend.name, "pass", note)


def _called(case: Case, call: Callable, world: dict, device: torch.device) -> Outcome:
    """One call of the started backend on `world`, then the backward if the case asks for it."""
    before = observe(world)
    outputs, ledger, error, backward_error = None, None, None, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            autocast = case.autocast
            autocasting = torch.autocast(device.type, dtype=autocast, enabled=autocast is not None)
            with torch.set_grad_enabled(case.grad_enabled), autocasting, _default_dtype(case):
                outputs, ledger = call([world[name] for name in case.args])
        except Exception as raised:  # noqa: BLE001  (the expectations judge every error)
            error = raised
    if error is None:
        world = world_of(world, outputs)
        if case.backward:
            try:
                if case.before_backward is not None:
                    case.before_backward(world)
                _backpropagate(world, case.retain_graph)
            except Exception as raised:  # noqa: BLE001
                backward_error = raised
    plans = getattr(call, "plans", None)
    traced = None if plans is None else plans()
    return Outcome(
        world, observe(world), before, error, ledger, tuple(caught), backward_error, traced
    )


def _judged(outcome: Outcome, expect: tuple) -> tuple[list[str], int]:
    """What failed of `expect` for one call, and how many memory expectations went unchecked
    for want of a ledger. An error nothing expected is the one failure."""
    if outcome.error is not None and not any(isinstance(e, Raises) for e in expect):
        return [f"the call raised {describe(outcome.error)}"], 0
    raised = outcome.backward_error
    if raised is not None and not any(isinstance(e, BackwardRaises) for e in expect):
        return [f"the backward raised {describe(raised)}"], 0
    failures, unobservable = [], 0
    for expectation in expect:
        if expectation.needs_ledger and outcome.ledger is None and outcome.error is None:
            unobservable += 1  # this backend keeps no ledger: memory facts are not observable
            continue
        if expectation.needs_plans and outcome.plans is None:
            continue  # this backend does not say how many plans it traced
        message = expectation.check(outcome)
        if message is not None:
            failures.append(message)
    return failures, unobservable


#: How much of an error's message a result keeps (a compiler's errors can run to pages).
MESSAGE_LIMIT = 600


def describe(error: BaseException) -> str:
    """`Type: message`, the message cut to MESSAGE_LIMIT characters."""
    text = str(error)
    if len(text) > MESSAGE_LIMIT:
        text = text[:MESSAGE_LIMIT] + " [...]"
    return f"{type(error).__name__}: {text}"


@contextlib.contextmanager
def _default_dtype(case: Case):
    """The call under `case.default_dtype`, if it names one; the caller's default after it."""
    before = torch.get_default_dtype()
    if case.default_dtype is not None:
        torch.set_default_dtype(case.default_dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def _backpropagate(world: dict, retain_graph: tuple[bool, ...]) -> None:
    outputs = [
        t
        for name, t in world.items()
        if re.fullmatch(r"out\d+", name) and isinstance(t, torch.Tensor)
    ]
    losses = [t.sum() for t in outputs if t.requires_grad]
    if losses:
        loss = torch.stack(losses).sum()
        for retain in retain_graph:
            loss.backward(retain_graph=retain)
    for name, t in list(world.items()):
        if isinstance(t, torch.Tensor) and t.is_leaf and t.grad is not None:
            world[f"{name}.grad"] = t.grad


CASES_BY_NAME = {case.name: case for case in ALL_CASES}


def run_named(
    case_name: str, backend_name: str, device: str = "cpu"
) -> tuple[str, tuple[str, ...], float]:
    """A worker's task: the case named `case_name` on `backend_name`, as picklable data. An
    error of the case's own code (its observation, an expectation's check) fails the case: out
    of the worker it would end the whole run (`aotspec.workers.TaskError`)."""
    try:
        result = run_case(CASES_BY_NAME[case_name], _backend(backend_name), device)
    except Exception as raised:  # noqa: BLE001
        return "fail", (f"running the case raised {describe(raised)}",), 0.0
    return result.status, result.messages, result.seconds


_RESOLVED: dict[str, Backend] = {}


def _backend(name: str) -> Backend:
    """A worker resolves each backend once (a user's callable is imported once)."""
    if name not in _RESOLVED:
        _RESOLVED[name] = resolve(name)
    return _RESOLVED[name]


def run_cases(
    cases: list[Case],
    backends: list[str],
    *,
    jobs: int = 0,
    timeout: float = 300.0,
    on_result: Callable[[CaseResult], None] | None = None,
    device: str = "cpu",
) -> list[CaseResult]:
    """Every case on every backend, in the order given. `jobs` = 0: in this process; else in
    that many reusable worker processes, a crash or a run past `timeout` seconds being the
    case's `crash` result. `on_result` sees each result as it comes. `device`: where the
    cases' tensors live (see the module's docstring)."""
    results = {}
    for result in _results(cases, backends, jobs, timeout, device):
        results[result.case.name, result.backend] = result
        if on_result is not None:
            on_result(result)
    return [results[case.name, backend] for case in cases for backend in backends]


def _results(cases, backends, jobs: int, timeout: float, device: str) -> Iterator[CaseResult]:
    # Cases of several ranks run together, in one group spawned from here: a worker, being a
    # daemon process, may not start processes.
    grouped = [case for case in cases if case.ranks > 1]
    if torch.device(device).type == "cpu":
        yield from run_in_group(grouped, backends)
    else:
        for case in grouped:
            yield from (CaseResult(case, b, "skip", (RANKS_ON_CPU,)) for b in backends)
    cases = [case for case in cases if case.ranks == 1]
    if jobs == 0:
        for case in cases:
            for backend in backends:
                yield run_case(case, _backend(backend), device)
        return
    from aotspec.workers import Crashed, Done, Pool, Task

    # Refuse a bad backend name here, before any worker starts.
    for backend in backends:
        _backend(backend)
    tasks = [
        Task(run_named, (case.name, backend, device)) for case in cases for backend in backends
    ]
    with Pool(jobs, timeout) as pool:
        for task, outcome in pool.map(tasks):
            case, backend = CASES_BY_NAME[task.args[0]], task.args[1]
            if isinstance(outcome, Done):
                status, messages, seconds = outcome.value
                yield CaseResult(case, backend, status, messages, seconds)
                continue
            if isinstance(outcome, Crashed):
                message = f"the worker died of {outcome.signal} running the case"
            else:
                message = f"timed out after {outcome.seconds:g} s; the worker was killed"
            messages = (message, *_log_lines(outcome.log))
            yield CaseResult(case, backend, "crash", messages, outcome.seconds)


def _log_lines(log: str) -> tuple[str, ...]:
    """The lines of a crashed worker's log worth showing: the fault handler's report."""
    lines = [line for line in log.splitlines() if line.strip()]
    # not the thread's address: it differs at every run
    return tuple(line for line in lines if not line.startswith("Current thread 0x"))[:12]


def apply_xfail(results: list[CaseResult], known: set[tuple[str, str]]) -> list[CaseResult]:
    """Mark the results of known failures: `known` holds (case, backend) pairs, `*` for every
    backend. A known one that failed or crashed is `xfail`; one that passed is `xpass`."""

    def listed(result: CaseResult) -> bool:
        return (result.case.name, result.backend) in known or (result.case.name, "*") in known

    marked = []
    for result in results:
        if listed(result) and result.status in FAILING:
            result = evolve(result, status="xfail")
        elif listed(result) and result.status == "pass":
            note = "listed as a known failure, but passed: remove it from the list"
            result = evolve(result, status="xpass", messages=(note, *result.messages))
        marked.append(result)
    return marked


def run_in_group(cases: list[Case], backends: list[str]) -> list[CaseResult]:
    """Each case on each backend, on every rank of a gloo group spawned for them (one group per
    number of ranks); a case passes when it passes on every rank, and fails when a rank fails,
    hangs or dies."""
    results = {}
    for ranks in sorted({case.ranks for case in cases}):
        pairs = [(case, backend) for case in cases if case.ranks == ranks for backend in backends]
        for (case, backend), result in zip(pairs, _in_groups(pairs, ranks), strict=True):
            results[case.name, backend] = result
    return [results[case.name, backend] for case in cases for backend in backends]


def _in_groups(pairs: list[tuple[Case, str]], ranks: int) -> list[CaseResult]:
    """`pairs` (case, backend) in order on one group of `ranks` ranks, where it can: a case that
    takes the group down runs again alone, to be told from the others; and as a failed case may
    leave the group broken (a peer gave up on a collective), the cases after the first failure
    run again on a new group."""
    names = [(case.name, backend) for case, backend in pairs]
    try:
        per_rank = run_on_ranks(_run_named, names, ranks=ranks, timeout=60 + 10 * len(names))
    except RanksFailed as failed:
        if len(pairs) > 1:  # find the cases that take a group down: each in its own group
            return [result for pair in pairs for result in _in_groups([pair], ranks)]
        status = "crash" if "died" in str(failed) else "fail"
        lost = (f"the group of {ranks} ranks failed: {failed}",)
        return [CaseResult(case, backend, status, lost) for case, backend in pairs]
    results = [
        _merged(case, backend, [answers[k] for answers in per_rank])
        for k, (case, backend) in enumerate(pairs)
    ]
    first = next((k for k, result in enumerate(results) if result.status in FAILING), None)
    if first is None or first == len(pairs) - 1:
        return results
    return results[: first + 1] + _in_groups(pairs[first + 1 :], ranks)


def _run_named(names: list[tuple[str, str]]) -> list[tuple[str, tuple[str, ...]]]:
    """On one rank: (status, messages) of each named case on its backend."""
    from .cases import ALL_CASES

    by_name = {case.name: case for case in ALL_CASES}
    results = []
    for name, backend in names:
        result = run_here(by_name[name], backend)
        results.append((result.status, result.messages))
    return results


def _merged(case: Case, backend: str, per_rank: list) -> CaseResult:
    statuses = [status for status, _ in per_rank]
    if "fail" in statuses:
        messages = tuple(
            f"rank {rank}: {message}"
            for rank, (status, messages) in enumerate(per_rank)
            if status == "fail"
            for message in messages
        )
        return CaseResult(case, backend, "fail", messages)
    status, messages = per_rank[0]
    return CaseResult(case, backend, status, messages)


def rule_table(results: list[CaseResult], backends: list[str]) -> str:
    """One row per rule: for each backend, passed/ran, CRASH or FAIL when any case crashed or
    failed (a known failure counts as ran and not passed, marked xfail), and `*` when some memory
    expectation could not be observed there (no ledger); then where the rule is in the spec."""
    results_by: dict[str, dict[str, list[CaseResult]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        for rule in result.case.rules:
            results_by[rule][result.backend].append(result)
    width = max([len("rule")] + [len(rule) for rule in results_by])
    columns = [max(len(backend), 16) for backend in backends]
    header = f"{'rule':<{width}}  " + "  ".join(
        f"{b:<{w}}" for b, w in zip(backends, columns, strict=True)
    )
    header += "  spec"
    lines = [header, "-" * len(header)]
    rules = all_rules()
    for rule in sorted(results_by):
        cells = [
            f"{cell(results_by[rule][backend]):<{w}}"
            for backend, w in zip(backends, columns, strict=True)
        ]
        where = rules[rule].link if rule in rules else "(not in the spec)"
        lines.append(f"{rule:<{width}}  " + "  ".join(cells) + f"  {where}")
    return "\n".join(lines)


def cell(results: list[CaseResult]) -> str:
    """A rule's cell for one backend: `passed/ran`, then the worst of CRASH, FAIL, XFAIL, or
    `*` when a memory expectation was not observable there; `skip` when nothing ran."""
    ran = [r.status for r in results if r.status != "skip"]
    if not ran:
        return "skip"
    text = f"{ran.count('pass') + ran.count('xpass')}/{len(ran)}"
    for status in ("crash", "fail", "xfail"):
        if status in ran:
            return f"{text} {status.upper()}"
    if any(r.messages for r in results if r.status == "pass"):
        return f"{text} *"
    return text


def failure_report(results: list[CaseResult]) -> str:
    """Each failure, crash and unexpected pass: the case, its rules and where they are in the
    spec, and what went wrong."""
    rules = all_rules()
    lines = []
    for result in results:
        if result.status not in (*FAILING, "xpass"):
            continue
        lines.append(f"{result.status.upper()} {result.case.name} on {result.backend}")
        for rule in result.case.rules:
            where = rules[rule].link if rule in rules else "(not in the spec)"
            lines.append(f"  rule {rule}: {where}")
        lines.extend(f"    {message}" for message in result.messages)
    return "\n".join(lines)
