"""Cases for specs/saved-tensor-hooks.md: which saved tensors the hooks see, and where they run.

The hooks are lossy on purpose: pack rounds to bfloat16, so a gradient shows whether the value it
read went through the hooks. Expected gradients are worked out from the chain rule, with the
rounding applied by hand (`_rounded`) to exactly the tensors the rule says are packed.
"""

import torch

from aotspec.errors import HooksWarning, UnsupportedError

from ..case import (
    COMPILED_ONLY,
    AtSize,
    Case,
    FreedBy,
    PlansTraced,
    Raises,
    Steps,
    Values,
    Warns,
    eager_only,
)

torch.manual_seed(0)
_X, _W = torch.randn(6), torch.randn(6)
_A, _B = torch.randn(4, 5), torch.randn(5, 3)


def _pack_bf16(x):
    return x.to(torch.bfloat16)


def _unpack_f32(x):
    return x.to(torch.float32)


def _pack_with_dtype(x):
    return (x.dtype, x.to(torch.bfloat16))  # the dtype is a constant of the trace


def _unpack_to_dtype(packed):
    dtype, x = packed
    return x.to(dtype)


def _pack_f16(x):
    return x.to(torch.float16)


def _pack_reading_data(x):
    return x.to(torch.bfloat16) if x.sum().item() > 0 else x


_LOSSY = (_pack_bf16, _unpack_f32)


def _pack_doubled(n):
    return n * 2  # an int64 tensor stays int64


def _unpack_quartered(n):
    return n / 4  # true division: float32, the halved saved value


def _unpack_quartered_f64(n):
    return n.double() / 4


class _ScalesByItsSavedInt(torch.autograd.Function):
    """Saves only its int64 argument `n`, and scales the gradient by it."""

    @staticmethod
    def forward(ctx, x, n):
        ctx.save_for_backward(n)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        (n,) = ctx.saved_tensors
        return grad * n, None


def _scaled_by_saved_int(x, n):
    return _ScalesByItsSavedInt.apply(x, n).sum()


def _times_int(x, n):
    return (x * n).sum()  # mul saves n for x's gradient


def _int_case():
    return {"x": torch.ones(3, requires_grad=True), "n": torch.tensor([3, 5, -7])}


def _rounded(t):
    return t.to(torch.bfloat16).to(torch.float32)


def _product(x, w):
    return (x * w).sum()


def _halve_then_product(x, w):
    with torch.no_grad():
        w.mul_(0.5)  # an update of the parameter: the backward reads w as the call leaves it
    return (x * w).sum()


def _matmul_sin(a, b):
    return (a @ b).sin().sum()


def _product_under_inner_hooks(x, w):
    with torch.autograd.graph.saved_tensors_hooks(_pack_f16, _unpack_f32):
        return (x * w).sum()


def _leaves(**tensors):
    return {name: t.clone().requires_grad_() for name, t in tensors.items()}


def _matmul_sin_grads(a, b, read_mm):
    """Gradients of sum(sin(a @ b)) when the backward reads the saved a @ b through `read_mm`."""
    g = torch.cos(read_mm(a @ b))
    return g @ b.t(), a.t() @ g


_MM_GRADS = _matmul_sin_grads(_A, _B, _rounded)
_EAGER_ONLY_INNER = eager_only(
    "a compiled function rejects hooks entered inside it (hooks.compiled.traced)"
)

CASES = [
    Case(
        name="hooks.product-all",
        rules=[
            "hooks.filter.all",
            "hooks.eager.pack-on-save",
            "hooks.eager.unpack-on-use",
            "hooks.compiled.traced",
        ],
        setup=lambda: _leaves(x=_X, w=_W),
        args=["x", "w"],
        program=_product,
        hooks=_LOSSY,
        hooks_filter="all",
        backward=True,
        # mul saves x for w's gradient and w for x's: both are packed, so both gradients are
        # rounded.
        expect=[
            Values("out0", (_X * _W).sum()),
            Values("x.grad", _rounded(_W)),
            Values("w.grad", _rounded(_X)),
        ],
    ),
    Case(
        name="hooks.product-no-static",
        rules=["hooks.filter.no-static"],
        setup=lambda: {"x": _X.clone().requires_grad_(), "w": torch.nn.Parameter(_W.clone())},
        args=["x", "w"],
        program=_product,
        hooks=_LOSSY,
        hooks_filter="no_static",
        backward=True,
        # w is a Parameter: not packed, so x's gradient (which reads w) is exact.
        expect=[Values("x.grad", _W), Values("w.grad", _rounded(_X))],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="hooks.product-donated-selects-nothing",
        rules=["hooks.filter.donated", "hooks.filter.donated-empty"],
        setup=lambda: _leaves(x=_X, w=_W),
        args=["x", "w"],
        program=_product,
        hooks=_LOSSY,
        backward=True,
        # Only inputs are saved: donated selects nothing, the gradients are exact, and aotspec
        # warns.
        expect=[
            Values("x.grad", _W),
            Values("w.grad", _X),
            Warns(HooksWarning, rule="hooks.filter.donated-empty"),
        ],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="hooks.saved-matmul-intermediate-packed",
        rules=[
            "hooks.filter.donated",
            "hooks.place.pack-after-last-use",
            "hooks.place.unpack-before-first-use",
        ],
        setup=lambda: _leaves(a=_A, b=_B),
        args=["a", "b"],
        program=_matmul_sin,
        hooks=_LOSSY,
        backward=True,
        expect=[
            Values("out0", _matmul_sin(_A, _B)),
            # sin saves mm = a @ b, an intermediate: packed; mm's rule reads the inputs, not
            # packed.
            Values("a.grad", _MM_GRADS[0]),
            Values("b.grad", _MM_GRADS[1]),
            # pack right after mm's last forward use (sin), and mm dies there;
            Steps("forward", ["mm", "sin", "mm_packed", "sum_1"]),
            FreedBy("forward", made_by="mm", freed_by="mm_packed"),
            # unpack right before the first op reading mm (cos), and the packed value dies there.
            Steps("backward", ["mm_unpacked", "cos"]),
            FreedBy("backward", made_by="mm_packed", freed_by="mm_unpacked"),
        ],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="hooks.input-read-after-the-call-is-not-packed",
        rules=["hooks.filter.read-after-call", "autograd.saved-inputs"],
        setup=lambda: _leaves(x=_X, w=_W),
        args=["x", "w"],
        program=_halve_then_product,
        hooks=_LOSSY,
        hooks_filter="all",
        backward=True,
        # x is packed (w's gradient reads it rounded); the halved w is read from the caller's
        # tensor, exact (eager would pack the halved w: its x.grad is rounded)
        expect=[Values("w", _W * 0.5), Values("x.grad", _W * 0.5), Values("w.grad", _rounded(_X))],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="hooks.pack-returns-a-constant",
        rules=["hooks.compiled.constants"],
        setup=lambda: _leaves(x=_X, w=_W),
        args=["x", "w"],
        program=_product,
        hooks=(_pack_with_dtype, _unpack_to_dtype),
        hooks_filter="all",
        backward=True,
        expect=[Values("x.grad", _rounded(_W)), Values("w.grad", _rounded(_X))],
    ),
    Case(
        name="hooks.saves-only-what-the-rule-reads",
        rules=["hooks.eager.saved-set"],
        setup=lambda: {"x": _X.clone().requires_grad_(), "w": _W.clone()},
        args=["x", "w"],
        program=_product,
        hooks=_LOSSY,
        hooks_filter="all",
        backward=True,
        # Only x needs a gradient, and its rule reads w: w is saved (and packed), x is not.
        expect=[Values("x.grad", _rounded(_W))],
    ),
    Case(
        name="hooks.new-hooks-compile-again",
        rules=["hooks.compiled.respecialize"],
        setup=lambda: _leaves(x=_X, w=_W),
        args=["x", "w"],
        program=_product,
        hooks=_LOSSY,
        hooks_filter="all",
        warm_up_without_hooks=True,
        backward=True,
        # Had the plan compiled without hooks been reused, the gradients would be exact.
        expect=[Values("x.grad", _rounded(_W)), Values("w.grad", _rounded(_X))],
    ),
    Case(
        name="hooks.untraceable-pack-is-rejected",
        rules=["hooks.compiled.untraceable", "boundary.failed-call"],
        setup=lambda: _leaves(x=_X, w=_W),
        args=["x", "w"],
        program=_product,
        hooks=(_pack_reading_data, _unpack_f32),
        hooks_filter="all",
        expect=[
            Raises(UnsupportedError, rule="hooks.compiled.untraceable", match="_pack_reading_data")
        ],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="hooks.unpack-to-float-custom-function",
        rules=["hooks.compiled.unpack-dtype", "hooks.filter.all"],
        setup=_int_case,
        args=["x", "n"],
        program=_scaled_by_saved_int,
        hooks=(_pack_doubled, _unpack_quartered),
        hooks_filter="all",
        backward=True,
        # The backward reads unpack's float32 n * 2 / 4 = [1.5, 2.5, -3.5], as eager's does;
        # computed in int64, as the backward was traced, it would be whole numbers.
        expect=[Values("x.grad", [1.5, 2.5, -3.5])],
        skip={
            "reference-eager": "the eager interpreter refuses custom Functions a gradient "
            "reaches (capture.custom-function.eager-interpreter)"
        },
    ),
    Case(
        name="hooks.unpack-to-float-table-op",
        rules=["hooks.compiled.unpack-dtype"],
        setup=_int_case,
        args=["x", "n"],
        program=_times_int,
        hooks=(_pack_doubled, _unpack_quartered),
        hooks_filter="all",
        backward=True,
        expect=[Values("out0", 1.0), Values("x.grad", [1.5, 2.5, -3.5])],
    ),
    Case(
        name="hooks.unpack-to-float64-gradient-is-refused",
        rules=["hooks.compiled.unpack-dtype.refused", "boundary.failed-call"],
        setup=_int_case,
        args=["x", "n"],
        program=_times_int,
        hooks=(_pack_doubled, _unpack_quartered_f64),
        hooks_filter="all",
        backward=True,
        # mul's derivative for x would compute in float64 where it was traced in float32 (eager's
        # engine casts x's gradient to float32: [1.5, 2.5, -3.5]).
        expect=[Raises(UnsupportedError, rule="hooks.compiled.unpack-dtype.refused")],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="hooks.innermost-pair-applies",
        rules=["hooks.eager.innermost"],
        setup=lambda: _leaves(x=_X, w=_W),
        args=["x", "w"],
        program=_product_under_inner_hooks,
        hooks=_LOSSY,
        backward=True,
        # The inner pair rounds to float16, not bfloat16.
        expect=[
            Values("x.grad", _W.to(torch.float16).float()),
            Values("w.grad", _X.to(torch.float16).float()),
        ],
        skip={
            **_EAGER_ONLY_INNER,
            "reference-eager": "a captured graph does not record which ops ran inside a hooks "
            "context entered in it",
        },
    ),
    Case(
        name="hooks.hooks-inside-a-compiled-function-are-rejected",
        rules=["hooks.compiled.traced", "boundary.failed-call"],
        setup=lambda: _leaves(x=_X, w=_W),
        args=["x", "w"],
        program=_product_under_inner_hooks,
        expect=[Raises(UnsupportedError, rule="hooks.compiled.traced")],
        skip=COMPILED_ONLY,
    ),
]


def _ramps(n):
    """x and w of size n, as leaves, whose values bfloat16 rounds."""
    return {
        "x": torch.linspace(-1.3, 2.7, n).requires_grad_(),
        "w": torch.linspace(0.3, 3.1, n).requires_grad_(),
    }


#: Two sizes of x and w, one compiled function called at each in turn.
_HOOKS_SIZES = (4, 8)

CASES.append(
    Case(
        name="hooks.product-all-at-each-size",
        rules=[
            "hooks.filter.all",
            "hooks.eager.pack-on-save",
            "hooks.compiled.traced",
            "sizes.symbolic.scope",
        ],
        setup=_ramps,
        args=["x", "w"],
        program=_product,
        hooks=_LOSSY,
        hooks_filter="all",
        backward=True,
        sizes=_HOOKS_SIZES,
        dynamic=True,
        # at each size, as eager: mul saves x and w, both packed, so both gradients are rounded;
        # with hooks active, each size is planned at its own sizes
        expect=[
            *[
                AtSize(n, expectation)
                for n, world in ((n, _ramps(n)) for n in _HOOKS_SIZES)
                for expectation in (
                    Values("out0", (world["x"] * world["w"]).sum().detach()),
                    Values("x.grad", _rounded(world["w"].detach())),
                    Values("w.grad", _rounded(world["x"].detach())),
                )
            ],
            *[AtSize(n, PlansTraced(k)) for k, n in enumerate(_HOOKS_SIZES, start=1)],
        ],
    )
)


def _matrices(rows):
    """a of `rows` rows by 5, b 5 by 3, as leaves, values bfloat16 rounds."""
    a = torch.linspace(-1.7, 1.3, rows * 5).reshape(rows, 5)
    return _leaves(a=a, b=torch.linspace(-0.9, 1.1, 15).reshape(5, 3))


#: Rows of a, one compiled function called at each in turn.
_ROWS_SIZES = (4, 7)

CASES.append(
    Case(
        name="hooks.saved-matmul-intermediate-packed-at-each-size",
        rules=["hooks.place.pack-after-last-use", "hooks.place.unpack-before-first-use"],
        setup=_matrices,
        args=["a", "b"],
        program=_matmul_sin,
        hooks=_LOSSY,
        backward=True,
        sizes=_ROWS_SIZES,
        dynamic=True,
        expect=[
            # at each size, as at one: mm is packed right after sin and dies there, and
            # unpacked right before cos, where the packed value dies
            Steps("forward", ["mm", "sin", "mm_packed", "sum_1"]),
            FreedBy("forward", made_by="mm", freed_by="mm_packed"),
            Steps("backward", ["mm_unpacked", "cos"]),
            FreedBy("backward", made_by="mm_packed", freed_by="mm_unpacked"),
            *[
                AtSize(rows, Values(name, grad))
                for rows, world in ((rows, _matrices(rows)) for rows in _ROWS_SIZES)
                for name, grad in zip(
                    ("a.grad", "b.grad"),
                    _matmul_sin_grads(world["a"].detach(), world["b"].detach(), _rounded),
                    strict=True,
                )
            ],
        ],
        skip=COMPILED_ONLY,
    )
)
