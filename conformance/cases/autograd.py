"""Cases for specs/autograd.md: gradients of compiled programs, saved values, the detach rule.

Expected gradients are worked out by hand from the chain rule, or computed by eager PyTorch on
private copies; never taken from the reference.
"""

import math

import torch
from torch.utils.checkpoint import checkpoint

from aotspec.errors import SpecViolation, UnsupportedError

from ..case import (
    COMPILED_ONLY,
    Absent,
    BackwardRaises,
    Case,
    History,
    Identical,
    Layout,
    LiveBytesAfter,
    Raises,
    RequiresGrad,
    SavedFreedDuringBackward,
    Separate,
    Shares,
    Values,
)

torch.manual_seed(0)
_X, _W1, _W2 = torch.randn(5, 4), torch.randn(8, 4), torch.randn(3, 8)


def _product(x, w):
    return x * w


def _leaves(**tensors):
    return {name: t.clone().requires_grad_() for name, t in tensors.items()}


def _mlp(x, w1, w2):
    return torch.relu(x @ w1.t()) @ w2.t()


def _eager_mlp_grads():
    x, w1, w2 = (t.clone().requires_grad_() for t in (_X, _W1, _W2))
    _mlp(x, w1, w2).sum().backward()
    return x.grad, w1.grad, w2.grad


_MLP_GRADS = _eager_mlp_grads()

#: Skip entries for cases that write a caller's tensor with history (`r[autograd.input-writes]`).
_EAGER_INTERPRETER_KEEPS_HISTORIES = {
    "reference-eager": "the eager interpreter does not rebase a caller's history "
    "(autograd.mutated-grad-input)"
}


def _non_leaf_world():
    x = torch.arange(3.0, requires_grad=True)
    return {"x": x, "y": x * 2, "z": torch.ones(3, requires_grad=True)}


def _ignores_y(y, z):
    return z * 2 + y.detach()


def _scaled_by_a_constant_copy(x):
    with torch.no_grad():
        y = x * 2  # a constant for autograd
    return (x * y).sum()


def _inplace_on_leaf(w):
    w.add_(1)
    return w * 2


def _product_then_zero_w(x, w):
    y = x * w  # saves w for x's gradient
    w.copy_(torch.zeros(3))
    return y


def _views_w_writes_its_head_then_multiplies(x, w):
    tail = w[1:]  # taken before the write, which touches none of its elements
    w[:1].mul_(2.0)
    return x * tail  # saves tail, at the version the write gave w


def _product_then_free_w(x, w):
    y = x * w  # saves w for x's gradient
    torch.ops.inductor.resize_storage_bytes_(w, 0)  # FSDP's reshard after forward
    return y


def _x_and_w():
    return {"x": torch.ones(3, requires_grad=True), "w": torch.tensor([1.0, 2.0, 3.0])}


def _caller_writes_w(world):
    world["w"].add_(1)


def _tanh(x):
    return x.tanh()


def _tanh_and_its_first(x):
    t = x.tanh()
    return t, t[0]


def _doubled_and_tanh(x):
    return x * 2, x.tanh()


def _caller_doubles_out0(world):
    with torch.no_grad():
        world["out0"].mul_(2)


def _caller_zeroes_out1(world):
    with torch.no_grad():
        world["out1"].zero_()


def _sine_times_x(x):
    return (x.sin() * x).sum()


def _first_order_gradient_with_history(world):
    """Replaces the output by its gradient, taken with create_graph=True: the runner's backward
    is then a double backward."""
    (gx,) = torch.autograd.grad(world["out0"], world["x"], create_graph=True)
    world["gx"], world["out0"] = gx.detach(), gx


def _caller_regathers_w(world):
    """FSDP's pre-backward all-gather: the storage comes back with new bytes, same version."""
    w = world["w"]
    w.untyped_storage().resize_(3 * w.element_size())
    with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(w):
        w.copy_(torch.tensor([5.0, 6.0, 7.0]))


#: eager reads the freed storage in the backward: a segfault on CPU
#: (docs/torch-2.13.md section 2.2).
_EAGER_READS_FREED_MEMORY = {
    "torch-eager": "eager reads a 0-byte storage in the backward (segfault)"
}


_resize = torch.ops.inductor.resize_storage_bytes_
_G = torch.randn(4, 4)


def _fsdp_layer(x, w, gathered):
    """FSDP's forward for one layer: all-gather into the parameter's storage, use, reshard."""
    _resize(w, gathered.numel() * gathered.element_size())
    with torch.no_grad():
        w.copy_(gathered)
    y = x @ w
    _resize(w, 0)
    return y


def _fsdp_layer_with_fsdp_copy(x, w, gathered):
    """The same layer with the copy FSDP itself uses (r[aliasing.copy.fsdp])."""
    _resize(w, gathered.numel() * gathered.element_size())
    with torch.no_grad():
        torch.ops.fsdp.copy_(w, gathered)
    y = x @ w
    _resize(w, 0)
    return y


def _sharded_world_with_fsdp():
    import torch.distributed.fsdp._fully_shard._fsdp_param  # noqa: F401  (defines fsdp.copy_)

    return _sharded_world()


def _update_then_use(x, w):
    with torch.no_grad():
        w.mul_(0.5)
    return (x @ w).sin()


def _use_update_use(x, w):
    before = x @ w  # saves w as it is now, for x's gradient
    with torch.no_grad():
        w.mul_(0.5)
    return before + x @ w


def _sharded_world():
    w = torch.nn.Parameter(torch.empty(4, 4))
    w.untyped_storage().resize_(0)  # sharded: the parameter holds no bytes between uses
    return {"x": _X[:2].clone().requires_grad_(), "w": w, "gathered": _G.clone()}


def _regather(world):
    """FSDP's pre-backward all-gather, which leaves the version alone."""
    w = world["w"]
    w.untyped_storage().resize_(_G.numel() * _G.element_size())
    with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(w):
        w.copy_(_G)


def _eager_grads(program, world, before_backward=None) -> dict[str, torch.Tensor]:
    """Eager PyTorch's outputs and gradients of `program` on a private world."""
    out = program(world["x"], *[world[k] for k in ("w", "gathered") if k in world])
    if before_backward is not None:
        before_backward(world)
    out.sum().backward()
    return {
        "out0": out.detach(),
        "x.grad": world["x"].grad,
        "w.grad": world["w"].grad,
        "w": world["w"].detach(),
    }


def _x_w_world():
    return {"x": _X[:2].clone().requires_grad_(), "w": _G.clone().requires_grad_()}


_FSDP = _eager_grads(_fsdp_layer, _sharded_world(), _regather)
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


def _write_then_first_read_without_grad(x):
    v = torch.cat([x, x])
    v.mul_(2)
    with torch.no_grad():
        v * 2  # the first read of v after the write
    return v.neg()


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


def _no_grad_write_into_a_view_input(v):
    with torch.no_grad():
        v.mul_(2)
    return v.view(3) * 1


def _view_input_world():
    b = torch.ones(3, requires_grad=True)
    return {"b": b, "v": b.as_strided((3,), (1,), 0)}


def _detached_and_doubled(a):
    return a.detach(), a * 2


def _doubled_detached_and_tripled(a):
    return (a * 2).detach(), a * 3


def _detached_factor(a):
    b = a.detach()
    return b * a


def _write_through_a_detached_intermediate(a):
    x = a * 2
    b = x.detach()
    b.add_(1)
    return x * 3, b


def _write_through_a_detached_input(a):
    b = a.view(2, 2).detach()
    b.add_(1)
    return a * 3


def _write_grad_values_through_a_detached_alias(a, y):
    x = a * 2
    x.detach().add_(y)
    return x


def _detached_alias_world():
    p = torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    x = p * 1
    return {"p": p, "x": x, "d": x.detach().view(2, 2)}


def _no_grad_write_through_the_detached_alias(d, x):
    with torch.no_grad():
        d.mul_(2)
    return x * 3, d * 2


def _write_through_the_detached_alias(d, x):
    d.add_(1)
    return x * 3


def _aliased_views_world(made_without_grad=False):
    p = torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    x = p * 1
    with torch.set_grad_enabled(not made_without_grad):
        return {"p": p, "x": x, "v": x.view(-1), "m": x.view(2, 2)}


def _no_grad_write_and_read(v):
    with torch.no_grad():
        v.mul_(2)
        return v * 2


def _no_grad_write_into_one_view_read_the_other(v, m):
    with torch.no_grad():
        v.mul_(2)
    return m * 3


def _rows_of_a_product(a):
    return (a * 2).unbind(0)


def _rows_of_an_input(a):
    return a.unbind(0)


def _caller_writes_out0(world):
    world["out0"].mul_(2)


#: The eager interpreter exports its outputs through one tape node, not as torch views.
_TORCH_VIEWS = {
    "reference-eager": "its outputs are not torch views (r[autograd.multi-output-views])"
}


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


def _doubles_detached_w(w):
    w.detach().mul_(2)
    return w * 3


def _aliasing_world():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    a = x * 1
    return {"x": x, "a": a, "v": a.view(3)}


def _doubles_a_reads_v(a, v):
    a.mul_(2)
    return a + v


def _two_non_leaves_world():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = torch.tensor([4.0, 5.0, 6.0], requires_grad=True)
    return {"x": x, "w": w, "a": x * 1, "b": w * 1}


def _doubles_a_returns_triple_b(a, b):
    a.mul_(2)
    return b * 3


def _inf_world():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    return {"x": x, "a": x * 1, "y": torch.tensor([float("inf"), 2.0, 3.0])}


def _halves_a_then_multiplies_it_by_y(a, y):
    half = a * 0.5
    a.mul_(y)
    return half


def _multiplies_a_by_w(a, w):
    a.mul_(w)
    return a * 2


def _sets_y_to_z(y, z):
    y.set_(z.detach())
    return y * 2


def _sin_of_product(x, w):
    return (x * w).sin()  # saves an intermediate (x * w) besides the inputs


def _plus_one(x):
    return x + 1  # saves nothing


def _eager_twice(program, **tensors) -> dict[str, torch.Tensor]:
    """Eager PyTorch's gradients after two backwards (the first retaining the graph)."""
    leaves = _leaves(**tensors)
    loss = program(*leaves.values()).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    return {f"{name}.grad": t.grad for name, t in leaves.items()}


_TWICE = _eager_twice(_sin_of_product, x=_X[0], w=_X[1])


def _enable_grad_for_one_output(x):
    out1 = x.sin()
    with torch.enable_grad():
        out2 = x.cos()
    return out1, out2


def _nested_grad_modes(x):
    with torch.no_grad():
        a = x * 3
        with torch.enable_grad():
            b = x * a  # a is a constant for autograd: d b / d x = a
    return a, b


def _grad_off_inside(x):
    with torch.set_grad_enabled(False):
        y = x * 2
    return y * x


def _views_inside_enable_grad(x):
    with torch.enable_grad():
        y = x * 2
        v = x.view(-1)
    return y, y, v  # y twice: the same tensor


def _view_taken_under_no_grad(x):
    y = x * 3
    with torch.no_grad():
        v = y.view(-1)
    return y.sum(), v


def _write_into_out1(world):
    world["out1"].mul_(2)


def _two_sines(x):
    return x.sin().sin()


def _checkpointed_sines(x):
    return checkpoint(_two_sines, x, use_reentrant=False).sum()


def _checkpointed_sines_squared(x):
    y = checkpoint(_two_sines, x, use_reentrant=False)
    return (y * y).sum()


def _doubled_plus_one_in_place(x):
    y = x * 2
    y.add_(1)
    return y


def _checkpointed_write(x):
    return checkpoint(_doubled_plus_one_in_place, x, use_reentrant=False).sum()


def _half_dropped(x):
    return torch.nn.functional.dropout(x, 0.5)


def _checkpointed_dropout(x):
    return checkpoint(_half_dropped, x, use_reentrant=False).sum()


_ANGLES = torch.tensor([0.0, 0.5, 1.0, 1.5])


def _input_set_to_require_grad(x):
    x.requires_grad_()
    return x * 3


def _intermediate_set_to_require_grad(x):
    y = x * 2
    y.requires_grad_()
    return y * 3


def _input_set_to_require_grad_after_a_read(x):
    a = x * 2  # eager: a has no history
    x.requires_grad_()
    return a + x * 3


class _DoublesItsGradientInPlace(torch.autograd.Function):
    """Forward: a copy of x; backward: doubles the incoming gradient in place and returns it."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        grad.mul_(2)
        return grad


def _incoming_gradient_written(a, b):
    return _DoublesItsGradientInPlace.apply(a * b) * 2


class _ScaledBySaved(torch.autograd.Function):
    """x * w, saving w for the backward."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        (w,) = ctx.saved_tensors
        return grad * w, None


def _scaled_by_saved(x, w):
    return _ScaledBySaved.apply(x, w)


def _caller_writes_w(world):
    world["w"].add_(1)


class _CountsInSaved(torch.autograd.Function):
    """Forward: a copy of x, saving `counter`; backward: adds 1 to the counter it saved."""

    @staticmethod
    def forward(ctx, x, counter):
        ctx.save_for_backward(counter)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        (counter,) = ctx.saved_tensors
        counter.add_(1)
        return grad, None


def _counts_in_saved(x, counter):
    return _CountsInSaved.apply(x, counter)


class _ZeroesItsOutput(torch.autograd.Function):
    """Forward: 2x, saving the result; backward: zeroes the saved result (the caller's output)."""

    @staticmethod
    def forward(ctx, x):
        doubled = x * 2
        ctx.save_for_backward(doubled)
        return doubled

    @staticmethod
    def backward(ctx, grad):
        (doubled,) = ctx.saved_tensors
        doubled.zero_()
        return grad * 2


def _zeroes_its_output(x):
    return _ZeroesItsOutput.apply(x)


def _leaf_x_and_y():
    return {**_leaves(x=torch.tensor([1.0, 2.0, 3.0])), "y": torch.tensor([4.0, 5.0, 6.0])}


def _copy_over_a_result(x, y):
    t = x * 2
    t.copy_(y * 1)  # replaces all of t's storage
    return (t * 3,)


def _copy_over_part_of_a_result(x, y):
    t = x * 2
    head = t[:2]
    head.copy_(y[:2])  # then read through the tensor written
    return (head * 3,)


_CUSTOM_FUNCTIONS_COMPILED_ONLY = {
    "reference-eager": "the eager interpreter refuses custom Functions a gradient reaches "
    "(capture.custom-function.eager-interpreter)"
}


def _layer_norm_with_statistics(x):
    return torch.ops.aten.native_layer_norm(x, [4], None, None, 1e-5)


CASES = [
    Case(
        name="autograd.layer-norm-statistics-do-not-require-grad",
        rules=["autograd.requires-grad.op-outputs", "autograd.requires-grad"],
        setup=lambda: _leaves(x=_X),
        args=["x"],
        program=_layer_norm_with_statistics,
        backward=True,
        # derivatives.yaml: native_layer_norm's output_differentiability is [True, False, False];
        # the mean and rstd add nothing to the backpropagated sum, so x.grad is the output's:
        # the gradient of a sum of a normalized row is 0
        expect=[
            RequiresGrad("out0"),
            RequiresGrad("out1", False),
            RequiresGrad("out2", False),
            History("out1", None),
            Values("x.grad", torch.zeros(5, 4)),
        ],
    ),
    Case(
        name="autograd.grad-of-a-product",
        rules=["autograd.joint", "autograd.derivative-rules", "autograd.requires-grad"],
        setup=lambda: _leaves(x=torch.tensor([1.0, 2.0, 3.0]), w=torch.tensor([4.0, 5.0, 6.0])),
        args=["x", "w"],
        program=_product,
        backward=True,
        # d/dx sum(x * w) = w and d/dw = x
        expect=[
            Values("out0", [4.0, 10.0, 18.0]),
            Values("x.grad", [4.0, 5.0, 6.0]),
            Values("w.grad", [1.0, 2.0, 3.0]),
        ],
    ),
    Case(
        name="autograd.copy-over-a-result-keeps-its-history",
        rules=["functionalize.writes.copied", "functionalize.writes.whole-private"],
        setup=_leaf_x_and_y,
        args=["x", "y"],
        program=_copy_over_a_result,
        backward=True,
        # t requires grad after the copy_, through its old value x * 2, whose gradient is 0
        expect=[Values("out0", [12.0, 15.0, 18.0]), Values("x.grad", [0.0, 0.0, 0.0])],
    ),
    Case(
        name="autograd.copy-over-part-of-a-result-keeps-its-history",
        rules=["functionalize.writes.copied", "functionalize.reads.unwritten"],
        setup=_leaf_x_and_y,
        args=["x", "y"],
        program=_copy_over_part_of_a_result,
        backward=True,
        # head requires grad after the copy_, through its old value (x * 2)[:2]: a gradient of 0
        expect=[Values("out0", [12.0, 15.0]), Values("x.grad", [0.0, 0.0, 0.0])],
    ),
    Case(
        name="autograd.mlp-grads-match-eager",
        rules=[
            "autograd.partition.saved",
            "autograd.partition.recompute-views",
            "autograd.saved-freed-in-backward",
            "autograd.tangent-layout",  # the runner backpropagates sum(): an expanded gradient
        ],
        setup=lambda: _leaves(x=_X, w1=_W1, w2=_W2),
        args=["x", "w1", "w2"],
        program=_mlp,
        backward=True,
        expect=[
            Values("out0", _mlp(_X, _W1, _W2)),
            Values("x.grad", _MLP_GRADS[0]),
            Values("w1.grad", _MLP_GRADS[1]),
            Values("w2.grad", _MLP_GRADS[2]),
            SavedFreedDuringBackward(),
        ],
    ),
    Case(
        name="autograd.no-gradient-for-a-detached-input",
        rules=["autograd.detach-no-grad-inputs"],
        setup=_non_leaf_world,
        args=["y", "z"],
        program=_ignores_y,
        backward=True,
        expect=[
            Values("out0", [2.0, 4.0, 6.0]),
            Values("z.grad", [2.0, 2.0, 2.0]),
            Absent("x.grad"),
        ],
    ),
    Case(
        name="autograd.no-grad-region-carries-no-gradient",
        rules=["capture.grad-mode", "autograd.requires-grad"],
        setup=lambda: _leaves(x=torch.tensor([1.0, -2.0, 3.0])),
        args=["x"],
        program=_scaled_by_a_constant_copy,
        backward=True,
        # sum(x * y) with y = 2x held constant: the gradient is y = 2x, not 4x
        expect=[Values("out0", 28.0), Values("x.grad", [2.0, -4.0, 6.0])],
    ),
    Case(
        name="autograd.detached-output-aliases-and-carries-no-gradient",
        rules=["autograd.detach"],
        setup=lambda: _leaves(a=torch.tensor([1.0, 2.0, 3.0, 4.0])),
        args=["a"],
        program=_detached_and_doubled,
        backward=True,
        # eager: out0 is a itself without history; only out1 = 2a sends a gradient (2 each)
        expect=[
            Values("out0", [1.0, 2.0, 3.0, 4.0]),
            Shares("out0", "a"),
            Values("out1", [2.0, 4.0, 6.0, 8.0]),
            Values("a.grad", [2.0, 2.0, 2.0, 2.0]),
        ],
    ),
    Case(
        name="autograd.detached-intermediate-output",
        rules=["autograd.detach"],
        setup=lambda: _leaves(a=torch.tensor([1.0, 2.0, 3.0, 4.0])),
        args=["a"],
        program=_doubled_detached_and_tripled,
        backward=True,
        # eager: out0 = 2a requires no grad; a's gradient is 3 each, from out1 = 3a alone
        expect=[
            Values("out0", [2.0, 4.0, 6.0, 8.0]),
            Separate("out0", "a"),
            Values("a.grad", [3.0, 3.0, 3.0, 3.0]),
        ],
    ),
    Case(
        name="autograd.detached-factor-is-a-constant",
        rules=["autograd.detach"],
        setup=lambda: _leaves(a=torch.tensor([1.0, -2.0, 3.0])),
        args=["a"],
        program=_detached_factor,
        backward=True,
        # d (b * a) / d a with b = a held constant is b = a, not 2a
        expect=[Values("out0", [1.0, 4.0, 9.0]), Values("a.grad", [1.0, -2.0, 3.0])],
    ),
    Case(
        name="autograd.write-through-a-detached-intermediate",
        rules=["autograd.detach", "autograd.no-grad-writes"],
        setup=lambda: _leaves(a=torch.tensor([1.0, 2.0])),
        args=["a"],
        program=_write_through_a_detached_intermediate,
        backward=True,
        # x = 2a + 1 after the write, which x's history does not see: d 3x / d a = 6
        expect=[
            Values("out0", [9.0, 15.0]),
            Values("out1", [3.0, 5.0]),
            Values("a.grad", [6.0, 6.0]),
        ],
    ),
    Case(
        name="autograd.write-through-a-detached-input",
        rules=["autograd.detach", "autograd.no-grad-input-writes"],
        setup=lambda: _leaves(a=torch.tensor([1.0, 2.0, 3.0, 4.0])),
        args=["a"],
        program=_write_through_a_detached_input,
        backward=True,
        # eager allows it: a's values become a + 1, a stays the same leaf; d 3a / d a = 3
        expect=[
            Values("out0", [6.0, 9.0, 12.0, 15.0]),
            Values("a", [2.0, 3.0, 4.0, 5.0]),
            Values("a.grad", [3.0, 3.0, 3.0, 3.0]),
        ],
    ),
    Case(
        name="autograd.write-of-grad-values-through-a-detached-alias-is-rejected",
        rules=["autograd.detach"],
        setup=lambda: _leaves(a=torch.tensor([1.0, 2.0]), y=torch.tensor([3.0, 4.0])),
        args=["a", "y"],
        program=_write_grad_values_through_a_detached_alias,
        expect=[Raises(UnsupportedError, rule="autograd.detach")],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="autograd.detached-alias-passed-first",
        rules=["autograd.detach.inputs", "autograd.no-grad-writes"],
        setup=_detached_alias_world,
        args=["d", "x"],
        program=_no_grad_write_through_the_detached_alias,
        backward=True,
        # eager: x reads [2, 4, 6, 8] and keeps its history (x = p * 1): d sum(3x) / d p = 3;
        # d * 2 requires no grad
        expect=[
            Values("out0", [6.0, 12.0, 18.0, 24.0]),
            Values("out1", [[4.0, 8.0], [12.0, 16.0]]),
            Values("x", [2.0, 4.0, 6.0, 8.0]),
            Values("p.grad", [3.0, 3.0, 3.0, 3.0]),
        ],
    ),
    Case(
        name="autograd.write-with-grad-through-a-detached-alias-input",
        rules=["autograd.detach.inputs", "autograd.detach"],
        setup=_detached_alias_world,
        args=["d", "x"],
        program=_write_through_the_detached_alias,
        backward=True,
        # eager allows it: d has no history to rebase; x reads p + 1 and keeps x = p * 1
        expect=[
            Values("out0", [6.0, 9.0, 12.0, 15.0]),
            Values("x", [2.0, 3.0, 4.0, 5.0]),
            Values("p.grad", [3.0, 3.0, 3.0, 3.0]),
        ],
    ),
    Case(
        name="autograd.aliased-grad-views-one-written-is-rejected",
        rules=["autograd.no-grad-input-writes.identity", "capture.view-replays"],
        setup=_aliased_views_world,
        args=["v", "m"],
        program=_no_grad_write_into_one_view_read_the_other,
        expect=[Raises(UnsupportedError, rule="autograd.no-grad-input-writes.identity")],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="capture.views-made-without-grad-written-without-grad",
        rules=["capture.custom-function.refused", "capture.grad-mode"],
        setup=lambda: _aliased_views_world(made_without_grad=True),
        args=["v"],
        program=_no_grad_write_and_read,
        # autograd refuses to rebuild v's history now (made under no_grad, its base written
        # since); eager reads it nowhere, and neither may capture
        expect=[
            Values("out0", [4.0, 8.0, 12.0, 16.0]),
            Values("x", [2.0, 4.0, 6.0, 8.0]),
            Values("m", [[2.0, 4.0], [6.0, 8.0]]),
        ],
    ),
    Case(
        name="autograd.caller-writes-an-unbind-output-of-an-intermediate",
        rules=["autograd.multi-output-views"],
        setup=lambda: _leaves(a=torch.tensor([[1.0, 2.0], [3.0, 4.0]])),
        args=["a"],
        program=_rows_of_a_product,
        backward=True,
        before_backward=_caller_writes_out0,
        # eager: "Output 0 of UnbindBackward0 is a view and is being modified inplace. This
        # view is the output of a function that returns multiple views. ..."
        expect=[
            Values("out0", [2.0, 4.0]),
            BackwardRaises(RuntimeError, match="function that returns multiple views"),
        ],
        skip=_TORCH_VIEWS,
    ),
    Case(
        name="autograd.caller-writes-an-unbind-output-of-an-input",
        rules=["autograd.multi-output-views"],
        setup=lambda: {"a": torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True) * 1},
        args=["a"],
        program=_rows_of_an_input,
        backward=True,
        before_backward=_caller_writes_out0,
        expect=[
            Shares("out1", "a"),
            BackwardRaises(RuntimeError, match="function that returns multiple views"),
        ],
        skip=_TORCH_VIEWS,
    ),
    Case(
        name="autograd.unbind-outputs-without-grad-are-writable",
        rules=["autograd.multi-output-views"],
        setup=lambda: {"a": torch.tensor([[1.0, 2.0], [3.0, 4.0]])},
        args=["a"],
        program=_rows_of_an_input,
        backward=True,
        before_backward=_caller_writes_out0,
        # nothing requires grad: the write goes through to a
        expect=[Values("a", [[2.0, 4.0], [3.0, 4.0]]), Values("out0", [2.0, 4.0])],
        skip=_TORCH_VIEWS,
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
        name="autograd.written-input-unused-gets-no-gradient",
        rules=["autograd.unreached-outputs", "autograd.input-writes"],
        setup=_two_non_leaves_world,
        args=["a", "b"],
        program=_doubles_a_returns_triple_b,
        backward=True,
        # nothing reads a after the call: x gets no gradient (not zeros); out = 3b: w.grad = 3
        expect=[
            Values("a", [2.0, 4.0, 6.0]),
            Values("w.grad", [3.0, 3.0, 3.0]),
            Absent("x.grad"),
        ],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.unreached-write-adds-no-term-times-inf",
        rules=["autograd.unreached-outputs.terms", "autograd.input-writes"],
        setup=_inf_world,
        args=["a", "y"],
        program=_halves_a_then_multiplies_it_by_y,
        backward=True,
        # x's gradient sums out0's term (0.5) and the term of a's new contents, which nothing
        # reads after the call: eager runs no derivative of a.mul_(y), so x.grad is 0.5, not
        # 0 * inf = NaN where y is inf
        expect=[
            Values("a", [float("inf"), 4.0, 9.0]),
            Values("out0", [0.5, 1.0, 1.5]),
            Values("x.grad", [0.5, 0.5, 0.5]),
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
        name="autograd.write-through-a-detached-alias",
        rules=["autograd.detach"],
        setup=lambda: _leaves(w=torch.tensor([1.0, 2.0, 3.0])),
        args=["w"],
        program=_doubles_detached_w,
        backward=True,
        # w keeps being the leaf; its values double; out = 3w: w.grad = 3
        expect=[
            Values("w", [2.0, 4.0, 6.0]),
            Values("out0", [6.0, 12.0, 18.0]),
            Values("w.grad", [3.0, 3.0, 3.0]),
        ],
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
        name="autograd.saved-input-written-by-the-program",
        rules=["autograd.saved-inputs.version", "functionalize.epilogue.version"],
        setup=_x_and_w,
        args=["x", "w"],
        program=_product_then_zero_w,
        backward=True,
        # eager: mul saved w at version 0, copy_ made it version 1, the backward refuses
        expect=[
            Values("out0", [1.0, 2.0, 3.0]),
            Values("w", [0.0, 0.0, 0.0]),
            BackwardRaises(RuntimeError, match="modified by an inplace operation"),
            Absent("x.grad"),
        ],
    ),
    Case(
        name="autograd.saved-input-read-after-the-program-writes-it-elsewhere",
        rules=["autograd.saved-inputs.version", "functionalize.reads.unwritten"],
        setup=lambda: {"x": torch.ones(2, requires_grad=True), "w": torch.tensor([1.0, 2.0, 3.0])},
        args=["x", "w"],
        program=_views_w_writes_its_head_then_multiplies,
        backward=True,
        # eager: mul saves w's tail after the write made w version 1, and nothing writes w
        # after; the backward runs: x.grad = w[1:] = [2, 3]
        expect=[
            Values("out0", [2.0, 3.0]),
            Values("w", [2.0, 2.0, 3.0]),
            Values("x.grad", [2.0, 3.0]),
        ],
    ),
    Case(
        name="autograd.saved-input-written-by-the-caller",
        rules=["autograd.saved-inputs.version"],
        setup=_x_and_w,
        args=["x", "w"],
        program=_product,
        backward=True,
        before_backward=_caller_writes_w,
        expect=[
            BackwardRaises(RuntimeError, match="modified by an inplace operation"),
            Absent("x.grad"),
        ],
    ),
    Case(
        name="autograd.saved-output-written-by-the-caller",
        rules=["autograd.saved-outputs.version"],
        setup=_x_and_w,
        args=["x"],
        program=_tanh,
        backward=True,
        before_backward=_caller_doubles_out0,
        # eager: tanh saved its output at version 0; the caller's mul_ made it version 1
        expect=[
            BackwardRaises(RuntimeError, match="modified by an inplace operation"),
            Absent("x.grad"),
        ],
    ),
    Case(
        name="autograd.saved-value-written-through-an-output-view",
        rules=["autograd.saved-outputs.version"],
        setup=_x_and_w,
        args=["x"],
        program=_tanh_and_its_first,
        backward=True,
        before_backward=_caller_zeroes_out1,
        # eager: out1 is a view of tanh's saved output, so writing it bumps the shared version
        expect=[
            BackwardRaises(RuntimeError, match="modified by an inplace operation"),
            Absent("x.grad"),
        ],
    ),
    Case(
        name="autograd.unsaved-output-written-by-the-caller",
        rules=["autograd.saved-outputs.version"],
        setup=_x_and_w,
        args=["x"],
        program=_doubled_and_tanh,
        backward=True,
        before_backward=_caller_doubles_out0,
        # eager: x * 2 saves nothing of its output, so writing out0 leaves the backward alone;
        # d/dx (2x + tanh x) = 2 + 1 - tanh(1)^2 at x = 1
        expect=[Values("x.grad", [3.0 - math.tanh(1.0) ** 2] * 3)],
    ),
    Case(
        name="autograd.gradient-of-a-gradient-raises",
        rules=["autograd.double-backward"],
        setup=lambda: {"x": _ANGLES.clone().requires_grad_()},
        args=["x"],
        program=_sine_times_x,
        backward=True,
        before_backward=_first_order_gradient_with_history,
        expect=[
            # d/dx (x sin x) = sin x + x cos x, as eager computes it with create_graph=True
            Values("gx", _ANGLES.sin() + _ANGLES * _ANGLES.cos()),
            BackwardRaises(RuntimeError, match="double backward"),
        ],
        skip={
            "torch-eager": "eager differentiates its gradients again",
            "reference-eager": "the eager interpreter's gradients carry no history",
        },
    ),
    Case(
        name="autograd.saved-input-regathered-before-the-backward",
        rules=["autograd.saved-inputs", "autograd.saved-inputs.in-bounds", "resize.eager.version"],
        setup=_x_and_w,
        args=["x", "w"],
        program=_product_then_free_w,
        backward=True,
        before_backward=_caller_regathers_w,
        # d(sum(x * w))/dx is w as the backward reads it: the re-gathered [5, 6, 7]
        expect=[
            Values("out0", [1.0, 2.0, 3.0]),
            Values("w", [5.0, 6.0, 7.0]),
            Values("x.grad", [5.0, 6.0, 7.0]),
        ],
    ),
    Case(
        name="autograd.saved-input-left-at-zero-bytes",
        rules=["autograd.saved-inputs.in-bounds"],
        setup=_x_and_w,
        args=["x", "w"],
        program=_product_then_free_w,
        backward=True,
        expect=[BackwardRaises(SpecViolation), Absent("x.grad")],
        skip=_EAGER_READS_FREED_MEMORY,
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
        name="autograd.fsdp-copy-gather-use-reshard",
        rules=[
            "aliasing.copy.fsdp",
            "autograd.no-grad-input-writes",
            "autograd.saved-inputs.final-contents",
        ],
        setup=_sharded_world_with_fsdp,
        args=["x", "w", "gathered"],
        program=_fsdp_layer_with_fsdp_copy,
        backward=True,
        before_backward=_regather,
        # fsdp.copy_ is copy_: eager's values of the case above
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
        name="autograd.read-before-a-no-grad-write",
        rules=["autograd.saved-inputs.both-values", "autograd.saved-inputs.version"],
        setup=_x_w_world,
        args=["x", "w"],
        program=_use_update_use,
        backward=True,
        # eager: the first mm saved w at version 0; mul_ made it version 1
        expect=[
            Values("w", _G * 0.5),
            BackwardRaises(RuntimeError, match="modified by an inplace operation"),
            Absent("w.grad"),
        ],
    ),
    Case(
        name="autograd.no-grad-write-shared-by-two-grad-inputs",
        rules=["autograd.no-grad-input-writes.identity"],
        setup=_two_grad_inputs_world,
        args=["w", "flat"],
        program=_writes_one_of_two,
        expect=[Raises(UnsupportedError, rule="autograd.no-grad-input-writes.identity")],
        skip=COMPILED_ONLY,
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
        name="autograd.first-read-after-a-write-is-under-no-grad",
        rules=["functionalize.reads.grad-mode", "capture.grad-mode"],
        setup=lambda: _leaves(x=torch.tensor([1.0, 2.0, 3.0])),
        args=["x"],
        program=_write_then_first_read_without_grad,
        backward=True,
        # out = -2 [x, x]: each x element reaches two outputs, each with d out / d x = -2
        expect=[
            Values("out0", [-2.0, -4.0, -6.0, -2.0, -4.0, -6.0]),
            Values("x.grad", [-4.0, -4.0, -4.0]),
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
        name="autograd.no-grad-write-into-a-view-input",
        rules=["capture.view-replays", "autograd.no-grad-writes"],
        setup=_view_input_world,
        args=["v"],
        program=_no_grad_write_into_a_view_input,
        backward=True,
        # b reads [2, 2, 2] through its view; the output's gradient (ones) reaches b through v
        expect=[
            Values("out0", [2.0, 2.0, 2.0]),
            Values("b", [2.0, 2.0, 2.0]),
            Values("b.grad", [1.0, 1.0, 1.0]),
        ],
    ),
    Case(
        name="autograd.inplace-on-a-grad-leaf-raises",
        rules=["autograd.eager-errors", "boundary.failed-call"],
        setup=lambda: {"w": torch.ones(3, requires_grad=True)},
        args=["w"],
        program=_inplace_on_leaf,
        expect=[
            Raises(
                RuntimeError,
                match="a leaf Variable that requires grad is being used in an in-place operation",
            )
        ],
    ),
    Case(
        name="autograd.retain-graph-backward-twice",
        rules=["autograd.retain-graph"],
        setup=lambda: _leaves(x=torch.tensor([1.0, 2.0, 3.0]), w=torch.tensor([4.0, 5.0, 6.0])),
        args=["x", "w"],
        program=_product,
        backward=True,
        retain_graph=[True, False],
        # each pass adds w to x.grad and x to w.grad
        expect=[Values("x.grad", [8.0, 10.0, 12.0]), Values("w.grad", [2.0, 4.0, 6.0])],
    ),
    Case(
        name="autograd.retain-graph-keeps-saved-intermediates",
        rules=["autograd.retain-graph"],
        setup=lambda: _leaves(x=_X[0], w=_X[1]),
        args=["x", "w"],
        program=_sin_of_product,
        backward=True,
        retain_graph=[True, False],
        expect=[Values("x.grad", _TWICE["x.grad"]), Values("w.grad", _TWICE["w.grad"])],
    ),
    Case(
        name="autograd.second-backward-without-retain-graph-raises",
        rules=["autograd.retain-graph"],
        setup=lambda: _leaves(x=_X[0], w=_X[1]),
        args=["x", "w"],
        program=_sin_of_product,
        backward=True,
        retain_graph=[False, False],
        expect=[
            BackwardRaises(
                RuntimeError, match="Trying to backward through the graph a second time"
            )
        ],
    ),
    Case(
        name="autograd.second-backward-of-a-node-without-saved-values",
        rules=["autograd.retain-graph"],
        setup=lambda: _leaves(x=torch.zeros(3)),
        args=["x"],
        program=_plus_one,
        backward=True,
        retain_graph=[False, False],
        expect=[Values("x.grad", [2.0, 2.0, 2.0])],
    ),
    Case(
        name="autograd.enable-grad-inside-a-no-grad-call",
        rules=["autograd.grad-mode-inside", "capture.grad-mode"],
        setup=lambda: _leaves(x=torch.tensor([0.0, 1.0, 2.0])),
        args=["x"],
        program=_enable_grad_for_one_output,
        grad_enabled=False,
        backward=True,
        # only cos(x) has a history: x.grad = -sin(x)
        expect=[
            Values("out0", torch.tensor([0.0, 1.0, 2.0]).sin()),
            RequiresGrad("out0", False),
            Values("out1", torch.tensor([0.0, 1.0, 2.0]).cos()),
            RequiresGrad("out1"),
            Values("x.grad", -torch.tensor([0.0, 1.0, 2.0]).sin()),
        ],
    ),
    Case(
        name="autograd.enable-grad-nested-in-no-grad-in-a-no-grad-call",
        rules=["autograd.grad-mode-inside"],
        setup=lambda: _leaves(x=torch.tensor([1.0, 2.0, 3.0])),
        args=["x"],
        program=_nested_grad_modes,
        grad_enabled=False,
        backward=True,
        # b = x * 3x, a constant: x.grad = 3x
        expect=[
            RequiresGrad("out0", False),
            Values("out1", [3.0, 12.0, 27.0]),
            RequiresGrad("out1"),
            Values("x.grad", [3.0, 6.0, 9.0]),
        ],
    ),
    Case(
        name="autograd.grad-off-inside-a-grad-call",
        rules=["autograd.grad-mode-inside", "capture.grad-mode"],
        setup=lambda: _leaves(x=torch.tensor([1.0, 2.0, 3.0])),
        args=["x"],
        program=_grad_off_inside,
        backward=True,
        # y = 2x is a constant for autograd: x.grad = y
        expect=[Values("out0", [2.0, 8.0, 18.0]), Values("x.grad", [2.0, 4.0, 6.0])],
    ),
    Case(
        name="autograd.no-grad-call-without-enable-grad-records-nothing",
        rules=["autograd.grad-mode-inside"],
        setup=lambda: _leaves(x=torch.tensor([1.0, 2.0, 3.0])),
        args=["x"],
        program=_grad_off_inside,
        grad_enabled=False,
        backward=True,
        expect=[Values("out0", [2.0, 8.0, 18.0]), RequiresGrad("out0", False), Absent("x.grad")],
    ),
    Case(
        name="autograd.outputs-viewed-inside-enable-grad",
        rules=["autograd.grad-mode-inside", "autograd.grad-mode-inside.views"],
        setup=lambda: _leaves(x=torch.ones(2, 2)),
        args=["x"],
        program=_views_inside_enable_grad,
        grad_enabled=False,
        backward=True,
        # every output has a history: x.grad = 2 + 2 + 1
        expect=[
            RequiresGrad("out1"),
            RequiresGrad("out2"),
            Values("x.grad", [[5.0, 5.0], [5.0, 5.0]]),
        ],
    ),
    Case(
        name="autograd.output-viewed-under-no-grad-has-no-history",
        rules=["autograd.grad-mode-inside.views"],
        setup=lambda: _leaves(x=torch.ones(2, 2)),
        args=["x"],
        program=_view_taken_under_no_grad,
        backward=True,
        before_backward=_write_into_out1,
        skip={"reference-eager": "its outputs are not torch views made in no_grad mode"},
        # eager: v requires grad (its base does) but was made in no_grad mode, so mul_ on it
        # with grad mode on raises
        expect=[
            Values("out1", [3.0, 3.0, 3.0, 3.0]),
            RequiresGrad("out1"),
            BackwardRaises(RuntimeError, match="no_grad mode"),
        ],
    ),
    Case(
        name="autograd.requires-grad-on-an-input-inside",
        rules=["autograd.requires-grad-inside"],
        setup=lambda: {"x": torch.tensor([1.0, 2.0, 3.0])},
        args=["x"],
        program=_input_set_to_require_grad,
        backward=True,
        # x becomes a leaf that requires grad: x.grad = 3
        expect=[
            RequiresGrad("x"),
            RequiresGrad("out0"),
            Values("out0", [3.0, 6.0, 9.0]),
            Values("x.grad", [3.0, 3.0, 3.0]),
        ],
    ),
    Case(
        name="autograd.requires-grad-on-an-intermediate-raises",
        rules=["autograd.requires-grad-inside", "boundary.failed-call"],
        setup=lambda: {"x": torch.tensor([1.0, 2.0, 3.0])},
        args=["x"],
        program=_intermediate_set_to_require_grad,
        expect=[Raises(UnsupportedError, rule="autograd.requires-grad-inside")],
        skip={"torch-eager": "eager makes y a leaf that requires grad inside the function"},
    ),
    Case(
        name="autograd.requires-grad-on-an-input-after-a-read-raises",
        rules=["autograd.requires-grad-inside", "boundary.failed-call"],
        setup=lambda: {"x": torch.tensor([1.0, 2.0, 3.0])},
        args=["x"],
        program=_input_set_to_require_grad_after_a_read,
        expect=[Raises(UnsupportedError, rule="autograd.requires-grad-inside")],
        skip={"torch-eager": "eager records the ops after requires_grad_() only"},
    ),
    Case(
        name="autograd.checkpointed-value-is-recomputed",
        rules=["checkpoint.region", "checkpoint.saved", "checkpoint.recompute"],
        setup=lambda: _leaves(x=_ANGLES),
        args=["x"],
        program=_checkpointed_sines,
        backward=True,
        expect=[
            # d/dx sin(sin(x)) = cos(sin(x)) * cos(x)
            Values("x.grad", _ANGLES.sin().cos() * _ANGLES.cos()),
            # x 16 bytes; sin makes a (16); sin_1 makes b (16) and a dies there, as the
            # backward recomputes it from x instead of keeping it: 32 (48 unchecked)
            LiveBytesAfter("sin_1", 32),
        ],
        skip={"reference-eager": "the eager interpreter keeps every saved value"},
    ),
    Case(
        name="autograd.checkpointed-output-saved-outside-is-kept",
        rules=["checkpoint.saved"],
        setup=lambda: _leaves(x=_ANGLES),
        args=["x"],
        program=_checkpointed_sines_squared,
        backward=True,
        # d/dx sin(sin(x))^2 = 2 sin(sin(x)) cos(sin(x)) cos(x)
        expect=[
            Values("x.grad", 2 * _ANGLES.sin().sin() * _ANGLES.sin().cos() * _ANGLES.cos())
        ],
    ),
    Case(
        name="autograd.checkpointed-write-is-refused",
        rules=["checkpoint.functional", "boundary.failed-call"],
        setup=lambda: _leaves(x=_ANGLES),
        args=["x"],
        program=_checkpointed_write,
        # eager runs it: out0 = sum(2x + 1) = 10
        expect=[Raises(UnsupportedError, rule="checkpoint.functional")],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="autograd.checkpointed-random-op-is-refused",
        rules=["checkpoint.random", "boundary.failed-call"],
        setup=lambda: _leaves(x=_ANGLES),
        args=["x"],
        program=_checkpointed_dropout,
        # eager replays the generator's state when it recomputes the dropout
        expect=[Raises(UnsupportedError, rule="checkpoint.random")],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="autograd.custom-function-writes-its-incoming-gradient",
        rules=["autograd.custom-function"],
        setup=lambda: _leaves(a=torch.ones(3), b=torch.ones(3)),
        args=["a", "b"],
        program=_incoming_gradient_written,
        backward=True,
        # the Function receives 2 (from * 2), doubles it to 4 in place and returns it: a.grad =
        # 4 * b (PyTorch's test_backward_mutation_on_grad_out)
        expect=[Values("a.grad", [4.0, 4.0, 4.0]), Values("b.grad", [4.0, 4.0, 4.0])],
        skip=_CUSTOM_FUNCTIONS_COMPILED_ONLY,
    ),
    Case(
        name="autograd.custom-function-saved-input-written-before-the-backward",
        rules=["autograd.custom-function", "autograd.saved-inputs.version"],
        setup=lambda: {"x": torch.ones(3, requires_grad=True), "w": torch.full((3,), 2.0)},
        args=["x", "w"],
        program=_scaled_by_saved,
        backward=True,
        before_backward=_caller_writes_w,
        # w, saved by ctx.save_for_backward, is the caller's tensor: eager's backward refuses it
        expect=[
            Values("out0", [2.0, 2.0, 2.0]),
            BackwardRaises(RuntimeError, match="modified by an inplace operation"),
        ],
        skip=_CUSTOM_FUNCTIONS_COMPILED_ONLY,
    ),
    Case(
        name="autograd.custom-function-backward-writes-an-input",
        rules=["autograd.custom-function.backward-writes"],
        setup=lambda: {"x": torch.ones(3, requires_grad=True), "counter": torch.zeros(3)},
        args=["x", "counter"],
        program=_counts_in_saved,
        backward=True,
        # eager's backward adds 1 to the caller's counter (PyTorch's test_backward_mutation_data)
        expect=[
            Values("out0", [1.0, 1.0, 1.0]),
            Values("counter", [1.0, 1.0, 1.0]),
            Values("x.grad", [1.0, 1.0, 1.0]),
        ],
        skip=_CUSTOM_FUNCTIONS_COMPILED_ONLY,
    ),
    Case(
        name="autograd.custom-function-backward-writing-an-output-is-refused",
        rules=["autograd.custom-function.backward-writes", "boundary.failed-call"],
        setup=lambda: {"x": torch.ones(3, requires_grad=True)},
        args=["x"],
        program=_zeroes_its_output,
        expect=[Raises(UnsupportedError, rule="autograd.custom-function.backward-writes")],
        skip={
            **_CUSTOM_FUNCTIONS_COMPILED_ONLY,
            "torch-eager": "eager's backward zeroes the caller's output; the spec refuses it",
        },
    ),
]


# ---------------------------------------------------------------- in-place metadata ops

_W32 = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])


def _non_leaf_and_weight():
    p = torch.arange(6.0).reshape(2, 3).requires_grad_()
    return {"p": p, "x": p * 1, "w": _W32.clone().requires_grad_()}


def _transpose_then_multiply(x, w):
    x.t_()
    return x * w  # saves x as t_ left it


def _as_strided_transpose_then_multiply(x, w):
    x.as_strided_((3, 2), (1, 3))  # the same elements as x.t()
    return x * w


def _square_then_transpose(x, w):
    y = x * x  # saves x before the t_
    x.t_()
    return y


def _transpose_a_leaf(x):
    x.t_()


def _relay_out_an_intermediate(p, w):
    y = p * 2
    y.t_()
    y.unsqueeze_(0)
    return y * w


def _non_leaf_and_its_rows():
    p = torch.arange(12.0).reshape(4, 3).requires_grad_()
    x = p * 1
    return {"p": p, "x": x, "v": x[1:3]}


def _transpose_then_double(v):
    v.t_()
    return v * 2


def _no_grad_transpose_then_read(x, w):
    with torch.no_grad():
        x.t_()
    return x * 2


def _no_grad_transpose_unread(x, w):
    with torch.no_grad():
        x.t_()
    return w * 2


def _as_strided_to_fewer_elements(x, w):
    x.as_strided_((2,), (1,), 0)
    return x * 2


def _square_non_leaf_and_ones():
    p = torch.arange(4.0).reshape(2, 2).requires_grad_()
    return {"p": p, "x": p * 1, "y": torch.ones(2, 2)}


def _set_then_transpose(x, y):
    with torch.no_grad():
        x.set_(y)
    x.t_()
    return x * 2


def _view_before_transpose(x, w):
    y = x * 2
    flat = y.view(6)
    y.t_()
    return flat * 1  # autograd regenerates flat's history from y, now transposed


def _reshaped_buffer_and_weight():
    # reshape of a contiguous tensor is a view: the caller's x replays from a base of sizes (3,)
    x = torch.tensor([3.0, 1.5, 2.0]).reshape(1, 3)
    return {"x": x, "w": torch.tensor(2.0).requires_grad_()}


def _view_of_a_relaid_view(x, w):
    x.unsqueeze_(0)
    column = x.transpose(1, 2)  # its replay starts with x's reshape to (1, 3), now stale
    column.mul_(w)  # a history for the storage: autograd regenerates column's
    return column * 1


def _expanded_non_leaf_and_scales():
    p = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    return {"p": p, "a": (p * 1).expand(2, 3), "w": torch.tensor([[1.0], [10.0]])}


def _double_row_then_scale(a, w):
    a[0].mul_(2)  # both rows read the one row of memory
    return a * w


def _non_leaf_and_scale():
    p = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    return {"p": p, "x": p * 1, "w": torch.tensor([1.0, 10.0, 100.0], requires_grad=True)}


def _detach_argument(x, w):
    x.detach_()
    return x * w


def _detach_transposed_intermediate(x, w):
    out = x.view(3, 1) * 3
    out.t_()
    out.detach_()
    return out, x * w


CASES += [
    Case(
        name="autograd.metadata-op-gives-an-argument-the-view-history",
        rules=[
            "autograd.metadata",
            "autograd.metadata.inputs",
            "functionalize.epilogue.metadata",
        ],
        setup=_non_leaf_and_weight,
        args=["x", "w"],
        program=_transpose_then_multiply,
        backward=True,
        # eager: x is x.t() with history TBackward1 back to p; d sum(x.t() * w) / d p = w.t()
        expect=[
            Values("out0", [[0.0, 6.0], [3.0, 16.0], [10.0, 30.0]]),
            Layout("x", shape=(3, 2), strides=(1, 3), offset=0),
            History("x", "TBackward1"),
            RequiresGrad("x"),
            Values("p.grad", [[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]]),
            Values("w.grad", [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]),
        ],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.as-strided-in-place-over-the-same-elements",
        rules=["autograd.metadata.as-strided", "autograd.metadata.inputs"],
        setup=_non_leaf_and_weight,
        args=["x", "w"],
        program=_as_strided_transpose_then_multiply,
        backward=True,
        expect=[
            Values("out0", [[0.0, 6.0], [3.0, 16.0], [10.0, 30.0]]),
            History("x", "AsStridedBackward1"),
            Values("p.grad", [[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]]),
        ],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.as-strided-in-place-to-other-elements-raises",
        rules=["autograd.metadata.as-strided", "functionalize.errors-before-running"],
        setup=_non_leaf_and_weight,
        args=["x", "w"],
        program=_as_strided_to_fewer_elements,
        expect=[Raises(UnsupportedError, rule="autograd.metadata.as-strided")],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="autograd.value-saved-before-a-metadata-op-fails-the-backward",
        rules=["autograd.metadata.inputs", "autograd.saved-inputs.version"],
        setup=_non_leaf_and_weight,
        args=["x", "w"],
        program=_square_then_transpose,
        backward=True,
        # eager: mul saved x at version 0; t_ moved it to 1
        expect=[BackwardRaises(RuntimeError, match="modified by an inplace operation")],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.metadata-op-on-a-leaf-raises",
        rules=["autograd.metadata", "autograd.eager-errors"],
        setup=lambda: _leaves(x=torch.ones(2, 3)),
        args=["x"],
        program=_transpose_a_leaf,
        expect=[Raises(RuntimeError, match="a leaf Variable that requires grad")],
    ),
    Case(
        name="autograd.metadata-ops-on-an-intermediate",
        rules=["autograd.metadata"],
        setup=lambda: _leaves(
            p=torch.arange(6.0).reshape(2, 3), w=torch.arange(1.0, 7.0).reshape(1, 3, 2)
        ),
        args=["p", "w"],
        program=_relay_out_an_intermediate,
        backward=True,
        # y = (2p).t() unsqueezed: d sum(y * w) / d p = 2 w[0].t(), d / d w = y
        expect=[
            Values("out0", [[[0.0, 12.0], [6.0, 32.0], [20.0, 60.0]]]),
            Values("p.grad", [[2.0, 6.0, 10.0], [4.0, 8.0, 12.0]]),
            Values("w.grad", [[[0.0, 6.0], [2.0, 8.0], [4.0, 10.0]]]),
        ],
    ),
    Case(
        name="autograd.metadata-op-on-a-view-argument",
        rules=["autograd.metadata.inputs", "functionalize.epilogue.metadata"],
        setup=_non_leaf_and_its_rows,
        args=["v"],
        program=_transpose_then_double,
        backward=True,
        # v is rows 1 and 2 of x, transposed in place: a view still, at offset 3
        expect=[
            Values("out0", [[6.0, 12.0], [8.0, 14.0], [10.0, 16.0]]),
            Layout("v", shape=(3, 2), strides=(1, 3), offset=3),
            History("v", "TBackward1"),
            Layout("x", shape=(4, 3), strides=(3, 1), offset=0),
            Values("p.grad", [[0.0, 0.0, 0.0], [2.0, 2.0, 2.0], [2.0, 2.0, 2.0], [0.0] * 3]),
        ],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.no-grad-metadata-op-then-a-read-raises",
        rules=["autograd.no-grad-metadata"],
        setup=_non_leaf_and_weight,
        args=["x", "w"],
        program=_no_grad_transpose_then_read,
        expect=[Raises(UnsupportedError, rule="autograd.no-grad-metadata")],
        skip={
            "torch-eager": "eager returns, and its backward fails: MulBackward0 returned an "
            "invalid gradient"
        },
    ),
    Case(
        name="autograd.no-grad-metadata-op-keeps-the-history",
        rules=["autograd.no-grad-metadata", "functionalize.epilogue.metadata"],
        setup=_non_leaf_and_weight,
        args=["x", "w"],
        program=_no_grad_transpose_unread,
        backward=True,
        # eager: x is transposed and keeps x = p * 1's history; only w gets a gradient
        expect=[
            Layout("x", shape=(3, 2), strides=(1, 3), offset=0),
            History("x", "MulBackward0"),
            Values("w.grad", [[2.0, 2.0], [2.0, 2.0], [2.0, 2.0]]),
            Absent("p.grad"),
        ],
        skip={"reference-eager": "the eager interpreter refuses the op itself"},
    ),
    Case(
        name="autograd.detach-in-place-of-an-argument",
        rules=["aliasing.metadata.detach", "capture.detach-in-place"],
        setup=_non_leaf_and_scale,
        args=["x", "w"],
        program=_detach_argument,
        backward=True,
        # eager: x is a leaf without history afterwards; only w gets a gradient, x's values
        expect=[
            RequiresGrad("x", False),
            History("x", None),
            Values("out0", [1.0, 20.0, 300.0]),
            Values("w.grad", [1.0, 2.0, 3.0]),
            Absent("p.grad"),
        ],
        skip=_EAGER_INTERPRETER_KEEPS_HISTORIES,
    ),
    Case(
        name="autograd.detach-in-place-of-a-transposed-intermediate",
        rules=["aliasing.metadata.detach", "capture.detach-in-place", "autograd.metadata"],
        setup=_non_leaf_and_scale,
        args=["x", "w"],
        program=_detach_transposed_intermediate,
        backward=True,
        # out0 = 3x as a row, without history; d sum(x * w) / d p = w
        expect=[
            Values("out0", [[3.0, 6.0, 9.0]]),
            Layout("out0", shape=(1, 3), strides=(1, 1)),
            RequiresGrad("out0", False),
            History("out0", None),
            Values("p.grad", [1.0, 10.0, 100.0]),
        ],
    ),
    Case(
        name="autograd.view-taken-before-a-metadata-op-raises",
        rules=["capture.metadata-views"],
        setup=_non_leaf_and_weight,
        args=["x", "w"],
        program=_view_before_transpose,
        expect=[Raises(UnsupportedError, rule="capture.metadata-views")],
        skip={"torch-eager": "eager regenerates the view's history by address, and runs it"},
    ),
    Case(
        name="autograd.view-of-a-relaid-view-raises",
        rules=["capture.metadata-views"],
        setup=_reshaped_buffer_and_weight,
        args=["x", "w"],
        program=_view_of_a_relaid_view,
        expect=[Raises(UnsupportedError, rule="capture.metadata-views")],
        skip={"torch-eager": "eager regenerates the view's history by address, and runs it"},
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
        name="autograd.set-then-metadata-op-with-grad-raises",
        rules=["functionalize.metadata.set"],
        setup=_square_non_leaf_and_ones,
        args=["x", "y"],
        program=_set_then_transpose,
        expect=[Raises(UnsupportedError, rule="functionalize.metadata.set")],
        skip=COMPILED_ONLY,
    ),
]


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


CASES += [
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
]


def _set_to_other_sizes_then_unread(p, y, w):
    with torch.no_grad():
        p.set_(y.view(2, 2))
    return w * 2


CASES += [
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


def _doubled_then_marked(x):
    y = x * 2
    y.requires_grad_()
    return y


def _view_marked(a, w):
    v = a.view(-1)
    v.requires_grad_()
    return v, w * 3


CASES += [
    Case(
        name="autograd.requires-grad-on-a-returned-tensor-makes-a-leaf",
        rules=["autograd.requires-grad-inside.outputs"],
        setup=lambda: {"x": torch.tensor([1.0, 2.0])},
        args=["x"],
        program=_doubled_then_marked,
        backward=True,
        # eager: y = [2, 4] is a leaf that requires grad; the backward of sum(y) fills y.grad
        expect=[
            Values("out0", [2.0, 4.0]),
            RequiresGrad("out0"),
            History("out0", None),
            Values("out0.grad", [1.0, 1.0]),
            Absent("x.grad"),
        ],
    ),
    Case(
        name="autograd.requires-grad-on-a-returned-view-of-an-input",
        rules=["autograd.requires-grad-inside.outputs", "functionalize.outputs"],
        setup=lambda: {"a": torch.ones(2, 2), "w": torch.ones(2, requires_grad=True)},
        args=["a", "w"],
        program=_view_marked,
        backward=True,
        # eager: v, a view of a, is a leaf that requires grad (a does not); w * 3 sends 3 to w
        expect=[
            Values("out0", [1.0, 1.0, 1.0, 1.0]),
            Shares("out0", "a"),
            History("out0", None),
            Values("out0.grad", [1.0, 1.0, 1.0, 1.0]),
            Values("w.grad", [3.0, 3.0]),
        ],
    ),
]
