"""The spec's rules as the installed package holds them: an error's `[rule ID]` opened by ID.

The chapters ship as package data (`aotspec.specs`); a rule is its label line `r[ID]` and the
lines after it up to the next blank line (`specs/README.md`).
"""

from __future__ import annotations

import importlib.resources
import re

from attrs import frozen

_LABEL = re.compile(r"^r\[([a-z0-9][a-z0-9.\-]*)\]$")


@frozen
class Rule:
    """One rule of the specification: its ID, the chapter holding it, and its text."""

    id: str
    chapter: str
    text: str


def all_rules() -> dict[str, Rule]:
    """Every rule of the installed chapters, by ID."""
    rules: dict[str, Rule] = {}
    for chapter in sorted(importlib.resources.files("aotspec.specs").iterdir(), key=str):
        if not chapter.name.endswith(".md") or chapter.name == "README.md":
            continue
        rule_id, lines = None, []
        for line in chapter.read_text().splitlines() + [""]:
            label = _LABEL.match(line)
            if label:
                rule_id, lines = label.group(1), []
            elif rule_id is not None and line.strip():
                lines.append(line)
            elif rule_id is not None:
                rules[rule_id] = Rule(rule_id, chapter.name, "\n".join(lines))
                rule_id = None
    return rules


def rule(rule_id: str) -> Rule:
    """The rule `rule_id`; `KeyError` naming the closest IDs when there is none."""
    rules = all_rules()
    if rule_id in rules:
        return rules[rule_id]
    prefix = rule_id.split(".")[0]
    near = sorted(known for known in rules if known.startswith(prefix))
    raise KeyError(f"no rule {rule_id!r} in the specification; rules of {prefix!r}: {near}")
