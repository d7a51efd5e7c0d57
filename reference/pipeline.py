"""The compile pipeline: a user's function and its arguments become one frozen `Plan`.

    capture ─▶ functionalize ─▶ rule checks ─▶ differentiate (joint graph, partition)
            ─▶ inline saved-tensor hooks ─▶ Plan

Each pass hands the next a typed record (`CapturedProgram` and `FunctionalProgram` of
`program_records.py`, `Differentiated` of `plan_records.py`). The rule checks between them reject
programs outside the specification before any input is touched
(`r[functionalize.errors-before-running]`). Both runtimes run the `Plan` (`plan_records.py`): the
reference's (`compiled.py`) and the fast backend's (`aotspec.fast`), through one skeleton
(`runtime.py`), which import the records and none of the passes.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Iterator

import torch
import torch.utils._pytree as pytree
from attrs import evolve, frozen
from torch.fx._lazy_graph_module import _use_lazy_graph_module

from aotspec.errors import UnsupportedError

from .aten import shapes_from_arguments
from .autograd import AliasedInputsWritten, differentiate
from .capture import capture, grad_enabled, hooks_silenced_while_tracing
from .dynamic import size_binding, symbolic_inputs, symbolic_sizes
from .functionalize import functionalize
from .hooks import FILTERS as HOOK_FILTERS
from .hooks import SavedTensorHooks, inline_hooks
from .plan_records import Placement, Plan
from .program_records import CallerStorage, FunctionalProgram, OutputIsInput, Rebind
from .synthetic_bases import SyntheticBases

_log = logging.getLogger("aotspec")

#: What the front door (`aotspec.api`) takes from the passes: the hooks a call may be made under.
__all__ = ["HOOK_FILTERS", "HooksRequest", "SavedTensorHooks", "build_plan", "trace_symbolically"]


@frozen
class HooksRequest:
    """The saved-tensor hooks active around a call, and how the caller asked to apply them."""

    hooks: SavedTensorHooks
    #: "donated", "no_static" or "all" (`r[hooks.filter.donated]` and its siblings).
    hooks_filter: str
    #: Flat indices of parameters and inputs marked static (`r[hooks.filter.no-static]`).
    static_inputs: frozenset[int]
    placement: Placement


def build_plan(
    fn,
    args: tuple,
    kwargs: dict,
    tensors: list[torch.Tensor],
    stolen: frozenset[int],
    hooks: HooksRequest | None,
) -> Plan:
    """The plan of `fn(*args, **kwargs)`, specialized to its flat `tensors` and grad mode.
    Every rule check raises here, before the runtime touches an input
    (`r[functionalize.errors-before-running]`)."""
    bases = SyntheticBases()
    while True:
        try:
            # r[capture.data-dependent.shapes-from-arguments]: every pass traces on fakes.
            # Graph modules generate their Python code when it is first read or run, not at
            # every trace and graph edit (as under Dynamo): the passes read nodes, not code.
            with shapes_from_arguments(), _use_lazy_graph_module(True), _collected_after():
                return _build_plan(fn, args, kwargs, tensors, stolen, hooks, bases)
        except AliasedInputsWritten as written:
            # r[autograd.input-writes.synthetic-base]: compile them as views of their base; each
            # round merges a group (or raises), so the loop ends.
            bases = bases.merged(written.inputs, tensors)


@contextlib.contextmanager
def _collected_after() -> Iterator[None]:
    """Inside, the garbage collector does not run: tracing makes thousands of objects in
    reference cycles (fx nodes and their graph, fake tensors and their mode), and each of the
    collector's passes while the passes trace walks again those still in use. What they leave
    is collected at the collector's next pass, after (a fuzz program's collections: 2.3 ms of
    CPU, 1.6 after). No tensor the caller can observe is freed later for it: the caller holds
    every one it passed while the plan is built, and the plan's are made after."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def trace_symbolically(
    fn,
    args: tuple,
    kwargs: dict,
    tensors: list,
    dims: list,
    numbers: frozenset[int],
    facts: tuple,
    stolen: frozenset[int],
) -> Plan | None:
    """r[sizes.symbolic.scope]: the plan of `fn(*args, **kwargs)` traced with the `dims` of
    its flat `tensors` and its number leaves at positions `numbers` as symbols (`facts`: the
    tensors', from `input_facts`), or None where the call is planned at its sizes instead: no
    size is a symbol, two inputs share a storage, or the program needs a number where a size is
    a symbol (a value read as a number, a relation tracing cannot keep as a guard)."""
    if not (any(dims) or numbers):
        return None
    if any(fact[4] != i or fact[8] != i for i, fact in enumerate(facts)):
        return None
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    numbered = sorted(numbers)
    fakes, symbols, shape_env = symbolic_inputs(tensors, dims, [leaves[i] for i in numbered])
    as_fake = {id(t): fake for t, fake in zip(tensors, fakes, strict=True)}
    traced = [as_fake.get(id(leaf), leaf) for leaf in leaves]
    for position, symbol in zip(numbered, symbols, strict=True):
        traced[position] = symbol
    fake_args, fake_kwargs = pytree.tree_unflatten(traced, spec)
    try:
        plan = build_plan(fn, fake_args, fake_kwargs, fakes, stolen, None)
    except Exception as error:  # noqa: BLE001 (the call's own sizes are traced next)
        _log.info("planned at the call's sizes: symbolic tracing failed (%s)", error)
        return None
    if plan.bases.groups:
        return None
    plan = evolve(plan, symbolic=symbolic_sizes(shape_env, tuple(numbered)))
    # an input whose storage's bytes are no expression of its sizes (a storage resized to 0
    # bytes) makes a plan that does not serve even the call it was traced for
    return plan if size_binding(plan, facts, leaves) is not None else None


def _build_plan(
    fn, args: tuple, kwargs: dict, tensors: list, stolen, hooks, bases: SyntheticBases
) -> Plan:
    if bases.groups:
        fn, args, kwargs, traced = bases.program(fn, args, kwargs, tensors)
        stolen = frozenset(bases.program_index(i) for i in stolen)
        if hooks is not None:
            static = frozenset(bases.program_index(i) for i in hooks.static_inputs)
            hooks = evolve(hooks, static_inputs=static)
        tensors = bases.inputs(tensors)
    plan = _build_program_plan(fn, args, kwargs, tensors, stolen, hooks)
    if not bases.groups:
        return plan
    bases = evolve(bases, returned=tuple(traced.returned), relayouts=tuple(traced.relayouts))
    return evolve(plan, bases=bases)


def _build_program_plan(fn, args, kwargs, tensors, stolen, hooks) -> Plan:
    # r[hooks.compiled.traced]: hooks entered inside the function cannot be placed.
    with hooks_silenced_while_tracing(rule="hooks.compiled.traced"):
        program = capture(fn, args, kwargs)
        tensors = as_after_requires_grad(program.requires_grad_inputs, tensors)
        functional = functionalize(program, tensors)
        _check_stolen(functional, stolen)
        needs_grad = [i for i, meta in enumerate(functional.inputs) if meta.requires_grad]
        if not (needs_grad and records_autograd(functional)):
            return Plan(functional)
        _check_grad_input_mutations(functional, needs_grad)
        plan = Plan(functional, differentiate(functional, tensors))
        _check_rebound_grad_inputs(functional, plan.differentiated.grad_inputs)
        if hooks is None:
            return plan
        return inline_hooks(
            plan, hooks.hooks, hooks.hooks_filter, hooks.static_inputs, hooks.placement
        )


def as_after_requires_grad(flipped: frozenset[int], tensors: list) -> list:
    """r[autograd.requires-grad-inside]: the inputs as the program sees them, the ones it calls
    `requires_grad_()` on as leaves that require grad (one stand-in per tensor object)."""
    if not flipped:
        return tensors
    stand_ins = {id(tensors[i]): tensors[i].detach().requires_grad_() for i in flipped}
    return [stand_ins.get(id(t), t) for t in tensors]


def records_autograd(functional: FunctionalProgram) -> bool:
    """r[autograd.grad-mode-inside]: whether some op of the program runs with grad mode on, which
    it does when the call is made with grad mode on or an op runs inside `torch.enable_grad()`."""
    nodes = functional.captured.graph.nodes
    return torch.is_grad_enabled() or any(grad_enabled(node) for node in nodes)


def _check_grad_input_mutations(functional: FunctionalProgram, needs_grad: list[int]) -> None:
    # r[autograd.input-writes.set]: set_ of an input that requires grad only under no_grad().
    rebound = sorted(i for i in needs_grad if i in functional.rebound_with_grad)
    if rebound:
        raise UnsupportedError(
            f"flat inputs {rebound} require grad and the program rebinds them with set_ with "
            "grad mode on",
            rule="autograd.input-writes.set",
            fix="set_ such inputs under torch.no_grad() (as FSDP does), rebind them outside the "
            "compiled function, or call it under torch.no_grad()",
        )


def _check_rebound_grad_inputs(functional: FunctionalProgram, grad_inputs: tuple[int, ...]):
    """r[autograd.no-grad-set]: an input the program's gradients reach keeps its identity, so its
    sizes and dtype, through a set_."""
    for step in functional.epilogue:
        entry = functional.inputs[step.input_index]
        if not (isinstance(step, Rebind) and step.input_index in grad_inputs):
            continue
        new, old = step.layout, entry.layout
        if (new.sizes, new.dtype) != (old.sizes, old.dtype):
            raise UnsupportedError(
                f"set_ gives flat input {step.input_index}, which requires grad and which the "
                f"program's gradients reach, sizes {new.sizes} and dtype {new.dtype} where it had "
                f"{old.sizes} and {old.dtype}",
                rule="autograd.no-grad-set",
                fix="set_ a tensor that requires grad only to a source of its own sizes and "
                "dtype, or read it only through the source after the set_",
            )


def _check_stolen(functional: FunctionalProgram, stolen: frozenset[int]) -> None:
    """r[boxed.steal.read-only]: a stolen input is only read: the caller gave it away, so nothing
    may reach it afterwards."""
    touched = set()
    for step in functional.epilogue:
        touched.add(step.input_index)
        if isinstance(step, Rebind) and isinstance(step.storage, CallerStorage):
            touched.add(step.storage.input_index)
    for output in functional.outputs:
        if isinstance(output, OutputIsInput):
            touched.add(output.input_index)
        elif isinstance(output.storage, CallerStorage):
            touched.add(output.storage.input_index)
    for call in functional.custom_calls.values():  # written by a custom Function's backward
        touched.update(write.input_index for _, write in call.writes if write is not None)
    storages_of_stolen = {functional.inputs[i].storage for i in stolen}
    bad = sorted(i for i in touched if functional.inputs[i].storage in storages_of_stolen)
    if bad:
        raise UnsupportedError(
            f"flat inputs {bad} of a stolen list are written, resized, rebound or returned",
            rule="boxed.steal.read-only",
            fix="steal only lists whose tensors the function reads (activations handed over to "
            "be freed)",
        )
