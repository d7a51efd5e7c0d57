"""Differential tests: random valid programs must behave the same on eager PyTorch and on the
reference eager interpreter (docs/design.md section 7).

Eager PyTorch is the oracle for values, mutations and aliasing. Each program runs once on eager
and once through `aotspec.reference.run`, each time on freshly built caller tensors, and every
observable is compared (docs/design.md section 5): outputs, every caller tensor after the call (the
arguments and the aliases the caller kept), their storage sizes, and which of them share storage
(strides that address no element are not observables: `r[memory.layout.unaddressed-strides]`).
A failure prints the program as Python and hypothesis's `@reproduce_failure` blob, and writes a
standalone `repros/repro_<hash>.py`.

Run: `.venv/bin/python -m pytest tests/test_differential_eager.py`
(HYPOTHESIS_PROFILE=ci|dev|nightly; see tests/conftest.py).
"""

from __future__ import annotations

import torch
from hypothesis import event, given, settings

from aotspec.conformance.observe import Observation, differences, observe, world_of
from aotspec.fuzz import coverage
from aotspec.reference import run

from repro import is_final_run, write_repro
from strategies.mutations import programs
from strategies.program import Program, as_function, build_inputs, run_on_eager, source


def eager_observation(program: Program) -> Observation:
    named, args = build_inputs(program.setup)
    return observe(world_of(named, as_function(program)(*args)))


def reference_observation(program: Program) -> Observation:
    named, args = build_inputs(program.setup)
    return observe(world_of(named, run(as_function(program), *args).outputs))


def divergence(program: Program) -> list[str]:
    """How the reference differs from eager on `program`; empty when they agree."""
    expected = run_on_eager(eager_observation, program)
    try:
        actual = reference_observation(program)
    except Exception as error:  # noqa: BLE001 (any error of the reference is a divergence)
        notes = "".join(f"\n  {note}" for note in getattr(error, "__notes__", ()))
        return [f"the reference raised {type(error).__name__}: {error}{notes}"]
    return differences(expected, actual)


def _record_events(program: Program) -> None:
    """What the examples covered (pytest --hypothesis-show-statistics)."""
    setup = program.setup
    for op in sorted({instr.op for instr in program.body}):
        event(f"op {op}")
    if any(base.zeroed for base in setup.bases):
        event("input on a zero-byte storage")
    if len(set(setup.args)) < len(setup.args):
        event("one tensor passed twice")
    if any(view.name.startswith("h") for view in setup.views):
        event("caller-held alias")
    base_of = {view.name: view.base for view in setup.views}
    passed = set(setup.args)
    if len({base_of.get(name, name) for name in passed}) < len(passed):
        event("two arguments share a storage")


@given(programs())
def test_reference_agrees_with_eager(program):
    """Every observable of a random valid program agrees between eager and the reference."""
    _record_events(program)
    coverage.note("reference_eager", coverage.program_items(program))
    found = divergence(program)
    if not found:
        return
    where = ""
    if is_final_run():
        where = f"\nstandalone repro: .venv/bin/python {write_repro(program, found)}"
    raise AssertionError(
        "the reference disagrees with eager:\n"
        + "\n".join(f"  {line}" for line in found)
        + f"\nprogram:\n{source(program)}{where}"
    )


@settings(max_examples=max(settings.default.max_examples // 5, 20))
@given(programs())
def test_rendered_source_matches_closure(program):
    """The Python printed in failures and repros does what the tested closure does (on eager)."""
    namespace = {"torch": torch}
    exec(source(program), namespace)  # noqa: S102 (our own rendering)
    named, args = namespace["make_inputs"]()
    rendered = observe(world_of(named, namespace["program"](*args)))
    found = differences(eager_observation(program), rendered)
    assert not found, "\n".join(found) + f"\n{source(program)}"
