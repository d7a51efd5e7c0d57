"""Differential test: one compiled function called at several sizes, each call against eager.

Today a compiled function specializes its plan on the sizes of each call's tensors and compiles
again for a new size; symbolic plans, one for every size, are to come. Either way a call must
compute what eager computes at its own sizes, and no plan may serve a size it does not hold
for. The generator `sized_programs()` (tests/strategies/sizes.py) draws a pointwise program
and two or three sizes of the last dimension of its widest tensors; `sizes_divergence`
(tests/harness.py) compiles the program once for the reference and once for fast, and calls
each at every size in turn, on a fresh caller's world each time:

- the reference against eager: outputs, the caller's tensors, requires_grad and gradients
  (`compare`, rounding forgiven by a float64 eager run);
- fast against the reference, on the plans the reference built: those observables, and the
  memory facts of `tests/test_differential_fast.py` (the runtime's storages alive after every
  node and the peaks of forward and backward) of the plan the call ran.

A failure prints the program, its sizes and what differed at which size, and writes a
standalone `repros/repro_sizes_<hash>.py` that reruns the check.

With dynamic sizes, `sized_grad_programs()` also draws programs of `grad_programs()`: views,
reductions over some dims, `cat`, writes through views, at the drawn sizes where eager runs the
body. The program records have no int arguments; `int_programs()` draws functions of a tensor
and an int, which `torch.compile(backend="aotspec", dynamic=True)` calls at several column
counts and ints (0, 1 and negative ones among them), each call against eager: the output, the
gradient and the caller's tensor the function writes. A failure prints the function's source
and its calls, and hypothesis's `@reproduce_failure` line.

Run: `.venv/bin/python -m pytest tests/test_differential_sizes.py` (HYPOTHESIS_PROFILE=ci, the
default, runs a few examples; dev and nightly more; see tests/conftest.py).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aotspec.fuzz import coverage

from harness import sizes_divergence
from repro import is_final_run, write_sizes_repro
from strategies.program import Base, Instr, Program, Setup, Var
from strategies.sizes import (
    IntProgram,
    Sized,
    int_programs,
    sized_grad_programs,
    sized_programs,
    sized_source,
)

#: A profile's examples (ci: 500) over 25: ci runs 20 programs, each at two or three sizes.
EXAMPLES = max(settings.default.max_examples // 25, 10)


@pytest.mark.filterwarnings("ignore::UserWarning")  # casts of nan and inf to integers
@settings(max_examples=EXAMPLES)
@given(sized_programs())
def test_one_compiled_function_agrees_with_eager_at_each_size(sized):
    """At every size in turn: the reference as eager, fast as the reference, memory included."""
    _agrees_at_each_size(sized, dynamic=False)


@pytest.mark.filterwarnings("ignore::UserWarning")  # casts of nan and inf to integers
@settings(max_examples=EXAMPLES)
@given(sized_programs())
def test_one_symbolic_plan_agrees_with_eager_at_each_size(sized):
    """With dynamic sizes (`r[sizes.symbolic.dims]`): at every size in turn, the reference as
    eager and as a plan for that size alone (its peaks), fast as the reference."""
    _agrees_at_each_size(sized, dynamic=True)


@pytest.mark.filterwarnings("ignore::UserWarning")  # casts of nan and inf to integers
@settings(max_examples=EXAMPLES)
@given(sized_grad_programs())
def test_a_symbolic_plan_of_views_reductions_and_writes_agrees_with_eager_at_each_size(sized):
    """As above, on programs of `grad_programs()`: views (slices, `t`, `view`, `reshape`,
    `expand`, `select`), reductions over some dims (`keepdim` or not), `cat`, writes through
    views, custom Functions and grad modes, at the sizes where eager runs the body."""
    _agrees_at_each_size(sized, dynamic=True)


@settings(max_examples=max(EXAMPLES // 2, 5))
@given(int_programs(), st.sampled_from(["reference", "fast"]))
def test_dynamo_int_arguments_agree_with_eager_at_each_call(program, backend):
    """`torch.compile(f, backend="aotspec", dynamic=True)` of a function of a tensor whose
    columns vary and of an int that varies too, 0, 1 and negative ones among them
    (`r[sizes.symbolic.dynamo]`, `r[sizes.symbolic.guard]`): at every call, the output, the
    gradient of `x` and the caller's `buf`, which the function may write, are eager's."""
    torch._dynamo.reset()
    compiled = torch.compile(
        program.function(), backend="aotspec", dynamic=True, options={"backend": backend}
    )
    try:
        found = [line for call in program.calls for line in _int_differs(program, compiled, *call)]
    finally:
        torch._dynamo.reset()
    assert not found, (
        f"torch.compile(backend='aotspec', options={{'backend': {backend!r}}}, dynamic=True) "
        "disagrees with eager:\n"
        + "\n".join(f"  {line}" for line in found)
        + f"\n{program.source}# called at (columns, k): {list(program.calls)}"
    )


def _int_differs(program: IntProgram, compiled, columns: int, k: int) -> list[str]:
    """How the compiled call at `columns` and `k` differs from eager's."""
    seen = {}
    for side, fn in (("eager", program.function()), ("compiled", compiled)):
        x, buf = program.inputs(columns)
        try:
            out = fn(x, buf, k)
            out.sum().backward()
        except Exception as error:  # noqa: BLE001 (a divergence when eager returns)
            seen[side] = f"{type(error).__name__}: {error}"
            continue
        seen[side] = {"output": out.detach(), "x.grad": x.grad, "buf": buf}
    where = f"at columns {columns}, k {k}"
    raised = {side: seen[side] for side in seen if isinstance(seen[side], str)}
    if raised:
        said = ", ".join(f"{side} raised {error}" for side, error in raised.items())
        return [] if len(raised) == 2 and len(set(raised.values())) == 1 else [f"{where}: {said}"]
    found = []
    for name, expected in seen["eager"].items():
        try:
            torch.testing.assert_close(seen["compiled"][name], expected, equal_nan=True)
        except AssertionError as error:
            found.append(f"{where}, {name}: {str(error).splitlines()[0]}")
    return found


def _agrees_at_each_size(sized: Sized, dynamic: bool) -> None:
    coverage.note("sizes", coverage.program_items(sized.program))
    found = sizes_divergence(sized, dynamic=dynamic)
    if not found:
        return
    where = ""
    if is_final_run():
        path = write_sizes_repro(sized, found, dynamic=dynamic)
        where = f"\nstandalone repro: .venv/bin/python {path}"
    compiled = "with dynamic sizes " if dynamic else ""
    raise AssertionError(
        f"one compiled function {compiled}called at several sizes disagrees:\n"
        + "\n".join(f"  {line}" for line in found)
        + f"\nprogram:\n{sized_source(sized)}{where}"
    )


def _broadcast_product_sized(sizes: tuple[int, ...]) -> Sized:
    """`(x0 * x1).sin()` of a (2, 3) leaf and a (3,) leaf, the 3 at each of `sizes`: its
    backward sums x1's gradient over the broadcast rows, to x1's size."""
    bases = (
        Base("b0", (2, 3), (1.0, -1.0, 0.5, 2.0, -0.5, 1.5), requires_grad=True),
        Base("b1", (3,), (2.0, -1.0, 0.5), requires_grad=True),
    )
    body = (Instr("mul", ("v0",), (Var("x0"), Var("x1"))), Instr("sin", ("v1",), (Var("v0"),)))
    program = Program(Setup(bases, (), ("b0", "b1")), body, ("v1",))
    return Sized(program, 3, sizes)


def test_the_sizes_change_the_caller_tensors_and_nothing_else():
    """`Sized.at` gives every tensor of the widest last dimension the size there, its values
    repeated, and leaves the body and the other dimensions alone."""
    sized = _broadcast_product_sized((5, 1))
    at_five = sized.at(5)
    assert [((2, 5), (1.0, -1.0, 0.5, 2.0, -0.5, 1.5, 1.0, -1.0, 0.5, 2.0)), ((5,), None)] == [
        (base.shape, base.values if base.name == "b0" else None) for base in at_five.setup.bases
    ]
    assert ((2, 1), (1,)) == tuple(base.shape for base in sized.at(1).setup.bases)
    assert at_five.body == sized.program.body


def test_a_plan_that_serves_a_size_it_was_not_made_for_is_caught(monkeypatch):
    """A guard that forgets sizes lets the plan made at size 3 serve size 5: its backward sums
    x1's gradient to 3 elements, so the call fails or differs from eager; the check says so,
    at size 5. With the guard intact it agrees at both sizes."""
    import aotspec.api
    from aotspec.reference.program_records import input_facts

    sized = _broadcast_product_sized((3, 5))
    assert [] == sizes_divergence(sized)

    def sizeless(tensors):
        # the facts with the shape, the strides and the storage's bytes left out
        return tuple((f[0], None, None, *f[3:5], None, *f[6:]) for f in input_facts(tensors))

    monkeypatch.setattr(aotspec.api, "input_facts", sizeless)
    found = sizes_divergence(sized)
    assert found and all(line.startswith("at size 5") for line in found), found


@pytest.mark.parametrize("dynamic", [False, True])
def test_repro_reruns_the_check(tmp_path, dynamic):
    """A written repro runs alone and passes on a program every side agrees on; with dynamic
    sizes, it reruns the check with dynamic sizes."""
    from repro import REPRO_DIR

    sized = _broadcast_product_sized((3, 5))
    path = write_sizes_repro(sized, ["(none)"], tmp_path, dynamic=dynamic)
    text = path.read_text()
    assert ("sizes_divergence(SIZED, dynamic=True)" in text) == dynamic
    namespace = {"__name__": "__main__", "__file__": str(REPRO_DIR / path.name)}
    exec(compile(text, str(path), "exec"), namespace)  # noqa: S102 (ours)
    assert namespace["SIZED"].sizes == (3, 5)
