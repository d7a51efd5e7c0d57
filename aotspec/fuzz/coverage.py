"""What the differential tests covered in one run, as a table where a gap shows as a zero.

Each differential test notes, per example, the items its program reached (`note`): the ops of
its body, program features (zero-byte inputs, aliasing, special values, dead values, stolen
lists, hooks, ...), the dtypes of its caller tensors, and what the run did (a backward, fused
groups and Triton kernel launches). At the end of a pytest session, tests/conftest.py prints
`table()`: a row per item the generators can reach, a column per test, the number of examples
that reached it; a row of zeros is something no test exercised in this run.

Counting walks the program's data only: it costs nothing next to running the program.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable

from rich.table import Table

from .strategies.program import OPS, Program
from .strategies.stealing import Stealing

#: Test name -> item -> examples that reached it.
COUNTS: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)

DTYPES = ["float32", "float16", "bfloat16", "int32", "int64", "bool"]

#: Program features, as `features` names them.
FEATURES = [
    "zero-byte input",
    "caller-held alias",
    "arguments sharing a storage",
    "grad arguments sharing a storage",
    "one object passed twice",
    "non-leaf input with grad",
    "non-leaf input, graph freed",
    "detached alias of a leaf",
    "inf or nan in an input",
    "inf or nan constant",
    "clamp with min > max",
    "dead value",
    "seeded draw",
    "called under no_grad",
    "backward twice (retain_graph)",
    "stolen list",
    "stolen tensors require grad",
    "saved-tensor hooks",
]

#: What a run did, noted by the test itself.
RUN_ITEMS = ["backward ran", "fused groups", "kernel launches"]


def note(test: str, items: Iterable[str], count: int = 1) -> None:
    """`test` reached each of `items` (in one more example, or `count` times)."""
    counter = COUNTS[test]
    for item in items:
        counter[item] += count


def program_items(case) -> list[str]:
    """The items of a Program, Stealing or Hooked case: ops, features, dtypes."""
    program = getattr(case, "program", case)
    items = [f"op {op}" for op in sorted({instr.op for instr in program.body})]
    items += [f"feature {name}" for name in features(case)]
    items += [f"dtype {dtype}" for dtype in sorted({b.dtype for b in program.setup.bases})]
    return items


def features(case) -> list[str]:
    program: Program = getattr(case, "program", case)
    found = _setup_features(program.setup) | _body_features(program)
    if isinstance(case, Stealing):
        found.add("stolen list")
        if case.requires_grad:
            found.add("stolen tensors require grad")
    if hasattr(case, "hooks_filter"):
        found.add("saved-tensor hooks")
    return sorted(found)


def _setup_features(setup) -> set[str]:
    """What the inputs of a program are like: aliases, sharing, histories, values."""
    found = set()
    if any(base.zeroed for base in setup.bases):
        found.add("zero-byte input")
    if any(view.name not in setup.args for view in setup.views):
        found.add("caller-held alias")
    base_of = {view.name: view.base for view in setup.views}
    passed = list(dict.fromkeys(setup.args))
    if len({base_of.get(name, name) for name in passed}) < len(passed):
        found.add("arguments sharing a storage")
    requires_grad = {base.name for base in setup.bases if base.requires_grad}
    detached = {view.name for view in setup.views if view.detached}
    with_grad = [
        base_of.get(name, name)
        for name in passed
        if base_of.get(name, name) in requires_grad and name not in detached
    ]
    if len(set(with_grad)) < len(with_grad):
        found.add("grad arguments sharing a storage")
    if len(passed) < len(setup.args):
        found.add("one object passed twice")
    if any(base.non_leaf and not base.history_freed for base in setup.bases):
        found.add("non-leaf input with grad")
    if any(base.history_freed for base in setup.bases):
        found.add("non-leaf input, graph freed")
    if any(view.detached and view.name in setup.args for view in setup.views):
        found.add("detached alias of a leaf")
    if any(_non_finite(v) for base in setup.bases for v in base.values):
        found.add("inf or nan in an input")
    return found


def _body_features(program: Program) -> set[str]:
    """What a program's body and call are like: constants, ops, grad mode, backwards."""
    found = set()
    constants = [a for instr in program.body for a in _flat(instr.args)]
    if any(_non_finite(a) for a in constants):
        found.add("inf or nan constant")
    for instr in program.body:
        if instr.op in ("clamp", "clamp_") and _inverted(instr.args[1:3]):
            found.add("clamp with min > max")
        if instr.op == "rand_like":
            found.add("dead value")
        if instr.op == "seeded_rand_like":
            found.add("seeded draw")
    if not program.grad_enabled:
        found.add("called under no_grad")
    if program.retain_graph:
        found.add("backward twice (retain_graph)")
    return found


def _flat(values) -> list:
    flat = []
    for value in values:
        flat += _flat(value) if isinstance(value, (list, tuple)) else [value]
    return flat


def _non_finite(value) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _inverted(bounds) -> bool:
    low, high = (list(bounds) + [None, None])[:2]
    return low is not None and high is not None and low > high


def rows() -> list[str]:
    """Every item the generators can reach, then any other item a test noted."""
    known = [f"op {op}" for op in OPS] + [f"feature {name}" for name in FEATURES]
    known += [f"dtype {dtype}" for dtype in DTYPES] + RUN_ITEMS
    noted = {item for counter in COUNTS.values() for item in counter}
    return known + sorted(noted - set(known))


def table() -> Table:
    tests = sorted(COUNTS)
    grid = Table(title="what the differential tests covered (examples per item; 0: a gap)")
    grid.add_column("item")
    for test in tests:
        grid.add_column(test.removeprefix("test_"), justify="right", overflow="fold")
    for item in rows():
        counts = [COUNTS[test][item] for test in tests]
        style = "bold red" if not any(counts) else None
        grid.add_row(item, *(str(c) for c in counts), style=style)
    return grid
