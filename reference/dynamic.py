"""Symbolic plans: one plan for every size of a call that keeps what tracing decided
(`specs/sizes.md`).

- `symbolic_inputs` makes the fake tensors and numbers a symbolic plan is traced on, in a shape
  environment of their own;
- `symbolic_sizes` reads off that environment what the trace decided about the sizes;
- `size_binding` says whether a plan serves a call, binding its symbols to the call's numbers;
- `at_sizes` is a plan's records at one call's sizes; its graphs stay as traced, and read their
  sizes from their inputs when they run.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import sympy
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import (
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
)

from .graph import GraphProgram
from .plan_records import Plan, SymbolicSizes
from .symbols import SizeBinding, bind, evaluated, is_symbolic


def symbolic_inputs(
    tensors: Sequence[torch.Tensor], dims: Sequence[frozenset[int]], numbers: Sequence[int]
) -> tuple[list[torch.Tensor], list, ShapeEnv]:
    """Fakes of `tensors` whose `dims` are symbols, and `numbers` as symbols, in a new shape
    environment. r[sizes.symbolic.duck]: sizes of one value at tracing share one symbol (as
    Dynamo's duck sizing does), and sizes 0 and 1 are traced as numbers."""
    # Dynamo's names for a symbol's origin; imported here, as importing Dynamo loads Triton
    from torch._dynamo.source import ConstantSource

    shape_env = ShapeEnv()
    mode = FakeTensorMode(shape_env=shape_env)
    # Its cache of op results costs more than it saves on symbolic sizes: a transformer step's
    # traces take 2.5 s without it, 3.4 s with it
    mode.cache_enabled = False
    fakes = []
    for i, (t, dynamic) in enumerate(zip(tensors, dims, strict=True)):
        kinds = [DimDynamic.DUCK if d in dynamic else DimDynamic.STATIC for d in range(t.dim())]
        context = StatelessSymbolicContext(dynamic_sizes=kinds)
        source = ConstantSource(f"input{i}")
        fake = mode.from_tensor(_alone(t), source=source, symbolic_context=context)
        if t.requires_grad:
            fake.requires_grad_()
            if not t.is_leaf:  # an activation: a tensor with a history, as the call's
                fake = fake.view_as(fake)
        fakes.append(fake)
    symbols = []
    for k, number in enumerate(numbers):
        source = ConstantSource(f"number{k}")
        # r[sizes.symbolic.dynamo]: a number may be below 0 (a dim, a shift), so its symbol, unlike
        # a size's, has no sign and any integer for its range; one equal to a size is its symbol
        symbol = shape_env.create_symbol(number, source, DimDynamic.DUCK, positive=None)
        symbols.append(shape_env.create_symintnode(symbol, hint=number, source=source))
    return fakes, symbols, shape_env


def _alone(t: torch.Tensor) -> torch.Tensor:
    """`t`'s layout on its storage, with no base and no history: a view's sizes are then
    symbols of their own, not expressions of its base's, whose sizes no trace sees."""
    alone = torch.empty(0, dtype=t.dtype, device=t.device)
    with torch.no_grad():
        return alone.set_(t.untyped_storage(), t.storage_offset(), t.shape, t.stride())


def symbolic_sizes(shape_env: ShapeEnv, numbers: tuple[int, ...]) -> SymbolicSizes:
    """What tracing decided about the sizes: the guards and ranges of `shape_env`."""
    ranges = {
        symbol: (bounds.lower, bounds.upper) for symbol, bounds in shape_env.var_to_range.items()
    }
    # each relation over the symbols left: those tracing settled to a number are numbers in it
    relations = (shape_env.simplify(guard.expr) for guard in shape_env.guards)
    guards = tuple(relation for relation in relations if relation is not sympy.true)
    return SymbolicSizes(guards, ranges, numbers)


def size_binding(plan: Plan, facts: tuple, leaves: Sequence) -> SizeBinding | None:
    """r[sizes.symbolic.guard]: the binding of `plan`'s symbols to a call with input `facts`
    (`input_facts`) and flat `leaves`, or None where the plan does not serve that call."""
    binding: SizeBinding = {}
    inputs = plan.functional.inputs
    if len(inputs) != len(facts):
        return None
    for meta, fact in zip(inputs, facts, strict=True):
        dtype, sizes, strides, offset, storage, nbytes, requires_grad, is_leaf, same = fact
        kept = (meta.layout.dtype, meta.storage, meta.requires_grad, meta.is_leaf)
        if kept + (meta.same_object,) != (dtype, storage, requires_grad, is_leaf, same):
            return None
        if len(meta.layout.sizes) != len(sizes):
            return None
        if not bind(_numbers(meta), (*sizes, *strides, offset, nbytes), binding):
            return None
    in_leaves = plan.functional.captured.in_leaves
    traced = [in_leaves[position] for position in plan.symbolic.numbers]
    numbers = [leaves[position] for position in plan.symbolic.numbers]
    if not bind(traced, numbers, binding):
        return None
    # a number argument traced as a number (0 or 1), or one a relation settled, binds nothing:
    # the call's must be it
    if any(_number_at(n, binding) != number for n, number in zip(traced, numbers, strict=True)):
        return None
    return binding if _holds(plan, facts, binding) else None


def _number_at(n, binding: SizeBinding) -> int | None:
    """A traced number argument at `binding`; None where it reads a symbol nothing bound."""
    if not is_symbolic(n):
        return n
    value = sympy.sympify(n.node.expr.xreplace(binding))  # a symbol alone gives its number
    return int(value) if value.is_number else None


def _numbers(meta) -> tuple:
    return (*meta.layout.numbers(), meta.storage_nbytes)


def _holds(plan: Plan, facts: tuple, binding: SizeBinding) -> bool:
    """Whether every input's numbers are the call's at `binding`, every symbol is in its range
    and every relation tracing decided holds."""
    for meta, fact in zip(plan.functional.inputs, facts, strict=True):
        _, sizes, strides, offset, _, nbytes, *_ = fact
        numbers = tuple(evaluated(n, binding) for n in _numbers(meta))
        if numbers != (*sizes, *strides, offset, nbytes):
            return False
    symbolic = plan.symbolic
    for symbol, value in binding.items():
        lowest, highest = symbolic.ranges[symbol]
        if not (bool(lowest <= value) and bool(value <= highest)):
            return False
    return all(bool(guard.xreplace(binding)) for guard in symbolic.guards)


def at_sizes(plan: Plan, binding: SizeBinding, constant: set[int]) -> Plan:
    """r[sizes.symbolic.per-call]: `plan`'s records with every symbol at its number of
    `binding`; the graphs are the plan's own. `constant`: the ids of `plan`'s records found to
    hold no symbol, by this and earlier calls for `plan` (they read as they are at every size,
    so a later call walks only the records that hold symbols)."""
    functional = _at(plan.functional, binding, constant)
    differentiated = _at(plan.differentiated, binding, constant)
    return attrs.evolve(plan, functional=functional, differentiated=differentiated, sizes=binding)


def _at(value, binding: SizeBinding, constant: set[int]):
    if id(value) in constant:
        return value
    new = _numbers_at(value, binding, constant)
    if new is value:
        constant.add(id(value))
    return new


def _numbers_at(value, binding: SizeBinding, constant: set[int]):
    if is_symbolic(value):
        return evaluated(value, binding)
    if isinstance(value, GraphProgram):
        return value  # graphs read their sizes from their inputs
    if isinstance(value, (tuple, list, frozenset)):
        parts = [_at(part, binding, constant) for part in value]
        if all(new is old for new, old in zip(parts, value, strict=True)):
            return value
        return type(value)(parts)
    if isinstance(value, dict):
        parts = {key: _at(part, binding, constant) for key, part in value.items()}
        if all(parts[key] is part for key, part in value.items()):
            return value
        return parts
    if attrs.has(type(value)):
        changes = {}
        for field in attrs.fields(type(value)):
            if not field.init:
                continue
            old = getattr(value, field.name)
            new = _at(old, binding, constant)
            if new is not old:
                changes[field.alias] = new
        return attrs.evolve(value, **changes) if changes else value
    return value
