"""Programs with backward.

Generates `grad_programs()`: float32 leaves that require grad, non-leaves made from them, and
buffers that do not (`grad_setups()`, setups.py), a chain of differentiable
ops, in-place ops and copy_ into intermediates (through views too), and writes with grad mode on
into buffers and non-leaf arguments, from values with or without grad (r[autograd.input-writes]);
at least one output requires grad. Validity for eager autograd, on top of the mutation programs'
rules (mutations.py), is kept per storage (one view family here, so one version
counter):

- nothing writes a leaf that requires grad or a view of one with grad mode on (eager raises);
  under torch.no_grad() it may, when it is the one argument requiring grad on its storage;
- an argument's storage takes a history (a value that requires grad, or any write once it has
  one) only when one argument object reads it, or when the argument objects on it are all the
  base tensor or views of it, none a detached alias and none relaid out by an in-place
  metadata op (r[autograd.input-writes.synthetic-base]; aotspec.compile rejects other aliasing
  arguments there: rule autograd.input-writes.aliased);
- a write or an in-place metadata op never targets a tensor made before another write gave its
  storage its first history: eager leaves such a view's history unset until something reads
  it, and takes it for a leaf that requires grad in the in-place op, which raises;
- nothing writes a storage once autograd saved a tensor on it for the backward (eager's
  backward raises "modified by an inplace operation"): `SAVES_INPUTS` and `SAVES_RESULT`
  over-approximate what autograd saves when some input requires grad;
- no multi-output views (split): eager forbids writing them when they require grad;
- a view made under torch.no_grad() (the caller's grad mode off) is not used once its storage
  is written: eager raises where grad mode reads it (an enable_grad() op, the caller);
- `detach()` makes an alias that requires no grad (of arguments, intermediates and views):
  writes through it carry no gradient (r[autograd.detach]), and may target an argument that
  requires grad, when it is the one such argument on its storage;
- in-place metadata ops (`t_`, `transpose_`, `swapdims_`, `unsqueeze_`, `squeeze_`) of
  arguments, intermediates and views of either (r[autograd.metadata]): never of a leaf that
  requires grad or a view of one (eager raises), never of a storage autograd saved a tensor on
  (they advance the version counter too), under torch.no_grad() only of tensors that require no
  grad (r[autograd.no-grad-metadata]), and `as_strided_` only of intermediates (on an argument's
  storage it must keep the elements read: r[autograd.metadata.as-strided]); after one on a
  tensor that requires grad, no other tensor of its view family is used, and no view is taken
  of a tensor one relaid out, which may be a view itself (tracing could not regenerate their
  histories: r[capture.metadata-views]);
- log and fractional or negative powers read only values known to be positive;
- losses (`mse_loss`, `smooth_l1_loss`, `huber_loss`; not reduced, or a mean or a sum) of a
  value, often transposed first, against a value of its sizes or a full tensor;
- norms over one dim (`vector_norm`, `std` of two values or more, `F.normalize`): their
  backward formulas write into tensors they made (r[ops.aten-derivatives.functional]);
- custom autograd.Functions (functions.py beside this module) wrap a product, a scaling, exp
  or tanh with a hand-written backward (saving inputs, the result, a constant on ctx; one writes
  the gradient it receives in place, so a product with a scalar is the one reader of its
  output, one marks an output non-differentiable); one returns its
  input, which eager makes a view created inside a custom Function: nothing writes that storage
  afterwards.

`as_strided_copy` of every other element of a value that fills its storage: an ATen-valued op
whose eager formula writes into a view of zeros.

Edges: non-finite constants and clamp with min > max or infinite bounds; `torch.rand_like` values
nothing reads (they die where they are made); and an argument whose graph the caller freed
(setups.py), read only through detach() as the program's first step, so it gets no gradient.

The caller calls one program in four under torch.no_grad() (r[autograd.grad-mode-inside]): the
rules above still hold, as if every op recorded, and the program ends with a product under
torch.enable_grad() of an argument that requires grad, so that an output does. Products under
enable_grad(), alone or nested in no_grad(), also come among the steps. One program in four is
backpropagated twice, the first time retaining the graph (r[autograd.retain-graph]).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from hypothesis import strategies as st

from .functions import FUNCTIONS
from .model import (
    EDGE_CLAMPS,
    ITEMSIZE,
    SCALARS,
    SPECIAL_SCALARS,
    Model,
    Strided,
    apply_view,
    broadcastable,
    copy_sources,
    draw_relayout,
    draw_view_args,
    relayout_ops,
    view_ops,
    viewable,
)
from .program import OPS, Instr, Program, Var
from .sampling import sampled_from
from .setups import grad_setups, initial_grad_model

GRAD_VIEWS = ["view", "reshape", "t", "transpose", "permute", "expand", "slice", "select"]
GRAD_VIEWS += ["unsqueeze", "squeeze"]
POSITIVE_SCALARS = {2.0, 0.5, 3.0}
#: Ops whose autograd node saves their tensor inputs, or their result, when an input requires
#: grad.
SAVES_INPUTS = {"mul", "maximum", "abs", "log", "pow", "mm", "matmul", "amax", "mul_", "clamp"}
SAVES_INPUTS |= {"enable_grad_mul", "nested_grad_mul", "fn_product", "fn_tanh"}
SAVES_INPUTS |= {"vector_norm", "std", "normalize", "mse_loss", "smooth_l1_loss", "huber_loss"}
#: Products under torch.enable_grad(): recorded whatever the caller's grad mode.
GRAD_MODE_PRODUCTS = ["enable_grad_mul", "nested_grad_mul"]
SAVES_RESULT = {"relu", "sigmoid", "tanh", "exp", "amax", "fn_exp", "vector_norm", "std"}


def _requires_grad(model: Model, v: str) -> bool:
    return model.storage(v).requires_grad and not model.obj(v).detached


def _bind_view(model: Model, out: str, v: str, lay: Strided) -> None:
    """`out`, a view of `v`: the same storage, and detached if `v` is."""
    model.bind(out, model.obj(v).storage, lay)
    model.obj(out).detached = model.obj(v).detached
    model.obj(out).no_grad_view = not (model.grad_enabled or model.obj(v).detached)


def _forget_no_grad_views(model: Model, storage: int) -> None:
    """A view made under torch.no_grad() is of no more use once its storage is written: eager
    raises where grad mode reads it (an enable_grad() op, the caller looking at an output)."""
    for v in list(model.names):
        if model.obj(v).storage == storage and model.obj(v).no_grad_view:
            del model.names[v]


def _grad_writable(model: Model) -> list[str]:
    """What a write with grad mode on may target (see the section comment)."""
    return [
        v
        for v in model.names
        if model.writable(v)
        and not model.storage(v).saved
        and not model.obj(v).stale
        and (_detached_writable(model, v) if model.obj(v).detached else _takes_history(model, v))
    ]


def _detached_writable(model: Model, v: str) -> bool:
    """A detached alias: of a value that is no argument requiring grad, or of arguments requiring
    grad on its storage (their histories stay: r[autograd.detach], and each keeps its own:
    r[autograd.no-grad-input-writes.identity])."""
    storage = model.storage(v)
    return not (storage.caller and storage.requires_grad) or storage.grad_args >= 1


def _takes_history(model: Model, v: str) -> bool:
    """Not a leaf that requires grad or a view of one (eager raises), and an argument's storage
    with a history only when one argument object reads it (r[autograd.input-writes.aliased])."""
    storage = model.storage(v)
    return not storage.leaf and not (_shared_argument(model, v) and storage.requires_grad)


def _shared_argument(model: Model, v: str) -> bool:
    """An argument storage several argument objects read that cannot be taken as views of one
    base: one of them is a detached alias, or an in-place metadata op relaid a tensor on it out
    (r[autograd.input-writes.synthetic-base])."""
    storage = model.storage(v)
    # Under a call made under torch.no_grad() the write records nothing, and the arguments
    # requiring grad on the storage must be one (r[autograd.no-grad-input-writes.identity]).
    one_base = model.grad_enabled and not (storage.detached_args or storage.relaid)
    return storage.caller and storage.args > 1 and not one_base


def _grad_sources(model: Model, dst: str) -> list[str]:
    """What may be read into dst: another storage, and no grad into a detached alias
    (r[autograd.detach]) or the storage of aliasing arguments
    (r[autograd.input-writes.aliased])."""
    no_grad = model.obj(dst).detached or _shared_argument(model, dst)
    return [
        v
        for v in copy_sources(model, dst)
        if model.obj(v).storage != model.obj(dst).storage
        and not (no_grad and _requires_grad(model, v))
    ]


def _compute(model: Model, op: str, args: tuple, positive: bool = False) -> Instr:
    """A fresh output of `op`: its layout from the meta kernel; it requires grad when a tensor
    argument does; storages autograd saves are marked."""
    tensors = [a.name for a in args if isinstance(a, Var)]
    nbytes, lay = _result_layout(op, tuple(map(model.masks.get, tensors)), args, model)
    differentiable = [v for v in tensors if v not in model.masks]
    requires_grad = any(_requires_grad(model, v) for v in differentiable)
    out = model.new_name()
    storage = model.new_storage(nbytes, requires_grad=requires_grad, positive=positive)
    model.bind(out, storage, lay)
    if requires_grad and op in SAVES_INPUTS:
        for v in differentiable:
            model.storage(v).saved = True
    if requires_grad and op in SAVES_RESULT:
        model.storage(out).saved = True
    return Instr(op, (out,), args)


def _result_layout(op: str, masks: tuple, args: tuple, model: Model) -> tuple[int, Strided]:
    """The storage bytes and layout of `op`'s fresh result on `args` (`masks`: the mask layouts
    of its tensor arguments, None for a float tensor), by PyTorch's meta kernel; remembered by
    the arguments' layouts and the constants' exact values, which are all the kernel reads."""
    key = (op, masks, tuple(_layout_key(a, model) for a in args))
    known = _RESULT_LAYOUTS.get(key)
    if known is None:

        def meta(a):
            if not isinstance(a, Var):
                return a
            if a.name in model.masks:
                lay = model.masks[a.name]
                return torch.empty_strided(lay.sizes, lay.strides, dtype=torch.bool, device="meta")
            return model.lay(a.name).meta()

        result = OPS[op].run(*map(meta, args))
        if len(_RESULT_LAYOUTS) >= 4096:
            _RESULT_LAYOUTS.clear()
        known = _RESULT_LAYOUTS[key] = (result.untyped_storage().nbytes(), Strided.of(result))
    return known


#: `_result_layout`'s answers, by op, masks, argument layouts and constants.
_RESULT_LAYOUTS: dict[tuple, tuple[int, Strided]] = {}


def _layout_key(a, model: Model) -> tuple:
    """What of argument `a` a meta kernel reads: a tensor's layout, a constant's type and exact
    value (its repr tells 0.0 from -0.0)."""
    if isinstance(a, Var):
        return (Var, None if a.name in model.masks else model.lay(a.name))
    return (type(a), repr(a))


def _recent(draw, names: list[str]) -> str:
    """One of `names`, often one of the latest: programs become chains more than fans."""
    recent = draw(st.booleans())  # drawn always: the same choices however many names exist
    return draw(sampled_from(names[-2:] if recent else names))


def _is_positive(model: Model, arg) -> bool:
    if isinstance(arg, Var):
        return model.storage(arg.name).positive
    return arg in POSITIVE_SCALARS


def _viewable(model: Model) -> list[str]:
    """What a view may be taken of: no tensor an in-place metadata op relaid out (it may be a
    view itself, whose replay on its base tracing would compose with the new view's once their
    storage takes a history: r[capture.metadata-views])."""
    return [v for v in model.names if not model.obj(v).rebound]


def _g_view(draw, model: Model) -> list[Instr]:
    return _view_of(draw, model, _recent(draw, _viewable(model)))


def _view_of(draw, model: Model, v: str) -> list[Instr]:
    lay = model.lay(v)
    ops = [op for op in view_ops(lay, in_bounds=True) if op in GRAD_VIEWS]
    if 1 in lay.sizes:
        ops.append("squeeze")
    op = draw(sampled_from(ops))
    if op == "squeeze":
        args = draw(sampled_from([(), *((d,) for d, n in enumerate(lay.sizes) if n == 1)]))
    else:
        args = draw_view_args(draw, op, lay, may_copy=True)
    (result,) = apply_view(op, lay, args)
    obj, out = model.obj(v), model.new_name()
    if op == "reshape" and not viewable(lay, args[0]):  # a copy: a new view family
        old = model.storages[obj.storage]
        storage = model.new_storage(
            result.numel * ITEMSIZE, requires_grad=_requires_grad(model, v), positive=old.positive
        )
        model.bind(out, storage, result)
    else:
        _bind_view(model, out, v, result)
    return [Instr(op, (out,), (Var(v), *args))]


def _g_detach(draw, model: Model) -> list[Instr]:
    """`x.detach()` of an argument, an intermediate or a view: an alias that requires no grad."""
    v = _recent(draw, list(model.names))
    out = model.new_name()
    _bind_view(model, out, v, model.lay(v))
    model.obj(out).detached = True
    detach = Instr("detach", (out,), (Var(v),))
    if draw(st.booleans()):  # then a view of it, as `x.detach().t()`
        return [detach, *_view_of(draw, model, out)]
    return [detach]


def _relayable(model: Model) -> list[str]:
    """What an in-place metadata op may change (see the section comment)."""
    return [
        v
        for v in model.names
        if not model.storage(v).saved
        and not model.obj(v).stale
        and (model.obj(v).detached or not model.storage(v).leaf)
        and (model.grad_enabled or not _requires_grad(model, v))
        and not _may_have_a_synthetic_base(model, v)
    ]


def _may_have_a_synthetic_base(model: Model, v: str) -> bool:
    """An argument storage several argument objects read, whose contents carry a gradient: a
    write may give it a history through their base, and then none of them may be relaid out
    (r[autograd.input-writes.synthetic-base])."""
    storage = model.storage(v)
    return storage.caller and storage.args > 1 and storage.requires_grad


def _g_relayout(draw, model: Model) -> list[Instr]:
    """`x.t_()` and the like: the object takes a new layout on its storage, and its history."""
    v = _recent(draw, _relayable(model))
    obj = model.obj(v)
    ops = relayout_ops(obj.lay)
    ops.remove("resize_")  # eager refuses to resize a tensor that requires grad
    if model.storage(v).caller:
        ops.remove("as_strided_")
    op = draw(sampled_from(ops))
    args, obj.lay = draw_relayout(draw, op, obj.lay, model.storage(v).nbytes)
    model.storage(v).relaid = obj.rebound = True
    if _requires_grad(model, v):
        # r[capture.metadata-views]: the other tensors of its view family are used no more
        index = model.names[v]
        family = [n for n in model.names if model.obj(n).storage == obj.storage]
        for name in family:
            if model.names[name] != index:
                del model.names[name]
    return [Instr(op, (), (Var(v), *args))]


def _g_unary(draw, model: Model) -> list[Instr]:
    x = _recent(draw, list(model.names))
    positive = model.storage(x).positive
    ops = ["neg", "abs", "relu", "sigmoid", "tanh", "exp", "pow", "clone"]
    op = draw(sampled_from(ops + ["log"] * positive))
    args = ()
    if op == "pow":
        args = (draw(sampled_from([2.0, 3.0] + [0.5, -1.0] * positive)),)
    stays_positive = op in ("sigmoid", "exp") or (positive and op in ("pow", "clone"))
    return [_compute(model, op, (Var(x), *args), positive=stays_positive)]


def _g_custom_function(draw, model: Model) -> list[Instr]:
    """A custom autograd.Function (strategies/functions.py) applied to a value: its own backward
    gives the gradient (r[capture.custom-function])."""
    x = _recent(draw, list(model.names))
    functions = sorted(FUNCTIONS)
    if model.obj(x).rebound:  # fn_pass_through returns a view of x (see _viewable)
        functions.remove("fn_pass_through")
    op = draw(sampled_from(functions))
    positive = _is_positive(model, Var(x))
    if op == "fn_scaled":
        c = draw(sampled_from(SCALARS))
        return [_compute(model, op, (Var(x), c), positive=positive and c > 0)]
    if op == "fn_product":
        shape = model.lay(x).sizes
        others = [v for v in model.names if broadcastable(model.lay(v).sizes, shape)]
        y = Var(draw(sampled_from(others)))
        return [_compute(model, op, (Var(x), y), positive=positive and _is_positive(model, y))]
    if op == "fn_pass_through":
        # eager returns a view of x made inside the Function: writing it, or writing x and then
        # reading it, raises; nothing writes their storage from here on
        out = model.new_name()
        _bind_view(model, out, x, model.lay(x))
        model.storage(out).saved = True
        return [Instr(op, (out,), (Var(x),))]
    if op == "fn_halved_and_doubled":
        halved = _compute(model, "fn_scaled", (Var(x), 0.5), positive=positive)
        doubled = _compute(model, "fn_scaled", (Var(x), 2.0), positive=positive)
        model.storage(doubled.outs[0]).requires_grad = False  # marked non-differentiable
        return [Instr(op, (*halved.outs, *doubled.outs), (Var(x),))]
    if op == "fn_doubled_grad":
        # Its backward writes the gradient it receives; eager's result is the spec's only when
        # that gradient is its own, so a product with a scalar (whose derivative makes a new
        # tensor) is its one reader, and the product is what the program goes on with.
        applied = _compute(model, op, (Var(x),), positive=positive)
        (t,) = applied.outs
        c = draw(sampled_from(SCALARS))
        scaled = _compute(model, "mul", (Var(t), c), positive=positive and c > 0)
        del model.names[t]
        return [applied, scaled]
    return [_compute(model, op, (Var(x),), positive=positive or op == "fn_exp")]


def _g_no_grad(draw, model: Model) -> list[Instr]:
    """`x * c` computed under torch.no_grad(): a value that requires no grad."""
    x = _recent(draw, list(model.names))
    other = draw(sampled_from(SCALARS))
    positive = _is_positive(model, Var(x)) and other > 0
    instr = _compute(model, "no_grad_mul", (Var(x), other), positive=positive)
    model.storage(instr.outs[0]).requires_grad = False
    return [instr]


def _g_binary(draw, model: Model) -> list[Instr]:
    x = _recent(draw, list(model.names))
    op = draw(sampled_from(["add", "sub", "mul", "maximum"]))
    shape = model.lay(x).sizes
    others = [v for v in model.names if broadcastable(model.lay(v).sizes, shape)]
    if op != "maximum" and draw(st.booleans()):
        other = draw(sampled_from(SCALARS))
    else:
        other = Var(draw(sampled_from(others)))
    positive = op != "sub" and _is_positive(model, Var(x)) and _is_positive(model, other)
    return [_compute(model, op, (Var(x), other), positive=positive)]


def _g_grad_mode(draw, model: Model) -> list[Instr]:
    """`x * y` under torch.enable_grad(), alone or inside torch.no_grad()."""
    x = _recent(draw, list(model.names))
    shape = model.lay(x).sizes
    others = [v for v in model.names if broadcastable(model.lay(v).sizes, shape)]
    op = draw(sampled_from(GRAD_MODE_PRODUCTS))
    other = draw(st.one_of(sampled_from(SCALARS), sampled_from(others).map(Var)))
    positive = _is_positive(model, Var(x)) and _is_positive(model, other)
    return [_compute(model, op, (Var(x), other), positive=positive)]


def _matmul_partners(model: Model, a: str) -> list[str]:
    return [
        b
        for b in model.names
        if len(model.lay(b).sizes) == 2 and model.lay(b).sizes[0] == model.lay(a).sizes[1]
    ]


def _matmul_operands(model: Model) -> list[str]:
    """2-D values with a partner, or of which a transpose may be taken (see _viewable)."""
    return [
        v
        for v in model.names
        if len(model.lay(v).sizes) == 2
        and (not model.obj(v).rebound or _matmul_partners(model, v))
    ]


def _g_matmul(draw, model: Model) -> list[Instr]:
    """mm or matmul of 2-D values; with no fitting pair, of a value and its transpose."""
    a = _recent(draw, _matmul_operands(model))
    partners = _matmul_partners(model, a)
    op = draw(sampled_from(["mm", "matmul"]))
    if partners and (model.obj(a).rebound or draw(st.booleans())):
        return [_compute(model, op, (Var(a), Var(draw(sampled_from(partners)))))]
    t = model.new_name()
    _bind_view(model, t, a, apply_view("t", model.lay(a), ())[0])
    return [Instr("t", (t,), (Var(a),)), _compute(model, op, (Var(a), Var(t)))]


def _g_reduce(draw, model: Model) -> list[Instr]:
    x = _recent(draw, list(model.names))
    sizes = model.lay(x).sizes
    ops = ["sum", "mean"]
    if not sizes or draw(st.booleans()):  # every dim
        ops += ["amax"] * (math.prod(sizes) > 0)
        return [_compute(model, draw(sampled_from(ops)), (Var(x),))]
    dims = draw(st.lists(st.integers(0, len(sizes) - 1), min_size=1, unique=True))
    if all(sizes[d] > 0 for d in dims):  # amax of nothing raises
        ops.append("amax")
    op = draw(sampled_from(ops))
    dims = tuple(d - len(sizes) if draw(st.booleans()) else d for d in dims)
    return [_compute(model, op, (Var(x), dims, draw(st.booleans())))]


def _g_norm(draw, model: Model) -> list[Instr]:
    """A vector norm, std or F.normalize over one dim: ATen-valued ops whose backward formulas
    write into tensors they made (`masked_fill_` where a norm is 0), which the backward graph
    holds as functional ops (r[ops.aten-derivatives.functional])."""
    x = _recent(draw, [v for v in model.names if model.lay(v).sizes])
    sizes = model.lay(x).sizes
    d = draw(st.integers(0, len(sizes) - 1))
    ops = ["vector_norm", "normalize"] + ["std"] * (sizes[d] > 1)  # std of one value: nan
    op = draw(sampled_from(ops))
    if op == "vector_norm":
        ord = draw(sampled_from([2.0, 1.0, 3.0]))
        return [_compute(model, op, (Var(x), ord, (d,), draw(st.booleans())))]
    if op == "std":
        return [_compute(model, op, (Var(x), d))]
    return [_compute(model, op, (Var(x), 2.0, d))]


def _g_loss(draw, model: Model) -> list[Instr]:
    """`F.mse_loss` (or smooth_l1, huber) of a value, often transposed first, against a value of
    its sizes or a full tensor: their backward kernels lay the gradient of a transposed input out
    contiguously where the meta kernels keep its order, and the backward views it on
    (r[ops.fresh-output.meta-layout])."""
    x = _recent(draw, list(model.names))
    body = []
    if len(model.lay(x).sizes) >= 2 and not model.obj(x).rebound and draw(st.booleans()):
        body = _view_of_op(model, x, "transpose", (0, 1))
        x = body[0].outs[0]
    sizes = model.lay(x).sizes
    targets = [v for v in model.names if model.lay(v).sizes == sizes and v != x]
    if targets and draw(st.booleans()):
        target = draw(sampled_from(targets))
    else:
        full = _compute(model, "full", (sizes, draw(sampled_from(SCALARS))))
        body.append(full)
        target = full.outs[0]
    op = draw(sampled_from(["mse_loss", "smooth_l1_loss", "huber_loss"]))
    # A mean's or a sum's storage departs from eager's by rule (eager's kernel leaves the 0-d
    # result on a storage of every term, r[ops.fresh-output.meta-layout] gives it its own): the
    # oracle runs eager with the rule's storage (aotspec.fuzz.oracle.eager_as_specified).
    # No mean of no terms: PyTorch's decompositions of the losses' backward divide by the count
    # in Python, so tracing raises ZeroDivisionError where eager's kernel gives nan.
    reduction = draw(sampled_from(["none", "sum"] + ["mean"] * bool(math.prod(sizes))))
    return [*body, _compute(model, op, (Var(x), Var(target), reduction))]


def _view_of_op(model: Model, v: str, op: str, args: tuple) -> list[Instr]:
    """`v.op(*args)`, a view of `v`."""
    (result,) = apply_view(op, model.lay(v), args)
    out = model.new_name()
    _bind_view(model, out, v, result)
    return [Instr(op, (out,), (Var(v), *args))]


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
    partners = draw(st.lists(sampled_from(fitting), min_size=1, max_size=2))
    return [_compute(model, "cat", (d, Var(x), *map(Var, partners)))]


def _g_where(draw, model: Model) -> list[Instr]:
    """A mask from comparing a value with a scalar, then where(mask, a, b), all broadcasting."""
    c = _recent(draw, list(model.names))
    mask = model.new_name()
    scalar = draw(sampled_from(SCALARS))
    compare = Instr(draw(sampled_from(["gt", "lt"])), (mask,), (Var(c), scalar))
    mask_layout = Strided.of(model.lay(c).meta().gt(0.0))  # a fresh, dense tensor in c's order
    model.masks[mask] = mask_layout
    shape = mask_layout.sizes

    def fitting(shape):
        return [v for v in model.names if broadcastable(model.lay(v).sizes, shape)]

    a = _recent(draw, fitting(shape))
    b = draw(sampled_from(fitting(torch.broadcast_shapes(model.lay(a).sizes, shape))))
    positive = _is_positive(model, Var(a)) and _is_positive(model, Var(b))
    return [compare, _compute(model, "where", (Var(mask), Var(a), Var(b)), positive=positive)]


def _g_special(draw, model: Model) -> list[Instr]:
    """A non-finite constant (`x + inf`, `x * nan`, ...), or clamp with bounds in either order or
    infinite (min > max gives max everywhere)."""
    x = _recent(draw, list(model.names))
    if draw(st.booleans()):
        low, high = draw(sampled_from(EDGE_CLAMPS))
        return [_compute(model, "clamp", (Var(x), low, high))]
    op = draw(sampled_from(["add", "sub", "mul", "maximum"]))
    other = draw(sampled_from(SPECIAL_SCALARS))
    if op == "maximum":  # of a tensor only: a full one
        full = _compute(model, "full", (model.lay(x).sizes, other))
        return [full, _compute(model, op, (Var(x), Var(full.outs[0])))]
    return [_compute(model, op, (Var(x), other))]


def _as_strided_copyable(model: Model) -> list[str]:
    """Values laid out contiguously from the start of a storage of their own size: as_strided
    addresses the storage, so every other element of such a value is in bounds."""
    return [
        v
        for v in model.names
        if model.lay(v) == Strided.contiguous(model.lay(v).sizes)
        and 2 <= model.lay(v).numel
        and model.storage(v).full == model.lay(v).extent_bytes
    ]


def _g_aten_formula(draw, model: Model) -> list[Instr]:
    """`as_strided_copy` of every other element of a value: an ATen-valued op whose eager
    formula copies the gradient into an as_strided view of zeros
    (r[ops.aten-derivatives.functional])."""
    x = _recent(draw, _as_strided_copyable(model))
    offset = draw(st.integers(0, 1))
    count = (model.lay(x).numel - offset + 1) // 2
    return [_compute(model, "as_strided_copy", (Var(x), (count,), (2,), offset))]


def _g_dead(draw, model: Model) -> list[Instr]:
    """`torch.rand_like(x)`, which nothing reads: a value that dies where it is made."""
    x = _recent(draw, list(model.names))
    return [Instr("rand_like", (model.new_name(),), (Var(x),))]


def _detach_freed(setup, model: Model) -> list[Instr]:
    """An argument whose graph the caller freed (`Base.history_freed`) is read only through
    `detach()`: it gets no gradient, and a backward that walked the graph behind it would raise
    (r[autograd.detach-no-grad-inputs])."""
    freed = {base.name for base in setup.bases if base.history_freed}
    body = []
    for i, name in enumerate(setup.args):
        if name in freed and f"x{i}" in model.names:
            out = model.new_name()
            _bind_view(model, out, f"x{i}", model.lay(f"x{i}"))
            model.obj(out).detached = True
            del model.names[f"x{i}"]
            body.append(Instr("detach", (out,), (Var(f"x{i}"),)))
    return body


#: Views that a write may go through (single-output, no internal overlap).
WRITE_VIEWS = ["view", "reshape", "t", "transpose", "permute", "slice", "select", "unsqueeze"]


def _g_write(draw, model: Model, targets: list[str]) -> list[Instr]:
    """An in-place op or copy_ into one of `targets` (see `_grad_writable`), or into a view of
    it made just before."""
    target = _recent(draw, targets)
    body = []
    if not model.obj(target).rebound and draw(st.booleans()):
        lay = model.lay(target)
        view_op = draw(sampled_from([op for op in view_ops(lay, True) if op in WRITE_VIEWS]))
        view_args = draw_view_args(draw, view_op, lay, may_copy=False)
        (result,) = apply_view(view_op, lay, view_args)
        view = model.new_name()
        _bind_view(model, view, target, result)
        body.append(Instr(view_op, (view,), (Var(target), *view_args)))
        target = view
    sources = _grad_sources(model, target)
    ops = ["add_", "sub_", "mul_", "fill_", "zero_"] + ["copy_"] * bool(sources)
    op = draw(sampled_from(ops))
    other = draw(sampled_from(SCALARS))
    if sources and (op == "copy_" or (op in ("add_", "sub_", "mul_") and draw(st.booleans()))):
        other = Var(draw(sampled_from(sources)))
    if op in ("add_", "sub_"):
        args = (other, draw(sampled_from([1, 2.0])))
    elif op in ("mul_", "copy_", "fill_"):
        args = (other,)
    else:
        args = ()
    storage = model.storage(target)
    if isinstance(other, Var):
        source, source_grad = model.storage(other.name), _requires_grad(model, other.name)
        if source_grad and not storage.requires_grad:
            _first_history(model, target)
        storage.requires_grad |= source_grad
        # mul_ saves its operand for the target's gradient and the target's old value for the
        # operand's: both storages are frozen from here on.
        if op == "mul_" and (storage.requires_grad or source_grad):
            storage.saved = source.saved = True
    storage.positive = False
    _forget_no_grad_views(model, model.obj(target).storage)
    return [*body, Instr(op, (), (Var(target), *args))]


def _first_history(model: Model, target: str) -> None:
    """A write into `target` gives its storage a history: the other tensors on it go stale."""
    written = model.names[target]
    for v, index in model.names.items():
        if index != written and model.obj(v).storage == model.obj(target).storage:
            model.obj(v).stale = True


def _no_grad_writable(model: Model) -> list[str]:
    """What a write under torch.no_grad() may target (r[autograd.no-grad-writes]): intermediates,
    and arguments that require grad, or views of them (FSDP's all-gather into a parameter, an
    optimizer-like update: r[autograd.no-grad-input-writes]), one or several on a storage
    (r[autograd.no-grad-input-writes.identity])."""
    return [
        v
        for v in model.names
        if model.writable(v)
        and not model.obj(v).detached
        and not model.storage(v).saved
        and (not model.storage(v).caller or model.storage(v).grad_args >= 1)
    ]


def _g_no_grad_write(draw, model: Model) -> list[Instr]:
    """`x.mul_(c)` or `x.copy_(y)` under torch.no_grad(), into an intermediate or an argument that
    requires grad: the target keeps its history, the written values carry none."""
    target = _recent(draw, _no_grad_writable(model))
    storage = model.obj(target).storage
    sources = [v for v in copy_sources(model, target) if model.obj(v).storage != storage]
    if sources and draw(st.booleans()):
        instr = Instr("no_grad_copy_", (), (Var(target), Var(draw(sampled_from(sources)))))
    else:
        instr = Instr("no_grad_mul_", (), (Var(target), draw(sampled_from(SCALARS))))
    model.storage(target).positive = False
    _forget_no_grad_views(model, storage)
    return [instr]


def _writes_intermediates(model: Model) -> bool:
    return any(not model.storage(v).caller for v in _grad_writable(model))


def _writes_arguments(model: Model) -> bool:
    return any(model.storage(v).caller for v in _grad_writable(model))


def _g_write_intermediate(draw, model: Model) -> list[Instr]:
    return _g_write(draw, model, [v for v in _grad_writable(model) if not model.storage(v).caller])


def _g_write_argument(draw, model: Model) -> list[Instr]:
    """A write with grad mode on into a buffer or a non-leaf argument
    (r[autograd.input-writes])."""
    return _g_write(draw, model, [v for v in _grad_writable(model) if model.storage(v).caller])


GRAD_STEPS: list[tuple[str, Callable, Callable[[Model], bool]]] = [
    ("view", _g_view, lambda m: bool(_viewable(m))),
    ("detach", _g_detach, lambda m: True),
    ("relayout", _g_relayout, lambda m: bool(_relayable(m))),
    ("unary", _g_unary, lambda m: True),
    ("binary", _g_binary, lambda m: True),
    ("matmul", _g_matmul, lambda m: bool(_matmul_operands(m))),
    ("reduce", _g_reduce, lambda m: True),
    ("cat", _g_cat, lambda m: any(m.lay(v).sizes for v in m.names)),
    ("norm", _g_norm, lambda m: any(m.lay(v).sizes for v in m.names)),
    ("loss", _g_loss, lambda m: True),
    ("where", _g_where, lambda m: True),
    ("no_grad", _g_no_grad, lambda m: True),
    ("grad_mode", _g_grad_mode, lambda m: True),
    ("custom_function", _g_custom_function, lambda m: True),
    ("custom_function", _g_custom_function, lambda m: True),
    ("no_grad_write", _g_no_grad_write, lambda m: bool(_no_grad_writable(m))),
    ("special", _g_special, lambda m: True),
    ("dead", _g_dead, lambda m: True),
    ("aten_formula", _g_aten_formula, lambda m: bool(_as_strided_copyable(m))),
    # Writes come four times: the point of the exercise, and each is blocked often (saved).
    ("write", _g_write_intermediate, _writes_intermediates),
    ("write", _g_write_intermediate, _writes_intermediates),
    ("argument", _g_write_argument, _writes_arguments),
    ("argument", _g_write_argument, _writes_arguments),
]


@st.composite
def grad_programs(draw, max_steps: int = 10) -> Program:
    """A program with backward: at least one output requires grad (see the section comment)."""
    setup = draw(grad_setups())
    model = initial_grad_model(setup)
    body: list[Instr] = _detach_freed(setup, model)
    grad_arguments = [v for v in model.names if _requires_grad(model, v)]
    grad_enabled = draw(sampled_from([True, True, True, False]))
    model.grad_enabled = grad_enabled
    retain_graph = draw(sampled_from([False, False, False, True]))
    # At least two steps (one rarely reaches a write), then go on with odds 5:1. A "go on" choice
    # per step, rather than a count drawn first, lets shrinking delete any one step.
    steps = 0
    while steps < 2 or (steps < max_steps and draw(sampled_from([False] + [True] * 5))):
        # each predicate asked once: the writes' (which walk the model) come twice
        allows = {allowed: allowed(model) for allowed in dict.fromkeys(a for *_, a in GRAD_STEPS)}
        kinds = [(name, step) for name, step, allowed in GRAD_STEPS if allows[allowed]]
        _, step = draw(sampled_from(kinds))
        body += step(draw, model)
        steps += 1
    if not grad_enabled:  # the one value sure to require grad: see the section comment
        x = draw(sampled_from(grad_arguments))
        body.append(_compute(model, "enable_grad_mul", (Var(x), draw(sampled_from(SCALARS)))))
    names = list(model.names)
    with_grad = [v for v in reversed(names) if _requires_grad(model, v)]  # latest first
    first = with_grad[0] if not grad_enabled or draw(st.booleans()) else None
    returns = [first or draw(sampled_from(with_grad))]
    returns += draw(st.lists(sampled_from(names), max_size=2))
    returns += names[-1:] * draw(st.booleans())  # often the chain's end: what the last step made
    returns = tuple(draw(st.permutations(returns)))
    return Program(setup, tuple(body), returns, grad_enabled, retain_graph)
