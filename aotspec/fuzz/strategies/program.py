"""Programs as data, and how to run and print them (the generators are beside this module).

A program's `Setup` says how the caller builds its tensors before the call: float32 bases (some
resized to zero bytes), views of them made with `as_strided`, which of those are passed as
arguments, and which the caller only holds (so writes and `set_` can be observed through
aliases the program never sees). Its body is a list of `Instr` records over named values; `Var`
names a value, every other argument is a constant; `OPS` says how each op runs and prints.

`build_inputs` makes a setup's tensors, `as_function` turns a program into a Python function (a
closure interpreting the records), `source` renders it as Python, and `run_on_eager` runs it on
eager PyTorch, where an error means that a generator made an invalid program.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable
from typing import Any

import torch
from attrs import frozen

from .functions import FUNCTIONS, functions_source, mul_with_grad_inside_no_grad

resize_storage_bytes_ = torch.ops.inductor.resize_storage_bytes_
set_source_tensor = torch.ops.aten.set_.source_Tensor


# ---------------------------------------------------------------- program data


@frozen(repr=False)
class Var:
    """A value of the program, by name; renders as its name."""

    name: str

    def __repr__(self) -> str:
        return self.name


@frozen
class Base:
    """A contiguous tensor the caller makes, float32 unless `dtype` (a torch dtype's name) says
    otherwise; `zeroed`: its storage resized to 0 bytes; `requires_grad`: a leaf that requires
    grad (views the caller makes of it do not leaf); `non_leaf` with it: `{name}_leaf * 1` of
    such a leaf, which the caller keeps too (a program may write this tensor with grad mode on);
    `history_freed` with that: `{name}_leaf * torch.ones_like({name}_leaf)` instead, which the
    caller backpropagates once before the call, so the graph behind it is freed (a backward
    that walks it again raises)."""

    name: str
    shape: tuple[int, ...]
    values: tuple[float, ...]
    zeroed: bool = False
    requires_grad: bool = False
    non_leaf: bool = False
    dtype: str = "float32"
    history_freed: bool = False


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
    #: The grad mode the caller calls the program under (r[autograd.grad-mode-inside]).
    grad_enabled: bool = True
    #: Whether the caller backpropagates twice, the first time with retain_graph=True
    #: (r[autograd.retain-graph]).
    retain_graph: bool = False

    @property
    def call_options(self) -> dict[str, bool]:
        """How the caller calls and backpropagates: `harness.call_and_backward`'s options."""
        return {"grad_enabled": self.grad_enabled, "retain_graph": self.retain_graph}

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


def literal(value) -> str:
    """`value` as Python source; a non-finite float as `float('-inf')`, in lists and tuples too."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, list):
        return f"[{', '.join(map(literal, value))}]"
    if isinstance(value, tuple):
        return f"({', '.join(map(literal, value))}{',' if len(value) == 1 else ''})"
    return repr(value)


def _slice(x, dim, start, stop, step):
    return x[(slice(None),) * dim + (slice(start, stop, step),)]


def _render_slice(x, dim, start, stop, step) -> str:
    return f"{x!r}[{':, ' * dim}{start}:{stop}:{step}]"


def _method(name: str) -> Op:
    """`x.name(*args)`, rendered the same way."""

    def render(x, *args) -> str:
        return f"{x!r}.{name}({', '.join(map(literal, args))})"

    return Op(lambda x, *args: getattr(x, name)(*args), render)


def _with_alpha(name: str) -> Op:
    """`x.add_(y, alpha=alpha)`, rendered without `alpha` when it is 1."""

    def render(x, y, alpha) -> str:
        return f"{x!r}.{name}({literal(y)}{'' if alpha == 1 else f', alpha={alpha!r}'})"

    return Op(lambda x, y, alpha: getattr(x, name)(y, alpha=alpha), render)


def _call(qualified: str, fn: Callable) -> Op:
    """`torch.ops....(*args)` or `torch.full(*args)`, rendered by its qualified name."""
    return Op(fn, lambda *args: f"{qualified}({', '.join(map(literal, args))})")


def _render_cat(dim, *xs) -> str:
    return f"torch.cat([{', '.join(map(repr, xs))}], {dim})"


def _loss(name: str) -> Op:
    """`F.name(x, target, reduction=reduction)`: the reduction by keyword, as the losses take
    size_average and reduce positionally."""
    loss = getattr(torch.nn.functional, name)

    def render(x, target, reduction) -> str:
        return f"torch.nn.functional.{name}({x!r}, {target!r}, reduction={reduction!r})"

    return Op(lambda x, target, reduction: loss(x, target, reduction=reduction), render)
def _seeded_rand_like(x: torch.Tensor, seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.rand_like(x)


def _render_seeded_rand_like(x, seed) -> str:
    return f"(torch.manual_seed({seed!r}), torch.rand_like({x!r}))[1]"


def _applied(function: type[torch.autograd.Function]) -> Op:
    """`Function.apply(*args)` of a custom Function (aotspec/fuzz/strategies/functions.py),
    `apply` looked up at each call as the rendered source does: from torch 2.14, a reference to
    it taken beforehand is one capture does not see (`apply_references_intercepted`)."""
    return _call(f"{function.__name__}.apply", lambda *args: function.apply(*args))


OPS: dict[str, Op] = {
    # views
    **{name: _method(name) for name in ("view", "reshape", "t", "transpose", "permute")},
    **{name: _method(name) for name in ("select", "unsqueeze", "expand", "split")},
    "slice": Op(_slice, _render_slice),
    # in-place metadata ops: the tensor object takes a new layout on its own storage
    **{name: _method(name) for name in ("t_", "transpose_", "swapdims_", "unsqueeze_")},
    **{name: _method(name) for name in ("squeeze_", "as_strided_", "resize_")},
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
    "detach": _method("detach"),
    **{name: _method(name) for name in ("relu", "sigmoid", "tanh", "exp", "log", "pow", "clone")},
    **{name: _method(name) for name in ("sum", "mean", "amax", "mm", "gt", "lt")},
    "matmul": _call("torch.matmul", torch.matmul),
    # x * y under torch.no_grad(): a value that carries no gradient (r[capture.grad-mode])
    "no_grad_mul": _call("torch.no_grad()(torch.mul)", torch.no_grad()(torch.mul)),
    # x * y under torch.enable_grad(), alone or inside torch.no_grad(): recorded whatever the
    # caller's grad mode (r[autograd.grad-mode-inside])
    "enable_grad_mul": _call("torch.enable_grad()(torch.mul)", torch.enable_grad()(torch.mul)),
    "nested_grad_mul": _call("mul_with_grad_inside_no_grad", mul_with_grad_inside_no_grad),
    # writes under torch.no_grad() into an argument that requires grad
    # (r[autograd.no-grad-input-writes])
    "no_grad_mul_": _call(
        "torch.no_grad()(torch.Tensor.mul_)", torch.no_grad()(torch.Tensor.mul_)
    ),
    "no_grad_copy_": _call(
        "torch.no_grad()(torch.Tensor.copy_)", torch.no_grad()(torch.Tensor.copy_)
    ),
    "where": _call("torch.where", torch.where),
    # norms, whose backward formulas write into tensors they made (grad.py's `_g_norm`)
    "vector_norm": _call("torch.linalg.vector_norm", torch.linalg.vector_norm),
    "std": _method("std"),
    "normalize": _call("torch.nn.functional.normalize", torch.nn.functional.normalize),
    # losses, whose backward kernels lay a transposed input's gradient out otherwise than their
    # meta kernels (grad.py's `_g_loss`)
    **{name: _loss(name) for name in ("mse_loss", "smooth_l1_loss", "huber_loss")},
    # torch.cat([xs...], dim), with the dim first among the arguments
    "cat": Op(lambda dim, *xs: torch.cat(xs, dim), _render_cat),
    # custom autograd.Functions with their own backward (r[capture.custom-function])
    **{name: _applied(function) for name, function in FUNCTIONS.items()},
    # a value nobody reads, which dies where it is made (r[memory.eager.last-use]): random, so
    # dead code elimination keeps it
    "rand_like": _call("torch.rand_like", torch.rand_like),
    # a draw after the program seeds the generator itself, which the program's result reads: the
    # same values at every call whatever the caller's generator (r[capture.rng-state])
    "seeded_rand_like": Op(_seeded_rand_like, _render_seeded_rand_like),
    # pointwise chains over several dtypes, for the fusion pass (pointwise.py)
    **{name: _method(name) for name in ("sin", "sqrt", "floor", "ceil", "reciprocal", "isnan")},
    **{name: _method(name) for name in ("le", "ge", "eq", "ne", "div", "to")},
    **{name: _method(name) for name in ("logical_not", "logical_and", "logical_or")},
    "minimum": _call("torch.minimum", torch.minimum),
    # an ATen-valued op whose eager formula writes into a view of zeros (grad.py)
    "as_strided_copy": _call("torch.as_strided_copy", torch.as_strided_copy),
    "add_alpha": _with_alpha("add"),
    "sub_alpha": _with_alpha("sub"),
}


# ---------------------------------------------------------------- running and rendering


def build_inputs(
    setup: Setup, dtype: torch.dtype = torch.float32
) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """Fresh caller tensors for `setup`: every named tensor, and the argument list.

    `dtype`: float64 only to rerun a program as a numeric oracle (docs/design.md section 5)."""
    world: dict[str, torch.Tensor] = {}
    for base in setup.bases:
        own = getattr(torch, base.dtype)
        t = torch.tensor(base.values, dtype=dtype if own == torch.float32 else own)
        t = t.reshape(base.shape)
        # A leaf that requires grad is a tensor of its own, as a parameter is: reshape's result is
        # a view, and eager's autograd sends a view-leaf's gradients to its base after a write.
        if base.non_leaf:
            world[f"{base.name}_leaf"] = leaf = t.clone().requires_grad_()
            if base.history_freed:  # a node that saves a tensor, whose graph one backward frees
                world[base.name] = leaf * torch.ones_like(leaf)
                world[base.name].sum().backward()
            else:
                world[base.name] = leaf * 1
        else:
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
            if isinstance(result, tuple):  # split, a Function returning several outputs
                env.update(zip(instr.outs, result, strict=True))
            elif instr.outs:
                env[instr.outs[0]] = result
        return tuple(env[name] for name in program.returns)

    return program_fn


def _render_instr(instr: Instr) -> str:
    call = OPS[instr.op].render(*instr.args)
    if not instr.outs:
        return call
    if instr.op == "split" or len(instr.outs) > 1:  # a tuple (split's, even of one)
        return f"{''.join(f'{out}, ' for out in instr.outs).rstrip()} = {call}"
    return f"{instr.outs[0]} = {call}"


def setup_source(setup: Setup) -> str:
    """`def make_inputs()`: builds the caller's tensors, returns (named tensors, arguments)."""
    lines = ["def make_inputs():"]
    for base in setup.bases:
        values = literal(list(base.values))
        dtype = "" if base.dtype == "float32" else f", dtype=torch.{base.dtype}"
        grad = ".clone().requires_grad_()" if base.requires_grad else ""
        leaf = f"{base.name}_leaf" if base.non_leaf else base.name
        tensor = f"torch.tensor({values}{dtype})"
        lines.append(f"    {leaf} = {tensor}.reshape({base.shape!r}){grad}")
        if base.history_freed:
            lines.append(f"    {base.name} = {leaf} * torch.ones_like({leaf})")
            lines.append(f"    {base.name}.sum().backward()  # frees the graph behind it")
        elif base.non_leaf:
            lines.append(f"    {base.name} = {leaf} * 1")
    for view in setup.views:
        layout = f"{view.sizes!r}, {view.strides!r}, {view.offset}"
        base = f"{view.base}.detach()" if view.detached else view.base
        lines.append(f"    {view.name} = {base}.as_strided({layout})")
    for base in setup.bases:
        if base.zeroed:
            lines.append(f"    torch.ops.inductor.resize_storage_bytes_({base.name}, 0)")
    names = [view.name for view in setup.views]
    for base in reversed(setup.bases):
        names[:0] = [f"{base.name}_leaf", base.name] if base.non_leaf else [base.name]
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


def call_source(program: Program) -> str:
    """How the caller calls `program`, as constants (`Program.call_options`)."""
    return (
        "#: The caller's grad mode around the call; whether it backpropagates twice, the first\n"
        "#: time with retain_graph=True.\n"
        f"GRAD_ENABLED = {program.grad_enabled}\n"
        f"RETAIN_GRAPH = {program.retain_graph}\n"
    )


def source(program: Program) -> str:
    parts = [setup_source(program.setup), program_source(program), call_source(program)]
    functions = functions_source({instr.op for instr in program.body})
    return "\n\n\n".join([functions, *parts] if functions else parts)


def run_on_eager(run: Callable[[Program], Any], program: Program) -> Any:
    """`run(program)` on eager PyTorch; an error there means that the generator made an invalid
    program.

    The error becomes text, its traceback dropped: pytest prints the arguments of every frame in
    a traceback, and printing a tensor whose storage is too small segfaults.
    """
    try:
        return run(program)
    except Exception:
        trace = traceback.format_exc(limit=-4)
    raise AssertionError(
        "the generator made a program that eager rejects; fix aotspec/fuzz/strategies/:\n"
        f"{source(program)}\n{trace}"
    )
