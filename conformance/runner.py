"""The conformance runner: every case against a named backend, and a pass/fail table per rule."""

from __future__ import annotations

import re
import warnings
from collections import defaultdict

import torch
from attrs import frozen

from .backends import get_backend
from .case import BackwardRaises, Case, Outcome, Raises
from .observe import observe, world_of
from .ranks import RanksFailed, run_on_ranks


@frozen
class CaseResult:
    case: Case
    backend: str
    status: str  # "pass", "fail" or "skip"
    messages: tuple[str, ...]


def run_case(case: Case, backend: str) -> CaseResult:
    """The case on `backend`: here, or on every rank of a group spawned for it."""
    if case.ranks > 1:
        return run_in_group([case], [backend])[0]
    return run_here(case, backend)


def run_here(case: Case, backend: str) -> CaseResult:
    """The case on `backend`, in this process (one rank of a group, for a case of `ranks` > 1)."""
    run = get_backend(backend)
    if backend in case.skip:
        return CaseResult(case, backend, "skip", (case.skip[backend],))
    world = case.setup()
    before = observe(world)
    outputs, ledger, error, backward_error = None, None, None, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.set_grad_enabled(case.grad_enabled):
                outputs, ledger = run(case, [world[name] for name in case.args])
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
    outcome = Outcome(world, observe(world), before, error, ledger, tuple(caught), backward_error)
    expect = case.expectations()
    if error is not None and not any(isinstance(e, Raises) for e in expect):
        message = f"the call raised {type(error).__name__}: {error}"
        return CaseResult(case, backend, "fail", (message,))
    if backward_error is not None and not any(isinstance(e, BackwardRaises) for e in expect):
        message = f"the backward raised {type(backward_error).__name__}: {backward_error}"
        return CaseResult(case, backend, "fail", (message,))
    failures, unobservable = [], 0
    for expectation in expect:
        if expectation.needs_ledger and ledger is None and error is None:
            unobservable += (
                1  # this backend keeps no ledger: memory facts are not observable on it
            )
            continue
        message = expectation.check(outcome)
        if message is not None:
            failures.append(message)
    if failures:
        return CaseResult(case, backend, "fail", tuple(failures))
    note = (
        (f"{unobservable} memory expectation(s) not observable without a ledger",)
        if unobservable
        else ()
    )
    return CaseResult(case, backend, "pass", note)


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


def run_cases(cases: list[Case], backends: list[str]) -> list[CaseResult]:
    """Every case on every backend; the cases of `ranks` > 1 together, in one spawned group."""
    spread = [case for case in cases if case.ranks > 1]
    in_group = {(r.case.name, r.backend): r for r in run_in_group(spread, backends)}
    return [
        in_group[case.name, backend] if case.ranks > 1 else run_here(case, backend)
        for case in cases
        for backend in backends
    ]


def run_in_group(cases: list[Case], backends: list[str]) -> list[CaseResult]:
    """Each case on each backend, on every rank of a gloo group spawned for them (one group per
    number of ranks); a case passes when it passes on every rank, and fails when a rank fails,
    hangs or dies."""
    results = {}
    for ranks in sorted({case.ranks for case in cases}):
        pairs = [(case, backend) for case in cases if case.ranks == ranks for backend in backends]
        names = [(case.name, backend) for case, backend in pairs]
        try:
            per_rank = run_on_ranks(_run_named, names, ranks=ranks, timeout=60 + 10 * len(names))
        except RanksFailed as failed:
            lost = (f"the group of {ranks} ranks failed: {failed}",)
            results.update({(c.name, b): CaseResult(c, b, "fail", lost) for c, b in pairs})
            continue
        for k, (case, backend) in enumerate(pairs):
            on_each_rank = [answers[k] for answers in per_rank]
            results[case.name, backend] = _merged(case, backend, on_each_rank)
    return [results[case.name, backend] for case in cases for backend in backends]


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
    """One row per rule: for each backend, passed/ran, FAIL when any case failed, and `*` when some
    memory expectation could not be observed there (no ledger)."""
    tally: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    results_by: dict[str, dict[str, list[CaseResult]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        for rule in result.case.rules:
            tally[rule][result.backend].append(result.status)
            results_by[rule][result.backend].append(result)
    width = max([len("rule")] + [len(rule) for rule in tally])
    header = f"{'rule':<{width}}  " + "  ".join(f"{b:<16}" for b in backends)
    lines = [header, "-" * len(header)]
    for rule in sorted(tally):
        cells = []
        for backend in backends:
            statuses = tally[rule][backend]
            ran = [s for s in statuses if s != "skip"]
            passed = ran.count("pass")
            cell = f"{passed}/{len(ran)}" if ran else "skip"
            if "fail" in ran:
                cell += " FAIL"
            elif any(r.messages for r in results_by[rule][backend] if r.status == "pass"):
                cell += " *"
            cells.append(f"{cell:<16}")
        lines.append(f"{rule:<{width}}  " + "  ".join(cells))
    return "\n".join(lines)


def failure_report(results: list[CaseResult]) -> str:
    lines = []
    for result in results:
        if result.status == "fail":
            lines.append(
                f"FAIL {result.case.name} on {result.backend} "
                f"(rules: {', '.join(result.case.rules)})"
            )
            lines.extend(f"    {message}" for message in result.messages)
    return "\n".join(lines)
