"""`aotspec report`: a compatibility report of backends against the specification.

It runs the conformance suite and a fixed fuzz campaign (the first programs of seed 0, the
same for every backend) on each backend, in worker processes, and writes:
- `OUT.md`: a summary, a table per chapter with a row per rule (passed/ran, FAIL, CRASH per
  backend, each rule linked to its section of the spec), every conformance failure with its
  messages and the command that runs it again, and every distinct fuzz failure with its repro
  and its program;
- `OUT/repro_*.py`: those repros, standalone (each fails alone on its backend);
- `OUT.xfail`: the conformance failures as a known-failures file (`aotspec conformance
  --xfail`), so that a CI can hold a backend to what it does today.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import sysconfig
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch
from attrs import evolve

from aotspec.conformance.cases import ALL_CASES
from aotspec.conformance.runner import FAILING, CaseResult, cell, run_cases
from aotspec.fuzz.campaign import Campaign, repro_source
from aotspec.fuzz.judge import from_choices, subject_source
from aotspec.rules import all_rules

#: The fixed fuzz campaign of a report: the first programs of seed 0, the same for every
#: backend and every machine, each judged whatever it takes (up to the per-program timeout);
#: then at most this many seconds per backend to shrink what failed.
FUZZ_PROGRAMS = 30
SHRINK_SECONDS = 120.0


def write_report(
    backends: list[str], out: Path, *, jobs: int = 2, programs: int = FUZZ_PROGRAMS
) -> tuple[list[CaseResult], dict[str, Campaign]]:
    """Run everything and write `out` (`.md`), its repros folder and its `.xfail` file."""
    results = run_cases(ALL_CASES, backends, jobs=jobs, timeout=300.0)
    repro_dir = out.with_suffix("")
    if repro_dir.exists():
        shutil.rmtree(repro_dir)
    repro_dir.mkdir(parents=True)
    campaigns, repros = {}, {}
    for backend in backends:
        with tempfile.TemporaryDirectory(prefix="aotspec-report-") as scratch:
            campaign = Campaign(backend, Path(scratch), seed=0, jobs=jobs)
            campaign.start(resume=False)
            campaign.run(programs=programs, budget=None, shrinking=SHRINK_SECONDS)
            for failure in campaign.failures.values():
                slug = re.sub(r"[^a-z0-9]+", "_", backend.lower())
                target = repro_dir / f"{campaign.repro_path(failure).stem}__{slug}.py"
                # as the campaign wrote it, without this machine's paths
                found = tuple(_clean(line) for line in failure.found)
                subject = from_choices(failure.kind, failure.choices)
                text = repro_source(subject, evolve(failure, found=found), backend, 0, target.name)
                target.write_text(text)
                repros[backend, failure.signature] = target
            campaigns[backend] = campaign
    out.write_text(_markdown(results, campaigns, repros, backends, out, programs))
    out.with_suffix(".xfail").write_text(_xfail(results, out))
    return results, campaigns


def _xfail(results: list[CaseResult], out: Path) -> str:
    """The failures as a known-failures file; a line that the file already has keeps its
    comment (someone may have written what PyTorch does wrong there), unless the status it
    begins with changed."""
    path = out.with_suffix(".xfail")
    said = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        entry, _, comment = line.partition("#")
        if len(entry.split()) == 2:
            said[tuple(entry.split())] = comment.strip()
    lines = [
        f"# Known failures of torch {torch.__version__} (written by aotspec report with "
        f"{out.name}): `BACKEND CASE  # what happened`.",
    ]
    for result in results:
        if result.status not in FAILING:
            continue
        comment = said.get((result.backend, result.case.name), "")
        if not comment.startswith(f"{result.status}:"):
            first = result.messages[0] if result.messages else ""
            comment = f"{result.status}: {_clean(first)[:100]}"
        lines.append(f"{result.backend} {result.case.name}  # {comment}")
    return "\n".join(lines) + "\n"


def _markdown(results, campaigns, repros: dict, backends, out: Path, programs: int) -> str:
    """The report; `repros` maps (backend, signature) to the repro written for it."""
    rules = all_rules()
    root = Path(os.path.relpath(Path.cwd(), out.parent.resolve())).as_posix()

    def linked(rule: str) -> str:
        return f"[{rule}]({root}/{rules[rule].link})" if rule in rules else rule

    lines = _header(backends, out, programs)
    lines += _summary(results, campaigns, backends)
    lines += _per_rule(results, backends, rules, linked)
    lines += _conformance_failures(results, root, linked)
    lines += _fuzzing_failures(campaigns, repros, backends, out)
    return "\n".join(lines).rstrip() + "\n"


def _header(backends, out: Path, programs: int) -> list[str]:
    xfail = out.with_suffix(".xfail").name
    return [
        f"# torch {torch.__version__} against the aotspec specification",
        "",
        "Generated by `aotspec report "
        + " ".join(f"--backend {b}" for b in backends)
        + "` on CPU; do not edit by hand.",
        "",
        f"- Conformance: the {len(ALL_CASES)} cases of `conformance/cases/`, each in a worker "
        "process (a crash is a result). One case again: `aotspec conformance --backend BACKEND "
        "-k CASE`.",
        f"- Fuzzing: the first {programs} programs of seed 0, the same for every backend "
        f"(`aotspec fuzz --backend BACKEND --seed 0 --programs {programs}`), judged against "
        "eager PyTorch; each distinct failure shrunk and written as a repro that fails alone "
        "and passes when given `torch-eager` as its argument.",
        f"- Known failures, for `aotspec conformance --xfail`: [{xfail}]({xfail}).",
        "",
    ]


def _summary(results, campaigns, backends) -> list[str]:
    lines = [
        "## Summary",
        "",
        "| backend | conformance pass | fail | crash | skip | fuzz programs | fail | "
        "distinct failures |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for backend in backends:
        mine = [r for r in results if r.backend == backend]
        count = {s: sum(r.status == s for r in mine) for s in ("pass", "fail", "crash", "skip")}
        campaign = campaigns[backend]
        lines.append(
            f"| `{backend}` | {count['pass']} | {count['fail']} | {count['crash']} | "
            f"{count['skip']} | {sum(campaign.counts.values())} | "
            f"{campaign.counts.get('fail', 0)} | {len(campaign.failures)} |"
        )
    return lines


def _per_rule(results, backends, rules: dict, linked: Callable[[str], str]) -> list[str]:
    lines = ["", "## Conformance, per rule", ""]
    lines.append(
        "A cell is passed/ran; FAIL or CRASH when a case of the rule did; skip when none ran."
    )
    by_rule: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        for rule in result.case.rules:
            by_rule[rule][result.backend].append(result)
    chapters: dict[str, list[str]] = defaultdict(list)
    for rule in sorted(by_rule):
        chapter = rules[rule].chapter if rule in rules else "(not in the spec)"
        chapters[chapter].append(rule)
    for chapter, chapter_rules in sorted(chapters.items()):
        lines += ["", f"### {chapter}", ""]
        lines.append("| rule | " + " | ".join(f"`{b}`" for b in backends) + " |")
        lines.append("| --- |" + " --- |" * len(backends))
        for rule in chapter_rules:
            cells = [cell(by_rule[rule][backend]) for backend in backends]
            lines.append(f"| {linked(rule)} | " + " | ".join(cells) + " |")
    return lines


def _conformance_failures(results, root: str, linked: Callable[[str], str]) -> list[str]:
    lines = ["", "## Conformance failures", ""]
    failing: dict[str, list[CaseResult]] = defaultdict(list)
    for result in results:
        if result.status in FAILING:
            failing[result.case.name].append(result)
    if not failing:
        lines.append("None.")
    for name, failed in failing.items():
        case = failed[0].case
        again = " ".join(f"--backend {r.backend}" for r in failed)
        lines.append(
            f"- **{_case_link(case, root)}** (rules {', '.join(map(linked, case.rules))}): "
            f"`aotspec conformance {again} -k {name}`"
        )
        said: dict[tuple[str, ...], str] = {}
        for result in failed:
            messages = tuple(_clean(m) for m in result.messages[:6])
            if messages in said:
                lines.append(f"  - `{result.backend}`, {result.status}: as `{said[messages]}`")
                continue
            said[messages] = result.backend
            lines.append(f"  - `{result.backend}`, {result.status}:")
            lines += [f"    `{message}`" for message in messages if message]
    return lines


def _fuzzing_failures(campaigns, repros: dict, backends, out: Path) -> list[str]:
    lines = ["", "## Fuzzing: distinct failures", ""]
    for backend in backends:
        campaign = campaigns[backend]
        lines += [f"### `{backend}`", ""]
        counts = ", ".join(f"{n} {s}" for s, n in sorted(campaign.counts.items()))
        lines += [f"{sum(campaign.counts.values())} programs: {counts}.", ""]
        for failure in campaign.failures.values():
            path = repros[backend, failure.signature]
            link = f"{out.with_suffix('').name}/{path.name}"
            shown = Path(os.path.relpath(path.resolve(), Path.cwd())).as_posix()
            lines.append(
                f"- **{failure.signature}**, in {_programs(campaign, failure.signature)} "
                f"(the first: program {failure.index}, {failure.kind}"
                f"{', shrunk' if failure.shrunk else ''}): [{path.name}]({link}), "
                f"which fails alone: `python {shown}`"
            )
            lines += [f"  `{_clean(line)[:300]}`" for line in failure.found[:4]]
            program = subject_source(from_choices(failure.kind, failure.choices)).strip()
            lines += ["", "  <details><summary>the program</summary>", "", "  ```python"]
            lines += [f"  {line}".rstrip() for line in program.splitlines()]
            lines += ["  ```", "", "  </details>", ""]
        lines.append("")
    return lines


def _programs(campaign: Campaign, signature: str) -> str:
    count = campaign.failing.get(signature, 1)
    return f"{count} program{'s' if count > 1 else ''}"


def _case_link(case, root: str) -> str:
    """The case's name, linked to its program's source when that is in this checkout."""
    try:
        path = Path(inspect.getsourcefile(case.program)).resolve()
        line = inspect.getsourcelines(case.program)[1]
    except (OSError, TypeError):
        return case.name
    if not path.is_relative_to(Path.cwd()):
        return case.name
    return f"[{case.name}]({root}/{path.relative_to(Path.cwd()).as_posix()}#L{line})"


def _clean(message: str) -> str:
    """A message on one line, without this machine's paths (the checkout, the installed
    packages, Python's own library, the compile caches)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    text = " ".join(message.split())
    for path, name in [
        (sysconfig.get_paths()["purelib"], ""),
        (sysconfig.get_paths()["stdlib"], "<python>"),
        (cache_dir(), "<inductor cache>"),
        (str(Path.cwd()), ""),
        (tempfile.gettempdir(), "<tmp>"),
    ]:
        text = text.replace(path + "/", name + "/" if name else "")
    # and not what differs from run to run: ports, the numbers of generated code's names
    text = re.sub(r"\[127\.0\.0\.1\]:\d+", "[127.0.0.1]:PORT", text)
    return re.sub(r"<eval_with_key>\.\d+", "<eval_with_key>", text)[:400]
