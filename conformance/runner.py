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


@frozen
class CaseResult:
    case: Case
    backend: str
    status: str  # "pass", "fail" or "skip"
    messages: tuple[str, ...]


def run_case(case: Case, backend: str) -> CaseResult:
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
    if error is not None and not any(isinstance(e, Raises) for e in case.expect):
        message = f"the call raised {type(error).__name__}: {error}"
        return CaseResult(case, backend, "fail", (message,))
    if backward_error is not None and not any(isinstance(e, BackwardRaises) for e in case.expect):
        message = f"the backward raised {type(backward_error).__name__}: {backward_error}"
        return CaseResult(case, backend, "fail", (message,))
    failures, unobservable = [], 0
    for expectation in case.expect:
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
    return [run_case(case, backend) for case in cases for backend in backends]


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
