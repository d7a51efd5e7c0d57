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
    #: The heading of the section holding the rule, and the line of its label (1-based).
    section: str = ""
    line: int = 0

    @property
    def anchor(self) -> str:
        """The section's anchor as markdown renderers make it: lowercase, punctuation dropped
        but `-` and `_`, spaces as `-`."""
        kept = "".join(c for c in self.section.lower() if c.isalnum() or c in " -_")
        return kept.replace(" ", "-")

    @property
    def link(self) -> str:
        """Where the rule is, relative to the repository root: `specs/CHAPTER.md#SECTION`."""
        return f"specs/{self.chapter}" + (f"#{self.anchor}" if self.section else "")


def all_rules() -> dict[str, Rule]:
    """Every rule of the installed chapters, by ID."""
    rules: dict[str, Rule] = {}
    for chapter in sorted(importlib.resources.files("aotspec.specs").iterdir(), key=str):
        if not chapter.name.endswith(".md") or chapter.name == "README.md":
            continue
        rule_id, lines, section, start = None, [], "", 0
        for number, line in enumerate(chapter.read_text().splitlines() + [""], start=1):
            label = _LABEL.match(line)
            if line.startswith("#"):
                section = line.lstrip("#").strip()
            if label:
                rule_id, lines, start = label.group(1), [], number
            elif rule_id is not None and line.strip():
                lines.append(line)
            elif rule_id is not None:
                rules[rule_id] = Rule(rule_id, chapter.name, "\n".join(lines), section, start)
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
