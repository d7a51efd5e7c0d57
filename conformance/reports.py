"""What a conformance run hands to CI: known failures, progress, and JSON and JUnit reports.

- A *known-failures file* (`--xfail FILE`) lists one failure a line: `CASE` (on every backend)
  or `BACKEND CASE`; `#` starts a comment (the reason, say). Listed cases that fail or crash do
  not fail the run; listed cases that pass are reported, to be removed from the list.
- Progress: a progress bar on a terminal, one plain line per result elsewhere (CI logs).
- `write_json` and `write_junit`: every result, with its rules, status, messages and time.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree

import torch

from aotspec.rules import all_rules

from .runner import STATUSES, CaseResult


def read_xfail(path: str | Path, case_names: set[str]) -> tuple[set[tuple[str, str]], list[str]]:
    """The (case, backend) pairs a known-failures file lists (backend `*`: every backend), and
    a warning for each line naming no known case."""
    known, warnings = set(), []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 2:
            raise ValueError(
                f"{path}:{number}: expected `CASE` or `BACKEND CASE`, got {line.strip()!r}"
            )
        backend, case = words if len(words) == 2 else ("*", words[0])
        if case not in case_names:
            warnings.append(f"{path}:{number}: no conformance case is named {case!r}")
        known.add((case, backend))
    return known, warnings


def counts(results: list[CaseResult]) -> dict[str, int]:
    tally = Counter(result.status for result in results)
    return {status: tally[status] for status in STATUSES}


def summary(results: list[CaseResult], n_cases: int, n_backends: int) -> str:
    """`N cases x M backends: ...`, then the closing line CI tools read: `N passed, N failed`."""
    c = counts(results)
    known = f", {c['xfail']} known failures" if c["xfail"] else ""
    fixed = f", {c['xpass']} known failures passed" if c["xpass"] else ""
    return (
        f"{n_cases} cases x {n_backends} backends: {c['crash']} crashed{known}{fixed}\n"
        f"{c['pass'] + c['xpass']} passed, {c['fail'] + c['crash']} failed, "
        f"{c['skip']} skipped"
    )


# ---------------------------------------------------------------- progress


def _line(result: CaseResult, done: int, total: int) -> str:
    width = len(str(total))
    line = (
        f"[{done:>{width}}/{total}] {result.status.upper():<5} {result.case.name} "
        f"on {result.backend} ({result.seconds:.2f} s)"
    )
    if result.status in ("fail", "crash"):
        line += f": {result.messages[0]}" if result.messages else ""
    return line


class Progress:
    """Shows each result as it comes: a rich progress bar on a terminal, else plain lines."""

    def __init__(self, total: int, stream=None):
        self.total, self.done = total, 0
        self.stream = stream or sys.stdout
        self._bar = None
        if self.stream.isatty():
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[latest]}"),
                transient=True,
            )
            self._task = self._bar.add_task("conformance", total=total, latest="")

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc_info)

    def __call__(self, result: CaseResult) -> None:
        self.done += 1
        if self._bar is None:
            print(_line(result, self.done, self.total), file=self.stream, flush=True)
            return
        if result.status in ("fail", "crash"):
            self._bar.console.print(_line(result, self.done, self.total), markup=False)
        latest = f"{result.case.name} on {result.backend}"
        self._bar.update(self._task, advance=1, latest=latest)


# ---------------------------------------------------------------- reports


def _record(result: CaseResult) -> dict:
    return {
        "case": result.case.name,
        "backend": result.backend,
        "rules": list(result.case.rules),
        "status": result.status,
        "messages": list(result.messages),
        "seconds": round(result.seconds, 4),
    }


def write_json(path: str | Path, results: list[CaseResult], backends: list[str]) -> None:
    rules = all_rules()
    cited = sorted({rule for result in results for rule in result.case.rules})
    report = {
        "torch": torch.__version__,
        "backends": backends,
        "counts": counts(results),
        "rules": {rule: rules[rule].link for rule in cited if rule in rules},
        "results": [_record(result) for result in results],
    }
    Path(path).write_text(json.dumps(report, indent=1) + "\n")


def write_junit(path: str | Path, results: list[CaseResult], backends: list[str]) -> None:
    """One test suite per backend, one test case per conformance case; a failure is a
    `failure`, a crash an `error`, a skip and a known failure `skipped`."""
    root = ElementTree.Element("testsuites", name="aotspec conformance")
    for backend in backends:
        mine = [result for result in results if result.backend == backend]
        c = counts(mine)
        suite = ElementTree.SubElement(
            root,
            "testsuite",
            name=f"aotspec conformance on {backend}",
            tests=str(len(mine)),
            failures=str(c["fail"]),
            errors=str(c["crash"]),
            skipped=str(c["skip"] + c["xfail"]),
            time=f"{sum(result.seconds for result in mine):.3f}",
        )
        for result in mine:
            chapter = result.case.name.split(".")[0]
            case = ElementTree.SubElement(
                suite,
                "testcase",
                classname=f"{backend}.{chapter}",
                name=result.case.name,
                time=f"{result.seconds:.3f}",
            )
            text = "\n".join(result.messages)
            rules = f"rules: {', '.join(result.case.rules)}"
            if result.status == "fail":
                ElementTree.SubElement(case, "failure", message=rules).text = text
            elif result.status == "crash":
                first = result.messages[0] if result.messages else "crashed"
                ElementTree.SubElement(case, "error", message=first).text = text
            elif result.status == "skip":
                ElementTree.SubElement(case, "skipped", message=text)
            elif result.status == "xfail":
                ElementTree.SubElement(case, "skipped", message=f"known failure: {text}")
            elif result.status == "xpass":
                ElementTree.SubElement(case, "system-out").text = text
    ElementTree.indent(root)
    ElementTree.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
