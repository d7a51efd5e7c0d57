"""Run the planted bugs of tests/mutants/catalog.py against the tests: the mutation score.

    .venv/bin/python -m tests.mutants                  # every mutant
    .venv/bin/python -m tests.mutants 'fusion.*' guard.strides   # some, by name or glob
    .venv/bin/python -m tests.mutants --list           # the catalog, without running it

Each mutant runs in a process of its own (`tests/mutants/plant.py`): the bug is planted in its
module as the tests import it, and its tests run under the `mutants` hypothesis profile, the
`ci` profile's examples without shrinking (a failing example fails at once; what is killed is
what `ci` kills). A mutant is killed when a test fails; it survives when its tests pass. The
score is the killed share of the planted bugs; survivors are listed with why they are
realistic and, for the equivalent ones, why no test can see them.

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
    mutant: Mutant
    #: "killed", "survived", "timeout", or "not planted" (no test imported the module).
    verdict: str
    #: The first test that failed (killed), or what went wrong.
    detail: str
    seconds: float


def run_one(mutant: Mutant, timeout: float) -> Result:
    mutant.mutated_source()  # the snippet is there exactly once, or this raises
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aotspec-mutant-") as directory:
        report_path = os.path.join(directory, "report.json")
        env = dict(os.environ, HYPOTHESIS_PROFILE="mutants", AOTSPEC_MUTANT_REPORT=report_path)
        command = [sys.executable, "-m", "tests.mutants.plant", mutant.name]
        command += ["-x", "-q", "-p", "no:cacheprovider", "--no-header", *mutant.tests]
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
            console.print(f"[bold]survivor {r.mutant.name}[/] ({r.mutant.file}): {r.mutant.why}")
            explanation = r.mutant.equivalent or "NOT EXPLAINED: kill it with a test, or say why"
            console.print(f"    equivalent: {explanation}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutants", description=__doc__)
    parser.add_argument("patterns", nargs="*", help="mutant names or globs (default: all)")
    parser.add_argument("--list", action="store_true", help="print the catalog and exit")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per mutant")
    parser.add_argument(
        "--fail-under", type=float, default=90, help="exit 1 below this score (percent)"
    )
    options = parser.parse_args(argv)
    console = Console()
    mutants = selected(options.patterns)
    if options.list:
        print_catalog(console, mutants)
        return 0
    results = []
    for k, mutant in enumerate(mutants, 1):
        with console.status(f"[{k}/{len(mutants)}] {mutant.name}"):
            result = run_one(mutant, options.timeout)
        console.print(f"[{k}/{len(mutants)}] {mutant.name}: {result.verdict} {result.detail}")
        results.append(result)
    print_results(console, results)
    killed = sum(r.verdict in ("killed", "timeout") for r in results)
    return 0 if 100 * killed >= options.fail_under * len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
