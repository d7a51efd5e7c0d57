"""The `aotspec` command line.

- `aotspec conformance --backend NAME`: the conformance cases on backends, a table per rule;
- `aotspec fuzz --backend NAME`: differential fuzzing, repros of what fails;
- `aotspec report --backend NAME`: a compatibility report (docs/compat/);
- `aotspec opdb --backend NAME`: PyTorch's op database (OpInfo), eager against a backend, a
  table of ops per status and of refusals per rule (`aotspec/opdb.py`);
- `aotspec rule ID`: a rule of the spec, as an error names it;
- `aotspec explain FILE.py:FUNCTION`, `aotspec memory FILE.py:FUNCTION`: a plan and its memory
  timelines (`aotspec/program_commands.py`).

Backends: `fast`, `reference`, `reference-eager`, `torch-eager`, `torch.compile:NAME` (any
registered Dynamo backend) and `MODULE:CALLABLE` (a Dynamo backend callable of one's own).
Exit status: 0 when nothing failed or crashed, 1 when something did, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys

from aotspec import program_commands


def _selected(cases, names: list[str] | None, rules: list[str] | None) -> list:
    """Cases whose name contains one of `names`, and that name a rule of `rules` (a rule, or
    a prefix of rules: `resize` selects every resize.* rule)."""

    def wanted_rule(rule: str) -> bool:
        return any(rule == r or rule.startswith(r.rstrip(".") + ".") for r in rules)

    return [
        case
        for case in cases
        if (not names or any(name in case.name for name in names))
        and (not rules or any(wanted_rule(rule) for rule in case.rules))
    ]


def _conformance(options) -> int:
    from aotspec.conformance.backends import BACKENDS, resolve
    from aotspec.conformance.cases import ALL_CASES
    from aotspec.conformance.reports import Progress, read_xfail, summary, write_json, write_junit
    from aotspec.conformance.runner import (
        FAILING,
        apply_xfail,
        failure_report,
        rule_table,
        run_cases,
    )

    backends = options.backend or list(BACKENDS)
    try:
        for name in backends:
            resolve(name)
        known, warnings = set(), []
        if options.xfail:
            known, warnings = read_xfail(options.xfail, {case.name for case in ALL_CASES})
    except (ValueError, OSError) as error:
        print(error, file=sys.stderr)
        return 2
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    cases = _selected(ALL_CASES, options.k, options.rule)
    if not cases:
        print("no conformance case matches the selection (-k, --rule)", file=sys.stderr)
        return 2
    with Progress(len(cases) * len(backends)) as progress:
        results = run_cases(
            cases,
            backends,
            jobs=options.jobs,
            timeout=options.timeout,
            on_result=progress,
            device=options.device,
        )
    results = apply_xfail(results, known)
    print(rule_table(results, backends))
    print("(* : some memory expectations are not observable on that backend: it keeps no ledger)")
    report = failure_report(results)
    if report:
        print()
        print(report)
    if options.json:
        write_json(options.json, results, backends)
    if options.junit:
        write_junit(options.junit, results, backends)
    print()
    print(summary(results, len(cases), len(backends)))
    return 1 if any(result.status in FAILING for result in results) else 0


def _seconds(text: str) -> float:
    """`60s`, `2m`, `1h` or a number of seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text[-1:] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (say 60s, 2m or 1h)") from None


def _fuzz(options) -> int:
    from pathlib import Path

    from aotspec.conformance.backends import resolve
    from aotspec.fuzz.campaign import Campaign, Shard

    if options.budget is None and options.programs is None:
        options.budget = 60.0
    try:
        if options.backend == "reference-eager":
            raise ValueError("aotspec fuzz judges compiled backends; reference-eager is none")
        resolve(options.backend)
        shard = Shard.parse(options.shard)
        campaign = Campaign(
            options.backend,
            Path(options.out),
            seed=options.seed,
            shard=shard,
            jobs=options.jobs,
            timeout=options.timeout,
            on_result=_fuzz_line if options.verbose else None,
        )
        campaign.start(resume=options.resume)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    campaign.run(programs=options.programs, budget=options.budget)
    ran = sum(campaign.counts.values())
    finding = campaign.finding_seconds
    rate = campaign.judged / finding if finding else 0.0
    print(
        f"{options.backend}: {ran} programs judged in {campaign.directory} "
        f"({campaign.judged} this run in {finding:.0f} s, {rate:.1f} programs/s; "
        f"{campaign.seconds - finding:.0f} s shrinking); "
        + ", ".join(f"{n} {status}" for status, n in sorted(campaign.counts.items()))
    )
    for failure in campaign.failures.values():
        hits = campaign.failing.get(failure.signature, 1)
        print(f"FAIL {failure.signature} ({hits} programs): {campaign.repro_path(failure)}")
        print(f"    {failure.found[0]}")
    invalid = campaign.counts.get("invalid", 0)
    if invalid:
        print(f"warning: eager rejected {invalid} generated programs (a generator bug)")
    return 1 if campaign.failures else 0


def _fuzz_line(index: int, kind: str, verdict) -> None:
    suffix = f": {verdict.signature}" if verdict.signature else ""
    print(f"program {index} ({kind}): {verdict.status}{suffix}", flush=True)


def _fuzz_parser(commands) -> None:
    fuzz = commands.add_parser(
        "fuzz",
        help="differential fuzzing of a backend against eager PyTorch and the reference",
        description="Judge random valid programs on a backend; write each distinct failure, "
        "shrunk, as a standalone repro_*.py. Exit 0 only when none failed.",
    )
    fuzz.add_argument("--backend", default="fast", help=BACKEND_HELP + " (default: fast)")
    fuzz.add_argument("--budget", type=_seconds, help="time to spend: 60s, 2m, 1h (default 60s)")
    fuzz.add_argument("--programs", type=int, help="programs to judge (in this shard)")
    fuzz.add_argument("--seed", type=int, default=0, help="the campaign's seed (default 0)")
    fuzz.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    fuzz.add_argument(
        "--shard", default="1/1", help="I/N: this machine's share of the campaign (default 1/1)"
    )
    fuzz.add_argument(
        "--out", default="aotspec-fuzz", help="the campaign's directory (default aotspec-fuzz)"
    )
    fuzz.add_argument("--resume", action="store_true", help="go on with the campaign in --out")
    fuzz.add_argument(
        "--timeout", type=float, default=120.0, help="seconds one program may run (default 120)"
    )
    fuzz.add_argument("-v", "--verbose", action="store_true", help="a line per program")


def _report(options) -> int:
    from pathlib import Path

    import torch

    from aotspec.compat import write_report
    from aotspec.conformance.backends import resolve

    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    out = Path(options.out or f"docs/compat/torch-{version}.md")
    try:
        for name in options.backend:
            resolve(name)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    write_report(options.backend, out, jobs=options.jobs, programs=options.programs)
    print(f"wrote {out}, {out.with_suffix('.xfail')} and the repros in {out.with_suffix('')}/")
    return 0


def _report_parser(commands) -> None:
    report = commands.add_parser(
        "report",
        help="write a compatibility report: conformance and a fixed fuzz campaign per backend",
    )
    report.add_argument("--backend", action="append", required=True, help=BACKEND_HELP)
    report.add_argument("--out", help="the report (default docs/compat/torch-MAJOR.MINOR.md)")
    report.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    report.add_argument(
        "--programs", type=int, default=30, help="fuzz programs per backend (default 30)"
    )


def _opdb(options) -> int:
    import json
    import warnings

    import attrs
    from rich.console import Console

    from aotspec import opdb

    expectations = None
    if options.expect:
        expectations = [line for path in options.expect for line in opdb.read_expectations(path)]
    ops = opdb.database(options.dtype, options.op)
    if options.autograd_only:
        ops = [op for op in ops if op.supports_autograd]
    if options.spread:
        ops = opdb.spread(ops, options.spread)
    backends = options.backend or list(opdb.BACKENDS)
    disagreements = []

    def progress(result: opdb.OpResult) -> None:
        line = f"{result.status.upper():<7} {result.op} on {result.backend}"
        line += f" ({result.seconds:.1f} s)" + (f": {result.reason}" if result.reason else "")
        if options.verbose or result.status in ("wrong", "crash"):
            print(line, flush=True)
        if expectations is not None:
            disagreement = opdb.judge(result, expectations)
            if disagreement:
                disagreements.append(disagreement)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ops of the database warn of deprecations by design
        results = opdb.run(
            ops, backends, options.dtype, options.samples, options.timeout, progress
        )
    console = Console() if sys.stdout.isatty() else Console(width=160)  # CI logs: wide enough
    for table in opdb.tables(results, backends):
        console.print(table)
    if options.json:
        with open(options.json, "w") as out:
            json.dump([attrs.asdict(result) for result in results], out, indent=1)
    if expectations is not None:
        for disagreement in disagreements:
            print(disagreement)
        print(f"{len(results) - len(disagreements)} passed, {len(disagreements)} failed")
        return 1 if disagreements else 0
    return 1 if any(result.status in ("wrong", "crash") for result in results) else 0


def _opdb_parser(commands) -> None:
    from aotspec.opdb import BACKENDS, DTYPES

    opdb = commands.add_parser(
        "opdb",
        help="PyTorch's op database (OpInfo): eager against a backend, op by op",
        description="Run every OpInfo of torch's op_db that supports --dtype on CPU eagerly and "
        "compiled, and compare outputs, inputs after the call, gradients and a second call. "
        "Exit 0 when no op is wrong or crashed (with --expect: when every op is as listed).",
    )
    opdb.add_argument(
        "--backend",
        action="append",
        help=f"backend (repeatable): {', '.join(BACKENDS)}, dynamo:reference, or "
        "torch.compile:NAME for any registered Dynamo backend (default: aotspec's three)",
    )
    opdb.add_argument("--dtype", default="float32", choices=list(DTYPES), help="(default float32)")
    opdb.add_argument(
        "--samples", type=int, default=2, help="sample inputs per op, from the first (default 2)"
    )
    opdb.add_argument(
        "--op", action="append", help="only this op (repeatable; `linalg.` for a prefix)"
    )
    opdb.add_argument("--spread", type=int, help="only this many ops, a deterministic spread")
    opdb.add_argument(
        "--autograd-only",
        action="store_true",
        help="only ops that support autograd (PyTorch's own exhaustive test runs those)",
    )
    opdb.add_argument(
        "--timeout", type=float, default=120.0, help="seconds one op may run (default 120)"
    )
    opdb.add_argument(
        "--expect",
        metavar="FILE",
        action="append",
        help="ops listed as refused or known wrong (repeatable: tests/op_database_refusals.txt, "
        "tests/op_database_known_wrong.txt): judge every op against the lists",
    )
    opdb.add_argument("--json", metavar="FILE", help="write every result as JSON")
    opdb.add_argument("-v", "--verbose", action="store_true", help="a line per op")
    opdb.set_defaults(run=_opdb)


def _rule(options) -> int:
    from aotspec.rules import rule

    try:
        found = rule(options.id)
    except KeyError as error:
        print(error.args[0], file=sys.stderr)
        return 2
    print(f"r[{found.id}]  ({found.link}, line {found.line})\n{found.text}")
    return 0


BACKEND_HELP = (
    "backend to judge (repeatable): fast, reference, reference-eager, torch-eager, "
    "torch.compile:NAME (a registered Dynamo backend: aot_eager, inductor, ...) or "
    "MODULE:CALLABLE (your Dynamo backend callable)"
)


def _conformance_parser(commands) -> None:
    conformance = commands.add_parser(
        "conformance",
        help="run the conformance cases and print a table per rule",
        description="Run the conformance cases on backends; exit 0 only when none fails.",
    )
    conformance.add_argument(
        "--backend", action="append", help=BACKEND_HELP + " (default: aotspec's and eager)"
    )
    conformance.add_argument(
        "-k", action="append", help="only cases whose name contains this text (repeatable)"
    )
    conformance.add_argument(
        "--rule",
        action="append",
        help="only cases naming this rule, or a rule under it: `resize` (repeatable)",
    )
    conformance.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="worker processes that run the cases (default 1; 0: in this process, no isolation)",
    )
    conformance.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds a case may run before its worker is killed (default 300)",
    )
    conformance.add_argument(
        "--xfail",
        metavar="FILE",
        help="known failures, one `CASE` or `BACKEND CASE` a line: they do not fail the run",
    )
    conformance.add_argument(
        "--device",
        default="cpu",
        help="where the cases' tensors live: cpu (default) or cuda (the default device of each "
        "case's setup, call and backward)",
    )
    conformance.add_argument("--json", metavar="FILE", help="write every result as JSON")
    conformance.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="aotspec", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    _conformance_parser(commands)
    _fuzz_parser(commands)
    _report_parser(commands)
    _opdb_parser(commands)
    rule = commands.add_parser("rule", help="print a rule of the spec, as an error names it")
    rule.add_argument("id", help="the rule's ID, e.g. resize.compiled.zero-only")
    program_commands.register(commands)
    options = parser.parse_args(argv)
    if hasattr(options, "run"):
        return options.run(options)
    if options.command == "conformance":
        if options.jobs < 0:
            parser.error("--jobs must be 0 or more")
        return _conformance(options)
    if options.command == "fuzz":
        if options.jobs < 1:
            parser.error("--jobs must be 1 or more")
        return _fuzz(options)
    if options.command == "report":
        return _report(options)
    return _rule(options)


if __name__ == "__main__":
    sys.exit(main())
