"""The op table in `specs/ops.md` lists exactly the entries of the reference's OP_TABLE (and the
ops it takes once PyTorch defines them, DEFINED_ON_IMPORT).

When an op is added to (or removed from) `reference/ops.py`, the failure message gives the rows
to add to (or remove from) the table; `render_op_table()` gives the whole table.
"""

from __future__ import annotations

import re
from pathlib import Path

from aotspec.reference.optable import DEFINED_ON_IMPORT, OP_TABLE

SPEC = Path(__file__).resolve().parent.parent / "specs" / "ops.md"
HEADER = "| op | kind | effect |"
ROW = re.compile(r"^\| `(?P<op>[^`]+)` \| (?P<kind>[^|]+?) \| (?P<effect>[^|]+?) \|$")


def table_rows() -> list[tuple[str, str, str]]:
    """(op, kind, effect) of every OP_TABLE entry and every op defined on import, sorted by
    name."""
    rows = [(entry.name, entry.kind.value, entry.effect) for entry in OP_TABLE.values()]
    rows += [(name, kind.value, effect) for name, (kind, _, effect) in DEFINED_ON_IMPORT.items()]
    return sorted(rows)


def _format(row: tuple[str, str, str]) -> str:
    op, kind, effect = row
    return f"| `{op}` | {kind} | {effect} |"


def render_op_table() -> str:
    """The table as `specs/ops.md` must hold it."""
    return "\n".join([HEADER, "| --- | --- | --- |", *map(_format, table_rows())])


def documented_rows() -> list[tuple[str, str, str]]:
    """The rows of the table under HEADER in specs/ops.md, in order."""
    lines = SPEC.read_text().splitlines()
    assert HEADER in lines, f"specs/ops.md has no table headed {HEADER!r}"
    rows = []
    for line in lines[lines.index(HEADER) + 2 :]:
        if not line.startswith("|"):
            break
        match = ROW.match(line)
        assert match, f"specs/ops.md: not a table row: {line!r}"
        rows.append((match["op"], match["kind"], match["effect"]))
    return rows


def test_ops_md_lists_every_op_table_entry():
    documented = set(documented_rows())
    expected = set(table_rows())
    add = sorted(expected - documented)
    remove = sorted(documented - expected)
    message = "specs/ops.md's op table is out of date (render_op_table() gives all of it)."
    message += "".join(f"\nadd:    {_format(row)}" for row in add)
    message += "".join(f"\nremove: {_format(row)}" for row in remove)
    assert ([], []) == (add, remove), message


def test_ops_md_rows_are_sorted_by_op_name():
    rows = documented_rows()
    assert sorted(set(rows)) == rows, "sort the op table's rows by op name, one row per op"
