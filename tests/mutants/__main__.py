"""Run the planted bugs of tests/mutants/catalog.py against the tests: the mutation score.

    .venv/bin/python -m tests.mutants                  # every mutant
    .venv/bin/python -m tests.mutants 'fusion.*' guard.strides   # some, by name or glob
    .venv/bin/python -m tests.mutants --list           # the catalog, without running it

Each mutant runs in a process of its own (`tests/mutants/plant.py`): the bug is planted in its
module as the tests import it, and its tests run under the `mutants` hypothesis profile, the
`ci` profile's examples without shrinking (a failing example fails at once). A mutant is killed
when a test fails; it survives when its tests pass. The score is the killed share of the planted
bugs; survivors are listed with why they are realistic and, for the equivalent ones, why no test
can see them.

First, each set of tests the mutants name runs once without any mutant, in the same kind of
process: it must pass, or a failure would be blamed on every mutant. (Hypothesis draws its
derandomized examples partly from constants of the local modules loaded, so a test's examples
depend on which test files a run collects; the baseline collects exactly what the mutants'
runs do.)

On demand, not in CI: a full run takes tens of minutes on two cores.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import tempfile
import time

from attrs import frozen
from rich.console import Console
from rich.table import Table

from .catalog import MUTANTS, ROOT, Mutant


@frozen
class Result:
    mutant: Mutant | None  # None: the baseline
    #: "killed", "survived", "timeout", "not planted" (no test imported the module); for the
    #: baseline, "survived" (passed) or "failed".
    verdict: str
    #: The first test that failed (killed), or what went wrong.
    detail: str
    seconds: float


def run_one(mutant: Mutant, timeout: float) -> Result:
    mutant.mutated_source()  # the snippet is there exactly once, or this raises
    missing = [test for test in mutant.tests if not (ROOT / test.split("::")[0]).exists()]
    if missing:
        raise SystemExit(f"mutant {mutant.name} names tests that do not exist: {missing}")
    return _run(mutant.name, mutant, mutant.tests, timeout)


def run_baseline(tests: tuple[str, ...], timeout: float) -> Result:
    """`tests` without any mutant: they must pass."""
    return _run("none", None, tests, timeout)


def _run(name: str, mutant: Mutant | None, tests: tuple[str, ...], timeout: float) -> Result:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aotspec-mutant-") as directory:
        report_path = os.path.join(directory, "report.json")
        env = dict(os.environ, HYPOTHESIS_PROFILE="mutants", AOTSPEC_MUTANT_REPORT=report_path)
        command = [sys.executable, "-m", "tests.mutants.plant", name]
        command += ["-x", "-q", "-p", "no:cacheprovider", "--no-header", *tests]
        try:
            completed = subprocess.run(
                command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return Result(mutant, "timeout", f"over {timeout:.0f} s", timeout)
        seconds = time.perf_counter() - started
        try:
            with open(report_path) as report_file:
                report = json.load(report_file)
        except FileNotFoundError:
            tail = (completed.stdout + completed.stderr).strip().splitlines()[-5:]
            return Result(mutant, "killed", "the test process died: " + " | ".join(tail), seconds)
    if not report["planted"]:
        return Result(mutant, "not planted", f"no test imported {mutant.module}", seconds)
    if mutant is None and report["status"] not in (0, 5):
        tail = " | ".join(completed.stdout.strip().splitlines()[-3:])
        return Result(mutant, "failed", f"{report['failed']}: {tail}", seconds)
    if report["status"] in (0, 5):  # 5: no tests collected, which kills nothing
        return Result(mutant, "survived", "", seconds)
    return Result(mutant, "killed", report["failed"] or f"pytest exit {report['status']}", seconds)


def selected(patterns: list[str]) -> list[Mutant]:
    if not patterns:
        return list(MUTANTS)
    chosen = [m for m in MUTANTS if any(fnmatch.fnmatchcase(m.name, p) for p in patterns)]
    if not chosen:
        raise SystemExit(f"no mutant matches {patterns}; see --list")
    return chosen


def print_catalog(console: Console, mutants: list[Mutant]) -> None:
    table = Table(title=f"{len(mutants)} planted bugs")
    for column in ("mutant", "file", "why it is realistic", "equivalent"):
        table.add_column(column, overflow="fold")
    for m in mutants:
        table.add_row(m.name, m.file, m.why, m.equivalent or "")
    console.print(table)


def print_results(console: Console, results: list[Result]) -> None:
    table = Table(title="mutation run")
    for column in ("mutant", "verdict", "killed by", "s"):
        table.add_column(column, overflow="fold")
    styles = {"killed": "green", "survived": "red", "timeout": "yellow", "not planted": "red"}
    for r in results:
        verdict = f"[{styles[r.verdict]}]{r.verdict}[/]"
        table.add_row(r.mutant.name, verdict, r.detail, f"{r.seconds:.0f}")
    console.print(table)
    killed = sum(r.verdict in ("killed", "timeout") for r in results)
    console.print(
        f"score: {killed}/{len(results)} planted bugs killed ({100 * killed / len(results):.0f}%)"
    )
    for r in results:
        if r.verdict in ("survived", "not planted"):
            survivor = f"[bold]survivor {r.mutant.name}[/] ({r.mutant.file}): {r.mutant.why}"
            explanation = r.mutant.equivalent or "NOT EXPLAINED: kill it with a test, or say why"
            console.print(survivor, soft_wrap=True)
            console.print(f"    equivalent: {explanation}", soft_wrap=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutants", description=__doc__)
    parser.add_argument("patterns", nargs="*", help="mutant names or globs (default: all)")
    parser.add_argument("--list", action="store_true", help="print the catalog and exit")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per mutant")
    parser.add_argument(
        "--fail-under", type=float, default=90, help="exit 1 below this score (percent)"
    )
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the runs without a mutant"
    )
    options = parser.parse_args(argv)
    console = Console(width=150)
    mutants = selected(options.patterns)
    if options.list:
        print_catalog(console, mutants)
        return 0
    if not options.no_baseline:
        for tests in dict.fromkeys(m.tests for m in mutants):
            with console.status(f"baseline: {' '.join(tests)}"):
                baseline = run_baseline(tests, options.timeout)
            console.print(f"baseline {' '.join(tests)}: {baseline.seconds:.0f} s", soft_wrap=True)
            if baseline.verdict != "survived":
                console.print(f"[red]without any mutant, {baseline.verdict}: {baseline.detail}")
                return 2
    results = []
    for k, mutant in enumerate(mutants, 1):
        with console.status(f"[{k}/{len(mutants)}] {mutant.name}"):
            result = run_one(mutant, options.timeout)
        console.print(
            f"[{k}/{len(mutants)}] {mutant.name}: {result.verdict} {result.detail}",
            soft_wrap=True,
        )
        results.append(result)
    print_results(console, results)
    killed = sum(r.verdict in ("killed", "timeout") for r in results)
    return 0 if 100 * killed >= options.fail_under * len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
