"""Differential tests: `aotspec.compile(backend="fast")` against `backend="reference"` on random
valid programs, every observable and the memory facts (docs/design.md sections 5 and 7).

The reference is the oracle. Each program runs on both backends, each time on fresh caller
tensors, through `call_and_backward` (tests/harness.py, as is the whole check, `fast_divergence`):
errors (type and rule), outputs, the caller's tensors after the call, aliasing, requires_grad and
gradients must agree (`compare`). Generators: `programs(compiled=True)` (views, in-place ops,
copy_, set_, resizes, aliased arguments), `grad_programs()` (backward; also called inside
bfloat16 saved-tensor hooks under each `hooks_filter`, so the inlined pack and unpack ops are
compared too), and `stealing_programs()` (either kind after a stolen list of activations).

Memory facts. The fast run happens under `aotspec.tracker.MemoryTracker`, once the plan is built
(a first call on other fresh tensors builds it, so tracing is not tracked). The check wraps the
plan's generated forward and backward code in a `Bracket` that marks where each graph's run
begins and ends in the tracker. Inside a bracket each op the tracker sees is one op node of the
graph, in order (checked), and the reference's ledger has a probe per node of the same graph, so:

- Storages are named the same way on both sides, by *label*: the node that first held the
  storage and its rank among the storages that node made (a placeholder's label is the
  placeholder; the reference's caller-held inputs are held before any node, as `<inputs>`).
- A storage is *the runtime's* when nothing outside the runtime holds it: not a storage of a
  caller's tensor before or after the call, of an output, nor of a tangent (the autograd engine
  holds tangents for the whole backward call, on fast as in PyTorch). The reference's ledgers
  count only what the runtime holds (its backward frees a saved input at its last use, though
  the caller still has it), so only the runtime's storages compare. They are the activations:
  stolen inputs, intermediates, saved values, gradients.
- Alive: after each op node (with the `getitem`s after it: the tracker's probe of an op is taken
  when the next op begins, so it includes the frees that follow), the runtime's storages alive
  are the same labels on both sides, and at the graph's end.
- Peak: the greatest sum of the runtime's storages' bytes during the graph's run is the same.
- A stolen list is empty after the call and its activations' storages are freed.

A failure prints the program and writes `repros/repro_fast_<hash>.py`, which reruns this check
on the same program (pickled, beside its Python source) and fails on its own.

Run: `.venv/bin/python -m pytest tests/test_differential_fast.py` (HYPOTHESIS_PROFILE picks the
number of examples; see tests/conftest.py).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aotspec.fuzz import coverage

from harness import FuzzCase, Hooked, fast_divergence
from repro import REPRO_DIR, is_final_run, write_fast_repro
from strategies.grad import grad_programs
from strategies.mutations import programs
from strategies.program import Base, Instr, Program, Setup, Var
from strategies.stealing import Stealing, stealing_programs

#: A profile's examples (ci: 500) times 3/5, split: ci runs 100 programs with backward, 110
#: mutation programs, 60 with stolen lists and 50 with hooks (320 in all).
EXAMPLES = settings.default.max_examples * 3 // 5


def _check(case: Program | Stealing | Hooked, test: str) -> None:
    coverage.note(test, coverage.program_items(case))
    found = fast_divergence(case)
    if not found:
        return
    where = ""
    if is_final_run():
        where = f"\nstandalone repro: .venv/bin/python {write_fast_repro(case, found)}"
    raise AssertionError(
        "the fast backend disagrees with the reference:\n"
        + "\n".join(f"  {line}" for line in found)
        + f"\nprogram:\n{FuzzCase(case).source}{where}"
    )


# ---------------------------------------------------------------- properties


@settings(max_examples=max(EXAMPLES * 10 // 30, 20))
@given(grad_programs())
def test_fast_backward_agrees_with_reference(program):
    """Outputs, caller tensors, gradients; alive storages and peaks of forward and backward."""
    _check(program, "fast_backward")


@settings(max_examples=max(EXAMPLES * 11 // 30, 20))
@given(programs(compiled=True))
def test_fast_mutations_agree_with_reference(program):
    """Views, in-place ops, copy_, set_, resizes: observables and the forward's memory facts."""
    _check(program, "fast_mutations")


@settings(max_examples=max(EXAMPLES * 6 // 30, 10))
@given(st.booleans().flatmap(lambda backward: stealing_programs(backward=backward)))
def test_fast_stolen_lists_agree_with_reference(stealing):
    """A stolen list is emptied and its activations freed after their last use, on both, with
    autograd and without."""
    _check(stealing, "fast_stolen_lists")


@pytest.mark.filterwarnings("ignore::aotspec.HooksWarning")  # donated may select nothing
@settings(max_examples=max(EXAMPLES * 5 // 30, 10))
@given(grad_programs(), st.sampled_from(["donated", "no_static", "all"]))
def test_fast_hooks_agree_with_reference(program, hooks_filter):
    """bfloat16 saved-tensor hooks inlined: observables, and the storages alive after every node,
    pack and unpack included, and the peaks of forward and backward."""
    _check(Hooked(program, hooks_filter), "fast_hooks")


def test_fast_frees_stolen_activations_at_last_use_with_autograd():
    """With autograd too: one stolen activation read by exp, beside a leaf (apply's arguments
    once held it to the end of the call)."""
    setup = Setup((Base("b0", (3,), (1.0, 1.0, 1.0), requires_grad=True),), (), ("b0",))
    program = Program(setup, (Instr("view", ("v0",), (Var("x0"), (3,))),), ("v0",))
    assert fast_divergence(Stealing(program, ((1.0, 1.0, 1.0, 1.0),), ("exp",))) == []


def test_repro_reruns_the_check(tmp_path):
    """A written repro runs alone and passes on a program the backends agree on."""
    setup = Setup((Base("b0", (2,), (1.0, 2.0)),), (), ("b0",))
    program = Program(setup, (Instr("neg", ("v0",), (Var("x0"),)),), ("v0",))
    path = write_fast_repro(program, ["(none)"], tmp_path)
    namespace = {"__name__": "repro", "__file__": str(REPRO_DIR / path.name)}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 (ours)
    assert namespace["fast_divergence"](namespace["PROGRAM"]) == []

