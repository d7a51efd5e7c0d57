"""Caller setups: the tensors a caller makes before calling a program, and the generators'
model of them when the program starts.

Generates `setups()`, the callers of mutation programs (mutations.py): 1-3 float32 bases of
distinct values (one in six with -inf, inf or nan), some resized to zero bytes, passed whole or
as views (two arguments on one base alias; one object may be passed twice), and aliases the
caller keeps without passing them; and `grad_setups()`, the callers of programs with backward
(grad.py): leaves that require grad and buffers that do not.
`initial_model` and `initial_grad_model` are the generators' `Model` of a setup's arguments.
"""

from __future__ import annotations

import math

from hypothesis import strategies as st

from .model import ITEMSIZE, Model, Strided, draw_view
from .program import Base, CallerView, Setup
from .sampling import sampled_from

BASE_SHAPES = [(4,), (2, 3), (2, 2, 2), (3, 2)]
GRAD_SHAPES = [(3,), (4,), (2, 3), (3, 2), (2, 2), (1, 3), (2, 1, 3), ()]
# Shrinking goes to the first: 1.0, then small values of either sign; 0.0 (the kink of relu and
# abs) last.
GRAD_VALUES = [1.0, -1.0, 0.5, 2.0, -0.5, -2.0, 0.25, 1.5, -1.5, -0.25, 0.0]
#: Put in one element of one caller tensor in five or six.
SPECIAL_VALUES = [math.inf, -math.inf, math.nan]

#: How the caller passes a tensor: the tensor, a view of it, both (two aliasing arguments), the
#: same object twice, with a view of its detach() (an alias that requires no grad); "held": a
#: view the caller keeps without passing it.
LEAF_PASSING = [("base",), ("base",), ("view",), ("base", "view"), ("base", "base")]
LEAF_PASSING += [("base", "detached")]
BUFFER_PASSING = [("base",), ("base", "held"), ("view",), ("base", "view")]


@st.composite
def setups(draw) -> Setup:
    n_bases = draw(st.integers(1, 3))
    bases, views, args = [], [], []
    for k in range(n_bases):
        shape = draw(sampled_from(BASE_SHAPES))
        numel = math.prod(shape)
        # Distinct values, distinct per base: a misplaced element shows.
        values = tuple(10.0 * k + i - numel // 2 + 0.5 for i in range(numel))
        values = draw(_with_special_value(values, odds=5))
        zeroed = draw(sampled_from([False, False, False, True]))
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
    if draw(sampled_from([False] * 9 + [True])):
        args.append(draw(sampled_from(args)))
    args = draw(st.permutations(args))
    return Setup(tuple(bases), tuple(views), tuple(args))


@st.composite
def _with_special_value(draw, values: tuple[float, ...], odds: int) -> tuple[float, ...]:
    """`values`, or one time in `odds + 1` with one of them -inf, inf or nan."""
    if not values or not draw(sampled_from([False] * odds + [True])):
        return values
    k = draw(st.integers(0, len(values) - 1))
    return (*values[:k], draw(sampled_from(SPECIAL_VALUES)), *values[k + 1 :])


def _draw_caller_view(draw, lay: Strided) -> Strided:
    for _ in range(draw(st.integers(1, 2))):
        _, _, results = draw_view(draw, lay, in_bounds=True, may_copy=False)
        lay = draw(sampled_from(results))
    return lay


def initial_model(setup: Setup, compiled: bool = False) -> Model:
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


@st.composite
def _grad_tensor(draw, requires_grad: bool):
    """One caller tensor: its shape, values, how it is passed, the layout of its view, and for
    one that requires grad whether it is a non-leaf (`leaf * 1`)."""
    shape = draw(sampled_from(GRAD_SHAPES))
    numel = math.prod(shape)
    values = draw(st.lists(sampled_from(GRAD_VALUES), min_size=numel, max_size=numel))
    values = draw(_with_special_value(tuple(values), odds=4))
    passing = draw(sampled_from(LEAF_PASSING if requires_grad else BUFFER_PASSING))
    view = _draw_caller_view(draw, Strided.contiguous(shape)) if passing != ("base",) else None
    non_leaf = requires_grad and draw(st.booleans())
    return shape, tuple(values), passing, view, non_leaf


@st.composite
def grad_setups(draw) -> Setup:
    """1-3 tensors that require grad (leaves, or non-leaves made from leaves the caller keeps)
    and 0-2 buffers that do not, each drawn whole (so shrinking drops a tensor at once). A view
    of a leaf passed is an argument that requires grad but is not a leaf; a view of a buffer the
    caller keeps shows the buffer's writes. One caller in four also passes a non-leaf whose graph
    it freed (`Base.history_freed`), which grad programs read only through detach(); one tensor
    in five holds -inf, inf or nan."""
    leaves = draw(st.lists(_grad_tensor(requires_grad=True), min_size=1, max_size=3))
    buffers = draw(st.lists(_grad_tensor(requires_grad=False), max_size=2))
    # One caller in four passes a non-leaf whose graph it freed, which the program detaches.
    freed = []
    if draw(sampled_from([False, False, False, True])):
        shape = draw(sampled_from(GRAD_SHAPES))
        n = math.prod(shape)
        values = draw(st.lists(sampled_from(GRAD_VALUES), min_size=n, max_size=n))
        freed = [(shape, tuple(values), ("base",), None, True)]
    bases, views, args = [], [], []
    for k, (shape, values, passing, view, non_leaf) in enumerate(leaves + buffers + freed):
        bases.append(
            Base(
                f"b{k}",
                shape,
                values,
                requires_grad=k < len(leaves) or k == len(leaves + buffers),
                non_leaf=non_leaf,
                history_freed=k == len(leaves + buffers),
            )
        )
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


def initial_grad_model(setup: Setup) -> Model:
    model = initial_model(setup, compiled=True)
    requires_grad = {base.name for base in setup.bases if base.requires_grad}
    requires_grad |= {view.name for view in setup.views if view.base in requires_grad}
    leaves = {base.name for base in setup.bases if base.requires_grad and not base.non_leaf}
    leaves |= {view.name for view in setup.views if view.base in leaves}
    detached = {view.name for view in setup.views if view.detached}
    counted: set[str] = set()
    for i, name in enumerate(setup.args):
        storage = model.storage(f"x{i}")
        storage.caller = True
        storage.requires_grad |= name in requires_grad
        storage.leaf |= name in leaves
        model.obj(f"x{i}").detached = name in detached
        if name not in counted:
            counted.add(name)
            storage.args += 1
            storage.grad_args += name in requires_grad
            storage.detached_args += name in detached
    return model
