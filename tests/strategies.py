"""Hypothesis strategies for differential testing: random valid programs over aliased inputs.

A program is data. Its `Setup` says how the caller builds its tensors before the call: float32
bases (some resized to zero bytes), views of them made with `as_strided`, which of those are
passed as arguments, and which the caller only holds (so writes and `set_` can be observed
through aliases the program never sees). Its body is a list of `Instr` records over named
values; `Var` names a value, every other argument is a constant. `as_function` turns a program
into a Python function (a closure interpreting the records), `source` renders it as Python.

Validity is by construction (DESIGN.md section 7): the generator keeps a symbolic model of every
tensor object (storage, sizes, strides, offset) and of every storage (bytes now, bytes when
full), computes view and pointwise layouts with PyTorch's meta kernels (they may differ from
eager only in strides that address nothing, which validity never depends on), and only emits:

- reads and writes of tensors whose storage holds them (never of a zero-byte storage);
- writes to tensors without internal overlap (never through an `expand`ed view), from sources
  that are either disjoint from the destination's memory or exactly the destination's layout
  (eager raises on partial overlap and leaves other overlaps to its kernels' iteration order);
- `as_strided`-based views (slice, select, t, ...) only of tensors in bounds of their storage
  (eager's setStorage check raises otherwise); `view` and viewable `reshape` of any tensor;
- a resize to zero anywhere, and a resize up from zero to the storage's full size immediately
  followed by a `copy_` (or `fill_`) that overwrites every byte, so no uninitialized byte is
  ever read, by the program or by the observer afterwards;
- `set_` with a same-dtype source. A source on a zero storage makes eager grow that storage to
  the source's extent with uninitialized bytes, so the generator follows it at once with the
  resize-and-fill above, or with a resize back to zero; and it never pairs such a source with a
  tensor of the very same sizes and strides (eager raises there).

`programs(compiled=True)` draws only what `aotspec.compile` accepts on top of that: resizes only
of argument objects that `set_` has not moved, and no `set_` that grows a storage.
`grad_programs()` draws programs with backward (leaves that require grad, buffers, a chain of
differentiable ops); its section below says what keeps them valid for eager autograd.

Conventions: `lay` is a `Strided` layout, `v` a variable name, `obj` an index into the model's
objects, `st` an index into its storages, `xs` a list of x.
"""

from __future__ import annotations

import functools
import itertools
import math
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from attrs import define, field, frozen
from hypothesis import strategies as st

ITEMSIZE = 4  # every tensor here is float32

resize_storage_bytes_ = torch.ops.inductor.resize_storage_bytes_
set_source_tensor = torch.ops.aten.set_.source_Tensor

BASE_SHAPES = [(4,), (2, 3), (2, 2, 2), (3, 2)]
SCALARS = [2.0, -1.0, 0.5, 3.0, 0.0]
CLAMP_BOUNDS = [None, -1.0, 0.0, 1.0, 10.0]

# ---------------------------------------------------------------- program data


@frozen(repr=False)
class Var:
    """A value of the program, by name; renders as its name."""

    name: str

    def __repr__(self) -> str:
        return self.name


@frozen
class Base:
    """A contiguous float32 tensor the caller makes; `zeroed`: its storage resized to 0 bytes;
    `requires_grad`: a leaf that requires grad (views the caller makes of it do not leaf)."""

    name: str
    shape: tuple[int, ...]
    values: tuple[float, ...]
    zeroed: bool = False
    requires_grad: bool = False


@frozen
class CallerView:
    """`base.as_strided(sizes, strides, offset)`, made by the caller before any resize;
    `detached`: of `base.detach()` (the same storage, no autograd history)."""

    name: str
    base: str
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    detached: bool = False


@frozen
class Setup:
    bases: tuple[Base, ...]
    views: tuple[CallerView, ...]
    #: Names (of bases or views) passed to the program, in order; a repeated name passes the
    #: same tensor object twice.
    args: tuple[str, ...]


@frozen
class Instr:
    op: str
    #: Names this instruction binds (none for in-place ops and effects).
    outs: tuple[str, ...]
    args: tuple[Any, ...]


@frozen
class Program:
    setup: Setup
    body: tuple[Instr, ...]
    returns: tuple[str, ...]

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(f"x{i}" for i in range(len(self.setup.args)))


# ---------------------------------------------------------------- the ops a program may use


@frozen
class Op:
    #: Runs the op on torch tensors and constants.
    run: Callable[..., Any]
    #: The same call as Python source; gets the arguments (Vars render as their names).
    render: Callable[..., str]


def _slice(x, dim, start, stop, step):
    return x[(slice(None),) * dim + (slice(start, stop, step),)]


def _render_slice(x, dim, start, stop, step) -> str:
    return f"{x!r}[{':, ' * dim}{start}:{stop}:{step}]"


def _method(name: str) -> Op:
    """`x.name(*args)`, rendered the same way."""

    def render(x, *args) -> str:
        return f"{x!r}.{name}({', '.join(map(repr, args))})"

    return Op(lambda x, *args: getattr(x, name)(*args), render)


def _with_alpha(name: str) -> Op:
    """`x.add_(y, alpha=alpha)`, rendered without `alpha` when it is 1."""

    def render(x, y, alpha) -> str:
        return f"{x!r}.{name}({y!r}{'' if alpha == 1 else f', alpha={alpha!r}'})"

    return Op(lambda x, y, alpha: getattr(x, name)(y, alpha=alpha), render)


def _call(qualified: str, fn: Callable) -> Op:
    """`torch.ops....(*args)` or `torch.full(*args)`, rendered by its qualified name."""
    return Op(fn, lambda *args: f"{qualified}({', '.join(map(repr, args))})")


def _render_cat(dim, *xs) -> str:
    return f"torch.cat([{', '.join(map(repr, xs))}], {dim})"


OPS: dict[str, Op] = {
    # views
    **{name: _method(name) for name in ("view", "reshape", "t", "transpose", "permute")},
    **{name: _method(name) for name in ("select", "unsqueeze", "expand", "split")},
    "slice": Op(_slice, _render_slice),
    # in-place
    "add_": _with_alpha("add_"),
    "sub_": _with_alpha("sub_"),
    **{name: _method(name) for name in ("mul_", "clamp_", "zero_", "fill_", "copy_")},
    # effects on storages and tensor objects
    "set_": _call("torch.ops.aten.set_.source_Tensor", set_source_tensor),
    "resize_storage_bytes_": _call(
        "torch.ops.inductor.resize_storage_bytes_", resize_storage_bytes_
    ),
    # fresh outputs
    **{name: _method(name) for name in ("add", "sub", "mul", "neg", "abs", "clamp")},
    "maximum": _call("torch.maximum", torch.maximum),
    "full": _call("torch.full", torch.full),
    # programs with backward: views, fresh outputs, masks
    "squeeze": _method("squeeze"),
    **{name: _method(name) for name in ("relu", "sigmoid", "tanh", "exp", "log", "pow", "clone")},
    **{name: _method(name) for name in ("sum", "mean", "amax", "mm", "gt", "lt")},
    "matmul": _call("torch.matmul", torch.matmul),
    # x * y under torch.no_grad(): a value that carries no gradient (r[capture.grad-mode])
    "no_grad_mul": _call("torch.no_grad()(torch.mul)", torch.no_grad()(torch.mul)),
    # writes under torch.no_grad() into an argument that requires grad (r[autograd.no-grad-input-writes])
    "no_grad_mul_": _call("torch.no_grad()(torch.Tensor.mul_)", torch.no_grad()(torch.Tensor.mul_)),
    "no_grad_copy_": _call("torch.no_grad()(torch.Tensor.copy_)", torch.no_grad()(torch.Tensor.copy_)),
    "where": _call("torch.where", torch.where),
    # torch.cat([xs...], dim), with the dim first among the arguments
    "cat": Op(lambda dim, *xs: torch.cat(xs, dim), _render_cat),
}


# ---------------------------------------------------------------- running and rendering


def build_inputs(
    setup: Setup, dtype: torch.dtype = torch.float32
) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """Fresh caller tensors for `setup`: every named tensor, and the argument list.

    `dtype`: float64 only to rerun a program as a numeric oracle (DESIGN.md section 5)."""
    world: dict[str, torch.Tensor] = {}
    for base in setup.bases:
        t = torch.tensor(base.values, dtype=dtype).reshape(base.shape)
        # A leaf that requires grad is a tensor of its own, as a parameter is: reshape's result is
        # a view, and eager's autograd sends a view-leaf's gradients to its base after a write.
        world[base.name] = t.clone().requires_grad_() if base.requires_grad else t
    for view in setup.views:
        base = world[view.base].detach() if view.detached else world[view.base]
        world[view.name] = base.as_strided(view.sizes, view.strides, view.offset)
    # Views first: as_strided checks bounds, and a zero-byte storage holds nothing.
    for base in setup.bases:
        if base.zeroed:
            resize_storage_bytes_(world[base.name], 0)
    return world, [world[name] for name in setup.args]


def as_function(program: Program) -> Callable:
    """The program as a Python function of its arguments, returning a tuple of its outputs."""

    def program_fn(*xs):
        env = dict(zip(program.params, xs, strict=True))

        def value(arg):
            return env[arg.name] if isinstance(arg, Var) else arg

        for instr in program.body:
            result = OPS[instr.op].run(*map(value, instr.args))
            if isinstance(result, tuple):  # split
                env.update(zip(instr.outs, result, strict=True))
            elif instr.outs:
                env[instr.outs[0]] = result
        return tuple(env[name] for name in program.returns)

    return program_fn


def _render_instr(instr: Instr) -> str:
    call = OPS[instr.op].render(*instr.args)
    if not instr.outs:
        return call
    if instr.op == "split":  # a tuple, even of one
        return f"{''.join(f'{out}, ' for out in instr.outs).rstrip()} = {call}"
    return f"{instr.outs[0]} = {call}"


def setup_source(setup: Setup) -> str:
    """`def make_inputs()`: builds the caller's tensors, returns (named tensors, arguments)."""
    lines = ["def make_inputs():"]
    for base in setup.bases:
        values = list(base.values)
        grad = ".clone().requires_grad_()" if base.requires_grad else ""
        lines.append(f"    {base.name} = torch.tensor({values!r}).reshape({base.shape!r}){grad}")
    for view in setup.views:
        layout = f"{view.sizes!r}, {view.strides!r}, {view.offset}"
        base = f"{view.base}.detach()" if view.detached else view.base
        lines.append(f"    {view.name} = {base}.as_strided({layout})")
    for base in setup.bases:
        if base.zeroed:
            lines.append(f"    torch.ops.inductor.resize_storage_bytes_({base.name}, 0)")
    names = [base.name for base in setup.bases] + [view.name for view in setup.views]
    lines.append(f"    named = {{{', '.join(f'{n!r}: {n}' for n in names)}}}")
    lines.append(f"    return named, [{', '.join(setup.args)}]")
    return "\n".join(lines)


def program_source(program: Program) -> str:
    """`def program(x0, ...)`: the body as straight-line Python."""
    lines = [f"def program({', '.join(program.params)}):"]
    lines += [f"    {_render_instr(instr)}" for instr in program.body]
    returns = "".join(f"{name}, " for name in program.returns)
    lines.append(f"    return ({returns.rstrip(' ')})")
    return "\n".join(lines)


def source(program: Program) -> str:
    return f"{setup_source(program.setup)}\n\n\n{program_source(program)}\n"


# ---------------------------------------------------------------- the generator's model


@frozen
class Strided:
    """Sizes, strides (in elements) and storage offset of a float32 tensor."""

    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @classmethod
    def contiguous(cls, sizes) -> Strided:
        return cls.of(torch.empty(sizes, device="meta"))

    @classmethod
    def of(cls, t: torch.Tensor) -> Strided:
        return cls(tuple(t.shape), tuple(t.stride()), t.storage_offset())

    @property
    def numel(self) -> int:
        return math.prod(self.sizes)

    @property
    def extent_bytes(self) -> int:
        if self.numel == 0:
            return 0
        steps = zip(self.sizes, self.strides, strict=True)
        return (self.offset + sum((n - 1) * s for n, s in steps) + 1) * ITEMSIZE

    def meta(self) -> torch.Tensor:
        """A meta tensor with this layout, for PyTorch's own shape and stride rules."""
        room = torch.empty(max(self.extent_bytes // ITEMSIZE, 1), device="meta")
        return room.as_strided(self.sizes, self.strides, self.offset)

    def footprint(self) -> np.ndarray:
        """The storage elements this layout reads, one per element (repeats if overlapping)."""
        addresses = np.array(self.offset)
        for n, s in zip(self.sizes, self.strides, strict=True):
            addresses = addresses[..., None] + np.arange(n) * s
        return addresses.ravel()

    def overlaps_itself(self) -> bool:
        footprint = self.footprint()
        return np.unique(footprint).size != footprint.size


@define
class _Storage:
    full: int  # bytes while allocated
    nbytes: int  # bytes now: `full`, or 0 after a resize to zero
    # The rest is for programs with backward (`grad_programs`); a storage there is one view family,
    # so these hold for every tensor on it.
    caller: bool = False  # an argument's storage
    requires_grad: bool = False
    #: Autograd saved a tensor on it for the backward: writing it now makes eager's backward
    #: raise ("modified by an inplace operation"), so nothing writes it any more.
    saved: bool = False
    positive: bool = False  # every value on it is > 0 (log and fractional powers may read it)
    #: Distinct argument objects on it that require grad: a write under torch.no_grad() needs
    #: exactly one, whose contents the written values become (r[autograd.no-grad-input-writes.identity]).
    grad_args: int = 0


@define
class _Object:
    """A tensor object: `set_` changes its storage and layout for every name bound to it."""

    storage: int
    lay: Strided
    param: bool = False  # an object the caller passed
    rebound: bool = False  # set_ moved it to another storage or layout
    detached: bool = False  # made from a detach()ed alias: requires no grad, whatever its storage


@define
class Model:
    storages: list[_Storage] = field(factory=list)
    objects: list[_Object] = field(factory=list)
    names: dict[str, int] = field(factory=dict)  # variable -> object
    counter: itertools.count = field(factory=itertools.count)
    #: Draw only what `aotspec.compile` accepts (specs/storage-resize.md, "In compiled programs").
    compiled: bool = False
    #: Boolean masks of programs with backward (for `where`), by name: their shapes.
    masks: dict[str, tuple[int, ...]] = field(factory=dict)

    def new_storage(self, nbytes: int, **flags) -> int:
        self.storages.append(_Storage(nbytes, nbytes, **flags))
        return len(self.storages) - 1

    def bind(self, name: str, storage: int, lay: Strided, param: bool = False) -> None:
        self.objects.append(_Object(storage, lay, param))
        self.names[name] = len(self.objects) - 1

    def new_name(self) -> str:
        return f"v{next(self.counter)}"

    def obj(self, v: str) -> _Object:
        return self.objects[self.names[v]]

    def lay(self, v: str) -> Strided:
        return self.obj(v).lay

    def storage(self, v: str) -> _Storage:
        return self.storages[self.obj(v).storage]

    def in_bounds(self, v: str) -> bool:
        """Readable: between instructions a storage is full and holds values, or has 0 bytes."""
        return self.lay(v).extent_bytes <= self.storage(v).nbytes

    def readable(self, v: str) -> bool:
        return self.in_bounds(v)

    def writable(self, v: str) -> bool:
        return self.in_bounds(v) and not self.lay(v).overlaps_itself()

    def may_read_while_writing(self, src: str, dst: str) -> bool:
        """Eager's overlap rule, made strict: disjoint memory, or exactly dst's layout."""
        a, b = self.obj(src), self.obj(dst)
        if a.storage != b.storage or a.lay == b.lay:
            return True
        return np.intersect1d(a.lay.footprint(), b.lay.footprint()).size == 0

    def covers_storage(self, v: str) -> bool:
        """Writing `v` overwrites every byte of its storage when full."""
        lay, s = self.lay(v), self.storage(v)
        return (
            lay.numel * ITEMSIZE == s.full
            and lay.extent_bytes <= s.full
            and not lay.overlaps_itself()
        )

    def readable_names(self) -> list[str]:
        return [v for v in self.names if self.readable(v)]


def _broadcasts_to(shape, target) -> bool:
    try:
        return tuple(torch.broadcast_shapes(tuple(shape), tuple(target))) == tuple(target)
    except RuntimeError:
        return False


def _broadcastable(a, b) -> bool:
    try:
        torch.broadcast_shapes(tuple(a), tuple(b))
    except RuntimeError:
        return False
    return True


def _shapes_of(numel: int) -> list[tuple[int, ...]]:
    """Shapes of rank 1 to 3 holding `numel` elements."""
    if numel == 0:
        return [(0,), (1, 0), (0, 2)]
    divisors = [d for d in range(1, numel + 1) if numel % d == 0]
    shapes = [(numel,)]
    shapes += [(d, numel // d) for d in divisors]
    pairs = itertools.product(divisors, divisors)
    shapes += [(a, b, numel // (a * b)) for a, b in pairs if numel % (a * b) == 0]
    return shapes


# ---------------------------------------------------------------- drawing views


def _view_ops(lay: Strided, in_bounds: bool) -> list[str]:
    """View ops that eager accepts on this tensor: as_strided-based ones need it in bounds."""
    ops = ["view", "reshape"]
    if not in_bounds:
        return ops
    ndim = len(lay.sizes)
    ops += ["unsqueeze", "expand"]
    if ndim <= 2:
        ops.append("t")
    if ndim >= 1:
        ops += ["slice", "split"]
        if any(n > 0 for n in lay.sizes):
            ops.append("select")
    if ndim >= 2:
        ops += ["transpose", "permute"]
    return ops


@functools.cache
def _viewable(lay: Strided, shape) -> bool:
    try:
        lay.meta().view(shape)
    except RuntimeError:
        return False
    return True


def _draw_view_args(draw, op: str, lay: Strided, may_copy: bool) -> tuple:
    sizes, ndim = lay.sizes, len(lay.sizes)
    dim = st.integers(0, max(ndim - 1, 0))
    if op in ("view", "reshape"):
        shapes = _shapes_of(lay.numel)
        if op == "view" or not may_copy:
            # reshape copies (so reads) when no view exists.
            shapes = [s for s in shapes if _viewable(lay, s)]
        if not shapes:  # rank above 3 and nothing else viewable: flatten a size-1 dim away
            shapes = [tuple(n for n in sizes if n != 1) or (1,)]
        return (draw(st.sampled_from(shapes)),)
    if op == "t":
        return ()
    if op == "transpose":
        return (draw(dim), draw(dim))
    if op == "permute":
        return (tuple(draw(st.permutations(range(ndim)))),)
    if op == "slice":
        d = draw(dim)
        start = draw(st.integers(0, sizes[d]))
        stop = draw(st.integers(start, sizes[d]))
        return (d, start, stop, draw(st.integers(1, 3)))
    if op == "select":
        d = draw(st.sampled_from([d for d in range(ndim) if sizes[d] > 0]))
        return (d, draw(st.integers(-sizes[d], sizes[d] - 1)))
    if op == "unsqueeze":
        return (draw(st.integers(-ndim - 1, ndim)),)
    if op == "expand":
        grown = tuple(draw(st.sampled_from([1, 2, 3])) if n == 1 else n for n in sizes)
        lead = draw(st.lists(st.sampled_from([1, 2]), max_size=1))
        return (tuple(lead) + grown,)
    if op == "split":
        d = draw(dim)
        return (draw(st.integers(1, max(sizes[d], 1))), d)
    raise AssertionError(f"not a view op: {op}")


def _apply_view(op: str, lay: Strided, args: tuple) -> list[Strided]:
    result = OPS[op].run(lay.meta(), *args)
    results = result if isinstance(result, tuple) else (result,)
    return [Strided.of(t) for t in results]


def _draw_view(draw, lay: Strided, in_bounds: bool, may_copy: bool):
    """A view op applicable to `lay`, its arguments, and the layouts of its results."""
    op = draw(st.sampled_from(_view_ops(lay, in_bounds)))
    args = _draw_view_args(draw, op, lay, may_copy=may_copy)
    return op, args, _apply_view(op, lay, args)


# ---------------------------------------------------------------- drawing the setup


@st.composite
def setups(draw) -> Setup:
    n_bases = draw(st.integers(1, 3))
    bases, views, args = [], [], []
    for k in range(n_bases):
        shape = draw(st.sampled_from(BASE_SHAPES))
        numel = math.prod(shape)
        # Distinct values, distinct per base: a misplaced element shows.
        values = tuple(10.0 * k + i - numel // 2 + 0.5 for i in range(numel))
        zeroed = draw(st.sampled_from([False, False, False, True]))
        bases.append(Base(f"b{k}", shape, values, zeroed))
        base_lay = Strided.contiguous(shape)
        # The base itself, or views of it, as arguments: two arguments on one base alias.
        for _ in range(draw(st.integers(1, 2))):
            if draw(st.booleans()):
                args.append(f"b{k}")
                continue
            name = f"a{len(views)}"
            lay = _draw_caller_view(draw, base_lay)
            views.append(CallerView(name, f"b{k}", lay.sizes, lay.strides, lay.offset))
            args.append(name)
    # Aliases the caller keeps but does not pass.
    for _ in range(draw(st.integers(0, 2))):
        k = draw(st.integers(0, n_bases - 1))
        lay = _draw_caller_view(draw, Strided.contiguous(bases[k].shape))
        views.append(CallerView(f"h{len(views)}", f"b{k}", lay.sizes, lay.strides, lay.offset))
    args = list(dict.fromkeys(args))  # each object once, then maybe one passed twice
    if draw(st.sampled_from([False] * 9 + [True])):
        args.append(draw(st.sampled_from(args)))
    args = draw(st.permutations(args))
    return Setup(tuple(bases), tuple(views), tuple(args))


def _draw_caller_view(draw, lay: Strided) -> Strided:
    for _ in range(draw(st.integers(1, 2))):
        _, _, results = _draw_view(draw, lay, in_bounds=True, may_copy=False)
        lay = draw(st.sampled_from(results))
    return lay


def _initial_model(setup: Setup, compiled: bool = False) -> Model:
    model = Model(compiled=compiled)
    storage_of = {}
    lays = {}
    for base in setup.bases:
        nbytes = math.prod(base.shape) * ITEMSIZE
        storage_of[base.name] = model.new_storage(nbytes)
        if base.zeroed:
            model.storages[storage_of[base.name]].nbytes = 0
        lays[base.name] = Strided.contiguous(base.shape)
    for view in setup.views:
        storage_of[view.name] = storage_of[view.base]
        lays[view.name] = Strided(view.sizes, view.strides, view.offset)
    first_param: dict[str, str] = {}
    for i, name in enumerate(setup.args):
        param = f"x{i}"
        if name in first_param:  # the same object passed again
            model.names[param] = model.names[first_param[name]]
        else:
            first_param[name] = param
            model.bind(param, storage_of[name], lays[name], param=True)
    return model


# ---------------------------------------------------------------- drawing instructions


def _step_view(draw, model: Model) -> list[Instr]:
    v = draw(st.sampled_from(list(model.names)))
    in_bounds, readable = model.in_bounds(v), model.readable(v)
    op, args, results = _draw_view(draw, model.lay(v), in_bounds, may_copy=readable)
    obj = model.obj(v)
    copies = op == "reshape" and not _viewable(obj.lay, args[0])
    outs = []
    for lay in results:
        out = model.new_name()
        storage = model.new_storage(lay.numel * ITEMSIZE) if copies else obj.storage
        model.bind(out, storage, lay)
        outs.append(out)
    return [Instr(op, tuple(outs), (Var(v), *args))]


def _draw_other(draw, model: Model, target: str):
    """A scalar, or a tensor that may be read while writing `target` (see _copy_sources)."""
    tensors = _copy_sources(model, target)
    if tensors and draw(st.booleans()):
        return Var(draw(st.sampled_from(tensors)))
    return draw(st.sampled_from(SCALARS))


def _writable_names(model: Model) -> list[str]:
    return [v for v in model.names if model.writable(v)]


def _step_inplace(draw, model: Model) -> list[Instr]:
    target = draw(st.sampled_from(_writable_names(model)))
    op = draw(st.sampled_from(["add_", "mul_", "sub_", "clamp_", "zero_", "fill_"]))
    if op in ("add_", "sub_"):
        args = (_draw_other(draw, model, target), draw(st.sampled_from([1, 2.0])))
    elif op == "mul_":
        args = (_draw_other(draw, model, target),)
    elif op == "clamp_":
        low = draw(st.sampled_from(CLAMP_BOUNDS))
        high = draw(st.sampled_from(CLAMP_BOUNDS[1:] if low is None else CLAMP_BOUNDS))
        args = (low, high)
    elif op == "fill_":
        args = (draw(st.sampled_from(SCALARS)),)
    else:
        args = ()
    return [Instr(op, (), (Var(target), *args))]


def _copy_sources(model: Model, dst: str) -> list[str]:
    """Readable tensors that broadcast to dst's shape and that eager lets us read into dst."""
    shape = model.lay(dst).sizes
    return [
        v
        for v in model.readable_names()
        if _broadcasts_to(model.lay(v).sizes, shape) and model.may_read_while_writing(v, dst)
    ]


def _step_copy(draw, model: Model) -> list[Instr]:
    dsts = [v for v in _writable_names(model) if _copy_sources(model, v)]
    dst = draw(st.sampled_from(dsts))
    src = draw(st.sampled_from(_copy_sources(model, dst)))
    return [Instr("copy_", (), (Var(dst), Var(src)))]


def _set_sources(model: Model, dst: str) -> list[str]:
    # A source out of bounds (on a zero storage) grows its storage, unless it has dst's very
    # sizes and strides: then eager raises instead (resize_impl_cpu_ returns early). Compiled
    # programs reject the growing set_ (rule aliasing.set.grows-storage).
    if model.compiled:
        return [v for v in model.names if model.in_bounds(v)]
    return [v for v in model.names if model.in_bounds(v) or model.lay(v) != model.lay(dst)]


def _step_set(draw, model: Model) -> list[Instr]:
    dst = draw(st.sampled_from([v for v in model.names if _set_sources(model, v)]))
    src = draw(st.sampled_from(_set_sources(model, dst)))
    obj, source = model.obj(dst), model.obj(src)
    grows = not model.in_bounds(src)
    obj.rebound |= (obj.storage, obj.lay) != (source.storage, source.lay)
    obj.storage, obj.lay = source.storage, source.lay
    set_ = Instr("set_", (), (Var(dst), Var(src)))
    if not grows:
        return [set_]
    # Eager grows the zero storage to the source's extent, bytes uninitialized: make it full and
    # overwrite it, or empty it again, before anything (the observer included) reads it.
    if _covers(model, source.storage):
        return [set_, *_grow_and_fill(draw, model, src)]
    return [set_, Instr("resize_storage_bytes_", (), (Var(src), 0))]


def _resize_allowed(model: Model, v: str) -> bool:
    """Compiled programs resize only through an argument object itself, never one set_ moved
    (rules resize.compiled.inputs-only and resize.compiled.base-only): so only input storages."""
    obj = model.obj(v)
    return not model.compiled or (obj.param and not obj.rebound)


def _resizable_down(model: Model) -> list[str]:
    return [v for v in model.names if model.storage(v).nbytes > 0 and _resize_allowed(model, v)]


def _covers(model: Model, storage: int) -> list[str]:
    return [v for v in model.names if model.obj(v).storage == storage and model.covers_storage(v)]


def _resizable_up(model: Model) -> list[str]:
    """Names on a zero storage that some name covers entirely (the fill after the resize)."""
    return [
        v
        for v in model.names
        if model.storage(v).nbytes == 0
        and model.storage(v).full > 0
        and _resize_allowed(model, v)
        and _covers(model, model.obj(v).storage)
    ]


def _step_resize(draw, model: Model) -> list[Instr]:
    down, up = _resizable_down(model), _resizable_up(model)
    v = draw(st.sampled_from(down + up))
    storage = model.storage(v)
    if storage.nbytes > 0:
        storage.nbytes = 0
        return [Instr("resize_storage_bytes_", (), (Var(v), 0))]
    return _grow_and_fill(draw, model, v)


def _grow_and_fill(draw, model: Model, v: str) -> list[Instr]:
    """Resize v's storage to its full size, then overwrite every byte before anything reads it."""
    storage = model.storage(v)
    storage.nbytes = storage.full
    resize = Instr("resize_storage_bytes_", (), (Var(v), storage.full))
    index = model.obj(v).storage
    cover = draw(st.sampled_from(_covers(model, index)))
    sources = [s for s in _copy_sources(model, cover) if model.obj(s).storage != index]
    if sources and draw(st.booleans()):
        return [resize, Instr("copy_", (), (Var(cover), Var(draw(st.sampled_from(sources)))))]
    return [resize, Instr("fill_", (), (Var(cover), draw(st.sampled_from(SCALARS))))]


def _step_pointwise(draw, model: Model) -> list[Instr]:
    readable = model.readable_names()
    x = draw(st.sampled_from(readable))
    op = draw(st.sampled_from(["add", "mul", "sub", "maximum", "neg", "abs", "clamp"]))
    shape = model.lay(x).sizes
    if op in ("add", "mul", "sub", "maximum"):
        others = [v for v in readable if _broadcastable(model.lay(v).sizes, shape)]
        scalar_ok = op != "maximum"
        if scalar_ok and draw(st.booleans()):
            args = (draw(st.sampled_from(SCALARS)),)
        else:
            args = (Var(draw(st.sampled_from(others))),)
    elif op == "clamp":
        args = (draw(st.sampled_from(CLAMP_BOUNDS)), draw(st.sampled_from(CLAMP_BOUNDS[1:])))
    else:
        args = ()
    # The output's strides follow its inputs' (TensorIterator): ask the meta kernel.
    metas = [model.lay(a.name).meta() if isinstance(a, Var) else a for a in (Var(x), *args)]
    result = OPS[op].run(*metas)
    out = model.new_name()
    model.bind(out, model.new_storage(result.untyped_storage().nbytes()), Strided.of(result))
    return [Instr(op, (out,), (Var(x), *args))]


def _step_full(draw, model: Model) -> list[Instr]:
    shape = draw(st.sampled_from([(4,), (2, 3), (5,), (2, 2), (1, 3), (6,)]))
    value = draw(st.sampled_from(SCALARS))
    out = model.new_name()
    model.bind(out, model.new_storage(math.prod(shape) * ITEMSIZE), Strided.contiguous(shape))
    return [Instr("full", (out,), (shape, value))]


# Each step kind, and when the model allows it. Order is shrink order: simplest first. Views
# come twice: they are cheap, and eleven ops share the kind.
STEPS: list[tuple[str, Callable, Callable[[Model], bool]]] = [
    ("view", _step_view, lambda m: bool(m.names)),
    ("view", _step_view, lambda m: bool(m.names)),
    ("inplace", _step_inplace, lambda m: bool(_writable_names(m))),
    ("copy", _step_copy, lambda m: any(_copy_sources(m, v) for v in _writable_names(m))),
    ("set", _step_set, lambda m: any(_set_sources(m, v) for v in m.names)),
    ("resize", _step_resize, lambda m: bool(_resizable_down(m) or _resizable_up(m))),
    ("pointwise", _step_pointwise, lambda m: bool(m.readable_names())),
    ("full", _step_full, lambda m: True),
]


@st.composite
def programs(draw, max_steps: int = 10, compiled: bool = False) -> Program:
    """A valid program over a random setup (see the module docstring for what valid means).

    `compiled`: only programs `aotspec.compile` accepts: resizes (to or from zero, as always)
    only of argument objects that set_ has not moved, and no set_ to a source its storage cannot
    hold (specs/storage-resize.md, "In compiled programs"; rule aliasing.set.grows-storage).
    """
    setup = draw(setups())
    model = _initial_model(setup, compiled)
    body: list[Instr] = []
    for _ in range(draw(st.integers(1, max_steps))):
        kinds = [(name, step) for name, step, allowed in STEPS if allowed(model)]
        _, step = draw(st.sampled_from(kinds))
        body += step(draw, model)
    names = list(model.names)
    if draw(st.booleans()):
        # A few outputs, maybe one twice: what is returned, and what is not, both matter.
        returns = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3))
    else:
        # Everything: every effect of the program lands somewhere the observer looks.
        returns = names
    return Program(setup, tuple(body), tuple(returns))


# ---------------------------------------------------------------- programs with backward
#
# `grad_programs`: float32 leaves that require grad and buffers that do not, a chain of
# differentiable ops, in-place ops and copy_ into intermediates (through views too), and
# buffer writes from values computed without grad. Validity for eager autograd, on top of the
# rules above, is kept per storage (one view family here, so one version counter):
#
# - nothing writes an argument that requires grad or a view of one with grad mode on (eager
#   raises for leaves, and aotspec.compile rejects it: rule autograd.mutated-grad-input); under
#   torch.no_grad() it may, when it is the one argument requiring grad on its storage;
# - a buffer is written only from values that do not require grad;
# - nothing writes a storage once autograd saved a tensor on it for the backward (eager's
#   backward raises "modified by an inplace operation"): `SAVES_INPUTS` and `SAVES_RESULT`
#   over-approximate what autograd saves when some input requires grad;
# - no multi-output views (split): eager forbids writing them when they require grad;
# - log and fractional or negative powers read only values known to be positive.

GRAD_SHAPES = [(3,), (4,), (2, 3), (3, 2), (2, 2), (1, 3), (2, 1, 3), ()]
# Shrinking goes to the first: 1.0, then small values of either sign; 0.0 (the kink of relu and
# abs) last.
GRAD_VALUES = [1.0, -1.0, 0.5, 2.0, -0.5, -2.0, 0.25, 1.5, -1.5, -0.25, 0.0]
GRAD_VIEWS = ["view", "reshape", "t", "transpose", "permute", "expand", "slice", "select"]
GRAD_VIEWS += ["unsqueeze", "squeeze"]
POSITIVE_SCALARS = {2.0, 0.5, 3.0}
#: Ops whose autograd node saves their tensor inputs, or their result, when an input requires grad.
SAVES_INPUTS = {"mul", "maximum", "abs", "log", "pow", "mm", "matmul", "amax", "mul_"}
SAVES_RESULT = {"relu", "sigmoid", "tanh", "exp", "amax"}


#: How the caller passes a tensor: the tensor, a view of it, both (two aliasing arguments), the
#: same object twice, with a view of its detach() (an alias that requires no grad); "held": a
#: view the caller keeps without passing it.
LEAF_PASSING = [("base",), ("base",), ("view",), ("base", "view"), ("base", "base")]
LEAF_PASSING += [("base", "detached")]
BUFFER_PASSING = [("base",), ("base", "held"), ("view",), ("base", "view")]


@st.composite
def _grad_tensor(draw, requires_grad: bool):
    """One caller tensor: its shape, values, how it is passed, and the layout of its view."""
    shape = draw(st.sampled_from(GRAD_SHAPES))
    numel = math.prod(shape)
    values = draw(st.lists(st.sampled_from(GRAD_VALUES), min_size=numel, max_size=numel))
    passing = draw(st.sampled_from(LEAF_PASSING if requires_grad else BUFFER_PASSING))
    view = _draw_caller_view(draw, Strided.contiguous(shape)) if passing != ("base",) else None
    return shape, tuple(values), passing, view


@st.composite
def grad_setups(draw) -> Setup:
    """1-3 leaves that require grad and 0-2 buffers that do not, each drawn whole (so shrinking
    drops a tensor at once). A view of a leaf passed is an argument that requires grad but is
    not a leaf; a view of a buffer the caller keeps shows the buffer's writes."""
    leaves = draw(st.lists(_grad_tensor(requires_grad=True), min_size=1, max_size=3))
    buffers = draw(st.lists(_grad_tensor(requires_grad=False), max_size=2))
    bases, views, args = [], [], []
    for k, (shape, values, passing, view) in enumerate(leaves + buffers):
        bases.append(Base(f"b{k}", shape, values, requires_grad=k < len(leaves)))
        for way in passing:
            if way == "base":
                args.append(f"b{k}")
                continue
            name = f"{'h' if way == 'held' else 'a'}{len(views)}"
            lay = (view.sizes, view.strides, view.offset)
            views.append(CallerView(name, f"b{k}", *lay, detached=way == "detached"))
            if way != "held":
                args.append(name)
    # Rotated and maybe reversed, rather than any permutation: a fixed number of choices, so
    # that shrinking can drop a tensor without shifting every later choice.
    turn = draw(st.integers(0, len(args) - 1))
    args = args[turn:] + args[:turn]
    if draw(st.booleans()):
        args.reverse()
    return Setup(tuple(bases), tuple(views), tuple(args))


def _initial_grad_model(setup: Setup) -> Model:
    model = _initial_model(setup, compiled=True)
    requires_grad = {base.name for base in setup.bases if base.requires_grad}
    requires_grad |= {view.name for view in setup.views if view.base in requires_grad}
    detached = {view.name for view in setup.views if view.detached}
    counted: set[str] = set()
    for i, name in enumerate(setup.args):
        storage = model.storage(f"x{i}")
        storage.caller = True
        storage.requires_grad |= name in requires_grad
        model.obj(f"x{i}").detached = name in detached
        if name in requires_grad and name not in counted:
            counted.add(name)
            storage.grad_args += 1
    return model


def _requires_grad(model: Model, v: str) -> bool:
    return model.storage(v).requires_grad and not model.obj(v).detached


def _bind_view(model: Model, out: str, v: str, lay: Strided) -> None:
    """`out`, a view of `v`: the same storage, and detached if `v` is."""
    model.bind(out, model.obj(v).storage, lay)
    model.obj(out).detached = model.obj(v).detached


def _grad_writable(model: Model) -> list[str]:
    return [
        v
        for v in model.names
        if model.writable(v)
        and not model.storage(v).saved
        and not (model.storage(v).caller and model.storage(v).requires_grad)
    ]


def _grad_sources(model: Model, dst: str) -> list[str]:
    """What may be read into dst: another storage, and no grad into a buffer."""
    into_buffer = model.storage(dst).caller
    return [
        v
        for v in _copy_sources(model, dst)
        if model.obj(v).storage != model.obj(dst).storage
        and not (into_buffer and _requires_grad(model, v))
    ]


def _compute(model: Model, op: str, args: tuple, positive: bool = False) -> Instr:
    """A fresh output of `op`: its layout from the meta kernel; it requires grad when a tensor
    argument does; storages autograd saves are marked."""
    tensors = [a.name for a in args if isinstance(a, Var)]

    def meta(a):
        if not isinstance(a, Var):
            return a
        if a.name in model.masks:
            return torch.empty(model.masks[a.name], dtype=torch.bool, device="meta")
        return model.lay(a.name).meta()

    result = OPS[op].run(*map(meta, args))
    differentiable = [v for v in tensors if v not in model.masks]
    requires_grad = any(_requires_grad(model, v) for v in differentiable)
    out = model.new_name()
    storage = model.new_storage(
        result.untyped_storage().nbytes(), requires_grad=requires_grad, positive=positive
    )
    model.bind(out, storage, Strided.of(result))
    if requires_grad and op in SAVES_INPUTS:
        for v in differentiable:
            model.storage(v).saved = True
    if requires_grad and op in SAVES_RESULT:
        model.storage(out).saved = True
    return Instr(op, (out,), args)


def _recent(draw, names: list[str]) -> str:
    """One of `names`, often one of the latest: programs become chains more than fans."""
    recent = draw(st.booleans())  # drawn always: the same choices however many names exist
    return draw(st.sampled_from(names[-2:] if recent else names))


def _is_positive(model: Model, arg) -> bool:
    if isinstance(arg, Var):
        return model.storage(arg.name).positive
    return arg in POSITIVE_SCALARS


def _g_view(draw, model: Model) -> list[Instr]:
    v = _recent(draw, list(model.names))
    lay = model.lay(v)
    ops = [op for op in _view_ops(lay, in_bounds=True) if op in GRAD_VIEWS]
    if 1 in lay.sizes:
        ops.append("squeeze")
    op = draw(st.sampled_from(ops))
    if op == "squeeze":
        args = draw(st.sampled_from([(), *((d,) for d, n in enumerate(lay.sizes) if n == 1)]))
    else:
        args = _draw_view_args(draw, op, lay, may_copy=True)
    (result,) = _apply_view(op, lay, args)
    obj, out = model.obj(v), model.new_name()
    if op == "reshape" and not _viewable(lay, args[0]):  # a copy: a new view family
        old = model.storages[obj.storage]
        storage = model.new_storage(
            result.numel * ITEMSIZE, requires_grad=_requires_grad(model, v), positive=old.positive
        )
        model.bind(out, storage, result)
    else:
        _bind_view(model, out, v, result)
    return [Instr(op, (out,), (Var(v), *args))]


def _g_unary(draw, model: Model) -> list[Instr]:
    x = _recent(draw, list(model.names))
    positive = model.storage(x).positive
    ops = ["neg", "abs", "relu", "sigmoid", "tanh", "exp", "pow", "clone"]
    op = draw(st.sampled_from(ops + ["log"] * positive))
    args = ()
    if op == "pow":
        args = (draw(st.sampled_from([2.0, 3.0] + [0.5, -1.0] * positive)),)
    stays_positive = op in ("sigmoid", "exp") or (positive and op in ("pow", "clone"))
    return [_compute(model, op, (Var(x), *args), positive=stays_positive)]


def _g_no_grad(draw, model: Model) -> list[Instr]:
    """`x * c` computed under torch.no_grad(): a value that requires no grad."""
    x = _recent(draw, list(model.names))
    other = draw(st.sampled_from(SCALARS))
    instr = _compute(model, "no_grad_mul", (Var(x), other), positive=_is_positive(model, Var(x)) and other > 0)
    model.storage(instr.outs[0]).requires_grad = False
    return [instr]


def _g_binary(draw, model: Model) -> list[Instr]:
    x = _recent(draw, list(model.names))
    op = draw(st.sampled_from(["add", "sub", "mul", "maximum"]))
    shape = model.lay(x).sizes
    others = [v for v in model.names if _broadcastable(model.lay(v).sizes, shape)]
    if op != "maximum" and draw(st.booleans()):
        other = draw(st.sampled_from(SCALARS))
    else:
        other = Var(draw(st.sampled_from(others)))
    positive = op != "sub" and _is_positive(model, Var(x)) and _is_positive(model, other)
    return [_compute(model, op, (Var(x), other), positive=positive)]


def _g_matmul(draw, model: Model) -> list[Instr]:
    """mm or matmul of 2-D values; with no fitting pair, of a value and its transpose."""
    twod = [v for v in model.names if len(model.lay(v).sizes) == 2]
    a = _recent(draw, twod)
    partners = [b for b in twod if model.lay(b).sizes[0] == model.lay(a).sizes[1]]
    op = draw(st.sampled_from(["mm", "matmul"]))
    if partners and draw(st.booleans()):
        return [_compute(model, op, (Var(a), Var(draw(st.sampled_from(partners)))))]
    t = model.new_name()
    _bind_view(model, t, a, _apply_view("t", model.lay(a), ())[0])
    return [Instr("t", (t,), (Var(a),)), _compute(model, op, (Var(a), Var(t)))]


def _g_reduce(draw, model: Model) -> list[Instr]:
    x = _recent(draw, list(model.names))
    sizes = model.lay(x).sizes
    ops = ["sum", "mean"]
    if not sizes or draw(st.booleans()):  # every dim
        ops += ["amax"] * (math.prod(sizes) > 0)
        return [_compute(model, draw(st.sampled_from(ops)), (Var(x),))]
    dims = draw(st.lists(st.integers(0, len(sizes) - 1), min_size=1, unique=True))
    if all(sizes[d] > 0 for d in dims):  # amax of nothing raises
        ops.append("amax")
    op = draw(st.sampled_from(ops))
    dims = tuple(d - len(sizes) if draw(st.booleans()) else d for d in dims)
    return [_compute(model, op, (Var(x), dims, draw(st.booleans())))]


def _g_cat(draw, model: Model) -> list[Instr]:
    x = _recent(draw, [v for v in model.names if model.lay(v).sizes])
    sizes = model.lay(x).sizes
    d = draw(st.integers(0, len(sizes) - 1))

    def fits(v):
        other = model.lay(v).sizes
        return len(other) == len(sizes) and all(
            a == b for k, (a, b) in enumerate(zip(other, sizes, strict=True)) if k != d
        )

    fitting = [v for v in model.names if fits(v)]
    partners = draw(st.lists(st.sampled_from(fitting), min_size=1, max_size=2))
    return [_compute(model, "cat", (d, Var(x), *map(Var, partners)))]


def _g_where(draw, model: Model) -> list[Instr]:
    """A mask from comparing a value with a scalar, then where(mask, a, b), all broadcasting."""
    c = _recent(draw, list(model.names))
    mask = model.new_name()
    scalar = draw(st.sampled_from(SCALARS))
    compare = Instr(draw(st.sampled_from(["gt", "lt"])), (mask,), (Var(c), scalar))
    model.masks[mask] = shape = model.lay(c).sizes

    def fitting(shape):
        return [v for v in model.names if _broadcastable(model.lay(v).sizes, shape)]

    a = _recent(draw, fitting(shape))
    b = draw(st.sampled_from(fitting(torch.broadcast_shapes(model.lay(a).sizes, shape))))
    positive = _is_positive(model, Var(a)) and _is_positive(model, Var(b))
    return [compare, _compute(model, "where", (Var(mask), Var(a), Var(b)), positive=positive)]


#: Views that a write may go through (single-output, no internal overlap).
WRITE_VIEWS = ["view", "reshape", "t", "transpose", "permute", "slice", "select", "unsqueeze"]


def _g_write(draw, model: Model, targets: list[str]) -> list[Instr]:
    """An in-place op or copy_ into one of `targets` (see `_grad_writable`), or into a view of
    it made just before."""
    target = _recent(draw, targets)
    body = []
    if draw(st.booleans()):
        lay = model.lay(target)
        view_op = draw(st.sampled_from([op for op in _view_ops(lay, True) if op in WRITE_VIEWS]))
        view_args = _draw_view_args(draw, view_op, lay, may_copy=False)
        (result,) = _apply_view(view_op, lay, view_args)
        view = model.new_name()
        _bind_view(model, view, target, result)
        body.append(Instr(view_op, (view,), (Var(target), *view_args)))
        target = view
    sources = _grad_sources(model, target)
    ops = ["add_", "sub_", "mul_", "fill_", "zero_"] + ["copy_"] * bool(sources)
    op = draw(st.sampled_from(ops))
    other = draw(st.sampled_from(SCALARS))
    if sources and (op == "copy_" or (op in ("add_", "sub_", "mul_") and draw(st.booleans()))):
        other = Var(draw(st.sampled_from(sources)))
    if op in ("add_", "sub_"):
        args = (other, draw(st.sampled_from([1, 2.0])))
    elif op in ("mul_", "copy_", "fill_"):
        args = (other,)
    else:
        args = ()
    storage = model.storage(target)
    if isinstance(other, Var):
        source, source_grad = model.storage(other.name), _requires_grad(model, other.name)
        storage.requires_grad |= source_grad
        # mul_ saves its operand for the target's gradient and the target's old value for the
        # operand's: both storages are frozen from here on.
        if op == "mul_" and (storage.requires_grad or source_grad):
            storage.saved = source.saved = True
    storage.positive = False
    return [*body, Instr(op, (), (Var(target), *args))]


def _no_grad_writable(model: Model) -> list[str]:
    """What a write under torch.no_grad() may target (r[autograd.no-grad-writes]): intermediates,
    and arguments that require grad, or views of them (FSDP's all-gather into a parameter, an
    optimizer-like update: r[autograd.no-grad-input-writes])."""
    return [
        v
        for v in model.names
        if model.writable(v)
        and not model.obj(v).detached
        and not model.storage(v).saved
        and (not model.storage(v).caller or model.storage(v).grad_args == 1)
    ]


def _g_no_grad_write(draw, model: Model) -> list[Instr]:
    """`x.mul_(c)` or `x.copy_(y)` under torch.no_grad(), into an intermediate or an argument that
    requires grad: the target keeps its history, the written values carry none."""
    target = _recent(draw, _no_grad_writable(model))
    sources = [v for v in _copy_sources(model, target) if model.obj(v).storage != model.obj(target).storage]
    if sources and draw(st.booleans()):
        instr = Instr("no_grad_copy_", (), (Var(target), Var(draw(st.sampled_from(sources)))))
    else:
        instr = Instr("no_grad_mul_", (), (Var(target), draw(st.sampled_from(SCALARS))))
    model.storage(target).positive = False
    return [instr]


def _writes_intermediates(model: Model) -> bool:
    return any(not model.storage(v).caller for v in _grad_writable(model))


def _writes_buffers(model: Model) -> bool:
    return any(model.storage(v).caller for v in _grad_writable(model))


def _g_write_intermediate(draw, model: Model) -> list[Instr]:
    return _g_write(draw, model, [v for v in _grad_writable(model) if not model.storage(v).caller])


def _g_write_buffer(draw, model: Model) -> list[Instr]:
    return _g_write(draw, model, [v for v in _grad_writable(model) if model.storage(v).caller])


GRAD_STEPS: list[tuple[str, Callable, Callable[[Model], bool]]] = [
    ("view", _g_view, lambda m: True),
    ("unary", _g_unary, lambda m: True),
    ("binary", _g_binary, lambda m: True),
    ("matmul", _g_matmul, lambda m: any(len(m.lay(v).sizes) == 2 for v in m.names)),
    ("reduce", _g_reduce, lambda m: True),
    ("cat", _g_cat, lambda m: any(m.lay(v).sizes for v in m.names)),
    ("where", _g_where, lambda m: True),
    ("no_grad", _g_no_grad, lambda m: True),
    ("no_grad_write", _g_no_grad_write, lambda m: bool(_no_grad_writable(m))),
    # Writes come three times: the point of the exercise, and each is blocked often (saved).
    ("write", _g_write_intermediate, _writes_intermediates),
    ("write", _g_write_intermediate, _writes_intermediates),
    ("buffer", _g_write_buffer, _writes_buffers),
]


@st.composite
def grad_programs(draw, max_steps: int = 10) -> Program:
    """A program with backward: at least one output requires grad (see the section comment)."""
    setup = draw(grad_setups())
    model = _initial_grad_model(setup)
    body: list[Instr] = []
    # At least two steps (one rarely reaches a write), then go on with odds 5:1. A "go on" choice
    # per step, rather than a count drawn first, lets shrinking delete any one step.
    steps = 0
    while steps < 2 or (steps < max_steps and draw(st.sampled_from([False] + [True] * 5))):
        kinds = [(name, step) for name, step, allowed in GRAD_STEPS if allowed(model)]
        _, step = draw(st.sampled_from(kinds))
        body += step(draw, model)
        steps += 1
    names = list(model.names)
    with_grad = [v for v in reversed(names) if _requires_grad(model, v)]  # latest first
    returns = [with_grad[0] if draw(st.booleans()) else draw(st.sampled_from(with_grad))]
    returns += draw(st.lists(st.sampled_from(names), max_size=2))
    return Program(setup, tuple(body), tuple(draw(st.permutations(returns))))


def run_on_eager(run: Callable[[Program], Any], program: Program) -> Any:
    """`run(program)` on eager PyTorch; an error there means the generator made an invalid program.

    The error becomes text, its traceback dropped: pytest prints the arguments of every frame in
    a traceback, and printing a tensor whose storage is too small segfaults.
    """
    try:
        return run(program)
    except Exception:
        trace = traceback.format_exc(limit=-4)
    raise AssertionError(
        f"the generator made a program that eager rejects; fix tests/strategies.py:\n{source(program)}\n{trace}"
    )
