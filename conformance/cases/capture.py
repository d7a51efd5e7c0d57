"""Cases for specs/capture.md: what capture keeps, what it must not touch, and the boundary."""

import math

import torch
import torch.nn.functional as F

from aotspec.errors import UnsupportedError

from ..case import (
    COMPILED_ONLY,
    Absent,
    AtSize,
    BackwardRaises,
    Case,
    Identical,
    Layout,
    Number,
    PlansTraced,
    Raises,
    RequiresGrad,
    Separate,
    Shares,
    Values,
)
from ._autograd_common import _aliased_views_world, _leaves, _non_leaf_and_weight

_X = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 0.0, 2.0]])


def _gelu_then_silu(x):
    return F.silu(F.gelu(x))  # one kernel each in eager: captured as gelu, silu


def _mutate_then_unsupported(x):
    x.add_(1)
    return torch.ops.prims.sin(x)  # prims ops are outside the table, and not ATen-valued


def _two_unsupported_ops(x):
    y = torch.ops.prims.sin(x)
    return torch.ops.aten.mm.dtype(y, y, torch.float32)  # CUDA kernels only


def _flat_inputs(xs, scale, options):
    return xs[0] * scale + xs[1] * options["weight"]


def _pytree_world():
    a, b = torch.ones(2), torch.full((2,), 2.0)
    return {"a": a, "b": b, "xs": [a, b], "scale": 3.0, "options": {"weight": 10.0}}


def _same_object_twice(x, also_x):
    x.add_(1)
    return also_x * 1


class _HalfGradient(torch.autograd.Function):
    """Forward: the input itself; backward: half the incoming gradient."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 0.5


def _custom_function(x):
    return _HalfGradient.apply(x) * 2.0


def _custom_function_returning_its_input(x):
    return _HalfGradient.apply(x)


def _custom_function_without_grad(x):
    with torch.no_grad():
        y = _HalfGradient.apply(x)
    return y * 2.0


# The lifting cases' programs read these globals instead of taking them as arguments
# (r[capture.lift]). Each setup binds fresh tensors to them, so every run also checks that a
# call looks them up again.
_SCALE = None
_LINEAR = None
_CALLS = None
_IN_A_LIST: list = []


def _scale_world():
    global _SCALE
    _SCALE = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    return {"x": torch.tensor([4.0, 5.0, 6.0], requires_grad=True), "scale": _SCALE}


def _times_global_scale(x):
    return x * _SCALE


def _linear_world():
    global _LINEAR
    _LINEAR = torch.nn.Linear(2, 1)
    with torch.no_grad():
        _LINEAR.weight.copy_(torch.tensor([[1.0, -1.0]]))
        _LINEAR.bias.fill_(0.5)
    return {"x": torch.tensor([[3.0, 1.0]]), "weight": _LINEAR.weight, "bias": _LINEAR.bias}


def _global_linear(x):
    return _LINEAR(x)


def _calls_world():
    global _CALLS
    _CALLS = torch.zeros(1)
    return {"x": torch.tensor([2.0, 3.0]), "calls": _CALLS}


def _count_calls(x):
    _CALLS.add_(1)
    return x * _CALLS


def _listed_world():
    _IN_A_LIST[:] = [torch.ones(2)]
    return {"x": torch.tensor([2.0, 3.0]), "listed": _IN_A_LIST[0]}


def _times_listed(x):
    return x * _IN_A_LIST[0]


def _backward_inside(x):
    loss = (x * 2).sum()
    loss.backward()
    return loss


def _times_a_constant(x):
    return x * torch.tensor([1.0, 2.0, 3.0])


def _writes_a_constant(x):
    c = torch.tensor([7.0, 8.0])
    c.add_(x)
    return c


def _caller_writes_out0(world):
    world["out0"].mul_(2)


class _DoubledAndTripled(torch.autograd.Function):
    """Forward: 2x, and 3x marked non-differentiable; backward: twice the first gradient plus the
    (zero) second."""

    @staticmethod
    def forward(ctx, x):
        tripled = x * 3
        ctx.mark_non_differentiable(tripled)
        return x * 2, tripled

    @staticmethod
    def backward(ctx, doubled_grad, tripled_grad):
        return doubled_grad * 2 + tripled_grad


def _non_differentiable_output(x):
    return _DoubledAndTripled.apply(x)


def _non_differentiable_output_then_the_other_written_under_no_grad(x):
    doubled, _ = _DoubledAndTripled.apply(x)
    with torch.no_grad():
        doubled.mul_(5.0)
    return doubled


class _BroadcastSum(torch.autograd.Function):
    """x + y with y broadcast; the backward returns the unreduced gradient for both, the second
    in float64: eager's engine sums it to y's shape and casts it to y's dtype."""

    @staticmethod
    def forward(ctx, x, y):
        return x + y

    @staticmethod
    def backward(ctx, grad):
        return grad, grad.double()


def _broadcast_sum(x, y):
    return _BroadcastSum.apply(x, y)


class _OneGradientForTwo(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return x * y

    @staticmethod
    def backward(ctx, grad):
        return grad


def _one_gradient_for_two(x, y):
    return _OneGradientForTwo.apply(x, y)


class _DoubledInPlace(torch.autograd.Function):
    """Doubles its input in place and marks it dirty."""

    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def _dirty_input(x):
    return _DoubledInPlace.apply(x * 1)


_EAGER_INTERPRETER_REFUSES = {
    "reference-eager": "the eager interpreter refuses custom Functions a gradient reaches "
    "(capture.custom-function.eager-interpreter)"
}


def _reentrant_checkpoint_of_global_linear(x):
    return torch.utils.checkpoint.checkpoint(_LINEAR, x, use_reentrant=True)


def _reentrant_checkpoint_of_sin(x):
    return torch.utils.checkpoint.checkpoint(torch.sin, x, use_reentrant=True) * 2


def _hook_doubling_an_intermediate(x):
    h = x * 3
    h.register_hook(lambda grad: grad * 2)
    return h.sum()


def _hook_on_a_node(x):
    h = x * 3
    h.grad_fn.register_hook(lambda grad_in, grad_out: (grad_in[0] * 2, *grad_in[1:]))
    return h.sum()


def _retain_grad_of_an_output(x):
    h = x * 3
    h.retain_grad()
    return h


def _hooked_linear_world():
    world = _linear_world()
    _LINEAR.register_full_backward_hook(lambda module, grad_in, grad_out: (grad_in[0] * 2,))
    return {**world, "x": torch.tensor([[3.0, 1.0]], requires_grad=True)}


def _linear_with_gradients_world():
    world = _linear_world()
    _LINEAR.weight.grad = torch.tensor([[3.0, 4.0]])
    _LINEAR.bias.grad = torch.tensor([0.0])
    return world


def _clip_global_linear_gradients():
    return torch.nn.utils.clip_grad_norm_(_LINEAR.parameters(), 1.0)


def _doubled_unless_it_has_a_gradient(x):
    return x * 2 if x.grad is None else x


def _func_grad_of_sin(x):
    return torch.func.grad(lambda v: v.sin().sum())(x)


def _batched_dot(x, y):
    return torch.func.vmap(torch.dot)(x, y)


def _inference_world():
    with torch.inference_mode():
        return {"x": torch.tensor([1.0, 2.0])}


def _doubled(x):
    return x * 2


def _data_doubled_then_plus_one(x):
    x.data = x.data * 2
    return x + 1


def _return_argument(x):
    x.mul_(2)
    return x


CASES = [
    Case(
        name="capture.kernels-are-captured-whole-and-run",
        rules=["capture.aten-graph"],
        setup=lambda: {"x": _X.clone()},
        args=["x"],
        program=_gelu_then_silu,
        # eager PyTorch's own answer, computed on a private copy
        expect=[Values("out0", F.silu(F.gelu(_X.clone()))), Separate("x", "out0")],
    ),
    Case(
        name="capture.unsupported-op-touches-nothing",
        rules=["capture.no-side-effects", "ops.table", "boundary.failed-call"],
        setup=lambda: {"x": torch.zeros(3)},
        args=["x"],
        program=_mutate_then_unsupported,
        expect=[Raises(UnsupportedError, rule="ops.table", match="prims.sin.default")],
        skip={"torch-eager": "prims.sin is outside the reference op table; eager PyTorch runs it"},
    ),
    Case(
        name="capture.every-unsupported-op-in-one-error",
        rules=["ops.unsupported-all", "boundary.failed-call"],
        setup=lambda: {"x": torch.ones(2, 2)},
        args=["x"],
        program=_two_unsupported_ops,
        expect=[
            Raises(UnsupportedError, rule="ops.table", match="2 ops of the program"),
            Raises(UnsupportedError, match="prims.sin.default"),
            Raises(UnsupportedError, match="aten.mm.dtype"),
        ],
        skip={"torch-eager": "eager PyTorch runs prims.sin, and has no CPU kernel for mm.dtype"},
    ),
    Case(
        name="capture.pytree-and-constant-arguments",
        rules=["capture.flat-inputs"],
        setup=_pytree_world,
        args=["xs", "scale", "options"],
        program=_flat_inputs,
        expect=[Values("out0", [23.0, 23.0]), Values("a", [1.0, 1.0])],
    ),
    Case(
        name="boundary.same-object-twice",
        rules=["boundary.import"],
        setup=lambda: {"x": torch.zeros(2)},
        args=["x", "x"],
        program=_same_object_twice,
        expect=[Values("out0", [1.0, 1.0]), Values("x", [1.0, 1.0])],
    ),
    Case(
        name="boundary.output-is-the-argument",
        rules=["boundary.export"],
        setup=lambda: {"x": torch.arange(3.0)},
        args=["x"],
        program=_return_argument,
        expect=[Values("x", [0.0, 2.0, 4.0]), Identical("x", "out0"), Shares("x", "out0")],
    ),
    Case(
        name="capture.custom-function-runs-its-own-backward",
        rules=["capture.custom-function", "capture.custom-function.backward"],
        setup=lambda: {"x": torch.ones(3, requires_grad=True)},
        args=["x"],
        program=_custom_function,
        backward=True,
        # out0 = 2 y, y = x: the sum's gradient reaches y as 2, the Function halves it
        expect=[Values("out0", [2.0, 2.0, 2.0]), Values("x.grad", [1.0, 1.0, 1.0])],
        skip=_EAGER_INTERPRETER_REFUSES,
    ),
    Case(
        name="capture.custom-function-returning-its-input",
        rules=["capture.custom-function.outputs"],
        setup=lambda: {"x": torch.ones(3, requires_grad=True)},
        args=["x"],
        program=_custom_function_returning_its_input,
        backward=True,
        # eager makes the returned input a view of it whose gradient is the Function's: 0.5
        expect=[
            Values("out0", [1.0, 1.0, 1.0]),
            Shares("x", "out0"),
            RequiresGrad("out0"),
            Values("x.grad", [0.5, 0.5, 0.5]),
        ],
        skip=_EAGER_INTERPRETER_REFUSES,
    ),
    Case(
        name="capture.custom-function-view-output-written-by-the-caller",
        rules=["capture.custom-function.outputs"],
        setup=lambda: {"x": torch.ones(3, requires_grad=True)},
        args=["x"],
        program=_custom_function_returning_its_input,
        backward=True,
        before_backward=_caller_writes_out0,
        # eager: "Output 0 of _HalfGradientBackward is a view and is being modified inplace.
        # This view was created inside a custom Function (or because an input was returned
        # as-is) ..."
        expect=[BackwardRaises(RuntimeError, match="created inside a custom Function")],
        skip=_EAGER_INTERPRETER_REFUSES,
    ),
    Case(
        name="capture.custom-function-non-differentiable-output",
        rules=["capture.custom-function.outputs", "capture.custom-function.backward"],
        setup=lambda: {"x": torch.ones(3, requires_grad=True)},
        args=["x"],
        program=_non_differentiable_output,
        backward=True,
        # out1 does not require grad, so only out0's sum reaches the Function: 2 * 1 + zeros
        expect=[
            Values("out0", [2.0, 2.0, 2.0]),
            Values("out1", [3.0, 3.0, 3.0]),
            RequiresGrad("out1", False),
            Values("x.grad", [2.0, 2.0, 2.0]),
        ],
        skip=_EAGER_INTERPRETER_REFUSES,
    ),
    Case(
        name="capture.custom-function-output-written-under-no-grad-keeps-its-gradient",
        rules=["capture.custom-function.outputs", "autograd.no-grad-writes"],
        setup=lambda: {"x": torch.ones(3, requires_grad=True)},
        args=["x"],
        program=_non_differentiable_output_then_the_other_written_under_no_grad,
        backward=True,
        # eager: the Function's output keeps its history through the write, which records
        # none: out0 = 5 * 2x, and x.grad is the Function's 2 * 1
        expect=[
            Values("out0", [10.0, 10.0, 10.0]),
            RequiresGrad("out0"),
            Values("x.grad", [2.0, 2.0, 2.0]),
        ],
        skip=_EAGER_INTERPRETER_REFUSES,
    ),
    Case(
        name="capture.custom-function-gradients-summed-and-cast",
        rules=["capture.custom-function.gradients"],
        setup=lambda: {
            "x": torch.ones(2, 3, requires_grad=True),
            "y": torch.ones(3, requires_grad=True),
        },
        args=["x", "y"],
        program=_broadcast_sum,
        backward=True,
        # y's gradient: ones(2, 3) in float64, summed over the broadcast dim and cast to float32
        expect=[
            Values("x.grad", torch.ones(2, 3)),
            Values("y.grad", [2.0, 2.0, 2.0]),
            Layout("y.grad", dtype=torch.float32),
        ],
        skip=_EAGER_INTERPRETER_REFUSES,
    ),
    Case(
        name="capture.custom-function-wrong-number-of-gradients",
        rules=["capture.custom-function.gradients", "boundary.failed-call"],
        setup=lambda: {
            "x": torch.ones(3, requires_grad=True),
            "y": torch.ones(3, requires_grad=True),
        },
        args=["x", "y"],
        program=_one_gradient_for_two,
        expect=[Raises(RuntimeError, match="incorrect number of gradients (expected 2, got 1)")],
        skip={
            **_EAGER_INTERPRETER_REFUSES,
            "torch-eager": "eager's engine raises the same error in the backward, not the call",
        },
    ),
    Case(
        name="capture.custom-function-marking-inputs-dirty-is-refused",
        rules=["capture.custom-function.refused", "boundary.failed-call"],
        setup=lambda: {"x": torch.ones(3, requires_grad=True)},
        args=["x"],
        program=_dirty_input,
        expect=[
            Raises(UnsupportedError, rule="capture.custom-function.refused", match="mark_dirty")
        ],
        skip={"torch-eager": "eager PyTorch runs it; the spec refuses it"},
    ),
    Case(
        name="capture.reentrant-checkpoint-of-a-module-is-refused",
        rules=["capture.custom-function.backward-accumulates", "boundary.failed-call"],
        setup=lambda: {**_linear_world(), "x": torch.tensor([[3.0, 1.0]], requires_grad=True)},
        args=["x"],
        program=_reentrant_checkpoint_of_global_linear,
        expect=[
            Raises(
                UnsupportedError,
                rule="capture.custom-function.backward-accumulates",
                match="CheckpointFunction",
            )
        ],
        # eager: out0 = [[2.5]]; after its backward weight.grad = [[3, 1]], x.grad = [[1, -1]]
        skip=COMPILED_ONLY,
    ),
    Case(
        name="capture.reentrant-checkpoint-backpropagating-into-its-own-leaves",
        rules=["capture.custom-function.backward-accumulates", "capture.custom-function"],
        setup=lambda: {"x": torch.tensor([0.0, 1.0], requires_grad=True)},
        args=["x"],
        program=_reentrant_checkpoint_of_sin,
        backward=True,
        # x.grad = 2 * cos(x), as eager's checkpoint reads it from its detached input's .grad
        expect=[
            Values("out0", [0.0, 2 * math.sin(1.0)]),
            Values("x.grad", [2.0, 2 * math.cos(1.0)]),
        ],
        skip=_EAGER_INTERPRETER_REFUSES,
    ),
    Case(
        name="capture.module-with-a-full-backward-hook-is-refused",
        rules=["capture.module-backward-hooks", "boundary.failed-call"],
        setup=_hooked_linear_world,
        args=["x"],
        program=_global_linear,
        expect=[Raises(UnsupportedError, rule="capture.module-backward-hooks")],
        # eager: out0 = [[2.5]]; after its backward the hook doubles x.grad to [[2, -2]]
        skip=COMPILED_ONLY,
    ),
    Case(
        name="capture.custom-function-refused-by-the-eager-interpreter",
        rules=["capture.custom-function.eager-interpreter", "boundary.failed-call"],
        setup=lambda: {"x": torch.ones(3, requires_grad=True)},
        args=["x"],
        program=_custom_function,
        expect=[Raises(UnsupportedError, rule="capture.custom-function.eager-interpreter")],
        skip={
            "torch-eager": "eager PyTorch runs the Function's backward",
            "reference": "compiled programs run the Function's backward",
            "fast": "compiled programs run the Function's backward",
        },
    ),
    Case(
        name="capture.custom-function-under-no-grad-is-captured",
        rules=["capture.custom-function", "capture.grad-mode"],
        setup=lambda: {"x": torch.ones(3, requires_grad=True)},
        args=["x"],
        program=_custom_function_without_grad,
        backward=True,
        # y carries no gradient (computed under torch.no_grad()), so neither does 2 * y
        expect=[Values("out0", [2.0, 2.0, 2.0]), Absent("x.grad")],
    ),
    Case(
        name="capture.global-tensor-is-an-input",
        rules=["capture.lift"],
        setup=_scale_world,
        args=["x"],
        program=_times_global_scale,
        backward=True,
        # x * scale; its gradient reaches both: x.grad = scale, scale.grad = x
        expect=[
            Values("out0", [4.0, 10.0, 18.0]),
            Values("x.grad", [1.0, 2.0, 3.0]),
            Values("scale.grad", [4.0, 5.0, 6.0]),
        ],
    ),
    Case(
        name="capture.global-module-parameters-are-inputs",
        rules=["capture.lift"],
        setup=_linear_world,
        args=["x"],
        program=_global_linear,
        backward=True,
        # 3 * 1 + 1 * -1 + 0.5; weight.grad = x, bias.grad = 1
        expect=[
            Values("out0", [[2.5]]),
            Values("weight.grad", [[3.0, 1.0]]),
            Values("bias.grad", [1.0]),
        ],
    ),
    Case(
        name="capture.write-into-a-global-reaches-it",
        rules=["capture.lift"],
        setup=_calls_world,
        args=["x"],
        program=_count_calls,
        expect=[Values("calls", [1.0]), Values("out0", [2.0, 3.0])],
    ),
    Case(
        name="capture.tensor-in-a-global-list-is-refused",
        rules=["capture.lift.unreachable", "boundary.failed-call"],
        setup=_listed_world,
        args=["x"],
        program=_times_listed,
        expect=[Raises(UnsupportedError, rule="capture.lift.unreachable")],
        # eager reads the list at call time: out0 = [2, 3]
        skip=COMPILED_ONLY,
    ),
    Case(
        name="capture.backward-inside-is-refused",
        rules=["capture.backward-inside", "boundary.failed-call"],
        setup=lambda: {"x": torch.tensor([1.0, 2.0], requires_grad=True)},
        args=["x"],
        program=_backward_inside,
        expect=[Raises(UnsupportedError, rule="capture.backward-inside")],
        # eager: x.grad = [2, 2] after the call
        skip=COMPILED_ONLY,
    ),
    Case(
        name="capture.hook-on-an-intermediate-is-refused",
        rules=["capture.tensor-hooks", "boundary.failed-call"],
        setup=lambda: {"x": torch.tensor([1.0, 2.0], requires_grad=True)},
        args=["x"],
        program=_hook_doubling_an_intermediate,
        expect=[Raises(UnsupportedError, rule="capture.tensor-hooks", match="register_hook")],
        # eager: after out0.backward(), x.grad = 3 * 2 = [6, 6]
        skip=COMPILED_ONLY,
    ),
    Case(
        name="capture.hook-on-an-autograd-node-is-refused",
        rules=["capture.tensor-hooks", "boundary.failed-call"],
        setup=lambda: {"x": torch.tensor([1.0, 2.0], requires_grad=True)},
        args=["x"],
        program=_hook_on_a_node,
        expect=[Raises(UnsupportedError, rule="capture.tensor-hooks", match="autograd node")],
        # eager: after out0.backward(), x.grad = 3 * 2 = [6, 6]
        skip=COMPILED_ONLY,
    ),
    Case(
        name="capture.retain-grad-inside-is-refused",
        rules=["capture.tensor-hooks", "boundary.failed-call"],
        setup=lambda: {"x": torch.tensor([1.0, 2.0], requires_grad=True)},
        args=["x"],
        program=_retain_grad_of_an_output,
        expect=[Raises(UnsupportedError, rule="capture.tensor-hooks", match="retain_grad")],
        # eager: after out0.sum().backward(), out0.grad = [1, 1]
        skip=COMPILED_ONLY,
    ),
    Case(
        name="capture.hook-on-a-tensor-without-grad-raises-eagers-error",
        rules=["capture.tensor-hooks", "boundary.failed-call"],
        setup=lambda: {"x": torch.tensor([1.0, 2.0])},
        args=["x"],
        program=_hook_doubling_an_intermediate,
        expect=[Raises(RuntimeError, match="doesn't require gradient")],
    ),
    Case(
        name="capture.clipping-a-parameters-gradient-is-refused",
        rules=["capture.lift.grad", "boundary.failed-call"],
        setup=_linear_with_gradients_world,
        args=[],
        program=_clip_global_linear_gradients,
        expect=[Raises(UnsupportedError, rule="capture.lift.grad", match="reads the .grad")],
        # eager: out0 = 5.0 (the norm of [3, 4, 0]) and weight.grad becomes [[0.6, 0.8]]
        skip=COMPILED_ONLY,
    ),
    Case(
        name="capture.reading-a-grad-that-is-none",
        rules=["capture.lift.grad"],
        setup=lambda: {"x": torch.tensor([1.0, 2.0])},
        args=["x"],
        program=_doubled_unless_it_has_a_gradient,
        # x.grad is None, in eager and in the trace, so the function doubles x
        expect=[Values("out0", [2.0, 4.0])],
    ),
    Case(
        name="capture.func-grad-inside-is-refused",
        rules=["capture.gradient-transforms", "boundary.failed-call"],
        setup=lambda: {"x": torch.tensor([0.0, 1.0])},
        args=["x"],
        program=_func_grad_of_sin,
        expect=[Raises(UnsupportedError, rule="capture.gradient-transforms")],
        # eager: out0 = cos(x) = [1, 0.5403]
        skip=COMPILED_ONLY,
    ),
    Case(
        name="capture.vmap-inside-is-captured",
        rules=["capture.gradient-transforms"],
        setup=lambda: _leaves(x=torch.tensor([[1.0, 2.0], [3.0, 4.0]]), y=torch.ones(2, 2)),
        args=["x", "y"],
        program=_batched_dot,
        backward=True,
        # each row's dot with ones: [1 + 2, 3 + 4]; d/dx = y, d/dy = x
        expect=[
            Values("out0", [3.0, 7.0]),
            Values("x.grad", torch.ones(2, 2)),
            Values("y.grad", [[1.0, 2.0], [3.0, 4.0]]),
        ],
    ),
    Case(
        name="boundary.inference-tensor-argument-is-refused",
        rules=["boundary.inference-tensors", "boundary.failed-call"],
        setup=_inference_world,
        args=["x"],
        program=_doubled,
        expect=[Raises(UnsupportedError, rule="boundary.inference-tensors", match="argument 0")],
        # eager: out0 = [2, 4], itself an inference tensor
        skip={"torch-eager": "eager PyTorch runs it; the spec refuses it"},
    ),
    Case(
        name="capture.assigning-data-is-refused",
        rules=["capture.data-assignment", "boundary.failed-call"],
        setup=lambda: {"x": torch.tensor([1.0, 2.0])},
        args=["x"],
        program=_data_doubled_then_plus_one,
        expect=[Raises(UnsupportedError, rule="capture.data-assignment")],
        # eager: x becomes [2, 4] and out0 = [3, 5]
        skip=COMPILED_ONLY,
    ),
    Case(
        name="capture.constant-made-from-data",
        rules=["capture.constants"],
        setup=lambda: {"x": torch.tensor([1.0, 1.0, 2.0], requires_grad=True)},
        args=["x"],
        program=_times_a_constant,
        backward=True,
        expect=[Values("out0", [1.0, 2.0, 6.0]), Values("x.grad", [1.0, 2.0, 3.0])],
    ),
    Case(
        name="capture.written-constant-is-fresh",
        rules=["capture.constants"],
        setup=lambda: {"x": torch.tensor([1.0, 2.0])},
        args=["x"],
        program=_writes_a_constant,
        # each call starts from [7, 8]
        expect=[Values("out0", [8.0, 10.0])],
    ),
]


def _first_column_of_softmax(x, w):
    return (x @ w).softmax(-1)[:, 0]


_W = torch.tensor([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5], [1.0, 1.0]])


def _eager_under_bfloat16_autocast() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The output, x's and w's gradients eager computes, the call under CPU autocast to
    bfloat16 and the backward after it, as the runner does; on private copies."""
    x, w = _X.clone().requires_grad_(), _W.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = _first_column_of_softmax(x, w)
    out.sum().backward()
    return out.detach(), x.grad, w.grad


_AUTOCAST_OUT, _AUTOCAST_X_GRAD, _AUTOCAST_W_GRAD = _eager_under_bfloat16_autocast()

CASES.append(
    Case(
        name="capture.autocast-casts-are-eagers",
        rules=["capture.autocast"],
        setup=lambda: {"x": _X.clone().requires_grad_(), "w": _W.clone().requires_grad_()},
        args=["x", "w"],
        program=_first_column_of_softmax,
        autocast=torch.bfloat16,
        backward=True,
        expect=[
            # bfloat16, as CPU autocast leaves the product and its softmax; without autocast
            # the compiled function would give float32
            Values("out0", _AUTOCAST_OUT),
            Layout("out0", dtype=torch.bfloat16),
            Values("x.grad", _AUTOCAST_X_GRAD),
            Values("w.grad", _AUTOCAST_W_GRAD),
        ],
    )
)


def _plus_ones(x):
    return x + torch.ones(3)


CASES.append(
    Case(
        name="capture.factory-ops-take-the-default-dtype",
        rules=["capture.default-dtype"],
        setup=lambda: {"x": torch.tensor([1.0, 2.0, 3.0])},
        args=["x"],
        program=_plus_ones,
        default_dtype=torch.float64,
        # eager: ones is float64 under that default, and float32 + float64 promotes to float64
        expect=[Values("out0", torch.tensor([2.0, 3.0, 4.0], dtype=torch.float64))],
    )
)


def _evaluation_block() -> torch.nn.Module:
    """Linear, batch norm with running statistics of its own, dropout: in evaluation mode."""
    block = torch.nn.Sequential(
        torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2), torch.nn.Dropout(0.5)
    )
    with torch.no_grad():
        block[0].weight.copy_(torch.tensor([[1.0, -1.0], [0.5, 2.0]]))
        block[0].bias.copy_(torch.tensor([0.0, 1.0]))
        block[1].running_mean.copy_(torch.tensor([0.5, -0.5]))
        block[1].running_var.copy_(torch.tensor([4.0, 0.25]))
    return block.eval()


def _evaluation_world():
    global _BLOCK
    _BLOCK = _evaluation_block()
    return {"x": torch.tensor([[3.0, 1.0], [-1.0, 2.0]]), "mean": _BLOCK[1].running_mean}


def _global_block(x):
    return _BLOCK(x)


# eager on a private copy: no dropout, batch norm by its running statistics
_EVALUATED = _evaluation_block()(torch.tensor([[3.0, 1.0], [-1.0, 2.0]])).detach()

CASES.append(
    Case(
        name="capture.module-in-evaluation-mode",
        rules=["capture.module-mode", "capture.lift"],
        setup=_evaluation_world,
        args=["x"],
        program=_global_block,
        expect=[Values("out0", _EVALUATED), Values("mean", [0.5, -0.5])],
    )
)


class _Scales(torch.nn.Module):
    """Multiplies by its weight."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor(3.0))

    def forward(self, x):
        return x * self.weight


class _Shifts(_Scales):
    """The same weight, added."""

    def forward(self, x):
        return x + self.weight


_SWAPPED = _Scales()


def _class_swapped_world(n: int):
    """Length 3: the module scales; length 4: its class is reassigned, so it shifts."""
    _SWAPPED.__class__ = _Scales if n == 3 else _Shifts
    return {"x": torch.arange(float(n))}


def _swapped_module(x):
    return _SWAPPED(x)


CASES.append(
    Case(
        name="capture.module-class-reassigned-compiles-again",
        rules=["capture.module-mode", "sizes.symbolic.per-call"],
        setup=_class_swapped_world,
        args=["x"],
        program=_swapped_module,
        # one plan with a symbolic length would serve length 4; the class it traced does not
        sizes=(3, 4),
        dynamic=True,
        expect=[
            AtSize(3, Values("out0", [0.0, 3.0, 6.0])),
            AtSize(4, Values("out0", [3.0, 4.0, 5.0, 6.0])),
            AtSize(4, PlansTraced(2)),
        ],
    )
)


def _returns_numbers_read(x):
    return x * 2, x.sum().item(), (x > 0).sum().item(), x.tolist()


CASES.append(
    Case(
        name="capture.returned-numbers-are-eager-numbers",
        rules=["capture.data-dependent.returned"],
        setup=lambda: {"x": torch.tensor([1.0, -3.0], requires_grad=True)},
        args=["x"],
        program=_returns_numbers_read,
        backward=True,
        # eager: the float sum -2.0, the int count 1 of positive elements, the floats 1.0 and
        # -3.0 of tolist(); only out0 carries a gradient: 2 for each element
        expect=[
            Values("out0", [2.0, -6.0]),
            Number("out1", -2.0),
            Number("out2", 1),
            Number("out3", 1.0),
            Number("out4", -3.0),
            Values("x.grad", [2.0, 2.0]),
        ],
    )
)


def _reads_then_writes(x):
    first = x[0].item()
    x.add_(1)
    return first, x[0].item()


CASES.append(
    Case(
        name="capture.returned-number-is-read-where-the-function-reads-it",
        rules=["capture.data-dependent.returned"],
        setup=lambda: {"x": torch.tensor([1.0, -3.0])},
        args=["x"],
        program=_reads_then_writes,
        # eager: 1.0 before the write, 2.0 after it
        expect=[Number("out0", 1.0), Number("out1", 2.0), Values("x", [2.0, -2.0])],
    )
)


def _returns_twice_the_sum_as_a_number(x):
    return x.sum().item() * 2


CASES.append(
    Case(
        name="capture.returned-arithmetic-on-a-number-read-raises",
        rules=["capture.data-dependent.returned-arithmetic", "boundary.failed-call"],
        setup=lambda: {"x": torch.tensor([1.0, -3.0])},
        args=["x"],
        program=_returns_twice_the_sum_as_a_number,
        # eager returns the float -4.0
        expect=[Raises(UnsupportedError, rule="capture.data-dependent.returned-arithmetic")],
        skip={"torch-eager": "eager returns the number"},
    )
)


def _compares(x, y):
    return (
        torch.equal(x, y),
        x.equal(x.clone()),
        torch.equal(x, x[:1]),
        torch.allclose(x, y),
        x.allclose(y, rtol=0.0, atol=0.0),
        torch.allclose(x / 0.0 * 0.0, x / 0.0 * 0.0, 1e-5, 1e-8, True),
    )


CASES.append(
    Case(
        name="capture.equal-and-allclose-return-eager-bools",
        rules=["capture.data-dependent.comparisons", "capture.data-dependent.returned"],
        setup=lambda: {"x": torch.tensor([1.0, 2.0]), "y": torch.tensor([1.0, 2.0000002])},
        args=["x", "y"],
        program=_compares,
        # eager: y differs from x in its last element by one float32 step (2.4e-7), within
        # allclose's default tolerance but not equal; x equals its clone, not its first element
        # (other sizes); NaN == NaN with equal_nan
        expect=[
            Number("out0", False),
            Number("out1", True),
            Number("out2", False),
            Number("out3", True),
            Number("out4", False),
            Number("out5", True),
        ],
    )
)


def _branch_on_equal(x, y):
    if torch.equal(x, y):
        return x * 2
    return -x


CASES.append(
    Case(
        name="capture.branch-on-equal-raises",
        rules=["capture.data-dependent.comparisons", "capture.data-dependent"],
        setup=lambda: {"x": torch.tensor([1.0, -3.0]), "y": torch.tensor([1.0, -3.0])},
        args=["x", "y"],
        program=_branch_on_equal,
        # eager: x equals y, so [2, -6]
        expect=[Raises(UnsupportedError, rule="capture.data-dependent")],
        skip={"torch-eager": "eager runs Python that branches on values"},
    )
)


def _branch_on_the_sum(x):
    if x.sum() > 0:
        return x * 2
    return -x


CASES.append(
    Case(
        name="capture.branch-on-a-value-raises",
        rules=["capture.data-dependent", "boundary.failed-call"],
        setup=lambda: {"x": torch.tensor([1.0, -3.0])},
        args=["x"],
        program=_branch_on_the_sum,
        # eager: the sum is -2, so [-1, 3]
        expect=[Raises(UnsupportedError, rule="capture.data-dependent")],
        skip={"torch-eager": "eager runs Python that branches on values"},
    )
)


def _zeros_sized_by_a_packed_sequence(x, lengths):
    x.add_(1)
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths)
    return torch.zeros(1, packed.batch_sizes[0], 3)  # as nn.LSTM starts from a packed sequence


CASES.append(
    Case(
        name="capture.packed-sequence-raises",
        rules=["capture.data-dependent", "boundary.failed-call"],
        setup=lambda: {"x": torch.ones(3, 2, 4), "lengths": torch.tensor([3, 2])},
        args=["x", "lengths"],
        # eager: the packed data holds 5 steps, the batch sizes are [2, 2, 1]: zeros of sizes
        # (1, 2, 3)
        program=_zeros_sized_by_a_packed_sequence,
        expect=[Raises(UnsupportedError, rule="capture.data-dependent")],
        skip={"torch-eager": "eager packs the sequence by the lengths' values"},
    )
)


def _split_by_a_tensor(x, indices):
    x.add_(1)
    return torch.tensor_split(x, indices)


def _split_by_a_written_tensor(x, indices):
    x.add_(1)
    indices.add_(1)
    return torch.tensor_split(x, indices)


CASES.append(
    Case(
        name="capture.tensor-split-by-a-tensor-the-function-wrote-raises",
        rules=["capture.data-dependent.input-values", "boundary.failed-call"],
        setup=lambda: {"x": torch.arange(6.0), "indices": torch.tensor([1, 4], device="cpu")},
        args=["x", "indices"],
        on_cpu=["indices"],  # as eager's tensor_split wants them
        # eager: pieces of 2, 3 and 1 elements, by the indices' values after the write
        program=_split_by_a_written_tensor,
        expect=[Raises(UnsupportedError, rule="capture.data-dependent")],
        skip={"torch-eager": "eager splits by the indices' values"},
    )
)

CASES.append(
    Case(
        name="capture.tensor-split-and-narrow-by-input-values-as-eager",
        rules=["capture.data-dependent.input-values"],
        setup=lambda: {
            "x": torch.arange(6.0),
            "indices": torch.tensor([1, 4], device="cpu"),
            "start": torch.tensor(3),
        },
        args=["x", "indices", "start"],
        on_cpu=["indices"],  # as eager's tensor_split wants them
        program=lambda x, indices, start: (
            *_split_by_a_tensor(x, indices),
            x.narrow(0, start, 2),
        ),
        # eager: x + 1 in pieces of 1, 3 and 2 elements, then its elements 3 and 4
        expect=[
            Values("out0", [1.0]),
            Values("out1", [2.0, 3.0, 4.0]),
            Values("out2", [5.0, 6.0]),
            Values("out3", [4.0, 5.0]),
            Values("x", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            Shares("x", "out3"),
        ],
    )
)


def _ctc_and_lstsq(log_probs, targets, input_lengths, target_lengths, a, b):
    ctc = F.ctc_loss(log_probs, targets, input_lengths, target_lengths, reduction="sum")
    solution = torch.linalg.lstsq(a, b, driver="gels").solution
    return ctc, solution


def _ctc_and_lstsq_world():
    return {
        "log_probs": torch.tensor(
            [[[-1.0, -0.5, -2.0]], [[-0.7, -1.2, -1.5]], [[-2.0, -0.3, -1.0]]]
        ).requires_grad_(),
        "targets": torch.tensor([[1, 2]]),
        "input_lengths": torch.tensor([3]),
        "target_lengths": torch.tensor([2]),
        "a": torch.tensor([[2.0, 1.0], [1.0, 3.0], [0.0, 1.0]]).requires_grad_(),
        "b": torch.tensor([[1.0], [2.0], [3.0]]),
    }


def _eager_ctc_and_lstsq():
    world = _ctc_and_lstsq_world()
    ctc, solution = _ctc_and_lstsq(*world.values())
    (ctc + solution.sum()).backward()
    return {
        "out0": ctc.detach(),
        "out1": solution.detach(),
        "log_probs.grad": world["log_probs"].grad,
        "a.grad": world["a"].grad,
    }


_CTC_AND_LSTSQ = _eager_ctc_and_lstsq()

CASES.append(
    Case(
        name="capture.ctc-loss-and-lstsq-shapes-from-their-arguments-as-eager",
        rules=[
            "capture.data-dependent.shapes-from-arguments",
            "capture.data-dependent.input-values",
        ],
        setup=_ctc_and_lstsq_world,
        args=list(_ctc_and_lstsq_world()),
        on_cpu=["input_lengths", "target_lengths"],
        program=_ctc_and_lstsq,
        backward=True,
        # eager's loss, solution (a 3x2 least squares by QR, laid out column-major in a
        # 3-row buffer) and gradients
        expect=[Values(name, value) for name, value in _CTC_AND_LSTSQ.items()]
        + [Layout("out1", shape=(2, 1), strides=(1, 3))],
    )
)

def _mean_ctc_loss(log_probs, targets, input_lengths, target_lengths):
    return F.ctc_loss(log_probs, targets, input_lengths, target_lengths)


def _mean_ctc_world():
    return {
        "log_probs": torch.tensor(
            [
                [[-1.0, -0.5, -2.0], [-0.4, -1.5, -1.8]],
                [[-0.7, -1.2, -1.5], [-1.1, -0.9, -1.4]],
                [[-2.0, -0.3, -1.0], [-0.6, -1.3, -1.6]],
            ]
        ).requires_grad_(),
        "targets": torch.tensor([[1, 2], [1, 0]]),
        "input_lengths": torch.tensor([3, 3]),
        "target_lengths": torch.tensor([2, 0]),
    }


def _eager_mean_ctc_loss():
    world = _mean_ctc_world()
    loss = _mean_ctc_loss(*world.values())
    loss.backward()
    return {"out0": loss.detach(), "log_probs.grad": world["log_probs"].grad}


CASES.append(
    Case(
        name="capture.ctc-loss-mean-divides-by-the-target-lengths-as-eager",
        rules=["capture.data-dependent.decompositions", "capture.data-dependent.input-values"],
        setup=_mean_ctc_world,
        args=list(_mean_ctc_world()),
        on_cpu=["input_lengths", "target_lengths"],
        program=_mean_ctc_loss,
        backward=True,
        # eager's loss and gradient: the mean of each sequence's loss over its target length,
        # the empty target's clamped to 1
        expect=[Values(name, value) for name, value in _eager_mean_ctc_loss().items()],
    )
)

CASES.append(
    Case(
        name="capture.lstsq-whose-residuals-depend-on-the-rank-raises",
        rules=["capture.data-dependent.shapes-from-arguments"],
        setup=lambda: {"a": torch.ones(3, 2), "b": torch.ones(3, 1)},
        args=["a", "b"],
        # eager: a has rank 1, so gelsd returns no residuals (they exist at full rank only)
        program=lambda a, b: torch.linalg.lstsq(a, b, driver="gelsd").residuals,
        expect=[Raises(UnsupportedError, rule="capture.data-dependent")],
        skip={"torch-eager": "eager finds the rank"},
    )
)


def _pairs_and_covariance(x):
    return torch.combinations(x[0], 2), torch.cov(x), torch.corrcoef(x)


def _pairs_and_covariance_world():
    return {"x": torch.tensor([[1.0, 2.0, 4.0], [0.5, -1.0, 3.0]]).requires_grad_()}


def _eager_pairs_and_covariance():
    world = _pairs_and_covariance_world()
    outs = _pairs_and_covariance(world["x"])
    sum(out.sum() for out in outs).backward()
    return {**{f"out{k}": out.detach() for k, out in enumerate(outs)}, "x.grad": world["x"].grad}


_PAIRS_AND_COVARIANCE = _eager_pairs_and_covariance()

CASES.append(
    Case(
        name="capture.combinations-cov-and-corrcoef-as-eager",
        rules=["capture.data-dependent.decompositions"],
        setup=_pairs_and_covariance_world,
        args=["x"],
        program=_pairs_and_covariance,
        backward=True,
        # eager's values: the pairs (1, 2), (1, 4), (2, 4); the covariance and correlation of
        # the two rows over three observations; the gradient of their sum
        expect=[Values(name, value) for name, value in _PAIRS_AND_COVARIANCE.items()]
        + [Layout("out0", shape=(3, 2), strides=(2, 1))],
    )
)

CASES.append(
    Case(
        name="capture.cov-with-weights-raises",
        rules=["capture.data-dependent.decompositions"],
        setup=lambda: {"x": torch.ones(2, 3), "weights": torch.tensor([1, 2, 1])},
        args=["x", "weights"],
        # eager checks the weights' values (none negative, a sum not zero) before using them
        program=lambda x, weights: torch.cov(x, fweights=weights),
        expect=[Raises(UnsupportedError, rule="capture.data-dependent")],
        skip={"torch-eager": "eager checks the weights' values"},
    )
)


def _put_at_a_mask_and_columns(x, mask, columns, value):
    return torch.index_put(x, (mask, columns), value).sin()


CASES.append(
    Case(
        name="capture.gradient-at-a-mask-and-integer-indices-raises",
        rules=["capture.data-dependent", "boundary.failed-call"],
        setup=lambda: {
            "x": torch.ones(4, 2, requires_grad=True),
            "mask": torch.tensor([True, False, True, False]),
            "columns": torch.tensor([0, 1]),
            "value": torch.tensor(3.0, requires_grad=True),
        },
        args=["x", "mask", "columns", "value"],
        # eager: value's gradient sums the output's gradient at (0, 0) and (2, 1), the mask's
        # rows paired with the columns: as many positions as the mask holds
        program=_put_at_a_mask_and_columns,
        expect=[Raises(UnsupportedError, rule="capture.data-dependent", match="index_put")],
        skip={
            "torch-eager": "eager reads the gradient at the mask's positions",
            "reference-eager": "the eager interpreter differentiates when the backward runs, "
            "where tracing the rule fails on the mask (not yet refused by name)",
        },
    )
)


def _reseeded_world():
    torch.manual_seed(5)  # the caller's generator, somewhere along its stream
    torch.rand(7)
    return {"x": torch.ones(3, requires_grad=True)}


def _reseeds(x):
    before = torch.rand(3)  # from the caller's state
    torch.manual_seed(42)
    return x * before, torch.randn(3)  # the second: eager's after the reseed, at every call


def _reads_reseeds_and_restores(x):
    state = torch.get_rng_state()
    torch.random.manual_seed(42)
    seeded = torch.randn(3)
    torch.set_rng_state(state)
    return x * torch.rand(3), seeded  # the first: the caller's stream, as if nothing happened


def _draw_after_the_call(world: dict) -> None:
    world["after"] = torch.rand(4)  # what the caller draws next sees the generator's state


def _eager_reseeding(program) -> dict:
    with torch.random.fork_rng():
        world = _reseeded_world()
        outputs = program(world["x"])
        return {"out0": outputs[0].detach(), "out1": outputs[1], "after": torch.rand(4)}


for _program in (_reseeds, _reads_reseeds_and_restores):
    _expected = _eager_reseeding(_program)
    CASES.append(
        Case(
            name=f"capture.rng-state-{_program.__name__[1:].replace('_', '-')}-as-eager",
            rules=["capture.rng-state", "ops.random"],
            setup=_reseeded_world,
            args=["x"],
            program=_program,
            backward=True,
            before_backward=_draw_after_the_call,
            expect=[Values(name, _expected[name]) for name in ["out0", "out1", "after"]],
        )
    )


def _thresholds_through_dynamo(x):
    # dynamic=True: Dynamo passes the floats to its graph as 0-d tensors read with .item()
    threshold = torch.compile(F.threshold, backend="aotspec", dynamic=True)
    return threshold(x, 0.5, 2.0) + threshold(x * 2, 0.25, -1.0)


def _threshold_world():
    return {"x": torch.tensor([0.75, 0.5, 0.1, -1.0], requires_grad=True)}


def _eager_thresholds():
    x = _threshold_world()["x"]
    out = F.threshold(x, 0.5, 2.0) + F.threshold(x * 2, 0.25, -1.0)
    out.sum().backward()
    return out.detach(), x.grad


_THRESHOLDS, _THRESHOLDS_GRAD = _eager_thresholds()

CASES.append(
    Case(
        name="capture.dynamo-numbers-are-the-users-values",
        rules=["capture.dynamo-numbers"],
        setup=_threshold_world,
        args=["x"],
        program=_thresholds_through_dynamo,
        backward=True,
        # the derivative compares x with each threshold: a symbol there raised
        expect=[Values("out0", _THRESHOLDS), Values("x.grad", _THRESHOLDS_GRAD)],
        skip={
            name: "the program compiles itself with torch.compile(backend='aotspec'), which "
            "torch-eager runs"
            for name in ("reference", "fast", "reference-eager", "torch.compile")
        },
    )
)


def _scaled_by_a_constant_copy(x):
    with torch.no_grad():
        y = x * 2  # a constant for autograd
    return (x * y).sum()


def _no_grad_write_into_a_view_input(v):
    with torch.no_grad():
        v.mul_(2)
    return v.view(3) * 1


def _view_input_world():
    b = torch.ones(3, requires_grad=True)
    return {"b": b, "v": b.as_strided((3,), (1,), 0)}


def _no_grad_write_and_read(v):
    with torch.no_grad():
        v.mul_(2)
        return v * 2


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


CASES += [
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
]


def _gaussian_nll_then_write(x, target, var):
    loss = F.gaussian_nll_loss(x, target, var)  # checks `torch.any(var < 0)`, raising if so
    target.add_(1)  # eager reaches it only when the check passes
    return loss


def _gaussian_world(var):
    return lambda: {
        "x": torch.tensor([1.0, 3.0], requires_grad=True),
        "target": torch.tensor([0.0, 1.0]),
        "var": torch.tensor(var, requires_grad=True),
    }


CASES.append(
    Case(
        name="capture.value-check-passing-runs-as-eager",
        rules=["capture.data-dependent.checks"],
        setup=_gaussian_world([1.0, 2.0]),
        args=["x", "target", "var"],
        program=_gaussian_nll_then_write,
        backward=True,
        # eager: the mean of 0.5 * (log(var) + (x - target)**2 / var) over [0.5, 0.5 * log(2) +
        # 1]; d/dx = 0.5 * (x - target) / var / 2 = [0.5, 0.5]; d/dvar = 0.25 * (1 / var -
        # (x - target)**2 / var**2) = [0, -0.125]; target written after the check
        expect=[
            Values("out0", 0.75 + 0.25 * math.log(2.0)),
            Values("x.grad", [0.5, 0.5]),
            Values("var.grad", [0.0, -0.125]),
            Values("target", [1.0, 2.0]),
        ],
    )
)

CASES.append(
    Case(
        name="capture.value-check-failing-raises-eager-error",
        rules=["capture.data-dependent.checks", "boundary.failed-call"],
        setup=_gaussian_world([1.0, -2.0]),
        args=["x", "target", "var"],
        program=_gaussian_nll_then_write,
        # eager raises before it writes target
        expect=[Raises(ValueError, match="var has negative entry/entries")],
    )
)


def _writes_then_checks(x, var):
    x.add_(1)
    if torch.any(var < 0):
        raise ValueError("var has negative entries")
    return x * var


CASES.append(
    Case(
        name="capture.value-check-after-a-write-raises",
        rules=["capture.data-dependent.checks"],
        setup=lambda: {"x": torch.tensor([1.0, 2.0]), "var": torch.tensor([1.0, -1.0])},
        args=["x", "var"],
        program=_writes_then_checks,
        # eager writes x to [2, 3], then raises its ValueError
        expect=[Raises(UnsupportedError, rule="capture.data-dependent.checks")],
        skip={"torch-eager": "eager writes x, then raises its ValueError"},
    )
)


def _a_leaf_view_and_a_view_of_it():
    base = torch.ones(4, 3)
    leaf = base[1:].requires_grad_()
    return {"base": base, "leaf": leaf, "view": leaf[0]}


def _writes_the_leaf_then_reads_its_view(leaf, view):
    with torch.no_grad():
        leaf.add_(1)
    return (view * leaf[0]).sum()


CASES.append(
    Case(
        name="capture.leaf-view-written-with-its-view-passed-is-refused",
        rules=["capture.leaf-view-writes", "boundary.failed-call"],
        setup=_a_leaf_view_and_a_view_of_it,
        args=["leaf", "view"],
        program=_writes_the_leaf_then_reads_its_view,
        expect=[
            Raises(UnsupportedError, rule="capture.leaf-view-writes", match="flat input 0")
        ],
        skip={"torch-eager": "eager runs it, the view's history regenerated from the root base"},
    )
)
