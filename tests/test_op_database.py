"""PyTorch's op database as a test of aotspec (`aotspec/opdb.py`, issue 23).

Every OpInfo of `op_db` that supports float32 on CPU runs eagerly and compiled, on the reference,
the fast backend and Dynamo with the aotspec backend, and must be `pass`, or refused as
`op_database_refusals.txt` lists (the rule each refusal names). The list is checked both ways:
a listed op that passes, or is refused by another rule, fails, as does an unlisted refusal.
A wrong result or a crash always fails, except the pairs `op_database_known_wrong.txt` lists,
which are strict xfails: when a fix lands, the pair passes and the run fails until its line is
deleted.

- CI: a deterministic spread of `SPREAD` ops, one sample each, on the three backends, and the
  known-wrong pairs of the aotspec backends with the two samples the list was measured with
  (cheap: they fail fast or run small samples), and so the ops once listed (`ONCE_WRONG`).
- `AOTSPEC_OPDB=all`: the whole database, two samples an op (the table: `aotspec opdb`).
- `AOTSPEC_OPDB_SAMPLES=N`, or HYPOTHESIS_PROFILE=nightly (every sample): more samples an op.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import torch

from aotspec import UnsupportedError, opdb
from aotspec.rules import all_rules

HERE = Path(__file__).parent
REFUSALS = opdb.read_expectations(HERE / "op_database_refusals.txt")
KNOWN_WRONG = opdb.read_expectations(HERE / "op_database_known_wrong.txt")

WHOLE = os.environ.get("AOTSPEC_OPDB") == "all"
NIGHTLY = os.environ.get("HYPOTHESIS_PROFILE") == "nightly"
SAMPLES = int(os.environ.get("AOTSPEC_OPDB_SAMPLES", 1000 if NIGHTLY else 2 if WHOLE else 1))
#: The samples an op the lists were measured with.
LISTED_SAMPLES = 2
SPREAD = 12
#: Ops once listed as known wrong, run in CI with the listed samples so their fixes stay fixed
#: (issue 23: as_strided_scatter's derivative, eig's value check, the reference's rounding).
ONCE_WRONG = (
    "as_strided_scatter",
    "linalg.eig",
    "ormqr",
    "nn.functional.multi_head_attention_forward",
)
TIMEOUT = 300

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    OPS = {opdb.op_name(op): op for op in opdb.database("float32")}


def _pairs() -> list[tuple[str, str]]:
    if WHOLE:
        return [(name, backend) for backend in opdb.BACKENDS for name in OPS]
    chosen = [opdb.op_name(op) for op in opdb.spread(list(OPS.values()), SPREAD)]
    pairs = [(name, backend) for backend in opdb.BACKENDS for name in chosen]
    for listed in KNOWN_WRONG:
        for backend in ("reference", "fast"):
            if listed.covers(backend) and (listed.op, backend) not in pairs:
                pairs.append((listed.op, backend))
    for name in ONCE_WRONG:
        for backend in ("reference", "fast"):
            if (name, backend) not in pairs:
                pairs.append((name, backend))
    return pairs


def _param(name: str, backend: str):
    listed = opdb.expected_for(KNOWN_WRONG, name, backend)
    marks = [pytest.mark.xfail(strict=True, reason=listed.detail)] if listed else []
    return pytest.param(name, backend, id=f"{name}-{backend}", marks=marks)


@pytest.mark.parametrize(("name", "backend"), [_param(*pair) for pair in _pairs()])
def test_op_matches_eager_or_is_listed(name, backend):
    """The op passes, or is refused by the rule its line in the refusals list names."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        listed = opdb.expected_for([*REFUSALS, *KNOWN_WRONG], name, backend)
        samples = max(SAMPLES, LISTED_SAMPLES) if listed or name in ONCE_WRONG else SAMPLES
        result = opdb.check_op(OPS[name], backend, "float32", samples, TIMEOUT)
    assert opdb.judge(result, REFUSALS) is None, opdb.judge(result, REFUSALS)


def test_lists_name_ops_of_the_database_once():
    """Every line of both lists names an op of the database and aotspec's backends, and no pair
    is listed twice (a stale line would otherwise never be checked)."""
    seen: set[tuple[str, str]] = set()
    problems = []
    for listed in [*REFUSALS, *KNOWN_WRONG]:
        if listed.op not in OPS:
            problems.append(f"line {listed.line}: {listed.op} is not an op of the database")
        backends = opdb.BACKENDS if listed.backends == ("*",) else listed.backends
        for backend in backends:
            if backend not in opdb.BACKENDS:
                problems.append(f"line {listed.line}: unknown backend {backend}")
            if (listed.op, backend) in seen:
                problems.append(f"line {listed.line}: {listed.op} on {backend} listed twice")
            seen.add((listed.op, backend))
    assert [] == problems


def test_known_wrong_lines_say_what_and_which_issue():
    """A known-wrong line names the issue that fixes it and says what is wrong."""
    assert [] == [
        f"line {listed.line}: {listed.detail}"
        for listed in KNOWN_WRONG
        if listed.status not in ("wrong", "crash") or "issue" not in listed.detail
    ]


@pytest.mark.parametrize("name", sorted(opdb.SPEC_EQUIVALENTS))
def test_spec_equivalents_depart_from_eager_by_a_rule(name):
    """An op compared with a composite instead of itself names a rule of the spec, and eager
    itself fails that comparison (its formula is what the rule departs from): a stale entry,
    once eager agrees, fails here."""
    rule, _ = opdb.SPEC_EQUIVALENTS[name]
    assert rule in all_rules()
    op = OPS[name]
    statuses = [
        opdb.check_sample(op, sample, lambda fn: fn)[0]
        for sample in opdb.samples(op, "float32", 2)
    ]
    assert "wrong" in statuses


# ---------------------------------------------------------------- the harness judges


def _mul_sample():
    op = OPS["mul"]
    return op, opdb.samples(op, "float32", 1)[0]


def _check_with(wrap) -> tuple[str, str]:
    """The status of `mul`'s first sample under a compiler that wraps the program by `wrap`."""
    op, sample = _mul_sample()
    return opdb.check_sample(op, sample, wrap)


def test_harness_passes_eager_itself():
    assert ("pass", "") == _check_with(lambda fn: fn)


def test_harness_sees_wrong_values_requires_grad_writes_and_a_second_call():
    def off_by_a_little(fn):
        return lambda *tensors: fn(*tensors) + 1e-3

    def without_history(fn):
        return lambda *tensors: fn(*tensors).detach()

    def writing_into_its_input(fn):
        def call(*tensors):
            out = fn(*tensors)
            tensors[0].data.add_(1)  # unseen by autograd's version check
            return out

        return call

    def advancing_a_version(fn):
        def call(*tensors):
            torch.autograd.graph.increment_version(tensors[0])  # values untouched
            return fn(*tensors)

        return call

    def remembering_its_first_call(fn):
        first = []

        def call(*tensors):
            if not first:
                first.append(fn(*tensors).detach())
            out = fn(*tensors)
            return out - out.detach() + first[0]  # the first call's values, the gradient's own

        return call

    found = {
        name: _check_with(wrap)
        for name, wrap in [
            ("values", off_by_a_little),
            ("requires_grad", without_history),
            ("input after the call", writing_into_its_input),
            ("versions", advancing_a_version),
            ("second call", remembering_its_first_call),
        ]
    }
    statuses = {name: status for name, (status, _) in found.items()}
    assert {name: "wrong" for name in found} == statuses
    assert [] == [name for name, (_, reason) in found.items() if name not in reason]


def test_harness_judges_rounding_by_the_float64_run():
    """Values beyond the tolerances pass when they are as close to the program run in float64 as
    eager's are (another kernel's rounding), never when further, nor when eager is so far from the
    float64 run that it computed something else."""
    exact = torch.tensor([1.0, 0.5], dtype=torch.float64)
    eager = (exact + torch.tensor([5e-5, 0.0], dtype=torch.float64)).float()

    def found(compiled, float64=exact):
        observed = [opdb.Observation(out, (), None, (), None, None) for out in (eager, compiled)]
        wide = opdb.Observation(float64, (), None, (), None, None)
        return opdb.differences(*observed, exact=wide)

    other_rounding = (exact - torch.tensor([2e-5, 0.0], dtype=torch.float64)).float()
    assert [] != opdb.differences(
        opdb.Observation(eager, (), None, (), None, None),
        opdb.Observation(other_rounding, (), None, (), None, None),
    )
    assert [] == found(other_rounding)
    assert [] != found((exact + torch.tensor([2e-4, 0.0], dtype=torch.float64)).float())
    assert [] != found(other_rounding, float64=exact + 1.0)


def test_harness_tells_refusals_from_crashes():
    def refusing(fn):
        def call(*tensors):
            raise UnsupportedError("a refusal", rule="ops.table", fix="none")

        return call

    def crashing(fn):
        def call(*tensors):
            raise ValueError("a bug")

        return call

    assert ("refused", "ops.table: a refusal") == _check_with(refusing)
    assert ("crash", "first call: ValueError(a bug)") == _check_with(crashing)


def test_judge_checks_the_lists_both_ways(tmp_path):
    listed = tmp_path / "listed.txt"
    listed.write_text("mul * refused ops.table the op is not in the table\n")
    expectations = opdb.read_expectations(listed)

    def result(op, status, reason=""):
        return opdb.OpResult(op, "fast", "float32", status, reason, 1, 0.0, True)

    assert opdb.judge(result("mul", "refused", "ops.table: x"), expectations) is None
    assert "update the list" in opdb.judge(result("mul", "pass"), expectations)
    assert "listed as refused by ops.table" in opdb.judge(
        result("mul", "refused", "memory.layout: x"), expectations
    )
    assert "not listed" in opdb.judge(result("add", "refused", "ops.table: x"), expectations)
    assert "not listed" in opdb.judge(result("add", "wrong", "values differ"), expectations)
    assert opdb.judge(result("add", "pass"), expectations) is None
