"""The guard of `aotspec.compile`: one compiled function, called by callers that differ in one
fact its plan depends on, behaves like eager for each (docs/contract.md: the callable is
specialized to what it has seen, and compiles again when its guard is new).

A generated test calls one compiled function twice, on two variants of a random program's
caller that differ in exactly one guarded fact, in either order, and compares each call with
eager PyTorch on the same caller (outputs, the caller's tensors, gradients: `compare`):
- requires_grad: the caller's tensors as they are, or none of them requiring grad;
- grad mode: the call under the caller's grad mode, or under the other one;
- aliasing: arguments that share a storage, or each on a copy of its own (same layout, same
  storage size, same values), for programs that neither resize nor rebind a storage.
A guard that ignores the fact reuses the first call's plan for the second, which then differs
from eager. Hand-written tests cover the non-tensor arguments, which the generated programs do
not take.

Run: `.venv/bin/python -m pytest tests/test_guards.py` (HYPOTHESIS_PROFILE=ci|dev|nightly).
"""

from __future__ import annotations

import pytest
import torch
from attrs import evolve
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import aotspec
from aotspec.fuzz import coverage

from harness import call_and_backward, compare, numerically_explained, outcome
from strategies.grad import grad_programs
from strategies.mutations import programs
from strategies.program import (
    Base,
    CallerView,
    Program,
    Setup,
    as_function,
    build_inputs,
    run_on_eager,
    source,
)

EXAMPLES = max(settings.default.max_examples // 10, 10)


def without_grad(program: Program) -> Program:
    """The same program, called by a caller none of whose tensors requires grad."""
    bases = tuple(
        evolve(base, requires_grad=False, non_leaf=False, history_freed=False)
        for base in program.setup.bases
    )
    return evolve(program, setup=evolve(program.setup, bases=bases))


def other_grad_mode(program: Program) -> Program:
    return evolve(program, grad_enabled=not program.grad_enabled)


def unaliased(program: Program) -> Program:
    """The same program, each argument object on a copy of its storage of its own: the same
    layout, storage size and values; the caller's other aliases stay on the original."""
    setup = program.setup
    bases = {base.name: base for base in setup.bases}
    views = {view.name: view for view in setup.views}
    base_of = {name: views[name].base if name in views else name for name in setup.args}
    on_base: set[str] = set()
    new_bases, new_views, passed_as = list(setup.bases), list(setup.views), {}
    for name in dict.fromkeys(setup.args):  # each object once
        base = base_of[name]
        passed_as[name] = name
        if base not in on_base:
            on_base.add(base)
            continue
        copy = f"{base}_own{len(new_bases)}"
        new_bases.append(evolve(bases[base], name=copy))
        if name in views:
            new_views[new_views.index(views[name])] = evolve(views[name], base=copy)
        else:
            passed_as[name] = copy
    args = tuple(passed_as[name] for name in setup.args)
    return evolve(program, setup=Setup(tuple(new_bases), tuple(new_views), args))


def _unaliasable(program: Program) -> bool:
    """Whether the program stays valid with its arguments on copies of their own: not when it
    resizes or rebinds a storage, or starts with an empty one (it may refill a storage through
    one argument and read it through another, which on a copy of its own stays empty)."""
    effects = {"resize_storage_bytes_", "set_"}
    return not any(base.zeroed for base in program.setup.bases) and not any(
        instr.op in effects for instr in program.body
    )


def _shares_storage(setup: Setup) -> bool:
    base_of = {view.name: view.base for view in setup.views}
    passed = list(dict.fromkeys(setup.args))
    return len({base_of.get(name, name) for name in passed}) < len(passed)


def _eager_accepts(program: Program) -> bool:
    try:
        outcome(program, compiled=False)
    except Exception:  # noqa: BLE001 (any error: eager refuses this caller)
        return False
    return True


VARIANTS = {
    "requires_grad": without_grad,
    "grad mode": other_grad_mode,
    "aliasing": unaliased,
}


def _divergence(compiled, program: Program) -> list[str]:
    expected = run_on_eager(lambda p: outcome(p, compiled=False), program)
    named, args = build_inputs(program.setup)
    try:
        actual = call_and_backward(compiled, named, args, **program.call_options)
    except aotspec.UnsupportedError:
        return []  # the spec refuses this caller (the differential tests compare errors)
    except Exception as error:  # noqa: BLE001 (any other error is a divergence)
        return [f"the compiled call raised {type(error).__name__}: {error}"]
    found = compare(expected, actual)
    if found and numerically_explained(program, expected, actual, found):
        return []
    return found


@settings(max_examples=EXAMPLES)
@given(
    st.one_of(grad_programs(), programs(compiled=True)),
    st.sampled_from(sorted(VARIANTS)),
    st.booleans(),
)
def test_one_compiled_function_agrees_with_eager_for_each_caller(program, fact, variant_first):
    """Two callers differing in one guarded fact, one compiled function: eager's results for
    both, whichever comes first."""
    if fact == "aliasing" and not _unaliasable(program):
        fact = "grad mode"
    variant = VARIANTS[fact](program)
    # The generators keep a program valid under its own caller only: flipping the grad mode may
    # make eager refuse it (a view taken under no_grad, written, then read with grad mode on).
    assume(_eager_accepts(variant))
    coverage.note("guards", [*coverage.program_items(program), f"guard {fact}"])
    compiled = aotspec.compile(as_function(program))
    calls = [variant, program] if variant_first else [program, variant]
    for k, caller in enumerate(calls):
        found = _divergence(compiled, caller)
        assert not found, (
            f"call {k + 1} of 2 (the callers differ in {fact}) disagrees with eager:\n"
            + "\n".join(f"  {line}" for line in found)
            + f"\ncallers, in order:\n{source(calls[0])}\n\n{source(calls[1])}"
        )


def test_unaliased_gives_each_argument_its_own_storage():
    setup = Setup(
        (Base("b0", (4,), (1.0, 2.0, 3.0, 4.0)),),
        (CallerView("a0", "b0", (2,), (1,), 2), CallerView("h1", "b0", (4,), (1,), 0)),
        ("b0", "a0", "a0"),
    )
    program = unaliased(Program(setup, (), ("x0",)))
    assert _shares_storage(setup) and not _shares_storage(program.setup)
    named, args = build_inputs(program.setup)
    assert args[1] is args[2]  # one object passed twice stays one object
    assert args[0].untyped_storage().nbytes() == args[1].untyped_storage().nbytes() == 16
    assert named["h1"].untyped_storage()._cdata == args[0].untyped_storage()._cdata


# ---------------------------------------------------------------- non-tensor arguments


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_new_scalar_argument_gives_eagers_values(backend):
    """The constants a program takes are part of the guard: a plan never computes with another
    call's scalar."""

    def scaled(x, c, shape):
        return (x * c).reshape(shape)

    compiled = aotspec.compile(scaled, backend=backend)
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    for c, shape in [(2.0, (4,)), (3.0, (4,)), (3, (2, 2)), (True, (4,))]:
        torch.testing.assert_close(compiled(x, c, shape), scaled(x, c, shape), rtol=0, atol=0)
