"""The op table: one small entry per aten op, saying what the op computes and what it aliases.

Four kinds of entry (`specs/ops.md` lists every op with its kind):

- compute: a pure function of values. Its rule gets numpy arrays (reduced-precision floats already
  widened to float32, `r[ops.opmath]`) and returns arrays; each output gets a fresh storage whose
  dtype, sizes and strides are those PyTorch's meta kernel computed at capture
  (`r[ops.fresh-output]`).
- view: a function of layouts. Its rule gets the input's Layout and returns the output's; the
  output shares the input's storage (`r[aliasing.view.shares-storage]`).
- in-place: a compute op's values written into the first argument, which is returned
  (`r[aliasing.inplace.writes-through]`).
- effect: an op that changes storage identity or size (`copy_`, `set_`, `resize_storage_bytes_`);
  its rule gets the interpreter's tensors and ledger and acts on them.

Rules take the schema's arguments positionally, in schema order, keyword-only ones included.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import torch
from attrs import frozen

from aotspec.errors import UnsupportedError

from .opaque import run_opaque

#: Namespaces whose ops must be in the table; ops of any other namespace (torch.library custom
#: ops) run opaquely through their own kernel (`r[ops.opaque.schema]`).
BUILTIN_NAMESPACES = frozenset({"aten", "prims", "inductor", "fsdp"})


class OpKind(enum.Enum):
    COMPUTE = "compute"
    VIEW = "view"
    INPLACE = "in-place"
    EFFECT = "effect"
    OPAQUE = "opaque"


@frozen
class OpEntry:
    """One op of the table (`r[ops.table]`): its kind, its rule (values, layouts or effects, by
    kind), and what it aliases or mutates."""

    overload: torch._ops.OpOverload
    kind: OpKind
    rule: Callable
    #: What the op aliases or mutates, in words, for specs/ops.md.
    effect: str
    #: For an in-place op, the functional op it writes back (`add` for `add_`); for an in-place
    #: metadata op (an effect), the view op whose layout it takes (`t` for `t_`).
    functional: torch._ops.OpOverload | None = None

    @property
    def name(self) -> str:
        return qualified_name(self.overload)

    @property
    def relayouts(self) -> bool:
        """An in-place metadata op (`t_`): its input reads its own storage through a new layout
        (`r[aliasing.metadata.relayout]`)."""
        return self.kind is OpKind.EFFECT and self.functional is not None


OP_TABLE: dict[torch._ops.OpOverload, OpEntry] = {}
#: Ops PyTorch defines only once some module is imported (FSDP's `fsdp.copy_`), by qualified name:
#: `lookup` finds them when a program calls them, without importing that module here.
DEFINED_ON_IMPORT: dict[str, tuple[OpKind, Callable, str]] = {}


def qualified_name(overload: torch._ops.OpOverload) -> str:
    """`aten.add.Tensor`, `inductor.resize_storage_bytes_.default`."""
    packet = overload.overloadpacket
    return f"{packet._qualified_op_name.replace('::', '.')}.{overload._overloadname}"


def _register(overload, kind: OpKind, rule: Callable, effect: str, functional=None) -> None:
    if overload in OP_TABLE:
        raise ValueError(f"{qualified_name(overload)} is registered twice in the op table")
    OP_TABLE[overload] = OpEntry(overload, kind, rule, effect, functional)


def compute(*overloads):
    """Register `rule` as the value semantics of each overload."""

    def register(rule):
        for overload in overloads:
            _register(overload, OpKind.COMPUTE, rule, "fresh output")
        return rule

    return register


def view(*overloads):
    """Register `rule` (Layout, *args) -> Layout | tuple[Layout, ...] as a view op."""

    def register(rule):
        for overload in overloads:
            _register(overload, OpKind.VIEW, rule, "output views input 0")
        return rule

    return register


def inplace(inplace_overload, functional_overload) -> None:
    """`x.op_(...)` is `x.copy_(op(x, ...))`, returning `x`
    (`r[aliasing.inplace.writes-through]`)."""
    functional = OP_TABLE[functional_overload]
    _register(
        inplace_overload,
        OpKind.INPLACE,
        functional.rule,
        "writes input 0, returns it",
        functional_overload,
    )


def effect(overload, description: str, relayout_as=None):
    """Register `rule` (machine, *args) as an op acting on storages and tensors directly;
    `relayout_as`: for an in-place metadata op, the view op whose layout it gives its input."""

    def register(rule):
        _register(overload, OpKind.EFFECT, rule, description, relayout_as)
        return rule

    return register


def effect_defined_on_import(name: str, description: str):
    """`effect` for an op PyTorch defines only once its module is imported, named `name`."""

    def register(rule):
        if name in DEFINED_ON_IMPORT:
            raise ValueError(f"{name} is registered twice in the op table")
        DEFINED_ON_IMPORT[name] = (OpKind.EFFECT, rule, description)
        return rule

    return register


# ---------------------------------------------------------------- derivatives

#: overload -> its vector-Jacobian product rule (see `derivative`).
DERIVATIVES: dict[torch._ops.OpOverload, Callable] = {}
#: overloads whose outputs carry no gradient (comparisons, creation, integer rounding, ...).
NONDIFFERENTIABLE: set[torch._ops.OpOverload] = set()


def derivative(*overloads):
    """Register `rule(grad, out, *args)`, the vector-Jacobian product of each overload.

    `grad` is the gradient flowing into the op's output (a tuple for multi-output ops, whose
    entries may be None), `out` the op's output, `args` its schema arguments in order. The rule
    returns a tuple with one entry per schema argument: the gradient for a tensor argument (same
    shape and dtype as the argument), or None. Rules are written with torch ops on tensors, so
    tracing them on fake tensors records the backward graph.
    """

    def register(rule):
        for overload in overloads:
            if overload in DERIVATIVES or overload in NONDIFFERENTIABLE:
                raise ValueError(f"{qualified_name(overload)} has two derivative rules")
            DERIVATIVES[overload] = rule
        return rule

    return register


def nondifferentiable(*overloads) -> None:
    """Declare that these ops' outputs never carry a gradient."""
    for overload in overloads:
        if overload in DERIVATIVES or overload in NONDIFFERENTIABLE:
            raise ValueError(f"{qualified_name(overload)} has two derivative rules")
        NONDIFFERENTIABLE.add(overload)


def bind(schema: torch.FunctionSchema, args, kwargs) -> list:
    """The op's arguments in schema order, defaults filled in."""
    bound = []
    for i, argument in enumerate(schema.arguments):
        if i < len(args) and not argument.kwarg_only:
            bound.append(args[i])
        elif argument.name in kwargs:
            bound.append(kwargs[argument.name])
        elif argument.has_default_value():
            bound.append(argument.default_value)
        else:
            bound.append(None)
    return bound


def lookup(overload, where: str) -> OpEntry:
    """The table entry for `overload`, or UnsupportedError naming the op and the user's line."""
    if overload in OP_TABLE:
        return OP_TABLE[overload]
    if (
        isinstance(overload, torch._ops.OpOverload)
        and qualified_name(overload) in DEFINED_ON_IMPORT
    ):
        kind, rule, effect = DEFINED_ON_IMPORT[qualified_name(overload)]
        return OpEntry(overload, kind, rule, effect)
    if (
        isinstance(overload, torch._ops.OpOverload)
        and overload.namespace not in BUILTIN_NAMESPACES
    ):
        return OpEntry(
            overload, OpKind.OPAQUE, run_opaque, "as its schema's alias annotations say"
        )
    name = (
        qualified_name(overload) if isinstance(overload, torch._ops.OpOverload) else repr(overload)
    )
    raise UnsupportedError(
        f"op {name} ({where}) is not in the reference op table",
        rule="ops.table",
        fix="rewrite the program with ops listed in specs/ops.md, or register the op as a "
        "custom op with torch.library (schema, CPU kernel, fake kernel) so it runs opaquely",
    )
