"""Pointwise programs over several dtypes, for the fusion pass and its Triton kernels.

Generates `pointwise_programs()`: 1-3 caller tensors of float32, float16, bfloat16, int32, int64
or bool, of one shape or of shapes that broadcast to it, some holding -inf, inf, nan or -0.0;
then a chain of pointwise ops as eager PyTorch types them: arithmetic with tensors and scalars
(`alpha` too, non-finite scalars among them), float functions of int tensors, comparisons of int
against float and bool masks, `logical_*`, `where`, casts between every pair of those dtypes,
`clamp` with bounds in either order (min > max gives max everywhere) or infinite, and a random
value nobody reads. Broadcasting makes values of a larger shape read values of a smaller one, so
a group of the fusion pass ends where a fusible reader of another shape follows. Float32 leaves
may require grad: the backward graph is fused too.

Valid by construction: each op's result dtype and shape come from PyTorch's meta kernels; the
model keeps a bound on each value's magnitude (infinite once it may be non-finite), so integer
arithmetic never overflows and a float is cast to an integer only when it is finite and fits
(C++ leaves the other casts undefined, and eager and Triton differ there).
"""

from __future__ import annotations

import math

import torch
from attrs import define, field
from hypothesis import strategies as st

from .program import OPS, Base, Instr, Program, Setup, Var
from .sampling import sampled_from

DTYPES = ["float32", "float16", "bfloat16", "int32", "int64", "bool"]
FLOATS = {"float32", "float16", "bfloat16"}
#: The largest magnitude each integer dtype holds, with room: arithmetic stays below it.
INT_LIMITS = {"int32": 2**30, "int64": 2**62}
#: Shapes a program's values broadcast to, largest first; each family's smaller shapes.
SHAPE_FAMILIES = [
    [(2, 3), (3,), (2, 1), ()],
    [(2, 2, 3), (2, 3), (3,), (1, 3)],
    [(5,), (1,), ()],
    [(4, 1), (4, 2), (2,)],
]
FLOAT_VALUES = [1.0, -1.0, 0.5, 2.0, -0.5, -2.0, 0.0, 1.5, -3.0, 0.25]
SPECIAL_VALUES = [math.nan, -math.inf, math.inf, -0.0]
INT_VALUES = [1, -1, 0, 2, -3, 5, 7, -7, 100]
#: Scalar operands; the non-finite ones are drawn apart, less often.
FLOAT_SCALARS = [2.0, -1.0, 0.5, 0.0, 1.5]
INT_SCALARS = [2, -1, 3, 0]
SPECIAL_SCALARS = [-math.inf, math.inf, math.nan]
CLAMP_BOUNDS = [None, -1.0, 0.0, 0.5, 2.0, -math.inf, math.inf]
ALPHAS = [1, 2, -1]
FLOAT16_MAX = 65504.0
TRANSCENDENTAL = {"exp", "sin", "sqrt", "sigmoid"}
#: Ops whose result jumps where their operand crosses a value: they read exact values only.
JUMPING = {"floor", "ceil", "logical_not", "isnan"}

COMPARISONS = ["lt", "le", "gt", "ge", "eq", "ne"]
#: Bounds of each float function's result given its operand's bound (inf: any value at all).
_BOUNDED = {"sigmoid": lambda b: 1.0, "floor": lambda b: b + 1, "ceil": lambda b: b + 1}
_BOUNDED |= {"abs": lambda b: b, "neg": lambda b: b, "relu": lambda b: b, "clone": lambda b: b}


@define
class _Value:
    dtype: str
    shape: tuple[int, ...]
    #: Every element's magnitude is at most this; math.inf: it may be anything, inf or nan too.
    bound: float
    requires_grad: bool = False
    #: Computed without transcendental functions, whose last bits differ between Triton's math
    #: library and PyTorch's: ops whose result jumps (comparisons, floor, casts to integers)
    #: read only exact values, so that the kernels' results stay within assert_close's
    #: tolerances of eager's.
    exact: bool = True


@define
class _Chain:
    values: dict[str, _Value] = field(factory=dict)
    counter: int = 0

    def new_name(self) -> str:
        self.counter += 1
        return f"v{self.counter - 1}"

    def names(self, accept=lambda value: True) -> list[str]:
        return [name for name, value in self.values.items() if accept(value)]


def _meta(value: _Value) -> torch.Tensor:
    dtype = getattr(torch, value.dtype)
    return torch.empty(value.shape, dtype=dtype, device="meta").requires_grad_(value.requires_grad)


def _typed(chain: _Chain, op: str, args: tuple) -> tuple[str, torch.Tensor]:
    """`op(*args)` on meta tensors: its result's dtype name, and the result."""
    meta = OPS[op].run(*(_meta(chain.values[a.name]) if isinstance(a, Var) else a for a in args))
    return str(meta.dtype).removeprefix("torch."), meta


def _result(chain: _Chain, op: str, args: tuple, bound: float) -> Instr:
    """Bind `op(*args)`'s result (dtype, shape and requires_grad from the meta kernel) to a new
    name, whose elements are at most `bound` in magnitude."""
    dtype, meta = _typed(chain, op, args)
    if dtype in INT_LIMITS and bound > INT_LIMITS[dtype]:
        raise AssertionError(f"the generator let {op} overflow {dtype}")
    if dtype == "bool":
        bound = 1.0
    if dtype == "float16" and bound > FLOAT16_MAX:
        bound = math.inf  # rounds to inf
    exact = op not in TRANSCENDENTAL and all(
        chain.values[a.name].exact for a in args if isinstance(a, Var)
    )
    out = chain.new_name()
    chain.values[out] = _Value(dtype, tuple(meta.shape), bound, meta.requires_grad, exact)
    return Instr(op, (out,), args)


def _recent(draw, names: list[str]) -> str:
    recent = draw(st.booleans())
    return draw(sampled_from(names[-2:] if recent else names))


def _scalar(draw, dtype: str):
    """A scalar operand for a `dtype` tensor: an int for an int tensor, one time in three a
    float (which promotes it), and a non-finite float one time in five."""
    special = draw(sampled_from([False] * 4 + [True]))
    if special:
        return draw(sampled_from(SPECIAL_SCALARS))
    if dtype in INT_LIMITS and draw(sampled_from([True, True, False])):
        return draw(sampled_from(INT_SCALARS))
    return draw(sampled_from(FLOAT_SCALARS))


def _bound(chain: _Chain, argument) -> float:
    if isinstance(argument, Var):
        return chain.values[argument.name].bound
    if isinstance(argument, bool):
        return 1.0
    return abs(argument) if math.isfinite(argument) else math.inf


def _fits(chain: _Chain, op: str, args: tuple, bound: float) -> bool:
    """Whether `op(*args)` keeps an integer result within its dtype."""
    dtype, _ = _typed(chain, op, args)
    return dtype not in INT_LIMITS or bound <= INT_LIMITS[dtype]


def _is_bool(chain: _Chain, argument) -> bool:
    return isinstance(argument, Var) and chain.values[argument.name].dtype == "bool"


def _unary(draw, chain: _Chain) -> list[Instr]:
    x = _recent(draw, chain.names())
    value = chain.values[x]
    ops = ["isnan", "logical_not", "exp", "sin", "sqrt", "sigmoid", "reciprocal", "clone"]
    if value.dtype != "bool":  # eager has no bool kernel for these; first, as drawn most often
        ops = ["relu", "neg", "abs", "floor", "ceil", *ops]
    if not value.exact:
        ops = [op for op in ops if op not in JUMPING]
    op = draw(sampled_from(ops))
    bound = _BOUNDED.get(op, lambda b: math.inf)(value.bound)
    return [_result(chain, op, (Var(x),), bound)]


def _arithmetic(draw, chain: _Chain) -> list[Instr]:
    """add, sub (with alpha), mul, div, maximum or minimum of a value and another or a scalar."""
    x = _recent(draw, chain.names())
    op = draw(sampled_from(["sub_alpha", "maximum", "add_alpha", "mul", "minimum", "div"]))
    tensor_only = op in ("maximum", "minimum")
    if tensor_only or draw(st.booleans()):
        other = Var(draw(sampled_from(chain.names())))
    else:
        other = _scalar(draw, chain.values[x].dtype)
    if op == "sub_alpha" and (_is_bool(chain, Var(x)) or _is_bool(chain, other)):
        op = "add_alpha"  # eager refuses to subtract bools
    args = (Var(x), other)
    a, b = _bound(chain, Var(x)), _bound(chain, other)
    if op in ("add_alpha", "sub_alpha"):
        integral = not any(
            isinstance(v, float) or (isinstance(v, Var) and chain.values[v.name].dtype in FLOATS)
            for v in args
        )
        alpha = draw(sampled_from(ALPHAS if integral else ALPHAS + [0.5]))
        args, bound = (*args, alpha), a + abs(alpha) * b
    elif op == "mul":
        bound = math.inf if math.inf in (a, b) else a * b
    elif op == "div":
        bound = math.inf
    else:
        bound = max(a, b)
    if not _fits(chain, op, args, bound):
        op, args, bound = "maximum", (Var(x), Var(x)), a
    return [_result(chain, op, args, bound)]


def _comparison(draw, chain: _Chain) -> list[Instr]:
    """A mask: a value against another (int against float, bool against either) or a scalar,
    or two masks combined."""
    exact = chain.names(lambda value: value.exact)
    x = _recent(draw, exact)
    op = draw(sampled_from(COMPARISONS + ["logical_and", "logical_or"]))
    if op.startswith("logical") or draw(st.booleans()):
        other = Var(draw(sampled_from(exact)))
    else:
        other = _scalar(draw, chain.values[x].dtype)
    return [_result(chain, op, (Var(x), other), 1.0)]


def _where(draw, chain: _Chain) -> list[Instr]:
    """where(mask, a, b), after a comparison that makes the mask when there is none."""
    body = []
    masks = chain.names(lambda value: value.dtype == "bool")
    if not masks:
        body = _comparison(draw, chain)
        masks = body[-1].outs
    mask = _recent(draw, list(masks))
    a = _recent(draw, chain.names())
    b = draw(sampled_from(chain.names()))
    bound = max(_bound(chain, Var(a)), _bound(chain, Var(b)))
    return [*body, _result(chain, "where", (Var(mask), Var(a), Var(b)), bound)]


def _cast(draw, chain: _Chain) -> list[Instr]:
    """`.to(dtype)`: to an integer only from a value that is finite and fits (see the module
    docstring)."""
    x = _recent(draw, chain.names())
    value = chain.values[x]
    targets = [
        dtype
        for dtype in DTYPES
        if dtype != value.dtype
        and (dtype in FLOATS or value.exact)
        and (dtype not in INT_LIMITS or value.bound <= INT_LIMITS[dtype])
    ]
    dtype = draw(sampled_from(targets))
    bound = value.bound + 1 if dtype in FLOATS else value.bound  # rounding up, at most
    return [_result(chain, "to", (Var(x), getattr(torch, dtype)), bound)]


def _clamp(draw, chain: _Chain) -> list[Instr]:
    """clamp with scalar bounds, in either order, infinite ones too."""
    candidates = chain.names(lambda value: value.dtype != "bool")
    if not candidates:
        return _cast(draw, chain)
    x = _recent(draw, candidates)
    low = draw(sampled_from(CLAMP_BOUNDS))
    high = draw(sampled_from(CLAMP_BOUNDS[1:] if low is None else CLAMP_BOUNDS))
    if chain.values[x].dtype in INT_LIMITS:  # integer bounds keep an integer result
        low, high = (None if b is None else int(max(min(b, 9), -9)) for b in (low, high))
    bounds = [abs(b) for b in (low, high) if b is not None]
    # NaN passes through clamp, and an infinite bound may become the value
    bound = max(_bound(chain, Var(x)), *bounds)
    return [_result(chain, "clamp", (Var(x), low, high), bound)]


def _dead(draw, chain: _Chain) -> list[Instr]:
    """torch.rand_like(x) of a float value, which nothing reads: it dies where it is made."""
    floats = chain.names(lambda value: value.dtype in FLOATS)
    x = _recent(draw, floats) if floats else None
    if x is None:
        return _unary(draw, chain)
    return [Instr("rand_like", (chain.new_name(),), (Var(x),))]


STEPS = [_unary, _unary, _arithmetic, _arithmetic, _comparison, _where, _cast, _clamp, _dead]


@st.composite
def _tensor(draw, k: int, shape: tuple[int, ...]) -> Base:
    """Caller tensor `b{k}`: its dtype, values (maybe a special one or two), requires_grad."""
    dtype = draw(sampled_from(["float32", *DTYPES]))  # float32 twice: it may require grad
    numel = math.prod(shape)
    if dtype in FLOATS:
        pool = FLOAT_VALUES
    elif dtype == "bool":
        pool = [True, False]
    else:
        pool = INT_VALUES
    values = draw(st.lists(sampled_from(pool), min_size=numel, max_size=numel))
    if dtype in FLOATS and numel and draw(st.booleans()):
        for _ in range(draw(st.integers(1, 2))):
            values[draw(st.integers(0, numel - 1))] = draw(sampled_from(SPECIAL_VALUES))
    requires_grad = dtype == "float32" and draw(st.booleans())
    return Base(f"b{k}", shape, tuple(values), requires_grad=requires_grad, dtype=dtype)


def _initial_bound(base: Base) -> float:
    finite = all(math.isfinite(v) for v in base.values)
    return max((abs(v) for v in base.values), default=0.0) if finite else math.inf


@st.composite
def pointwise_programs(draw, max_steps: int = 8) -> Program:
    """A chain of pointwise ops over 1-3 tensors of mixed dtypes (see the module docstring)."""
    family = draw(sampled_from(SHAPE_FAMILIES))
    n = draw(st.integers(1, 3))
    # The first tensor has the family's largest shape or a smaller one; the others any of them,
    # so the chain's shape grows where a smaller value meets a larger one.
    bases = [draw(_tensor(k, draw(sampled_from(family)))) for k in range(n)]
    setup = Setup(tuple(bases), (), tuple(base.name for base in bases))
    chain = _Chain()
    for i, base in enumerate(bases):
        chain.values[f"x{i}"] = _Value(
            base.dtype, base.shape, _initial_bound(base), base.requires_grad
        )
    body: list[Instr] = []
    steps = 0
    while steps < 2 or (steps < max_steps and draw(sampled_from([False] + [True] * 4))):
        body += draw(sampled_from(STEPS))(draw, chain)
        steps += 1
    read = {a.name for instr in body for a in instr.args if isinstance(a, Var)}
    dead = {instr.outs[0] for instr in body if instr.op == "rand_like"}
    made = [out for instr in body for out in instr.outs if out not in dead]
    last = made[-1] if made else "x0"
    unread = [v for v in made if v not in read and v != last]
    with_grad = [v for v in made if chain.values[v].requires_grad]  # then a backward runs
    returns = [last, *draw(st.lists(sampled_from(made or ["x0"]), max_size=2)), *unread[:1]]
    returns += with_grad[-1:]
    return Program(setup, tuple(body), tuple(dict.fromkeys(returns)))
