"""Cases for specs/capture.md: what capture keeps, what it must not touch, and the boundary."""

import torch
import torch.nn.functional as F

from aotspec.errors import UnsupportedError

from ..case import Absent, Case, Identical, Raises, Separate, Shares, Values

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


def _custom_function_without_grad(x):
    with torch.no_grad():
        y = _HalfGradient.apply(x)
    return y * 2.0


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
        name="capture.custom-function-a-gradient-reaches-is-refused",
        rules=["capture.custom-function", "boundary.failed-call"],
        setup=lambda: {"x": torch.ones(3, requires_grad=True)},
        args=["x"],
        program=_custom_function,
        backward=True,
        expect=[Raises(UnsupportedError, rule="capture.custom-function", match="_HalfGradient")],
        # eager runs the Function's own backward: x.grad = 2 * 0.5 = [1, 1, 1]
        skip={"torch-eager": "eager PyTorch runs the Function's backward; the spec refuses it"},
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
]
