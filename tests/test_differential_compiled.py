"""Differential tests: random valid programs must behave the same on eager PyTorch and through
`aotspec.compile(program, backend="reference")` (docs/contract.md and docs/design.md sections 5
and 7).

Eager PyTorch is the oracle. Each program runs once on eager and once compiled, each time on
freshly built caller tensors, and every observable is compared: outputs, every caller tensor
after the call (the arguments and the aliases the caller kept: values, storage sizes, which
share a storage), which of them require grad, and for programs with backward the gradients:
after the call, `sum(out.sum() for outputs that require grad)` is backpropagated on both sides
and the `.grad` of every leaf the caller made is compared, absence included. The caller's
tensors are observed again after the backward, which must leave them as they were. Running a
side and comparing two are tests/harness.py's `outcome` and `compare`.

Two generators (tests/strategies/):
- `programs(compiled=True)`: the eager differential test's mutation programs (views, in-place
  ops, copy_, set_, resizes, aliased arguments), restricted to what compiled programs accept;
  nothing requires grad.
- `grad_programs()`: leaves that require grad and buffers that do not, differentiable ops, writes
  to intermediates (through views too) and to buffers; every one of them runs a backward.

On a numeric disagreement both float32 results are compared to an eager float64 run first: the
compiled result is blamed only when it is farther from it than eager's is (docs/design.md
section 5).
A failure prints the program as Python and hypothesis's `@reproduce_failure` blob, and writes a
standalone `repros/repro_compiled_<hash>.py`.

Run: `.venv/bin/python -m pytest tests/test_differential_compiled.py`
(HYPOTHESIS_PROFILE=ci|dev|nightly; see tests/conftest.py).
"""

from __future__ import annotations

import functools

import pytest
import torch
from attrs import evolve
from hypothesis import event, given, settings
from hypothesis import strategies as st

from aotspec.fuzz import coverage

from harness import (
    Outcome,
    call_and_backward,
    compare,
    eager_as_specified,
    eager_outcome,
    numerically_explained,
    outcome,
)
from repro import compiled_repro_source, is_final_run, write_compiled_repro
from strategies.grad import GRAD_VIEWS, grad_programs
from strategies.mutations import programs
from strategies.program import Base, Instr, Program, Setup, Var, run_on_eager, source
from strategies.stealing import Stealing

#: A profile's examples a property, split: ci (500) runs 300 programs with backward and 200
#: mutation programs, dev 1,200 and 800, nightly 12,000 and 8,000.
BACKWARD_EXAMPLES = settings.default.max_examples * 3 // 5
MUTATION_EXAMPLES = settings.default.max_examples * 2 // 5


# ---------------------------------------------------------------- the differential check

VIEWS = set(GRAD_VIEWS) | {"split"}


def divergence(program: Program, *, backward: bool = False) -> list[str]:
    """How the compiled reference differs from eager on `program`; empty when they agree.
    `backward`: the program must run a backward on eager (or the generator is wrong)."""
    expected = run_on_eager(lambda p: outcome(p, compiled=False), program)
    if backward and not expected.backward:
        raise AssertionError(
            f"the generator made a program with no output that requires grad:\n{source(program)}"
        )
    try:
        actual = outcome(program, compiled=True)
    except Exception as error:  # noqa: BLE001 (any error of the compiled side is a divergence)
        notes = "".join(f"\n  {note}" for note in getattr(error, "__notes__", ()))
        return [f"the compiled program raised {type(error).__name__}: {error}{notes}"]
    found = compare(expected, actual)
    if found and numerically_explained(program, expected, actual, found):
        event("numeric disagreement explained by float64")
        return []
    return found


def _check(program: Program, *, backward: bool = False) -> None:
    found = divergence(program, backward=backward)
    if not found:
        return
    where = ""
    if is_final_run():
        where = f"\nstandalone repro: .venv/bin/python {write_compiled_repro(program, found)}"
    raise AssertionError(
        "aotspec.compile (reference) disagrees with eager:\n"
        + "\n".join(f"  {line}" for line in found)
        + f"\nprogram:\n{source(program)}{where}"
    )


def _record_events(program: Program) -> None:
    """What the examples covered (pytest --hypothesis-show-statistics)."""
    setup = program.setup
    for op in sorted({instr.op for instr in program.body}):
        event(f"op {op}")
    if any(base.zeroed for base in setup.bases):
        event("input on a zero-byte storage")
    if any(view.name.startswith("h") for view in setup.views):
        event("caller-held alias")
    if any(base.requires_grad for base in setup.bases):
        grad_bases = {base.name for base in setup.bases if base.requires_grad}
        passed = [v for v in setup.views if v.base in grad_bases and v.name in setup.args]
        if any(not view.detached for view in passed):
            event("non-leaf argument that requires grad")
        if any(view.detached for view in passed):
            event("detached alias of a leaf that requires grad")
        if len(grad_bases) < len(setup.bases):
            event("buffer beside leaves that require grad")
    made_by = {out: instr.op for instr in program.body for out in instr.outs}
    for instr in program.body:
        if instr.op.endswith("_"):
            target = made_by.get(instr.args[0].name, "argument")
            if target == "argument":
                event(f"{instr.op} of an argument")
            else:
                event(f"{instr.op} of {'a view' if target in VIEWS else 'a fresh value'}")


@settings(max_examples=max(MUTATION_EXAMPLES, 20))
@given(programs(compiled=True))
def test_compiled_mutations_agree_with_eager(program):
    """Mutation programs that compiled mode accepts: outputs, caller tensors, aliasing agree."""
    _record_events(program)
    coverage.note("compiled_mutations", coverage.program_items(program))
    _check(program)


@settings(max_examples=max(BACKWARD_EXAMPLES, 20))
@given(grad_programs())
def test_compiled_backward_agrees_with_eager(program):
    """Programs with backward: outputs, buffers, requires_grad and every leaf's .grad agree."""
    _record_events(program)
    event("backward")  # every example: _check fails when no output requires grad on eager
    coverage.note("compiled_backward", [*coverage.program_items(program), "backward ran"])
    _check(program, backward=True)


@settings(max_examples=max(settings.default.max_examples // 25, 10))
@given(st.one_of(programs(compiled=True), grad_programs()))
def test_compiled_repro_source_matches_closure(program):
    """The Python a failure prints and writes does what the tested closure does (on eager, with
    the backward), and the standalone repro's own check runs and passes."""
    namespace = {"__name__": "repro"}
    exec(compiled_repro_source(program, ["(none)"], "repro.py"), namespace)  # noqa: S102 (ours)
    named, args = namespace["make_inputs"]()
    options = {
        "grad_enabled": namespace["GRAD_ENABLED"],
        "retain_graph": namespace["RETAIN_GRAPH"],
    }
    rendered = call_and_backward(eager_as_specified(namespace["program"]), named, args, **options)
    found = compare(outcome(program, compiled=False), rendered)
    assert not found, "\n".join(found) + f"\n{source(program)}"
    namespace["main"]()


def test_eager_oracle_gives_a_reduced_loss_a_storage_of_its_own():
    """r[ops.fresh-output.meta-layout]: eager's mse_loss leaves its mean (and sum) on a storage
    of every term; the oracle runs eager with the rule's storage of one float32, value kept, so
    that grad programs may draw reduced losses."""
    x, target = torch.arange(6.0).view(2, 3), torch.ones(2, 3)
    for reduction, value in [("mean", 31 / 6), ("sum", 31.0)]:  # (x - 1)^2: 1+0+1+4+9+16
        loss = functools.partial(torch.nn.functional.mse_loss, reduction=reduction)
        assert 24 == loss(x, target).untyped_storage().nbytes()  # eager: 6 terms of 4 bytes
        result = eager_as_specified(loss)(x, target)
        assert (4, pytest.approx(value)) == (result.untyped_storage().nbytes(), result.item())


def test_float64_oracle_forgives_rounding_only():
    """A compiled value outside assert_close's tolerance of eager's passes when it is no farther
    from the float64 result than eager's, and fails when it is much farther."""
    setup = Setup((Base("b0", (3,), (0.3, 1.7, -2.2), requires_grad=True),), (), ("b0",))
    program = Program(setup, (Instr("exp", ("v0",), (Var("x0"),)),), ("v0",))
    exact = outcome(program, compiled=False, dtype=torch.float64).world.tensors["out0"].values

    def with_out0(values: torch.Tensor) -> Outcome:
        run = outcome(program, compiled=False)
        tensors = dict(run.world.tensors)
        tensors["out0"] = evolve(tensors["out0"], values=values.float())
        world = evolve(run.world, tensors=tensors)
        return evolve(run, world=world, after_backward=world)

    eager = with_out0(exact * (1 + 1e-4))  # a (pretended) inaccurate eager
    for compiled, explained in [(exact, True), (exact * (1 - 1e-4), True), (exact * 1.01, False)]:
        actual = with_out0(compiled)
        found = compare(eager, actual)
        assert found and all(line.startswith("out0 values") for line in found), found
        assert numerically_explained(program, eager, actual, found) is explained


def test_float64_oracle_of_a_stealing_program_after_two_backwards():
    """A stealing program's outputs are its stolen list's sum, then the program's: the float64
    rerun computes them under the same names (`out1` here), and a gradient after the first of two
    backwards (retain_graph) is judged as a final one is."""
    setup = Setup((Base("b0", (3,), (0.3, 1.7, -2.2), requires_grad=True),), (), ("b0",))
    body = (Instr("exp", ("v0",), (Var("x0"),)),)
    program = Program(setup, body, ("v0",), retain_graph=True)
    stealing = Stealing(program, ((1.0, -1.0, 0.5, 2.0),), ("exp",))
    exact = eager_outcome(stealing, torch.float64)

    def off_by(factor: float) -> Outcome:
        run = eager_outcome(stealing)
        tensors = dict(run.world.tensors)
        values = exact.world.tensors["out1"].values * factor
        tensors["out1"] = evolve(tensors["out1"], values=values.float())
        world = evolve(run.world, tensors=tensors)
        retained = {"b0": (exact.retained_grads["b0"] * factor).float()}
        return evolve(run, world=world, after_backward=world, retained_grads=retained)

    eager = off_by(1 + 1e-4)  # a (pretended) inaccurate eager
    for factor, explained in [(1, True), (1 - 1e-4, True), (1.01, False)]:
        actual = off_by(factor)
        found = compare(eager, actual)
        assert ["out1", "after the first backward: b0.grad"] == [
            line.split(" values")[0] for line in found
        ], found
        assert numerically_explained(stealing, eager, actual, found) is explained


def test_float64_oracle_refuses_a_program_that_resizes_in_bytes():
    """A resize's byte count is float32's: in float64 the storage would hold half the elements
    and the rerun would write past its end (heap corruption, once an abort), so such a program
    has no float64 oracle, and a value difference on it stays a failure."""
    setup = Setup((Base("b0", (4,), (0.3, 1.7, -2.2, 0.5), zeroed=True),), (), ("b0",))
    body = (
        Instr("resize_storage_bytes_", (), (Var("x0"), 16)),
        Instr("fill_", (), (Var("x0"), 0.3)),
        Instr("exp", ("v0",), (Var("x0"),)),
    )
    program = Program(setup, body, ("v0",))
    exact = torch.full((4,), 0.3, dtype=torch.float64).exp()

    def with_out0(values: torch.Tensor) -> Outcome:
        run = outcome(program, compiled=False)
        tensors = dict(run.world.tensors)
        tensors["out0"] = evolve(tensors["out0"], values=values.float())
        world = evolve(run.world, tensors=tensors)
        return evolve(run, world=world, after_backward=world)

    eager, actual = with_out0(exact * (1 + 1e-4)), with_out0(exact)  # a float64 run forgives
    found = compare(eager, actual)
    assert [line.split(" values")[0] for line in found] == ["out0"], found
    assert numerically_explained(program, eager, actual, found) is False
