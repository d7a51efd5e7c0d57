"""Cases for specs/autograd.md: gradients of compiled programs, saved values, the detach rule.

Expected gradients are worked out by hand from the chain rule, or computed by eager PyTorch on
private copies; never taken from the reference.
"""

import math

import torch

from aotspec.errors import SpecViolation, UnsupportedError

from ..case import (
    COMPILED_ONLY,
    Absent,
    BackwardRaises,
    Case,
    History,
    Raises,
    RequiresGrad,
    SavedFreedDuringBackward,
    Separate,
    Shares,
    Values,
)
from ._autograd_common import (
    _ANGLES,
    _EAGER_INTERPRETER_KEEPS_HISTORIES,
    _G,
    _W1,
    _W2,
    _X,
    _caller_writes_w,
    _leaves,
    _non_leaf_world,
    _two_non_leaves_world,
    _x_w_world,
)


def _product(x, w):
    return x * w


def _mlp(x, w1, w2):
    return torch.relu(x @ w1.t()) @ w2.t()


def _eager_mlp_grads():
    x, w1, w2 = (t.clone().requires_grad_() for t in (_X, _W1, _W2))
    _mlp(x, w1, w2).sum().backward()
    return x.grad, w1.grad, w2.grad


_MLP_GRADS = _eager_mlp_grads()


def _ignores_y(y, z):
    return z * 2 + y.detach()


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


def _use_update_use(x, w):
    before = x @ w  # saves w as it is now, for x's gradient
    with torch.no_grad():
        w.mul_(0.5)
    return before + x @ w


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


def _doubles_detached_w(w):
    w.detach().mul_(2)
    return w * 3


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


def _made_with_grad_written_and_viewed_without(x):
    with torch.enable_grad():
        y = x * 2
    y.add_(1)
    return y.t(), y


def _made_with_grad_written_and_viewed_as_laid_out(x, w):
    with torch.enable_grad():
        y = x * w
    y.add_(1)
    return y.t()  # y is 1-D: the view reads y as y is laid out


def _view_as_laid_out_taken_under_no_grad(x):
    y = x * 3
    with torch.no_grad():
        v = y.t()  # y is 1-D: the view reads y as y is laid out
    return v, y


def _sum_of_two(x, w):
    return x + w


def _sum_with_a_view(x, w):
    return x + w.view(3)  # w's gradient views x's: one storage


def _view_taken_under_no_grad(x):
    y = x * 3
    with torch.no_grad():
        v = y.view(-1)
    return y.sum(), v


def _write_into_out1(world):
    world["out1"].mul_(2)


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
        name="autograd.retain-graph-one-gradient-of-two-inputs",
        rules=["autograd.retain-graph"],
        setup=lambda: _leaves(x=torch.tensor([1.0, 2.0, 3.0]), w=torch.tensor([4.0, 5.0, 6.0])),
        args=["x", "w"],
        program=_sum_of_two,
        backward=True,
        retain_graph=[True, False],
        # each pass adds the sum's gradient, ones, to x.grad and to w.grad, each its own tensor
        expect=[Values("x.grad", [2.0, 2.0, 2.0]), Values("w.grad", [2.0, 2.0, 2.0])],
    ),
    Case(
        name="autograd.retain-graph-gradients-on-one-storage",
        rules=["autograd.retain-graph"],
        setup=lambda: _leaves(x=torch.tensor([1.0, 2.0, 3.0]), w=torch.tensor([[4.0, 5.0, 6.0]])),
        args=["x", "w"],
        program=_sum_with_a_view,
        backward=True,
        retain_graph=[True, False],
        # each pass adds ones to x.grad and to w.grad, each its own tensor
        expect=[Values("x.grad", [2.0, 2.0, 2.0]), Values("w.grad", [[2.0, 2.0, 2.0]])],
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
        name="autograd.no-grad-view-of-a-value-written-under-no-grad-requires-grad",
        rules=["autograd.grad-mode-inside.views", "autograd.no-grad-writes"],
        setup=lambda: _leaves(x=torch.ones(2, 2)),
        args=["x"],
        program=_made_with_grad_written_and_viewed_without,
        grad_enabled=False,
        skip={"reference-eager": "its outputs are not torch views made in no_grad mode"},
        # eager: y = 2x has a history (made under enable_grad()); add_ under the caller's
        # no_grad keeps it; y.t(), taken under no_grad, requires grad (as its base does) with no
        # grad_fn of its own
        expect=[
            Values("out0", [[3.0, 3.0], [3.0, 3.0]]),
            RequiresGrad("out0"),
            RequiresGrad("out1"),
        ],
    ),
    Case(
        name="autograd.no-grad-view-as-laid-out-of-a-value-written-under-no-grad-has-no-history",
        rules=["autograd.grad-mode-inside.views", "autograd.no-grad-writes"],
        setup=lambda: _leaves(x=torch.tensor([1.0, 2.0, 3.0]), w=torch.tensor([4.0, 5.0, 6.0])),
        args=["x", "w"],
        program=_made_with_grad_written_and_viewed_as_laid_out,
        grad_enabled=False,
        backward=True,
        skip={"reference-eager": "its outputs are not torch views made in no_grad mode"},
        # eager: y = x * w has a history, which add_ under the caller's no_grad keeps; y.t(),
        # taken under no_grad, requires grad with no history, so neither x nor w gets a gradient
        expect=[
            Values("out0", [5.0, 11.0, 19.0]),
            RequiresGrad("out0"),
            Absent("x.grad"),
            Absent("w.grad"),
        ],
    ),
    Case(
        name="autograd.output-viewed-as-laid-out-under-no-grad-has-no-history",
        rules=["autograd.grad-mode-inside.views"],
        setup=lambda: _leaves(x=torch.tensor([1.0, 2.0, 3.0])),
        args=["x"],
        program=_view_as_laid_out_taken_under_no_grad,
        backward=True,
        skip={"reference-eager": "its outputs are not torch views made in no_grad mode"},
        # eager: v requires grad with no history; only y's gradient reaches x: x.grad = 3
        expect=[
            Values("out0", [3.0, 6.0, 9.0]),
            RequiresGrad("out0"),
            Values("x.grad", [3.0, 3.0, 3.0]),
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
