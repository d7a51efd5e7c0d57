"""Cases for specs/aliasing.md: views, in-place ops, copy_ versus set_, aliased arguments."""

import torch

from aotspec.errors import UnsupportedError

from ..case import (
    COMPILED_ONLY,
    Absent,
    Case,
    History,
    Identical,
    Layout,
    Raises,
    RequiresGrad,
    Separate,
    Shares,
    StorageBytes,
    Values,
    Version,
    eager_only,
)
from ._autograd_common import (
    _EAGER_INTERPRETER_KEEPS_HISTORIES,
    _FSDP,
    _regather,
    _resize,
    _sharded_world,
)

set_ = torch.ops.aten.set_.source_Tensor
resize_storage_bytes_ = torch.ops.inductor.resize_storage_bytes_


def _base_and_alias():
    x = torch.zeros(4)
    return {"x": x, "x_alias": x.view(2, 2), "y": torch.arange(4.0)}


def _write_through_view(x):
    middle = x[1:3]
    middle.add_(1)
    return middle


def _return_view(x):
    return x.view(2, 2)


def _copy_into(x, y):
    x.copy_(y)


def _set_to(x, y):
    set_(x, y)


def _set_then_write_source(x, y):
    set_(x, y)
    y.add_(10)


def _set_then_write_target(x, y):
    set_(x, y)
    x.mul_(2)


def _write_expanded(x):
    x.expand(2, 4).add_(1)


def _aliased_arguments():
    base = torch.arange(4.0)
    return {"base": base, "a": base, "b": base[1:3]}


def _write_one_read_other(a, b):
    b.mul_(10)
    return a.clone()


CASES = [
    Case(
        name="aliasing.inplace-on-view-writes-base",
        rules=[
            "aliasing.inplace.writes-through",
            "aliasing.view.shares-storage",
            "memory.alias",
            "functionalize.writes",
            "functionalize.epilogue.data",
        ],
        setup=lambda: {"x": torch.zeros(4)},
        args=["x"],
        program=_write_through_view,
        expect=[
            Values("x", [0.0, 1.0, 1.0, 0.0]),
            Values("out0", [1.0, 1.0]),
            Layout("out0", shape=(2,), strides=(1,), offset=1),
            Shares("x", "out0"),
        ],
    ),
    Case(
        name="aliasing.returned-view-of-input",
        rules=["aliasing.view.of-input", "aliasing.view.shares-storage", "functionalize.outputs"],
        setup=lambda: {"x": torch.arange(4.0)},
        args=["x"],
        program=_return_view,
        expect=[
            Values("out0", [[0.0, 1.0], [2.0, 3.0]]),
            Layout("out0", strides=(2, 1)),
            Shares("x", "out0"),
        ],
    ),
    Case(
        name="aliasing.copy-seen-through-alias",
        rules=["aliasing.copy.writes-storage", "functionalize.epilogue.data"],
        setup=_base_and_alias,
        args=["x", "y"],
        program=_copy_into,
        expect=[
            Values("x", [0.0, 1.0, 2.0, 3.0]),
            Values("x_alias", [[0.0, 1.0], [2.0, 3.0]]),
            Shares("x", "x_alias"),
            Separate("x", "y"),
        ],
    ),
    Case(
        name="aliasing.set-not-seen-through-old-alias",
        rules=["aliasing.set.rebinds", "functionalize.epilogue.set"],
        setup=_base_and_alias,
        args=["x", "y"],
        program=_set_to,
        expect=[
            Values("x", [0.0, 1.0, 2.0, 3.0]),
            Values("x_alias", [[0.0, 0.0], [0.0, 0.0]]),
            Shares("x", "y"),
            Separate("x", "x_alias"),
        ],
    ),
    Case(
        name="aliasing.set-then-write-source",
        rules=[
            "aliasing.set.later-writes",
            "aliasing.set.rebinds",
            "functionalize.set.rebinds-cell",
        ],
        setup=_base_and_alias,
        args=["x", "y"],
        program=_set_then_write_source,
        expect=[
            Values("x", [10.0, 11.0, 12.0, 13.0]),
            Values("y", [10.0, 11.0, 12.0, 13.0]),
            Values("x_alias", [[0.0, 0.0], [0.0, 0.0]]),
            Shares("x", "y"),
        ],
    ),
    Case(
        name="aliasing.set-then-write-target",
        rules=["aliasing.set.later-writes", "functionalize.epilogue.set"],
        setup=_base_and_alias,
        args=["x", "y"],
        program=_set_then_write_target,
        expect=[
            # PyTorch 2.13's aot_function loses this aliasing (docs/torch-2.13.md section 3.2);
            # eager keeps it.
            Shares("x", "y"),
            Values("y", [0.0, 2.0, 4.0, 6.0]),
            Values("x", [0.0, 2.0, 4.0, 6.0]),
            Values("x_alias", [[0.0, 0.0], [0.0, 0.0]]),
        ],
    ),
    Case(
        name="aliasing.write-into-expanded-raises",
        rules=[
            "aliasing.inplace.no-overlapping-write",
            "boundary.failed-call",
            "functionalize.errors-before-running",
        ],
        setup=lambda: {"x": torch.ones(4)},
        args=["x"],
        program=_write_expanded,
        expect=[Raises(RuntimeError, match="more than one element of the written-to tensor")],
    ),
    Case(
        name="aliasing.aliased-arguments",
        rules=[
            "aliasing.inputs.shared-storage",
            "boundary.import",
            "functionalize.storage-values",
        ],
        setup=_aliased_arguments,
        args=["a", "b"],
        program=_write_one_read_other,
        expect=[
            Values("out0", [0.0, 10.0, 20.0, 3.0]),
            Values("base", [0.0, 10.0, 20.0, 3.0]),
            Values("b", [10.0, 20.0]),
            Shares("a", "b"),
            Separate("a", "out0"),
        ],
    ),
]


def _shrunk_source():
    source = torch.arange(6.0).reshape(2, 3)
    torch.ops.inductor.resize_storage_bytes_(source, 8)  # keeps 2 of its 6 floats
    return {"x": torch.zeros(4), "source": source}


CASES.append(
    Case(
        name="aliasing.set-grows-a-shrunk-source-storage",
        rules=["aliasing.set.grows-storage", "aliasing.set.rebinds"],
        setup=_shrunk_source,
        args=["x", "source"],
        program=_set_to,
        skip=eager_only(
            "compiled programs reject set_ growing a storage (the case after this one)"
        ),
        expect=[
            StorageBytes("source", 24),
            StorageBytes("x", 24),
            Layout("x", shape=(2, 3), strides=(3, 1)),
            Shares("x", "source"),
        ],
    )
)


CASES += [
    Case(
        name="aliasing.compiled-set-may-not-grow-a-storage",
        rules=["aliasing.set.grows-storage", "functionalize.errors-before-running"],
        setup=_shrunk_source,
        args=["x", "source"],
        program=_set_to,
        expect=[Raises(UnsupportedError, rule="aliasing.set.grows-storage")],
        skip=COMPILED_ONLY,
    ),
]


# ---------------------------------------------------------------- in-place metadata ops


def _two_by_three_and_alias():
    x = torch.arange(6.0).reshape(2, 3).clone()
    return {"x": x, "x_alias": x.view(6)}


def _relay_out(x):
    x.t_()  # (3, 2), strides (1, 3)
    x.unsqueeze_(0)
    x.squeeze_(0)
    x.unsqueeze_(2)
    x.squeeze_()
    x.unsqueeze_(0)
    x.squeeze_((0,))
    return x, x * 10


def _swap_and_restride(x, y):
    x.swapdims_(0, 1)
    y.as_strided_((2,), (2,), 1)
    return x + 0, y * 1


def _zero_storage():
    x = torch.ones(4)
    resize_storage_bytes_(x, 0)
    return {"x": x}


def _unsqueeze_(x):
    x.unsqueeze_(0)


def _resize_and_resize_as(x, y, template):
    x.resize_(2, 2)
    torch.resize_as_(y, template)
    return x * 10, y + 0


def _arange_with_an_offset_view():
    base = torch.arange(8.0)
    return {"base": base, "x": base[2:], "y": torch.arange(6.0), "template": torch.ones(3, 2)}


def _grow_a_copy(x):
    y = x.clone()
    y.resize_(3, 3)  # 6 elements to 9: the storage grows; its last 3 are unspecified until
    y[2].fill_(7.0)  # written
    return y


def _grow_an_input(x):
    x.resize_(3, 3)
    x[2].fill_(7.0)


def _grow_a_detached_alias(w, d):
    d.resize_(3, 3)
    return w * 2


def _resize_all_to_their_own_sizes(x, element, y):
    x.resize_(4, 3)
    element.resize_(())
    y.resize_(4, 3, memory_format=torch.contiguous_format)
    return x + 1, element * 2


def _transposed_and_an_element():
    base = torch.arange(4.0)
    return {
        "matrix": (matrix := torch.arange(12.0).reshape(3, 4)),
        "x": matrix.t(),
        "base": base,
        "element": base.as_strided((), (), 2),
        "y": torch.arange(12.0).reshape(3, 4).t(),
    }


CASES.append(
    Case(
        name="aliasing.resize-to-its-own-sizes-changes-nothing",
        rules=["aliasing.resize.same-sizes", "functionalize.epilogue.version"],
        setup=_transposed_and_an_element,
        args=["x", "element", "y"],
        program=_resize_all_to_their_own_sizes,
        # eager: the first two resize_ calls return at once: x stays transposed (so does x + 1,
        # which follows its layout); the memory format relays y out contiguously, reading
        # its storage in order; no counter advances
        expect=[
            Layout("x", shape=(4, 3), strides=(1, 4), offset=0),
            Layout("out0", shape=(4, 3), strides=(1, 4), offset=0),
            Values("out0", torch.arange(1.0, 13.0).reshape(3, 4).t()),
            Values("out1", 4.0),
            Layout("element", shape=(), strides=(), offset=2),
            Version("x", 0),
            Version("matrix", 0),
            Version("element", 0),
            Version("base", 0),
            Layout("y", shape=(4, 3), strides=(3, 1), offset=0),
            Values("y", torch.arange(12.0).reshape(4, 3)),
            Version("y", 0),
        ],
        skip={
            "reference-eager": "the eager interpreter advances a counter for the as_strided_ "
            "a resize_ in a memory format is traced as (r[boundary.export.versions])"
        },
    )
)

CASES += [
    Case(
        name="aliasing.resize-relays-out-the-argument",
        rules=["aliasing.resize.relayout", "functionalize.epilogue.metadata"],
        setup=_arange_with_an_offset_view,
        args=["x", "y", "template"],
        program=_resize_and_resize_as,
        # eager: x reads base from its offset 2 as a contiguous (2, 2), base keeps its layout;
        # y reads its 6 elements as the template's (3, 2); no storage changes size
        expect=[
            Layout("x", shape=(2, 2), strides=(2, 1), offset=2),
            Values("x", [[2.0, 3.0], [4.0, 5.0]]),
            Values("out0", [[20.0, 30.0], [40.0, 50.0]]),
            Layout("base", shape=(8,), strides=(1,), offset=0),
            StorageBytes("base", 32),  # 8 float32
            Shares("x", "base"),
            Layout("y", shape=(3, 2), strides=(2, 1), offset=0),
            Values("out1", [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]),
            StorageBytes("y", 24),  # 6 float32
        ],
    ),
    Case(
        name="aliasing.resize-grows-a-storage-the-program-made",
        rules=["aliasing.resize.grows-storage", "resize.compiled.grows-made"],
        setup=lambda: {"x": torch.arange(6.0)},
        args=["x"],
        program=_grow_a_copy,
        # eager: the copy's storage grows from 24 to 36 bytes (9 float32) keeping its 6 values;
        # the program writes the other 3
        expect=[
            Layout("out0", shape=(3, 3), strides=(3, 1), offset=0),
            Values("out0", [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [7.0, 7.0, 7.0]]),
            StorageBytes("out0", 36),
            Values("x", [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
        ],
    ),
    Case(
        name="aliasing.resize-grows-an-input-storage",
        rules=["aliasing.resize.grows-storage", "resize.compiled.grows-inputs"],
        setup=lambda: (lambda x: {"x": x, "x_alias": x[1:4]})(torch.arange(6.0)),
        args=["x"],
        program=_grow_an_input,
        # eager: x's storage grows from 24 to 36 bytes (9 float32), keeping its 6 values, and
        # the alias the caller kept sees the one storage, its layout unchanged
        expect=[
            Layout("x", shape=(3, 3), strides=(3, 1), offset=0),
            Values("x", [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [7.0, 7.0, 7.0]]),
            StorageBytes("x", 36),
            Shares("x", "x_alias"),
            Layout("x_alias", shape=(3,), strides=(1,), offset=1),
            Values("x_alias", [1.0, 2.0, 3.0]),
        ],
    ),
    Case(
        name="aliasing.resize-growing-a-storage-an-input-requiring-grad-reads-is-refused",
        rules=["resize.compiled.grows-inputs", "resize.compiled.zero-only"],
        setup=lambda: (lambda w: {"w": w, "d": w.detach()})(torch.ones(6, requires_grad=True)),
        args=["w", "d"],
        program=_grow_a_detached_alias,
        # eager: d's storage, which w reads, grows from 24 to 36 bytes
        expect=[Raises(UnsupportedError, rule="resize.compiled.zero-only", match="24 to 36")],
        skip=COMPILED_ONLY,
    ),
]


CASES += [
    Case(
        name="aliasing.metadata-ops-relay-out-the-argument",
        rules=[
            "aliasing.metadata.relayout",
            "functionalize.metadata.cell",
            "functionalize.epilogue.metadata",
        ],
        setup=_two_by_three_and_alias,
        args=["x"],
        program=_relay_out,
        # eager: x is x.t() on its own storage; the alias keeps its layout and every value
        expect=[
            Identical("out0", "x"),
            Layout("x", shape=(3, 2), strides=(1, 3), offset=0),
            Values("x", [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]),
            Values("out1", [[0.0, 30.0], [10.0, 40.0], [20.0, 50.0]]),
            Layout("x_alias", shape=(6,), strides=(1,), offset=0),
            Values("x_alias", [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
            Shares("x", "x_alias"),
        ],
    ),
    Case(
        name="aliasing.swapdims-and-as-strided-in-place",
        rules=["aliasing.metadata.relayout", "functionalize.epilogue.metadata"],
        setup=lambda: {"x": torch.arange(6.0).reshape(2, 3).clone(), "y": torch.arange(4.0)},
        args=["x", "y"],
        program=_swap_and_restride,
        # swapdims_ is transpose_; as_strided_'s offset counts from the storage's start
        expect=[
            Layout("x", shape=(3, 2), strides=(1, 3), offset=0),
            Values("out0", [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]),
            Layout("y", shape=(2,), strides=(2,), offset=1),
            Values("y", [1.0, 3.0]),
            Values("out1", [1.0, 3.0]),
        ],
    ),
    Case(
        name="aliasing.metadata-op-beyond-the-storage-raises",
        rules=["aliasing.metadata.relayout"],
        setup=_zero_storage,
        args=["x"],
        program=_unsqueeze_,
        # eager: setStorage: sizes [1, 4], ... out of bounds for storage of size 0
        expect=[Raises(RuntimeError, match="out of bounds")],
    ),
]


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
]
