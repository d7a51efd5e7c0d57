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
- collective: a functional collective (`collectives.py`): values from the process group, fresh
  outputs, like compute.
- ATen-valued: values from ATen's CPU kernel, fresh outputs, like compute, with the table's
  derivative (`var`, `std`, `var_mean`: `r[ops.aten-values.variance]`).

Aten ops outside the table run ATen's own kernels (`aten.py`, `r[ops.aten-values]`): `lookup`
gives them an entry of kind ATen-valued, or view for those whose schema says they return views.

Rules take the schema's arguments positionally, in schema order, keyword-only ones included.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import inspect
from collections.abc import Callable, Iterator

import torch
import torch.utils._pytree as pytree
from attrs import define, evolve, field, frozen
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
from torch.utils._python_dispatch import TorchDispatchMode

from aotspec.errors import InternalError, UnsupportedError

from .opaque import run_opaque

#: The in-place metadata ops as a function calls them, Python's tensor methods (`swapdims_` and
#: `swapaxes_` included): capture and the synthetic bases watch for them.
METADATA_OPS = frozenset(
    getattr(torch._C.TensorBase, name)
    for name in ("t_", "transpose_", "swapdims_", "swapaxes_", "unsqueeze_", "squeeze_")
) | {torch._C.TensorBase.as_strided_}


#: Compute ops whose kernel, and meta kernel, clone their first argument's whole storage and lay
#: the result out on the clone as that argument is laid out (r[ops.fresh-output.cloned-storage]):
#: the reference interpreter and the fast backend's code both place their results so.
CLONES_STORAGE = frozenset(
    {torch.ops.aten.copy.default, torch.ops.aten.as_strided_scatter.default}
)

#: Namespaces whose ops must be in the table; ops of any other namespace (torch.library custom
#: ops) run opaquely through their own kernel (`r[ops.opaque.schema]`). The functional collectives
#: are in the table, and the rest of their namespaces is refused (r[collectives.ops]).
BUILTIN_NAMESPACES = frozenset(
    {"aten", "prims", "inductor", "fsdp", "_c10d_functional", "_c10d_functional_autograd"}
)


class OpKind(enum.Enum):
    COMPUTE = "compute"
    VIEW = "view"
    INPLACE = "in-place"
    EFFECT = "effect"
    OPAQUE = "opaque"
    #: Values from ATen's CPU kernel (`r[ops.aten-values]`); fresh outputs, like compute.
    ATEN = "aten-valued"
    #: Values from the process group (`r[collectives.values]`); fresh outputs, like compute.
    COLLECTIVE = "collective"
    #: A size computation on the sizes of a symbolic plan (`r[sizes.symbolic.arithmetic]`).
    SIZE = "size"


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


@frozen
class Refusal:
    """Why an aten op outside the table has no entry: `lookup` raises UnsupportedError with it."""

    problem: str
    rule: str


@define
class _AtenValued:
    """How aten ops outside the table get an entry and a derivative rule (`r[ops.aten-values]`,
    `r[ops.aten-derivatives]`): filled in when `aten.py` and `aten_autograd.py` are imported, as
    importing `ops.py` fills the table."""

    #: overload -> its OpEntry, or a Refusal.
    entry: Callable | None = None
    #: overload -> its derivative rule.
    derivative: Callable | None = None


ATEN_VALUED = _AtenValued()
#: Ops PyTorch defines only once some module is imported (FSDP's `fsdp.copy_`), by qualified name:
#: `lookup` finds them when a program calls them, without importing that module here.
DEFINED_ON_IMPORT: dict[str, tuple[OpKind, Callable, str]] = {}


def qualified_name(overload: torch._ops.OpOverload) -> str:
    """`aten.add.Tensor`, `inductor.resize_storage_bytes_.default`; for Python's arithmetic on
    sizes, `operator.mul`, `torch.sym_max`."""
    if not isinstance(overload, torch._ops.OpOverload):
        module = overload.__module__.removeprefix("_")  # `_operator` is `operator`
        return f"{module}.{overload.__name__}"
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


def aten_valued(rule: Callable, *overloads) -> None:
    """Register each overload as an op of the table whose values are ATen's CPU kernel's, which
    `rule` (`aten.run_aten`) computes; its derivative, and so what autograd saves for it, stays
    the table's (`r[ops.aten-values.variance]`)."""
    for overload in overloads:
        _register(overload, OpKind.ATEN, rule, "fresh output (ATen's values)")


def view(*overloads):
    """Register `rule` (Layout, *args) -> Layout | tuple[Layout, ...] as a view op."""

    def register(rule):
        for overload in overloads:
            _register(overload, OpKind.VIEW, _keeping_bits(rule), "output views input 0")
        return rule

    return register


def _keeping_bits(rule: Callable) -> Callable:
    """r[memory.layout.conj-neg]: a view of the table keeps its input's conjugate and negative
    bits."""

    def keeping(layout, *args):
        result = rule(layout, *args)
        kept = {"conj": layout.conj, "neg": layout.neg}
        if isinstance(result, tuple):
            return tuple(evolve(r, **kept) for r in result)
        return evolve(result, **kept)

    return keeping


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
    """Register `rule` (ledger, *args) as an op acting on storages and tensors directly;
    `relayout_as`: for an in-place metadata op, the view op whose layout it gives its input."""

    def register(rule):
        _register(overload, OpKind.EFFECT, rule, description, relayout_as)
        return rule

    return register


def collective(*overloads):
    """Register `rule` (overload, meta, *args) as a functional collective: it returns fresh
    outputs holding the process group's values (`r[collectives.fresh-output]`)."""

    def register(rule):
        for overload in overloads:
            _register(overload, OpKind.COLLECTIVE, rule, "fresh output (the group's values)")
        return rule

    return register


def size_op(*targets):
    """Register `rule` (*args) -> number as a computation on sizes: a size op (an aten
    overload) or Python's arithmetic on sizes (`r[sizes.symbolic.arithmetic]`)."""

    def register(rule):
        for target in targets:
            if target in OP_TABLE:
                raise ValueError(f"{target} is registered twice in the op table")
            OP_TABLE[target] = OpEntry(target, OpKind.SIZE, rule, "a number")
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
    tracing them on fake tensors records the backward graph. A rule with a keyword parameter
    `needed` also gets, per tensor leaf of the arguments, whether it wants a gradient.
    """

    def register(rule):
        # A rule with a `needed` parameter is told which tensor leaves want a gradient.
        rule.takes_needed = "needed" in inspect.signature(rule).parameters
        for overload in overloads:
            if overload in DERIVATIVES or overload in NONDIFFERENTIABLE:
                raise ValueError(f"{qualified_name(overload)} has two derivative rules")
            DERIVATIVES[overload] = rule
        return rule

    return register


def derivative_of(overload) -> Callable | None:
    """The op's derivative rule: the table's, else, for an aten op outside the table, eager's
    (`r[ops.aten-derivatives]`); None for an op without one."""
    if overload in DERIVATIVES:
        return DERIVATIVES[overload]
    if _is_aten(overload) and overload not in OP_TABLE and ATEN_VALUED.derivative is not None:
        return ATEN_VALUED.derivative(overload)
    return None


def _is_aten(overload) -> bool:
    return isinstance(overload, torch._ops.OpOverload) and overload.namespace == "aten"


def call_with(overload: torch._ops.OpOverload, bound: list):
    """`overload` called on its arguments in schema order, keyword-only ones by name."""
    positional, keyword = [], {}
    for argument, value in zip(overload._schema.arguments, bound, strict=True):
        if argument.kwarg_only:
            keyword[argument.name] = value
        else:
            positional.append(value)
    return overload(*positional, **keyword)


def call_rule(rule: Callable, grad, out, bound: list, needed: tuple[bool, ...]):
    """`rule(grad, out, *bound)`; a rule that `takes_needed` also gets which tensor leaves of the
    arguments want a gradient."""
    if getattr(rule, "takes_needed", False):
        return rule(grad, out, *bound, needed=needed)
    return rule(grad, out, *bound)


class _ReadsOf(TorchDispatchMode):
    """Notes whether any op runs on `watched` itself (reading its sizes is not running an op)."""

    def __init__(self, watched: torch.Tensor):
        super().__init__()
        self.watched = watched
        self.read = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.read |= any(leaf is self.watched for leaf in pytree.tree_leaves((args, kwargs)))
        return func(*args, **kwargs)


_READS_FIRST_ARGUMENT: dict[torch._ops.OpOverload, bool] = {}


def derivative_reads_first_argument(overload, bound: list) -> bool:
    """Whether the op's derivative rule, asked for every gradient, reads the values of its first
    argument (`mul`'s does, for the other operand's gradient; `add`'s and `sigmoid`'s do not):
    what eager's in-place variant of the op copies before it writes
    (`r[functionalize.writes.original-part]`). Found once per overload, by running the rule on
    meta tensors shaped like `bound` (the op's arguments in schema order)."""
    if overload not in _READS_FIRST_ARGUMENT:
        rule = derivative_of(overload)
        read = False
        if rule is not None:
            with disable_proxy_modes_tracing(), unset_fake_temporarily():
                metas = pytree.tree_map_only(torch.Tensor, _meta_like, bound)
                out = call_with(overload, metas)
                grad = pytree.tree_map_only(torch.Tensor, torch.empty_like, out)
                leaves = pytree.tree_leaves(metas)
                needed = tuple(True for leaf in leaves if isinstance(leaf, torch.Tensor))
                with _ReadsOf(metas[0]) as reads:
                    call_rule(rule, grad, out, metas, needed)
                read = reads.read
        _READS_FIRST_ARGUMENT[overload] = read
    return _READS_FIRST_ARGUMENT[overload]


def _meta_like(value: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")


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


@define
class Refusals:
    """r[ops.unsupported-all]: what `aotspec.check` has found refused so far. While it runs,
    `lookup` notes each refused op here and gives it a stand-in entry, so that the compile goes
    on to the backward, whose refusals are noted too."""

    errors: list[UnsupportedError] = field(factory=list)
    #: The ops refused, which stand in as ops without a gradient.
    ops: set = field(factory=set)

    def note(self, error: UnsupportedError) -> None:
        if all(error.problem != known.problem for known in self.errors):
            self.errors.append(error)


_REFUSALS: contextvars.ContextVar[Refusals | None] = contextvars.ContextVar(
    "aotspec_refusals", default=None
)


@contextlib.contextmanager
def collecting_refusals() -> Iterator[Refusals]:
    """Within: refused ops are noted (`Refusals`) rather than raised."""
    refusals = Refusals()
    token = _REFUSALS.set(refusals)
    try:
        yield refusals
    finally:
        _REFUSALS.reset(token)


def refuse(error: UnsupportedError, overload=None, located: bool = True) -> None:
    """Raise `error`; while `aotspec.check` collects refusals, note it instead (and `overload`,
    the op it refuses), unless it refuses that op again at no source line of the user's."""
    refusals = _REFUSALS.get()
    if refusals is None:
        raise error
    if located or overload not in refusals.ops:
        refusals.note(error)
    if overload is not None:
        refusals.ops.add(overload)


def refused(overload) -> bool:
    """Whether `aotspec.check` refused `overload` already: it stands in without a gradient."""
    refusals = _REFUSALS.get()
    return refusals is not None and overload in refusals.ops


def _stand_in(overload) -> OpEntry:
    def never_run(*args, **kwargs):
        raise InternalError(f"{overload} was refused, and its stand-in ran")

    return OpEntry(overload, OpKind.ATEN, never_run, "refused: a stand-in while checking")


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
    if _is_aten(overload) and ATEN_VALUED.entry is not None:
        entry = ATEN_VALUED.entry(overload)
        if not isinstance(entry, Refusal):
            return entry
        error = UnsupportedError(
            f"op {qualified_name(overload)} ({where}) {entry.problem}", rule=entry.rule, fix=_FIX
        )
        refuse(error, overload, located=where.startswith("called from"))
        return _stand_in(overload)
    name = (
        qualified_name(overload) if isinstance(overload, torch._ops.OpOverload) else repr(overload)
    )
    refuse(
        UnsupportedError(
            f"op {name} ({where}) is not in the reference op table", rule="ops.table", fix=_FIX
        ),
        overload,
        located=where.startswith("called from"),
    )
    return _stand_in(overload)


_FIX = (
    "rewrite the program with ops listed in specs/ops.md, compute this part outside the "
    "compiled function, or register the op as a custom op with torch.library (schema, CPU "
    "kernel, fake kernel) so it runs opaquely"
)
