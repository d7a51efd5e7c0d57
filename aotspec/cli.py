"""The `aotspec` command line: `aotspec conformance --backend NAME`, `aotspec rule ID`,
`aotspec explain FILE.py:FUNCTION`, `aotspec memory FILE.py:FUNCTION` (`aotspec/show.py`)."""

from __future__ import annotations

import argparse
import sys

from aotspec import show


def _conformance(options) -> int:
    from aotspec.conformance.backends import BACKENDS
    from aotspec.conformance.cases import ALL_CASES
    from aotspec.conformance.runner import failure_report, rule_table, run_cases

    backends = options.backend or list(BACKENDS)
    for name in backends:
        if name not in BACKENDS:
            print(
                f"unknown backend {name!r}; valid backends: {', '.join(BACKENDS)}", file=sys.stderr
            )
            return 2
    cases = [case for case in ALL_CASES if not options.k or options.k in case.name]
    results = run_cases(cases, backends)
    print(rule_table(results, backends))
    print("(* : some memory expectations are not observable on that backend: it keeps no ledger)")
    report = failure_report(results)
    counts = {
        status: sum(r.status == status for r in results) for status in ("pass", "fail", "skip")
    }
    print()
    if report:
        print(report)
    print(
        f"{len(cases)} cases x {len(backends)} backends: {counts['pass']} passed, "
        f"{counts['fail']} failed, {counts['skip']} skipped"
    )
    return 1 if counts["fail"] else 0


def _rule(options) -> int:
    from aotspec.rules import rule

    try:
        found = rule(options.id)
    except KeyError as error:
        print(error.args[0], file=sys.stderr)
        return 2
    print(f"r[{found.id}]  (specs/{found.chapter})\n{found.text}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="aotspec", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    conformance = commands.add_parser(
        "conformance", help="run the conformance cases and print a table per rule"
    )
    conformance.add_argument(
        "--backend", action="append", help="backend to run (repeatable; default: all)"
    )
    conformance.add_argument("-k", help="only cases whose name contains this text")
    rule = commands.add_parser("rule", help="print a rule of the spec, as an error names it")
    rule.add_argument("id", help="the rule's ID, e.g. resize.compiled.zero-only")
    show.register(commands)
    options = parser.parse_args(argv)
    if hasattr(options, "run"):
        return options.run(options)
    if options.command == "conformance":
        return _conformance(options)
    return _rule(options)


if __name__ == "__main__":
    sys.exit(main())
