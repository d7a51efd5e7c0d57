"""Rule IDs tie the spec, the reference and the conformance cases together.

Fails when code, a spec chapter or a case cites a rule that no chapter defines, when a rule is
defined twice, when a defined rule has no conformance case, or when a rule is cited beside no
code: only in module docstrings, or nowhere in the library (`reference/`, `fast/`, `aotspec/`).
A rule that no single line implements, because it follows from others or from PyTorch itself,
is listed in EMERGENT with the reason.
"""

import ast
import re
from pathlib import Path

from aotspec.cli import main
from aotspec.conformance.cases import ALL_CASES
from aotspec.rules import all_rules

ROOT = Path(__file__).resolve().parent.parent
DEFINITION = re.compile(r"^r\[([a-z0-9][a-z0-9.\-]*)\]$", re.MULTILINE)
CITATION = re.compile(r"(?<![A-Za-z0-9_])r\[([a-z0-9][a-z0-9.\-]*)\]")
RULE_ARGUMENT = re.compile(r"""rule=["']([a-z0-9][a-z0-9.\-]*)["']""")
CITING_TREES = ["reference", "fast", "aotspec", "conformance"]
IMPLEMENTING_TREES = ["reference", "fast", "aotspec"]

#: Rules no line of the library implements by itself, and why.
EMERGENT = {
    "autograd.eager-errors": "capture traces the function with torch's own autograd on fake "
    "tensors, so the errors eager autograd raises are raised by torch itself while compiling",
}


def _chapters():
    return [path for path in sorted((ROOT / "specs").glob("*.md")) if path.name != "README.md"]


def defined_rules() -> dict[str, str]:
    rules: dict[str, str] = {}
    for path in _chapters():
        for rule in DEFINITION.findall(path.read_text()):
            assert rule not in rules, (
                f"rule {rule} is defined in both {rules[rule]} and {path.name}"
            )
            rules[rule] = path.name
    return rules


def cited_rules() -> dict[str, set[str]]:
    """rule -> the files that cite it (code comments, rule= arguments, chapters, cases)."""
    cited: dict[str, set[str]] = {}
    sources = [p for tree in CITING_TREES for p in (ROOT / tree).rglob("*.py")] + _chapters()
    for path in sources:
        text = DEFINITION.sub("", path.read_text())
        for rule in CITATION.findall(text) + RULE_ARGUMENT.findall(text):
            cited.setdefault(rule, set()).add(str(path.relative_to(ROOT)))
    for case in ALL_CASES:
        for rule in case.rules:
            cited.setdefault(rule, set()).add(f"case {case.name}")
    return cited


def test_the_spec_defines_rules():
    assert len(defined_rules()) >= 20


def test_every_cited_rule_is_defined():
    defined = defined_rules()
    undefined = {
        rule: sorted(where) for rule, where in cited_rules().items() if rule not in defined
    }
    assert not undefined, (
        f"cited but not defined in specs/*.md (define them, or fix the ID): {undefined}"
    )


def test_every_rule_has_a_conformance_case():
    covered = {rule for case in ALL_CASES for rule in case.rules}
    missing = sorted(set(defined_rules()) - covered)
    assert not missing, (
        f"rules without a conformance case (add one in conformance/cases/): {missing}"
    )


def test_the_checker_sees_citations_in_code():
    """Guards the regexes: a rule cited only in reference code must be found."""
    assert "reference/effects.py" in cited_rules()["aliasing.set.rebinds"]


def _without_module_docstring(text: str) -> str:
    module = ast.parse(text)
    if ast.get_docstring(module) is None:
        return text
    docstring = module.body[0]
    lines = text.splitlines(keepends=True)
    return "".join(lines[: docstring.lineno - 1] + lines[docstring.end_lineno :])


def rules_beside_code() -> dict[str, set[str]]:
    """rule -> the library files citing it outside their module docstring (a comment on the
    line that does the work, a `rule=` argument, or the docstring of the function doing it)."""
    cited: dict[str, set[str]] = {}
    for tree in IMPLEMENTING_TREES:
        for path in (ROOT / tree).rglob("*.py"):
            text = _without_module_docstring(path.read_text())
            for rule in CITATION.findall(text) + RULE_ARGUMENT.findall(text):
                cited.setdefault(rule, set()).add(str(path.relative_to(ROOT)))
    return cited


def test_every_rule_is_cited_beside_the_code_that_implements_it():
    beside = rules_beside_code()
    missing = sorted(
        rule for rule in defined_rules() if rule not in beside and rule not in EMERGENT
    )
    assert not missing, (
        f"rules cited beside no code (cite each on the line that does the work, "
        f"`# r[rule.id]`, or list it in EMERGENT with the reason): {missing}"
    )


def test_emergent_rules_are_defined_and_not_implemented_elsewhere():
    defined, beside = defined_rules(), rules_beside_code()
    assert set(EMERGENT) <= set(defined)
    assert not set(EMERGENT) & set(beside), (
        "an emergent rule is cited in code: drop it from EMERGENT"
    )


def test_the_checker_ignores_module_docstrings():
    text = '''"""A module implementing r[a.b]."""\n\nx = 1  # r[c.d]\n'''
    assert CITATION.findall(_without_module_docstring(text)) == ["c.d"]


def test_every_rule_opens_by_id_from_the_package():
    """`aotspec rule ID` reads the chapters the package ships: every rule, with its text."""
    shipped = all_rules()
    assert set(shipped) == set(defined_rules())
    assert all(rule.text and rule.chapter == defined_rules()[rule.id] for rule in shipped.values())


def test_the_rule_command_prints_a_rule_and_refuses_an_unknown_one(capsys):
    assert main(["rule", "boxed.steal.read-only"]) == 0
    assert "A stolen tensor may only be read" in capsys.readouterr().out
    assert main(["rule", "boxed.nonexistent"]) == 2
    assert "boxed.steal.read-only" in capsys.readouterr().err
