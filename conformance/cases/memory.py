"""Cases for specs/memory-model.md: layouts, extents, bounds, and the ledger's live/freed/peak.

Byte counts are worked out by hand from the rules: a float32 tensor of 4 elements is 16 bytes.
"""

import math

import torch

from aotspec.errors import SpecViolation, UnsupportedError

from ..case import (
    COMPILED_ONLY,
    EAGER_LEDGER,
    Case,
    Layout,
    Length,
    LiveBytesAfter,
    PeakBytes,
    Raises,
    Shares,
    StorageBytes,
    Values,
)

resize = torch.ops.inductor.resize_storage_bytes_
set_ = torch.ops.aten.set_.source_Tensor


def _chain_on_list(xs):
    a = xs[0].sin()
    return a.cos()


def _exp_chain_on_list(xs):
    a = xs[0].exp()  # exp saves its result, not the activation
    return a.exp()


def _activation_with_history():
    leaf = torch.zeros(4, requires_grad=True)
    return {"leaf": leaf, "xs": [leaf * 1]}


def _write_into_list(xs):
    xs[0].add_(1.0)
    return xs[0].sin()


def _chain(x):
    a = x.sin()
    b = a.cos()
    return b.exp()


def _pointwise_on_size_one_dim(x):
    return x.as_strided((4, 1), (1, 4)).add(2.0)


def _strided_view(x):
    return torch.as_strided(x, (2, 2), (4, 1), 5)


def _read_zero_storage(y, w):
    y.add_(1)  # a write that must not reach the caller, because the call fails
    return w.sum()


def _zero_storage_world():
    w = torch.ones(4)
    resize(w, 0)
    return {"y": torch.zeros(4), "w": w}


def _rebind(x, y):
    set_(x, y)
    return x + 1


def _activations_in_place(x):
    y = x.sin()
    y.relu_()  # an op of the table: relu, written into y's storage
    z = y.cos()
    z.exp2_()  # an ATen-valued op: captured as exp2, then a copy_ of its result into z
    return z * 2


def _shrink_to_zero(x):
    resize(x, 0)
    resize(x, 16)
    x.copy_(torch.ones(4))


CASES = [
    Case(
        name="memory.strided-view-reads-offset",
        rules=["memory.layout", "memory.alias"],
        setup=lambda: {"x": torch.arange(12.0)},
        args=["x"],
        program=_strided_view,
        expect=[
            Values("out0", [[5.0, 6.0], [9.0, 10.0]]),
            Layout("out0", dtype=torch.float32, shape=(2, 2), strides=(4, 1), offset=5),
            Shares("x", "out0"),
        ],
    ),
    Case(
        name="memory.read-of-zero-storage-raises",
        rules=[
            "memory.access-in-bounds",
            "memory.extent",
            "boundary.failed-call",
            "functionalize.errors-before-running",
        ],
        setup=_zero_storage_world,
        args=["y", "w"],
        program=_read_zero_storage,
        expect=[
            Raises(
                SpecViolation,
                rule="memory.access-in-bounds",
                match="needs 16 bytes but its storage holds 0",
            )
        ],
        skip={
            "torch-eager": "eager PyTorch segfaults reading a zero-byte storage on CPU "
            "(docs/torch-2.13.md section 2.2)"
        },
    ),
    Case(
        name="memory.chain-frees-at-last-use",
        rules=["memory.live", "memory.freed", "memory.peak", "memory.eager.last-use"],
        setup=lambda: {"x": torch.zeros(4)},
        args=["x"],
        program=_chain,
        expect=[
            Values("out0", torch.exp(torch.cos(torch.sin(torch.zeros(4))))),
            # inputs 16; sin makes a (32); cos makes b and drops a (48 -> 32); exp makes c, drops
            # b.
            LiveBytesAfter("sin", 32),
            LiveBytesAfter("cos", 32),
            LiveBytesAfter("exp", 32),
            PeakBytes(48),
        ],
        skip=EAGER_LEDGER,
    ),
    Case(
        name="memory.set-frees-old-storage",
        rules=["memory.freed", "aliasing.set.rebinds"],
        setup=lambda: {"x": torch.zeros(4), "y": torch.ones(4)},
        args=["x", "y"],
        program=_rebind,
        expect=[
            Values("out0", [2.0, 2.0, 2.0, 2.0]),
            Shares("x", "y"),
            # x's old 16 bytes die at set_: only y's storage is left.
            LiveBytesAfter("set_", 16),
            PeakBytes(32),
        ],
        skip=EAGER_LEDGER,
    ),
    Case(
        name="memory.resize-changes-live-bytes",
        rules=["memory.resize.live-bytes", "memory.storage"],
        setup=lambda: {"x": torch.zeros(4)},
        args=["x"],
        program=_shrink_to_zero,
        expect=[
            Values("x", [1.0, 1.0, 1.0, 1.0]),
            StorageBytes("x", 16),
            LiveBytesAfter("resize_storage_bytes_", 0),
            LiveBytesAfter("resize_storage_bytes__1", 16),
        ],
        skip=EAGER_LEDGER,
    ),
]


def _list_held_elsewhere():
    x = torch.zeros(4)
    return {"x": x, "xs": [x]}


CASES += [
    Case(
        name="boxed.caller-held-input-stays-alive",
        rules=["boxed.args-cleared", "memory.peak"],
        setup=_list_held_elsewhere,
        args=["xs"],
        program=_chain_on_list,
        expect=[
            Values("out0", [1.0, 1.0, 1.0, 1.0]),
            Length("xs", 1),
            # x 16 (the caller keeps it); sin 16 more; cos 16 more, then sin's dies: peak 48.
            PeakBytes(48),
        ],
    ),
    Case(
        name="boxed.stolen-list-freed-at-last-use",
        rules=["boxed.steal", "boxed.steal.freed-at-last-use", "boxed.args-cleared"],
        setup=lambda: {"xs": [torch.zeros(4)]},
        args=["xs"],
        program=_chain_on_list,
        steal=["xs"],
        expect=[
            Values("out0", [1.0, 1.0, 1.0, 1.0]),
            Length("xs", 0),
            # the stolen input (16) dies right after sin (32 -> 16); cos makes 16 more: peak 32.
            PeakBytes(32),
        ],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="boxed.stolen-activation-with-grad-freed-at-last-use",
        rules=["boxed.steal.freed-at-last-use", "autograd.saved-freed-in-backward"],
        setup=_activation_with_history,
        args=["xs"],
        program=_exp_chain_on_list,
        steal=["xs"],
        backward=True,
        expect=[
            Values("out0", torch.full((4,), math.e)),
            # d/dx exp(exp(x)) at 0: e * 1
            Values("leaf.grad", torch.full((4,), math.e)),
            Length("xs", 0),
            # the stolen activation (16) dies right after the first exp (32 -> 16), which is
            # saved; the second exp makes 16 more, also saved: peak 32.
            PeakBytes(32),
        ],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="boxed.stolen-tensor-written-is-rejected",
        rules=["boxed.steal.read-only", "boundary.failed-call"],
        setup=lambda: {"xs": [torch.zeros(4)]},
        args=["xs"],
        program=_write_into_list,
        steal=["xs"],
        # the spec refuses before the call: the list and its tensor are left as they were
        expect=[Raises(UnsupportedError, rule="boxed.steal.read-only")],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="boxed.steal-of-a-tuple-is-rejected",
        rules=["boxed.steal.lists-only"],
        setup=lambda: {"xs": (torch.zeros(4),)},
        args=["xs"],
        program=_chain_on_list,
        steal=["xs"],
        expect=[
            Raises(TypeError, rule="boxed.steal.lists-only", match="must be a list of tensors")
        ],
        skip=COMPILED_ONLY,
    ),
]

_ANGLES = torch.tensor([-0.5, 0.5, 1.0, 1.5])

CASES.append(
    Case(
        name="memory.in-place-activation-holds-one-storage",
        rules=["functionalize.writes.whole-private", "memory.live"],
        setup=lambda: {"x": _ANGLES.clone().requires_grad_()},
        args=["x"],
        program=_activations_in_place,
        backward=True,
        expect=[
            # d/dx 2 * 2^cos(relu(sin x)) = 2 * 2^c ln 2 * -sin(relu(sin x)) [sin x > 0] cos x,
            # with c = cos(relu(sin x))
            Values(
                "x.grad",
                2
                * torch.exp2(_ANGLES.sin().relu().cos())
                * torch.log(torch.tensor(2.0))
                * -_ANGLES.sin().relu().sin()
                * (_ANGLES.sin() > 0)
                * _ANGLES.cos(),
            ),
            # x 16; y 16, which relu_'s derivative saves (its result) and cos's (its input);
            # z 16, which exp2_'s derivative saves (its result); the output 16. The written
            # values are each storage's contents, never held beside a copy.
            LiveBytesAfter("mul", 64),
        ],
    )
)

CASES.append(
    Case(
        name="memory.size-one-strides-are-not-observed",
        rules=["memory.layout.unaddressed-strides"],
        setup=lambda: {"x": torch.arange(4.0)},
        args=["x"],
        program=_pointwise_on_size_one_dim,
        # eager gives strides (1, 4), PyTorch's meta kernel (1, 1): only the first one addresses.
        expect=[
            Values("out0", [[2.0], [3.0], [4.0], [5.0]]),
            Layout("out0", shape=(4, 1), strides=(1, 1)),
        ],
    )
)


def _sparse_rows_doubled(v):
    rows, cols = torch.tensor([0, 2, 4]), torch.tensor([0, 1, 0, 1])
    return torch.sparse_csr_tensor(rows, cols, v, size=(2, 2)).to_dense() * 2


def _dense_doubled(s):
    return s.to_dense() * 2


_EAGER_RUNS_SPARSE = {"torch-eager": "eager PyTorch runs sparse tensors"}

CASES += [
    Case(
        name="memory.sparse-tensor-made-inside-raises",
        rules=["memory.layout.strided-only", "boundary.failed-call"],
        setup=lambda: {"v": torch.tensor([1.0, 2.0, 3.0, 4.0])},
        args=["v"],
        program=_sparse_rows_doubled,
        # eager: [[2, 4], [6, 8]]
        expect=[Raises(UnsupportedError, rule="memory.layout.strided-only")],
        skip=_EAGER_RUNS_SPARSE,
    ),
    Case(
        name="memory.sparse-input-raises",
        rules=["memory.layout.strided-only"],
        setup=lambda: {"s": torch.eye(2).to_sparse()},
        args=["s"],
        program=_dense_doubled,
        # eager: [[2, 0], [0, 2]]
        expect=[Raises(UnsupportedError, rule="memory.layout.strided-only")],
        skip=_EAGER_RUNS_SPARSE,
    ),
]


def _activations_of_two_chunks(x):
    g = x * 1
    r, n = g.unsafe_chunk(2)  # two rows of one storage, as a GRU cell's gates
    r.sigmoid_()
    n.tanh_()
    return r * n


_ROWS = torch.tensor([[-1.0, 0.0, 1.0, 2.0], [0.5, -0.5, 1.5, -1.5]])

CASES.append(
    Case(
        name="memory.in-place-activations-of-chunks-hold-no-copy",
        rules=["functionalize.reads.unwritten", "memory.live"],
        setup=lambda: {"x": _ROWS.clone().requires_grad_()},
        args=["x"],
        program=_activations_of_two_chunks,
        backward=True,
        expect=[
            Values("out0", (_ROWS[0].sigmoid() * _ROWS[1].tanh())[None]),
            # d/dx0 = s (1 - s) tanh(x1); d/dx1 = s (1 - tanh(x1)^2), with s = sigmoid(x0)
            Values(
                "x.grad",
                torch.stack(
                    [
                        _ROWS[0].sigmoid() * (1 - _ROWS[0].sigmoid()) * _ROWS[1].tanh(),
                        _ROWS[0].sigmoid() * (1 - _ROWS[1].tanh() ** 2),
                    ]
                ),
            ),
            # after r * n: x 32; the two activations 16 + 16, which sigmoid_'s and tanh_'s
            # derivatives save and the product reads; the output 16. Eager holds the same 80:
            # x, the one 32-byte storage of g, and the output; no copy of g is kept per write.
            LiveBytesAfter("mul_1", 80),
        ],
        skip={
            "reference-eager": "the eager interpreter gives unsafe_split's outputs one version "
            "counter, where eager gives each its own, so its backward refuses sigmoid_'s result"
        },
    )
)


def _second_chunk_scaled_in_place(x, s):
    g = x * 1
    a, b = g.unsafe_chunk(2)
    b.mul_(s)  # mul's derivative reads b's old values, for s's gradient
    return a + b


_SCALE = torch.tensor([2.0, -1.0, 0.5, 3.0])

CASES.append(
    Case(
        name="memory.in-place-op-on-a-chunk-saves-a-copy-of-the-chunk",
        rules=["functionalize.writes.original-part", "memory.live"],
        setup=lambda: {"x": _ROWS.clone().requires_grad_(), "s": _SCALE.clone().requires_grad_()},
        args=["x", "s"],
        program=_second_chunk_scaled_in_place,
        backward=True,
        expect=[
            Values("out0", (_ROWS[0] + _ROWS[1] * _SCALE)[None]),
            Values("x.grad", torch.stack([torch.ones(4), _SCALE])),
            Values("s.grad", _ROWS[1]),
            # once the sum is made: x 32, s 16, the copy of the second row that mul_'s
            # derivative saves 16, the output 16. Eager holds the same 80 once the call returns:
            # g's 32-byte storage, which the saved copy does not keep, is freed.
            LiveBytesAfter("add", 80),
        ],
        skip={
            "reference-eager": "the eager interpreter gives unsafe_split's outputs one version "
            "counter, where eager gives each its own"
        },
    )
)
