"""Mutation programs: views, in-place ops, copy_, set_ and resizes over aliased inputs.

Generates `programs()`: a setup (setups.py), then 1-10 steps, each drawn among
those the generator's `Model` allows; validity is by construction (docs/design.md section 7), the
model letting the generator emit only:

- reads and writes of tensors whose storage holds them (never of a zero-byte storage);
- writes to tensors without internal overlap (never through an `expand`ed view), from sources
  that are either disjoint from the destination's memory or exactly the destination's layout
  (eager raises on partial overlap and leaves other overlaps to its kernels' iteration order);
- views that eager accepts (model.py);
- a resize to zero anywhere, and a resize up from zero to the storage's full size immediately
  followed by a `copy_` (or `fill_`) that overwrites every byte, so no uninitialized byte is
  ever read, by the program or by the observer afterwards;
- `set_` with a same-dtype source. A source on a zero storage makes eager grow that storage to
  the source's extent with uninitialized bytes, so the generator follows it at once with the
  resize-and-fill above, or with a resize back to zero; and it never pairs such a source with a
  tensor of the very same sizes and strides (eager raises there);
- in-place metadata ops (`t_`, `transpose_`, `swapdims_`, `unsqueeze_`, `squeeze_`,
  `as_strided_`, and `resize_` to contiguous sizes its storage holds) of tensors in bounds of
  their storage, arguments and views of them included, to layouts in bounds (eager's setStorage
  check raises otherwise).

Scalars are non-finite one time in eight (`model.draw_scalar`), `torch.rand_like` makes values
nothing reads, which die where they are made, and a `torch.manual_seed` then `torch.rand_like`
makes values the program may return (the same at every call, `r[capture.rng-state]`).

`programs(compiled=True)` draws only what `aotspec.compile` accepts on top of that: resizes only
of argument objects that neither `set_` nor an in-place metadata op has moved, and no `set_` that
grows a storage.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from hypothesis import strategies as st

from .model import (
    ITEMSIZE,
    SCALARS,
    Model,
    Strided,
    broadcastable,
    copy_sources,
    draw_relayout,
    draw_scalar,
    draw_view,
    relayout_ops,
    viewable,
)
from .program import OPS, Instr, Program, Var
from .sampling import sampled_from
from .setups import initial_model, setups

CLAMP_BOUNDS = [None, -1.0, 0.0, 1.0, 10.0]


def _step_view(draw, model: Model) -> list[Instr]:
    v = draw(sampled_from(list(model.names)))
    in_bounds, readable = model.in_bounds(v), model.readable(v)
    op, args, results = draw_view(draw, model.lay(v), in_bounds, may_copy=readable)
    obj = model.obj(v)
    copies = op == "reshape" and not viewable(obj.lay, args[0])
    outs = []
    for lay in results:
        out = model.new_name()
        storage = model.new_storage(lay.numel * ITEMSIZE) if copies else obj.storage
        model.bind(out, storage, lay)
        outs.append(out)
    return [Instr(op, tuple(outs), (Var(v), *args))]


def _step_relayout(draw, model: Model) -> list[Instr]:
    """An in-place metadata op: the object (every name bound to it) takes a new layout."""
    v = draw(sampled_from(_relayable(model)))
    obj = model.obj(v)
    op = draw(sampled_from(relayout_ops(obj.lay)))
    args, lay = draw_relayout(draw, op, obj.lay, model.storage(v).nbytes)
    obj.rebound |= lay != obj.lay  # compiled programs resize only objects laid out as passed
    obj.lay = lay
    return [Instr(op, (), (Var(v), *args))]


def _relayable(model: Model) -> list[str]:
    return [v for v in model.names if model.in_bounds(v)]


def _draw_other(draw, model: Model, target: str):
    """A scalar, or a tensor that may be read while writing `target` (see copy_sources)."""
    tensors = copy_sources(model, target)
    if tensors and draw(st.booleans()):
        return Var(draw(sampled_from(tensors)))
    return draw_scalar(draw)


def _writable_names(model: Model) -> list[str]:
    return [v for v in model.names if model.writable(v)]


def _step_inplace(draw, model: Model) -> list[Instr]:
    target = draw(sampled_from(_writable_names(model)))
    op = draw(sampled_from(["add_", "mul_", "sub_", "clamp_", "zero_", "fill_"]))
    if op in ("add_", "sub_"):
        args = (_draw_other(draw, model, target), draw(sampled_from([1, 2.0])))
    elif op == "mul_":
        args = (_draw_other(draw, model, target),)
    elif op == "clamp_":
        low = draw(sampled_from(CLAMP_BOUNDS))
        high = draw(sampled_from(CLAMP_BOUNDS[1:] if low is None else CLAMP_BOUNDS))
        args = (low, high)
    elif op == "fill_":
        args = (draw_scalar(draw),)
    else:
        args = ()
    return [Instr(op, (), (Var(target), *args))]


def _step_copy(draw, model: Model) -> list[Instr]:
    dsts = [v for v in _writable_names(model) if copy_sources(model, v)]
    dst = draw(sampled_from(dsts))
    src = draw(sampled_from(copy_sources(model, dst)))
    return [Instr("copy_", (), (Var(dst), Var(src)))]


def _set_sources(model: Model, dst: str) -> list[str]:
    # A source out of bounds (on a zero storage) grows its storage, unless it has dst's very
    # sizes and strides, whatever its offset: then eager raises instead (checkSetStorage checks
    # the bounds, and resize_impl_cpu_ returns early). Compiled programs reject the growing set_
    # (rule aliasing.set.grows-storage).
    if model.compiled:
        return [v for v in model.names if model.in_bounds(v)]
    return [v for v in model.names if model.in_bounds(v) or _shape(model, v) != _shape(model, dst)]


def _shape(model: Model, v: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return model.lay(v).sizes, model.lay(v).strides


def _step_set(draw, model: Model) -> list[Instr]:
    dst = draw(sampled_from([v for v in model.names if _set_sources(model, v)]))
    src = draw(sampled_from(_set_sources(model, dst)))
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
    v = draw(sampled_from(down + up))
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
    cover = draw(sampled_from(_covers(model, index)))
    sources = [s for s in copy_sources(model, cover) if model.obj(s).storage != index]
    if sources and draw(st.booleans()):
        return [resize, Instr("copy_", (), (Var(cover), Var(draw(sampled_from(sources)))))]
    return [resize, Instr("fill_", (), (Var(cover), draw(sampled_from(SCALARS))))]


def _step_pointwise(draw, model: Model) -> list[Instr]:
    readable = model.readable_names()
    x = draw(sampled_from(readable))
    op = draw(sampled_from(["add", "mul", "sub", "maximum", "neg", "abs", "clamp"]))
    shape = model.lay(x).sizes
    if op in ("add", "mul", "sub", "maximum"):
        others = [v for v in readable if broadcastable(model.lay(v).sizes, shape)]
        scalar_ok = op != "maximum"
        if scalar_ok and draw(st.booleans()):
            args = (draw_scalar(draw),)
        else:
            args = (Var(draw(sampled_from(others))),)
    elif op == "clamp":
        args = (draw(sampled_from(CLAMP_BOUNDS)), draw(sampled_from(CLAMP_BOUNDS[1:])))
    else:
        args = ()
    # The output's strides follow its inputs' (TensorIterator): ask the meta kernel.
    metas = [model.lay(a.name).meta() if isinstance(a, Var) else a for a in (Var(x), *args)]
    result = OPS[op].run(*metas)
    out = model.new_name()
    model.bind(out, model.new_storage(result.untyped_storage().nbytes()), Strided.of(result))
    return [Instr(op, (out,), (Var(x), *args))]


def _step_full(draw, model: Model) -> list[Instr]:
    shape = draw(sampled_from([(4,), (2, 3), (5,), (2, 2), (1, 3), (6,)]))
    value = draw_scalar(draw)
    out = model.new_name()
    model.bind(out, model.new_storage(math.prod(shape) * ITEMSIZE), Strided.contiguous(shape))
    return [Instr("full", (out,), (shape, value))]


def _step_dead(draw, model: Model) -> list[Instr]:
    """`torch.rand_like(x)`, which nothing reads: a value that dies where it is made."""
    x = draw(sampled_from(model.readable_names()))
    return [Instr("rand_like", (model.new_name(),), (Var(x),))]


def _step_seeded_draw(draw, model: Model) -> list[Instr]:
    """`torch.manual_seed(seed)` then `torch.rand_like(x)`, a value the program may return."""
    x = draw(sampled_from(model.readable_names()))
    seed = draw(st.integers(0, 2**16))
    # rand_like lays out its result as empty_like does (preserve_format)
    result = torch.empty_like(model.lay(x).meta())
    out = model.new_name()
    model.bind(out, model.new_storage(result.untyped_storage().nbytes()), Strided.of(result))
    return [Instr("seeded_rand_like", (out,), (Var(x), seed))]


# Each step kind, and when the model allows it. Order is shrink order: simplest first. Views
# come twice: they are cheap, and eleven ops share the kind.
STEPS: list[tuple[str, Callable, Callable[[Model], bool]]] = [
    ("view", _step_view, lambda m: bool(m.names)),
    ("view", _step_view, lambda m: bool(m.names)),
    ("inplace", _step_inplace, lambda m: bool(_writable_names(m))),
    ("copy", _step_copy, lambda m: any(copy_sources(m, v) for v in _writable_names(m))),
    ("set", _step_set, lambda m: any(_set_sources(m, v) for v in m.names)),
    ("relayout", _step_relayout, lambda m: bool(_relayable(m))),
    ("resize", _step_resize, lambda m: bool(_resizable_down(m) or _resizable_up(m))),
    ("pointwise", _step_pointwise, lambda m: bool(m.readable_names())),
    ("full", _step_full, lambda m: True),
    ("dead", _step_dead, lambda m: bool(m.readable_names())),
    ("seeded draw", _step_seeded_draw, lambda m: bool(m.readable_names())),
]


@st.composite
def programs(draw, max_steps: int = 10, compiled: bool = False) -> Program:
    """A valid program over a random setup (see the module docstring for what valid means).

    `compiled`: only programs `aotspec.compile` accepts: resizes (to or from zero, as always)
    only of argument objects that set_ has not moved, and no set_ to a source its storage cannot
    hold (specs/storage-resize.md, "In compiled programs"; rule aliasing.set.grows-storage).
    """
    setup = draw(setups())
    model = initial_model(setup, compiled)
    body: list[Instr] = []
    for _ in range(draw(st.integers(1, max_steps))):
        kinds = [(name, step) for name, step, allowed in STEPS if allowed(model)]
        _, step = draw(sampled_from(kinds))
        body += step(draw, model)
    names = list(model.names)
    if draw(st.booleans()):
        # A few outputs, maybe one twice: what is returned, and what is not, both matter.
        returns = draw(st.lists(sampled_from(names), min_size=1, max_size=3))
    else:
        # Everything: every effect of the program lands somewhere the observer looks.
        returns = names
    return Program(setup, tuple(body), tuple(returns))
