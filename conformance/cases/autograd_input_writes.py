"""Cases for specs/autograd.md's "Writes into inputs with grad mode on" and "Writes into inputs
under torch.no_grad()": a caller's tensor the program writes, its history and its gradient.

Expected gradients are worked out by hand, or computed by eager PyTorch on private copies.
"""

import torch

from aotspec.errors import UnsupportedError

from ..case import (
    COMPILED_ONLY,
    Absent,
    Case,
    Identical,
    Layout,
    PeakBytes,
    Raises,
    RequiresGrad,
    Shares,
    Values,
)
from ._autograd_common import (
    _EAGER_INTERPRETER_KEEPS_HISTORIES,
    _FSDP,
    _G,
    _aliased_views_world,
    _eager_grads,
    _fsdp_layer,
    _leaves,
    _non_leaf_world,
    _regather,
    _resize,
    _sharded_world,
    _two_non_leaves_world,
    _x_w_world,
)


def _update_then_use(x, w):
    with torch.no_grad():
        w.mul_(0.5)
    return (x @ w).sin()


_UPDATE = _eager_grads(_update_then_use, _x_w_world())


def _two_grad_inputs_world():
    w = _G.clone().requires_grad_()
    return {"w": w, "flat": w.view(16)}


def _writes_one_of_two(w, flat):
    with torch.no_grad():
        w.mul_(0.5)
    return flat * 2


def _no_grad_write_into_an_intermediate(x):
    v = x * 2
    with torch.no_grad():
        v[0].mul_(3)  # v keeps its history: d v / d x stays 2
    return (v * v).sum()


def _write_under_the_callers_no_grad(x):
    with torch.enable_grad():
        v = x * 2
    v.fill_(3.0)  # under the caller's no_grad: v keeps its history, d v / d x stays 2
    return v


def _write_under_the_callers_no_grad_into_a_value_made_without(x):
    with torch.enable_grad():
        y = x * 2
    w = x * 3  # under the caller's no_grad: no history
    w.mul_(0.5).add_(1.0)  # no history either: each result is w's storage's new contents
    return y, w


def _set_to_a_doubled_copy(p, y, w):
    with torch.no_grad():
        p.set_(y * 2)
    return (p * w).sum()


def _set_to_another_input(p, y, w):
    with torch.no_grad():
        p.set_(y)
    return (p * w).sum() + (y * y).sum()


def _set_to_other_sizes(p, y, w):
    with torch.no_grad():
        p.set_(y.view(2, 2))
    return p.sum()


def _set_world(y_requires_grad=False):
    def world():
        p = torch.zeros(4, requires_grad=True)
        y = torch.arange(4.0).requires_grad_(y_requires_grad)
        return {
            "p": p,
            "p_alias": p.detach().view(2, 2),
            "y": y,
            "w": torch.ones(4, requires_grad=True),
        }

    return world


def _no_grad_write_into_one_view_read_the_other(v, m):
    with torch.no_grad():
        v.mul_(2)
    return m * 3


def _set_shared_world():
    """a and b: non-leaves with histories of their own, on one storage since a.set_(b) (what
    Dynamo passes the graph after a graph break at that set_)."""
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = torch.tensor([4.0, 5.0, 6.0], requires_grad=True)
    a, b = x * 1, y * 1
    with torch.no_grad():
        a.set_(b)
    return {"x": x, "y": y, "a": a, "b": b}


def _doubles_b_reads_both(a, b):
    with torch.no_grad():
        b.mul_(2)
    return a * 2 + b * 3


def _expanded_world():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    base = x * 1
    return {"x": x, "base": base, "wide": base.expand(2, 3)}


def _doubles_base_reads_both(base, wide):
    with torch.no_grad():
        base.mul_(2)
    return wide * torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]) + base


def _complex_and_real_world():
    z = torch.tensor([1 + 2j, 3 - 1j], requires_grad=True)
    c = z * 1
    return {"z": z, "c": c, "r": torch.view_as_real(c)}


def _doubles_c_reads_both(c, r):
    with torch.no_grad():
        c.mul_(2)
    return r[:, 0] * 3 + c.imag


def _sharded_with_view_world():
    w = torch.nn.Parameter(torch.empty(2, 3))
    w.untyped_storage().resize_(0)  # sharded: the parameter holds no bytes between uses
    return {"w": w, "flat": w.view(6), "gathered": torch.arange(6.0)}


def _gathers_through_the_view(w, flat, gathered):
    _resize(w, 24)
    with torch.no_grad():
        flat.copy_(gathered)
    y = (w * torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])).sum(0) + flat[:3] * 5
    _resize(w, 0)
    return y


def _mutates_grad_input(y, z):
    y.mul_(2)
    return y * z


def _non_leaf_a_world():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    return {"x": x, "a": x * 1}


def _doubles_a(a):
    a.mul_(2)
    return a


def _doubles_a0_then_triples(a):
    a[0].mul_(2)
    return a * 3


def _buffer_and_grad_world():
    return {"x": torch.zeros(3), "y": torch.tensor([1.0, 2.0, 3.0], requires_grad=True)}


def _adds_y_into_x(x, y):
    x.add_(y)
    return x * 2


def _aliasing_world():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    a = x * 1
    return {"x": x, "a": a, "v": a.view(3)}


def _doubles_a_reads_v(a, v):
    a.mul_(2)
    return a + v


def _multiplies_a_by_w(a, w):
    a.mul_(w)
    return a * 2


def _sets_y_to_z(y, z):
    y.set_(z.detach())
    return y * 2


def _expanded_non_leaf_and_scales():
    p = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    return {"p": p, "a": (p * 1).expand(2, 3), "w": torch.tensor([[1.0], [10.0]])}


def _double_row_then_scale(a, w):
    a[0].mul_(2)  # both rows read the one row of memory
    return a * w


# ------------------------------------------------------- aliasing arguments written with grad


def _rows_of_a_non_leaf():
    p = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    x = p * 1
    return {"p": p, "x": x, "a": x[0], "b": x[1]}


def _row_and_its_base():
    p = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    x = p * 1
    return {"p": p, "x": x, "a": x[0]}


def _rows_without_grad_and_a_scale():
    x = torch.ones(2, 2)
    return {"x": x, "a": x[0], "b": x[1], "y": torch.tensor([2.0, 3.0], requires_grad=True)}


def _non_leaf_and_a_second_object_on_its_storage():
    p = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    x = p * 1
    y = torch.empty(0).set_(x.untyped_storage(), 0, (2, 2), (2, 1))  # no ._base: not a view
    return {"p": p, "x": x, "y": y}


def _row_plus_twice_other_row(a, b):
    a.add_(b * 2)
    return a + b


def _double_row_return_base(a, x):
    a.mul_(2)
    return x


def _row_times_scale(a, b, y):
    a.mul_(y)
    return a + b


def _double_then_add_alias(x, y):
    x.mul_(2)
    return x + y


def _double_row_unsqueeze_other(a, b):
    a.mul_(2)
    b.unsqueeze_(0)
    return a + b


def _base_and_middle_view_world():
    base = torch.tensor([1.0, 2.0, 0.0, 1.0], requires_grad=True)
    return {"base": base, "middle": base[1:3]}


def _doubles_base_reads_view_twice(middle, base):
    with torch.no_grad():
        base.mul_(2.0)
    middle + 1  # a read under the call's torch.no_grad()
    with torch.enable_grad():
        return middle * 3.0


def _set_to_other_sizes_then_unread(p, y, w):
    with torch.no_grad():
        p.set_(y.view(2, 2))
    return w * 2


CASES = [
    Case(
        name="autograd.aliased-grad-views-one-written-under-no-grad",
        rules=["autograd.no-grad-input-writes.identity", "capture.view-replays"],
        setup=_aliased_views_world,
        args=["v", "m"],
        program=_no_grad_write_into_one_view_read_the_other,
        backward=True,
        # x = p * 1 = [1, 2, 3, 4] becomes [2, 4, 6, 8] without history; m is a view of x:
        # out0 = 3 m, and sum(out0) sends 3 through m to x, then to p
        expect=[
            Values("out0", [[6.0, 12.0], [18.0, 24.0]]),
            Values("v", [2.0, 4.0, 6.0, 8.0]),
            Values("p.grad", [3.0, 3.0, 3.0, 3.0]),
        ],
    ),
    Case(
        name="autograd.eager-interpreter-rejects-writing-a-grad-input",
        rules=["autograd.mutated-grad-input"],
        setup=_non_leaf_world,
        args=["y", "z"],
        program=_mutates_grad_input,
        expect=[Raises(UnsupportedError, rule="autograd.mutated-grad-input")],
        skip={
            "torch-eager": "eager PyTorch rebases the input's history",
            "reference": "compiled programs rebase it (autograd.input-writes)",
            "fast": "compiled programs rebase it (autograd.input-writes)",
        },
    ),
    Case(
        name="autograd.non-leaf-input-written-then-used",
        rules=["autograd.input-writes", "functionalize.epilogue.data"],
        setup=_non_leaf_world,
        args=["y", "z"],
        program=_mutates_grad_input,
        backward=True,
        # y = 2x = [0, 2, 4] becomes [0, 4, 8]; out = 2y z = 4x z: x.grad = 4z, z.grad = 2y
        expect=[
            Values("y", [0.0, 4.0, 8.0]),
            Values("out0", [0.0, 4.0, 8.0]),
            Values("x.grad", [4.0, 4.0, 4.0]),
            Values("z.grad", [0.0, 4.0, 8.0]),
        ],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.written-input-returned",
        rules=["autograd.input-writes", "functionalize.outputs"],
        setup=_non_leaf_a_world,
        args=["a"],
        program=_doubles_a,
        backward=True,
        # out0 is a itself, 2x after the call: x.grad = 2
        expect=[
            Identical("out0", "a"),
            Values("a", [2.0, 4.0, 6.0]),
            Values("x.grad", [2.0, 2.0, 2.0]),
        ],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.view-of-a-non-leaf-input-written",
        rules=["autograd.input-writes"],
        setup=_non_leaf_a_world,
        args=["a"],
        program=_doubles_a0_then_triples,
        backward=True,
        # a = [2x0, x1, x2] = [2, 2, 3]; out = 3a: x.grad = [6, 3, 3]
        expect=[
            Values("a", [2.0, 2.0, 3.0]),
            Values("out0", [6.0, 6.0, 9.0]),
            Values("x.grad", [6.0, 3.0, 3.0]),
        ],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.input-without-grad-takes-a-gradient-carrying-write",
        rules=["autograd.input-writes"],
        setup=_buffer_and_grad_world,
        args=["x", "y"],
        program=_adds_y_into_x,
        backward=True,
        # x = 0 + y now requires grad (not a leaf, so no x.grad); out = 2x: y.grad = 2
        expect=[
            Values("x", [1.0, 2.0, 3.0]),
            Values("out0", [2.0, 4.0, 6.0]),
            Values("y.grad", [2.0, 2.0, 2.0]),
            Absent("x.grad"),
        ],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.input-written-by-an-op-that-saves-its-original-value",
        rules=["autograd.input-writes.original-value", "autograd.input-writes"],
        setup=lambda: {k: v for k, v in _two_non_leaves_world().items() if k in ("x", "w", "a")},
        args=["a", "w"],
        program=_multiplies_a_by_w,
        backward=True,
        # a = x w = [4, 10, 18]; out = 2 x w: x.grad = 2w = [8, 10, 12], w.grad = 2x = [2, 4, 6]
        expect=[
            Values("a", [4.0, 10.0, 18.0]),
            Values("out0", [8.0, 20.0, 36.0]),
            Values("x.grad", [8.0, 10.0, 12.0]),
            Values("w.grad", [2.0, 4.0, 6.0]),
        ],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.gradient-carrying-write-into-a-base-passed-with-its-view",
        rules=["autograd.input-writes.synthetic-base"],
        setup=_aliasing_world,
        args=["a", "v"],
        program=_doubles_a_reads_v,
        backward=True,
        # eager: a = 2x, and v, a view of a, reads it: out0 = 4x; d sum(out0) / dx = 4
        expect=[
            Values("out0", [4.0, 8.0, 12.0]),
            Values("v", [2.0, 4.0, 6.0]),
            RequiresGrad("v"),
            Values("x.grad", [4.0, 4.0, 4.0]),
        ],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.set-of-a-grad-input-with-grad-mode-on",
        rules=["autograd.input-writes.set"],
        setup=_non_leaf_world,
        args=["y", "z"],
        program=_sets_y_to_z,
        expect=[Raises(UnsupportedError, rule="autograd.input-writes.set")],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="autograd.fsdp-gather-use-reshard",
        rules=[
            "autograd.no-grad-input-writes",
            "autograd.no-grad-input-writes.identity",
            "autograd.saved-inputs.final-contents",
            "autograd.saved-inputs.in-bounds",
        ],
        setup=_sharded_world,
        args=["x", "w", "gathered"],
        program=_fsdp_layer,
        backward=True,
        before_backward=_regather,
        # eager on a private world: y = x @ g, x.grad = 1 @ g^T, w.grad = x^T @ 1, w re-gathered
        expect=[Values(name, _FSDP[name]) for name in ("out0", "x.grad", "w.grad", "w")],
    ),
    Case(
        name="autograd.no-grad-update-then-use",
        rules=["autograd.no-grad-input-writes", "autograd.no-grad-input-writes.identity"],
        setup=_x_w_world,
        args=["x", "w"],
        program=_update_then_use,
        backward=True,
        expect=[Values(name, _UPDATE[name]) for name in ("out0", "x.grad", "w.grad", "w")],
    ),
    Case(
        name="autograd.no-grad-write-shared-by-two-grad-inputs",
        rules=["autograd.no-grad-input-writes.identity"],
        setup=_two_grad_inputs_world,
        args=["w", "flat"],
        program=_writes_one_of_two,
        backward=True,
        # the leaf w halves without history; flat, its view, reads it: out0 = 2 flat = G, and
        # the gradient 2 goes through flat's view to w
        expect=[
            Values("out0", _G.view(16)),
            Values("w", _G * 0.5),
            Values("w.grad", torch.full((4, 4), 2.0)),
        ],
    ),
    Case(
        name="autograd.no-grad-write-then-reads-under-no-grad-and-enable-grad",
        rules=["autograd.no-grad-input-writes.identity", "functionalize.reads.grad-mode"],
        setup=_base_and_middle_view_world,
        args=["middle", "base"],
        program=_doubles_base_reads_view_twice,
        grad_enabled=False,
        backward=True,
        # base doubles without history to [2, 4, 0, 2]; the read under no_grad makes nothing to
        # differentiate, the one under enable_grad does: out0 = 3 middle = [12, 0] requires
        # grad, and 3 goes through middle's view to base
        expect=[
            Values("out0", [12.0, 0.0]),
            RequiresGrad("out0", True),
            Values("base", [2.0, 4.0, 0.0, 2.0]),
            Values("base.grad", [0.0, 3.0, 3.0, 0.0]),
        ],
    ),
    Case(
        name="autograd.no-grad-write-into-tensors-set-to-share-a-storage",
        rules=["autograd.no-grad-input-writes.identity"],
        setup=_set_shared_world,
        args=["a", "b"],
        program=_doubles_b_reads_both,
        backward=True,
        # a and b read [4, 5, 6], doubled through b: out0 = 2a + 3b = 5 [8, 10, 12]; each read
        # sends its gradient to the history of the tensor it reads through: a's to x, b's to y
        expect=[
            Values("out0", [40.0, 50.0, 60.0]),
            Values("a", [8.0, 10.0, 12.0]),
            Values("b", [8.0, 10.0, 12.0]),
            Values("x.grad", [2.0, 2.0, 2.0]),
            Values("y.grad", [3.0, 3.0, 3.0]),
        ],
    ),
    Case(
        name="autograd.no-grad-write-into-a-base-passed-with-its-expansion",
        rules=["autograd.no-grad-input-writes.identity"],
        setup=_expanded_world,
        args=["base", "wide"],
        program=_doubles_base_reads_both,
        backward=True,
        # base = [2, 4, 6] after the write, wide its rows: out0 = wide * W + base; wide's
        # gradient W goes through its expand to base summed over the rows, [5, 7, 9], and base
        # takes 1 from each of the two rows it is broadcast to: x.grad = [7, 9, 11]
        expect=[
            Values("out0", [[4.0, 12.0, 24.0], [10.0, 24.0, 42.0]]),
            Values("wide", [[2.0, 4.0, 6.0], [2.0, 4.0, 6.0]]),
            Values("x.grad", [7.0, 9.0, 11.0]),
        ],
    ),
    Case(
        name="autograd.no-grad-write-into-a-complex-input-passed-with-its-real-view",
        rules=["autograd.no-grad-input-writes.identity", "functionalize.complex-views"],
        setup=_complex_and_real_world,
        args=["c", "r"],
        program=_doubles_c_reads_both,
        backward=True,
        # c = [2 + 4j, 6 - 2j] after the write: out0 = 3 Re(c) + Im(c) = [10, 16]; the real
        # view's 3 and the imaginary part's 1 meet in z.grad = 3 + 1j
        expect=[
            Values("out0", [10.0, 16.0]),
            Values("r", [[2.0, 4.0], [6.0, -2.0]]),
            Values("z.grad", [3 + 1j, 3 + 1j]),
        ],
    ),
    Case(
        name="autograd.gather-through-a-view-of-a-sharded-parameter",
        rules=["autograd.no-grad-input-writes.identity", "autograd.no-grad-input-writes"],
        setup=_sharded_with_view_world,
        args=["w", "flat", "gathered"],
        program=_gathers_through_the_view,
        backward=True,
        # w = [[0, 1, 2], [3, 4, 5]] once gathered: out0 = colsum(w * W) + 5 flat[:3]
        # = [12, 22, 36] + [0, 5, 10]; w.grad = W through w, plus 5 on its first row through flat
        expect=[
            Values("out0", [12.0, 27.0, 46.0]),
            Values("w.grad", [[6.0, 7.0, 8.0], [4.0, 5.0, 6.0]]),
        ],
    ),
    Case(
        name="autograd.no-grad-write-into-an-intermediate",
        rules=["autograd.no-grad-writes"],
        setup=lambda: _leaves(x=torch.tensor([1.0, 2.0, 3.0])),
        args=["x"],
        program=_no_grad_write_into_an_intermediate,
        backward=True,
        # v = [6, 4, 6] after the write; d sum(v * v) / d v = 2 v; d v / d x = 2
        expect=[Values("out0", 88.0), Values("x.grad", [24.0, 16.0, 24.0])],
    ),
    Case(
        name="autograd.no-grad-call-write-into-a-value-made-with-grad",
        rules=["autograd.no-grad-writes", "autograd.grad-mode-inside"],
        setup=lambda: _leaves(x=torch.tensor([1.0, 2.0, 3.0])),
        args=["x"],
        program=_write_under_the_callers_no_grad,
        grad_enabled=False,
        backward=True,
        # eager: v is all 3s and keeps x * 2's history (the fill records none), so x.grad = 2
        expect=[
            Values("out0", [3.0, 3.0, 3.0]),
            RequiresGrad("out0"),
            Values("x.grad", [2.0, 2.0, 2.0]),
        ],
    ),
    Case(
        name="autograd.no-grad-call-write-into-a-value-made-without-grad",
        rules=[
            "autograd.no-grad-writes",
            "functionalize.writes.whole-without-history",
            "memory.peak",
        ],
        setup=lambda: _leaves(x=torch.arange(64.0)),
        args=["x"],
        program=_write_under_the_callers_no_grad_into_a_value_made_without,
        grad_enabled=False,
        backward=True,
        skip={
            "reference-eager": "the eager interpreter writes in place: its peak is x, y and w "
            "(768 bytes)"
        },
        # eager: y = 2x has a history, so x.grad = 2; w, made and written under the caller's
        # no_grad, has none
        expect=[
            Values("out1", torch.arange(64.0) * 1.5 + 1.0),
            RequiresGrad("out0"),
            RequiresGrad("out1", False),
            Values("x.grad", torch.full((64,), 2.0)),
            # x and y (256 bytes each) and two of w's contents in turn while mul_ and add_
            # compute each from the last (256 each), with no scattered copy: 256 * 4
            PeakBytes(1024),
        ],
    ),
    Case(
        name="autograd.no-grad-set-keeps-the-leaf",
        rules=["autograd.no-grad-set", "aliasing.set.rebinds"],
        setup=_set_world(),
        args=["p", "y", "w"],
        program=_set_to_a_doubled_copy,
        backward=True,
        # docs/torch-2.13.md section 3.2 (eager and aot_function agree): p reads 2y = [0, 2, 4,
        # 6]; its old storage keeps its zeros; sum(p * w) sends w to p and p to w
        expect=[
            Values("out0", 12.0),
            Values("p", [0.0, 2.0, 4.0, 6.0]),
            Values("p_alias", [[0.0, 0.0], [0.0, 0.0]]),
            Values("p.grad", [1.0, 1.0, 1.0, 1.0]),
            Values("w.grad", [0.0, 2.0, 4.0, 6.0]),
        ],
    ),
    Case(
        name="autograd.no-grad-set-to-an-input-that-requires-grad",
        rules=["autograd.no-grad-set", "functionalize.epilogue.set"],
        setup=_set_world(y_requires_grad=True),
        args=["p", "y", "w"],
        program=_set_to_another_input,
        backward=True,
        # p aliases y afterwards; p * w sends its gradient to p, not to y: y's is 2y from y * y
        expect=[
            Values("out0", 20.0),
            Shares("p", "y"),
            Values("p.grad", [1.0, 1.0, 1.0, 1.0]),
            Values("y.grad", [0.0, 2.0, 4.0, 6.0]),
            Values("w.grad", [0.0, 1.0, 2.0, 3.0]),
        ],
    ),
    Case(
        name="autograd.no-grad-set-to-other-sizes-is-rejected",
        rules=["autograd.no-grad-set"],
        setup=_set_world(),
        args=["p", "y", "w"],
        program=_set_to_other_sizes,
        expect=[Raises(UnsupportedError, rule="autograd.no-grad-set")],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="autograd.write-into-an-expanded-argument",
        rules=["autograd.input-writes"],
        setup=_expanded_non_leaf_and_scales,
        args=["a", "w"],
        program=_double_row_then_scale,
        backward=True,
        # a = 2 * (p expanded), a history back to p: d sum(a * w) / d p = 2 * (1 + 10)
        expect=[
            Values("a", [[2.0, 4.0, 6.0], [2.0, 4.0, 6.0]]),
            Layout("a", shape=(2, 3), strides=(0, 1)),
            RequiresGrad("a"),
            Values("out0", [[2.0, 4.0, 6.0], [20.0, 40.0, 60.0]]),
            Values("p.grad", [[22.0, 22.0, 22.0]]),
        ],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.write-into-a-row-read-beside-another-row",
        rules=["autograd.input-writes.synthetic-base", "autograd.input-writes"],
        setup=_rows_of_a_non_leaf,
        args=["a", "b"],
        program=_row_plus_twice_other_row,
        backward=True,
        # eager: a = [1, 2] + 2 * [3, 4] = [7, 10], written into x's row 0; out0 = a + b =
        # [10, 14] = a_old + 3 b: p.grad is 1 on row 0 and 3 on row 1
        expect=[
            Values("out0", [10.0, 14.0]),
            Values("x", [[7.0, 10.0], [3.0, 4.0]]),
            Values("a", [7.0, 10.0]),
            RequiresGrad("a"),
            Values("p.grad", [[1.0, 1.0], [3.0, 3.0]]),
        ],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.write-into-a-row-passed-beside-its-base",
        rules=["autograd.input-writes.synthetic-base"],
        setup=_row_and_its_base,
        args=["a", "x"],
        program=_double_row_return_base,
        backward=True,
        # eager returns x itself, its row 0 doubled; d sum(x) / d p = 2 on row 0, 1 on row 1
        expect=[
            Identical("out0", "x"),
            Values("x", [[2.0, 4.0], [3.0, 4.0]]),
            Values("a", [2.0, 4.0]),
            Values("p.grad", [[2.0, 2.0], [1.0, 1.0]]),
        ],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.write-with-grad-into-rows-that-required-none",
        rules=["autograd.input-writes.synthetic-base", "autograd.input-writes"],
        setup=_rows_without_grad_and_a_scale,
        args=["a", "b", "y"],
        program=_row_times_scale,
        backward=True,
        # eager: a = [1, 1] * y = [2, 3], and a, and its base x, now require grad;
        # out0 = a + b = [3, 4]; d sum(out0) / d y = a_old = [1, 1]
        expect=[
            Values("out0", [3.0, 4.0]),
            Values("x", [[2.0, 3.0], [1.0, 1.0]]),
            RequiresGrad("a"),
            RequiresGrad("x"),
            Values("y.grad", [1.0, 1.0]),
        ],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.aliasing-arguments-without-a-common-base-raise",
        rules=["autograd.input-writes.aliased", "boundary.failed-call"],
        setup=_non_leaf_and_a_second_object_on_its_storage,
        args=["x", "y"],
        program=_double_then_add_alias,
        # eager runs it: x = [[2, 4], [6, 8]] with MulBackward0, y reads the same memory
        expect=[Raises(UnsupportedError, rule="autograd.input-writes.aliased")],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="autograd.metadata-op-on-an-argument-taken-as-a-view-of-its-base",
        rules=["autograd.input-writes.synthetic-base.metadata"],
        setup=_rows_of_a_non_leaf,
        args=["a", "b"],
        program=_double_row_unsqueeze_other,
        backward=True,
        # eager: a = 2 * [1, 2] is written into x's row 0; b becomes shape (1, 2), strides
        # (2, 1), offset 2, with UnsqueezeBackward; out0 = [[2, 4]] + [[3, 4]] = [[5, 8]];
        # d sum(out0) / d p = 2 on row 0, 1 on row 1
        expect=[
            Values("out0", [[5.0, 8.0]]),
            Values("b", [[3.0, 4.0]]),
            Layout("b", shape=(1, 2), strides=(2, 1), offset=2),
            RequiresGrad("b"),
            Values("x", [[2.0, 4.0], [3.0, 4.0]]),
            Values("p.grad", [[2.0, 2.0], [1.0, 1.0]]),
        ],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.no-grad-set-to-other-sizes-of-an-input-no-gradient-reaches",
        rules=["autograd.no-grad-set", "functionalize.epilogue.set"],
        setup=_set_world(),
        args=["p", "y", "w"],
        program=_set_to_other_sizes_then_unread,
        backward=True,
        # eager: p, still the leaf that requires grad, reads y's storage as 2 x 2; nothing the
        # program returns reads p, so only w gets a gradient: d sum(2w) / dw = 2
        expect=[
            Layout("p", shape=(2, 2), strides=(2, 1), offset=0),
            Values("p", [[0.0, 1.0], [2.0, 3.0]]),
            Shares("p", "y"),
            RequiresGrad("p"),
            Absent("p.grad"),
            Values("w.grad", [2.0, 2.0, 2.0, 2.0]),
        ],
    ),
]
