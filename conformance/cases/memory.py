"""Cases for specs/memory-model.md: layouts, extents, bounds, and the ledger's live/freed/peak.

Byte counts are worked out by hand from the rules: a float32 tensor of 4 elements is 16 bytes.
"""

import torch

from aotspec.errors import SpecViolation, UnsupportedError

from ..case import (
    EAGER_LEDGER,
    Case,
    Layout,
    LiveBytesAfter,
    PeakBytes,
    Raises,
    Shares,
    StorageBytes,
    Values,
)

resize = torch.ops.inductor.resize_storage_bytes_
set_ = torch.ops.aten.set_.source_Tensor


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


#: Weights that tell the positions of a dense 2x2 result apart.
_BY_POSITION = ((1.0, 10.0), (100.0, 1000.0))


def _csr_rows_weighted(v):
    rows, cols = torch.tensor([0, 2, 4]), torch.tensor([0, 1, 0, 1])
    return torch.sparse_csr_tensor(rows, cols, v, size=(2, 2)).to_dense() * torch.tensor(
        _BY_POSITION
    )


def _coo_duplicates_weighted(v):
    # positions (0, 1), (0, 1) again, (1, 0)
    indices = torch.tensor([[0, 0, 1], [1, 1, 0]])
    return torch.sparse_coo_tensor(indices, v, (2, 2)).to_dense() * torch.tensor(_BY_POSITION)


def _csr_returned(v):
    return torch.sparse_csr_tensor(torch.tensor([0, 2, 4]), torch.tensor([0, 1, 0, 1]), v, (2, 2))


def _csr_copied_into(v, x):
    rows, cols = torch.tensor([0, 2, 4]), torch.tensor([0, 1, 0, 1])
    x.copy_(torch.sparse_csr_tensor(rows, cols, v, size=(2, 2)))
    return x * 2


def _to_sparse_inside(x):
    return x.to_sparse().to_dense() * 2


def _dense_doubled(s):
    return s.to_dense() * 2


_EAGER_RUNS_SPARSE = {"torch-eager": "eager PyTorch runs sparse tensors"}


CASES += [
    Case(
        name="memory.sparse-csr-made-inside-densified",
        rules=["memory.layout.sparse-made-inside", "memory.layout.sparse-made-inside.to-dense"],
        setup=lambda: {"v": torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)},
        args=["v"],
        program=_csr_rows_weighted,
        backward=True,
        # eager: the dense matrix [[1, 2], [3, 4]] times the weights; each value's gradient is
        # the weight at its position
        expect=[
            Values("out0", [[1.0, 20.0], [300.0, 4000.0]]),
            Layout("out0", dtype=torch.float32, shape=(2, 2), strides=(2, 1)),
            Values("v.grad", [1.0, 10.0, 100.0, 1000.0]),
        ],
    ),
    Case(
        name="memory.sparse-coo-made-inside-sums-duplicates",
        rules=["memory.layout.sparse-made-inside.to-dense"],
        setup=lambda: {"v": torch.tensor([1.0, 2.0, 3.0], requires_grad=True)},
        args=["v"],
        program=_coo_duplicates_weighted,
        backward=True,
        # eager: position (0, 1) holds 1 + 2, position (1, 0) holds 3; both values at (0, 1)
        # get its weight, 10
        expect=[
            Values("out0", [[0.0, 30.0], [300.0, 0.0]]),
            Values("v.grad", [10.0, 10.0, 100.0]),
        ],
    ),
    Case(
        name="memory.sparse-made-inside-returned-raises",
        rules=["memory.layout.sparse-made-inside.no-escape"],
        setup=lambda: {"v": torch.tensor([1.0, 2.0, 3.0, 4.0])},
        args=["v"],
        program=_csr_returned,
        # eager returns a sparse CSR tensor reading v's storage
        expect=[Raises(UnsupportedError, rule="memory.layout.sparse-made-inside.no-escape")],
        skip=_EAGER_RUNS_SPARSE,
    ),
    Case(
        name="memory.sparse-made-inside-copied-into-input-raises",
        rules=["memory.layout.sparse-made-inside.no-escape", "boundary.failed-call"],
        setup=lambda: {"v": torch.tensor([1.0, 2.0, 3.0, 4.0]), "x": torch.zeros(2, 2)},
        args=["v", "x"],
        program=_csr_copied_into,
        # eager: x becomes [[1, 2], [3, 4]]; refused, x keeps its zeros (Raises checks it)
        expect=[Raises(UnsupportedError, rule="memory.layout.sparse-made-inside.no-escape")],
        skip=_EAGER_RUNS_SPARSE,
    ),
    Case(
        name="memory.sparse-tensor-made-by-to-sparse-raises",
        rules=["memory.layout.strided-only", "boundary.failed-call"],
        setup=lambda: {"x": torch.eye(2)},
        args=["x"],
        program=_to_sparse_inside,
        # eager: [[2, 0], [0, 2]]
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
