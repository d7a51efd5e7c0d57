"""Differential tests of the fused path: the fast backend with Triton kernels (AOTSPEC_TRITON=1,
on CPU under TRITON_INTERPRET=1) against the reference, on random programs.

Generators: `pointwise_programs()` (chains over float32, float16, bfloat16, int32, int64 and
bool: comparisons of int against float, bool masks, `where`, casts, special values and
constants, clamp with min > max, broadcasting that ends a group where a reader of another shape
follows, float32 leaves with backward) and `grad_programs()` (their backward graphs fuse too).

Each program runs through the reference, then through the fast backend on the plan the
reference built (so both run the same graphs), each on fresh caller tensors; the observables of
`compare` must agree (values within assert_close's tolerances: Triton's transcendental functions
are not PyTorch's, see fast/triton_kernels.py). And the fused path must have run:

- the fast backend's graphs hold exactly the kernels the fusion pass makes of the plan's graphs
  (fusion requested but not done is a failure, though every value would be right);
- every kernel of a graph that ran launched Triton once per run of its graph
  (`triton_kernels.LAUNCHES`), unless its tensors are empty: a kernel that falls back to torch
  ops is a failure too.

Run: `.venv/bin/python -m pytest tests/test_fusion_differential.py`
(HYPOTHESIS_PROFILE=ci|dev|nightly).
"""

from __future__ import annotations

import contextlib
import os

import pytest
import torch
import torch.fx
from attrs import define, frozen
from hypothesis import given, settings

import aotspec
from aotspec.fast import triton_kernels
from aotspec.fast.codegen import GeneratedCode
from aotspec.fast.fusion import FusedKernel, fuse_pointwise
from aotspec.fuzz import coverage

from harness import call_and_backward, compare
from strategies.grad import grad_programs
from strategies.pointwise import pointwise_programs
from strategies.program import Base, Instr, Program, Setup, Var, as_function, build_inputs, source

# Triton's interpreter computes with numpy, which warns where PyTorch is silent (log of -1, ...).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

EXAMPLES = max(settings.default.max_examples // 3, 10)


@contextlib.contextmanager
def triton_on_cpu():
    """AOTSPEC_TRITON=1 and TRITON_INTERPRET=1 inside, the environment as it was after."""
    saved = {name: os.environ.get(name) for name in ("AOTSPEC_TRITON", "TRITON_INTERPRET")}
    os.environ.update(AOTSPEC_TRITON="1", TRITON_INTERPRET="1")
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _kernels(graph: torch.fx.Graph) -> list[FusedKernel]:
    return [node.target for node in graph.nodes if isinstance(node.target, FusedKernel)]


@define
class _Counted:
    """Stands in for a plan's generated graph code and counts its runs."""

    code: GeneratedCode
    runs: int = 0

    def __call__(self, arguments: list) -> list:
        self.runs += 1
        return self.code(arguments)


class _CountedWhenStored(dict):
    """Stands in for a plan's `backwards_reaching` (the backward's code for a backward that did
    not reach every output, made on first use) and counts the runs of each code it keeps."""

    def __setitem__(self, reached, code: GeneratedCode) -> None:
        super().__setitem__(reached, _Counted(code))


@frozen
class FusedRun:
    #: What differs from the reference; empty when the fused run agrees.
    found: list[str]
    backward: bool
    #: Kernels in the graphs that ran, and Triton launches during the run.
    kernels: int
    launches: int


def fused_divergence(program: Program) -> FusedRun:
    """The fused fast backend's run of `program` against the reference's."""
    options = program.call_options
    reference = aotspec.compile(as_function(program), backend="reference")
    named, args = build_inputs(program.setup)
    try:
        expected = call_and_backward(reference, named, args, **options)
    except aotspec.UnsupportedError:  # outside the spec: test_differential_fast compares errors
        return FusedRun([], False, 0, 0)
    fast = aotspec.compile(as_function(program), backend="fast")
    found = []
    with triton_on_cpu():
        fast.adopt_plans(reference)
        (plan,) = fast.plans.values()
        for name in ("forward", "backward"):
            graph = getattr(plan.plan, name)
            if graph is None:
                continue
            wanted = len(_kernels(fuse_pointwise(graph.graph_module, use_triton=True).graph))
            made = len(_kernels(getattr(plan, name).graph))
            if made != wanted:
                found.append(
                    f"{name}: the fusion pass makes {wanted} kernels of the plan's graph, the "
                    f"fast backend's code runs {made}"
                )
        graphs = {name: _Counted(getattr(plan, name)) for name in ("forward", "backward")}
        plan.forward, plan.backward = graphs["forward"], graphs["backward"]
        plan.backwards_reaching = _CountedWhenStored()
        before = sum(triton_kernels.LAUNCHES.values())
        named, args = build_inputs(program.setup)
        actual = call_and_backward(fast, named, args, **options)
        launches = sum(triton_kernels.LAUNCHES.values()) - before
    kernels = [
        kernel
        for counted in [*graphs.values(), *plan.backwards_reaching.values()]
        if counted.code is not None
        for kernel in _kernels(counted.code.graph) * counted.runs
    ]
    with_elements = sum(kernel.program.numel > 0 for kernel in kernels)
    if launches != with_elements:
        found.append(
            f"Triton launched {launches} kernels, the graphs that ran hold {with_elements} with "
            "elements: a fused path fell back to torch ops"
        )
    return FusedRun(found + compare(expected, actual), actual.backward, len(kernels), launches)


def _check(program: Program, test: str) -> None:
    run = fused_divergence(program)
    coverage.note(test, coverage.program_items(program) + ["backward ran"] * run.backward)
    coverage.note(test, ["fused groups"], run.kernels)
    coverage.note(test, ["kernel launches"], run.launches)
    assert not run.found, (
        "the fused fast backend disagrees with the reference:\n"
        + "\n".join(f"  {line}" for line in run.found)
        + f"\nprogram:\n{source(program)}"
    )


@settings(max_examples=EXAMPLES)
@given(pointwise_programs())
def test_fused_pointwise_chains_agree_with_reference(program):
    """Mixed dtypes, comparisons, where, casts, special values, group boundaries."""
    _check(program, "fused_pointwise_chains")


@settings(max_examples=max(EXAMPLES // 2, 10))
@given(grad_programs())
def test_fused_backward_agrees_with_reference(program):
    """Programs with backward: their forward and backward graphs fused."""
    _check(program, "fused_backward")


def test_a_fallback_to_torch_ops_is_a_failure(monkeypatch):
    """The check itself: kernels that run as torch ops, every value right, are caught."""
    monkeypatch.setattr(FusedKernel, "__call__", lambda self, *t: self.run_torch_ops(*t))
    setup = Setup((Base("b0", (3,), (1.0, -2.0, 3.0)),), (), ("b0",))
    body = (Instr("mul", ("v0",), (Var("x0"), 2.0)), Instr("sin", ("v1",), (Var("v0"),)))
    run = fused_divergence(Program(setup, body, ("v1",)))
    assert run.kernels == 1
    assert run.launches == 0
    assert any("fell back to torch ops" in line for line in run.found), run.found
