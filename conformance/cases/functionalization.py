"""Cases for specs/functionalization.md: writes replayed on private values, reads after writes,
metadata ops, the epilogue that writes a caller's tensors back, and what is refused before running.

Expected observables come from the rules and from eager PyTorch.
"""

import torch

from aotspec.errors import UnsupportedError

from ..case import (
    COMPILED_ONLY,
    AtSize,
    Case,
    Identical,
    Layout,
    LiveBytesAfter,
    PeakBytes,
    PlansTraced,
    Raises,
    RequiresGrad,
    Separate,
    Shares,
    StorageBytes,
    Values,
    Version,
    ViewOf,
)
from ._autograd_common import _leaves
from .aliasing import _two_by_three_and_alias, resize_storage_bytes_, set_
from .ops import _Z, _opaque_program
from .resize import resize


def _activations_in_place(x):
    y = x.sin()
    y.relu_()  # an op of the table: relu, written into y's storage
    z = y.cos()
    z.exp2_()  # an ATen-valued op: captured as exp2, then a copy_ of its result into z
    return z * 2


_ANGLES = torch.tensor([-0.5, 0.5, 1.0, 1.5])


def _activations_of_two_chunks(x):
    g = x * 1
    r, n = g.unsafe_chunk(2)  # two rows of one storage, as a GRU cell's gates
    r.sigmoid_()
    n.tanh_()
    return r * n


_ROWS = torch.tensor([[-1.0, 0.0, 1.0, 2.0], [0.5, -0.5, 1.5, -1.5]])


def _second_chunk_scaled_in_place(x, s):
    g = x * 1
    a, b = g.unsafe_chunk(2)
    b.mul_(s)  # mul's derivative reads b's old values, for s's gradient
    return a + b


_SCALE = torch.tensor([2.0, -1.0, 0.5, 3.0])


def _write_through_real_views(x):
    torch.view_as_real(x).mul_(2)
    x.imag.add_(1)
    return x * 1


def _ones_and_alias():
    x = torch.ones(4)
    return {"x": x, "x_alias": x.view(2, 2), "y": torch.arange(4.0)}


def _mutate_then_set(x, y):
    x.mul_(2)
    set_(x, y)


def _transpose_then_write_a_row(x):
    x.t_()
    x[0].mul_(10)  # row 0 of the transpose: elements 0 and 3 of the storage


def _two_views_of_one_base():
    base = torch.arange(4.0)
    return {"base": base, "a": base.view(2, 2), "b": base.view(2, 2)}


def _transpose_one(a, b):
    a.t_()
    return a + b


def _zeros_and_two_by_three():
    return {"x": torch.zeros(4), "y": torch.arange(6.0).reshape(2, 3).clone()}


def _set_then_transpose(x, y):
    set_(x, y)
    x.t_()


def _one_storage_two_objects():
    x = torch.arange(4.0)
    return {"x": x, "v": x.view(4)}


def _unsqueeze_then_free(v, x):
    v.unsqueeze_(0)
    resize_storage_bytes_(x, 0)


def _gather_sum_free(w, src):
    resize(w, 64)
    w.copy_(src)
    total = w.sum()
    resize(w, 0)
    return total


def _zero_storage_vector():
    w = torch.zeros(16)
    resize(w, 0)
    return {"w": w, "src": torch.arange(16.0)}


def _write_then_first_read_without_grad(x):
    v = torch.cat([x, x])
    v.mul_(2)
    with torch.no_grad():
        v * 2  # the first read of v after the write
    return v.neg()


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


def _write_into_another_chunk(x):
    t = torch.zeros(4)
    head = t[:2]
    head.add_(1)  # written first, so what head reads is the values written into it
    t[2:].copy_(x)  # touches none of head's bytes, but gives t's contents x's history
    return (head * 2,)


def _copy_into_no_elements(x):
    t = torch.zeros(0, 2)
    t.copy_(x)  # writes no byte, but records the copy: t now has x's history
    return (t * t,)


def _clone_with_middle_columns_scaled(x, w):
    y = x.clone()
    y[:, 1:3].mul_(w)
    return y, y[0], y


def _written_zeros_viewed_as_they_are(x):
    y = torch.zeros(4)
    y.add_(x)
    return y.view(4), y


def _double_in_place(world):
    world["out0"].mul_(2)


def _detach_in_place(world):
    world["out0"].detach_()


def _copy_of_a_number_into_no_element(x, s):
    t = x * 2  # a result with no elements, on a storage of 0 bytes
    t.copy_(s * 1)  # broadcasts a 0-dim value into no element: writes nothing
    return (t,)


def _square_non_leaf_and_ones():
    p = torch.arange(4.0).reshape(2, 2).requires_grad_()
    return {"p": p, "x": p * 1, "y": torch.ones(2, 2)}


def _set_without_grad_then_transpose(x, y):
    with torch.no_grad():
        x.set_(y)
    x.t_()
    return x * 2


def _x_and_w():
    return _leaves(
        x=torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
        w=torch.tensor([[2.0, 3.0], [4.0, 5.0]]),
    )


CASES = [
    Case(
        name="functionalize.an-op-result-written-in-part-is-no-view",
        rules=["functionalize.outputs.own", "functionalize.outputs"],
        setup=_x_and_w,
        args=["x", "w"],
        program=_clone_with_middle_columns_scaled,
        backward=True,
        before_backward=_double_in_place,
        skip={
            "reference-eager": "the eager interpreter's outputs are torch tensors of their own, "
            "not views of one another (functionalize.outputs.own)"
        },
        # eager: y is no view, y[0] a view of y, and y returned twice is one object; y.mul_(2)
        # after the call doubles them all, and the backward of sum(y) + sum(y[0]) + sum(y) goes
        # through the doubling: 6 on row 0, 4 on row 1
        expect=[
            ViewOf("out0", None),
            ViewOf("out1", "out0"),
            Identical("out0", "out2"),
            Values("out0", [[2.0, 8.0, 18.0], [8.0, 40.0, 60.0]]),
            Values("out1", [2.0, 8.0, 18.0]),
            Values("x.grad", [[6.0, 12.0, 18.0], [4.0, 16.0, 20.0]]),
            Values("w.grad", [[12.0, 18.0], [20.0, 24.0]]),
        ],
    ),
    Case(
        name="functionalize.an-op-result-and-a-view-laid-out-alike",
        rules=["functionalize.outputs.own", "functionalize.outputs"],
        setup=lambda: _leaves(x=torch.tensor([1.0, 2.0, 3.0, 4.0])),
        args=["x"],
        program=_written_zeros_viewed_as_they_are,
        skip={
            "reference-eager": "the eager interpreter's outputs are torch tensors of their own, "
            "not views of one another (functionalize.outputs.own)"
        },
        # eager: y.view(4) is a view of y, though laid out as y is; y is none
        expect=[
            ViewOf("out0", "out1"),
            ViewOf("out1", None),
            Values("out0", [1.0, 2.0, 3.0, 4.0]),
        ],
    ),
    Case(
        name="functionalize.an-op-result-written-in-part-detaches-in-place",
        rules=["functionalize.outputs.own"],
        setup=_x_and_w,
        args=["x", "w"],
        program=lambda x, w: _clone_with_middle_columns_scaled(x, w)[0],
        backward=True,
        before_backward=_detach_in_place,
        # eager: detach_() of a view raises; y is none, and after it has no history
        expect=[
            ViewOf("out0", None),
            RequiresGrad("out0", False),
            Values("out0", [[1.0, 4.0, 9.0], [4.0, 20.0, 30.0]]),
        ],
    ),
    Case(
        name="ops.complex-writes-through-real-views-reach-the-complex-input",
        rules=["functionalize.complex-views"],
        setup=lambda: {"x": _Z.clone()},
        args=["x"],
        program=_write_through_real_views,
        # doubled through view_as_real, then 1 added to each imaginary part
        expect=[
            Values("x", [[2.0 + 5.0j, -1.0 + 3.0j], [4.0 - 1.0j, 0.5 + 2.0j]]),
            Values("out0", [[2.0 + 5.0j, -1.0 + 3.0j], [4.0 - 1.0j, 0.5 + 2.0j]]),
            Separate("x", "out0"),
        ],
    ),
    Case(
        name="ops.compiled-rejects-a-mutating-custom-op",
        rules=["functionalize.opaque-functional-only", "functionalize.errors-before-running"],
        setup=lambda: {"x": torch.arange(3.0)},
        args=["x"],
        program=_opaque_program,
        expect=[
            Raises(UnsupportedError, rule="functionalize.opaque-functional-only", match="scale_")
        ],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="aliasing.mutation-before-set-is-kept",
        rules=[
            "functionalize.set.rebinds-cell",
            "functionalize.epilogue.data",
            "functionalize.epilogue.set",
        ],
        # PyTorch 2.13's aot_function drops the mul_ (docs/torch-2.13.md section 3.2); eager keeps
        # it in the old storage.
        setup=_ones_and_alias,
        args=["x", "y"],
        program=_mutate_then_set,
        expect=[
            Values("x_alias", [[2.0, 2.0], [2.0, 2.0]]),
            Values("x", [0.0, 1.0, 2.0, 3.0]),
            Shares("x", "y"),
            Separate("x", "x_alias"),
        ],
    ),
    Case(
        name="aliasing.write-through-a-transposed-argument",
        rules=[
            "functionalize.metadata.cell",
            "functionalize.epilogue.metadata",
            "functionalize.epilogue.data",
        ],
        setup=_two_by_three_and_alias,
        args=["x"],
        program=_transpose_then_write_a_row,
        expect=[
            Values("x_alias", [0.0, 1.0, 2.0, 30.0, 4.0, 5.0]),
            Values("x", [[0.0, 30.0], [1.0, 4.0], [2.0, 5.0]]),
            Layout("x", shape=(3, 2), strides=(1, 3), offset=0),
        ],
    ),
    Case(
        name="aliasing.metadata-op-on-one-of-two-aliased-arguments",
        rules=["functionalize.metadata.cell", "aliasing.inputs.shared-storage"],
        setup=_two_views_of_one_base,
        args=["a", "b"],
        program=_transpose_one,
        # a reads [[0, 2], [1, 3]], b still [[0, 1], [2, 3]]
        expect=[
            Values("out0", [[0.0, 3.0], [3.0, 6.0]]),
            Layout("a", shape=(2, 2), strides=(1, 2)),
            Layout("b", shape=(2, 2), strides=(2, 1)),
            Shares("a", "b"),
            Shares("a", "base"),
        ],
    ),
    Case(
        name="aliasing.metadata-op-after-set-is-part-of-the-rebinding",
        rules=["functionalize.epilogue.set", "aliasing.metadata.relayout"],
        setup=_zeros_and_two_by_three,
        args=["x", "y"],
        program=_set_then_transpose,
        expect=[
            Shares("x", "y"),
            Layout("x", shape=(3, 2), strides=(1, 3), offset=0),
            Values("x", [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]),
            Layout("y", shape=(2, 3), strides=(3, 1), offset=0),
        ],
    ),
    Case(
        name="aliasing.metadata-op-then-the-storage-freed",
        rules=["functionalize.epilogue.metadata", "resize.compiled.epilogue"],
        setup=_one_storage_two_objects,
        args=["v", "x"],
        program=_unsqueeze_then_free,
        # the unsqueeze_ ran while the storage held 16 bytes; the caller's v is relaid out all
        # the same (the epilogue resizes first)
        expect=[
            StorageBytes("x", 0),
            Layout("v", shape=(1, 4), strides=(4, 1), offset=0),
            Layout("x", shape=(4,), strides=(1,), offset=0),
        ],
    ),
    Case(
        name="resize.gather-holds-the-storage-once",
        rules=["functionalize.writes.whole-after-resize", "memory.peak"],
        setup=_zero_storage_vector,
        args=["w", "src"],
        program=_gather_sum_free,
        expect=[
            Values("out0", 120.0),
            StorageBytes("w", 0),
            # src 64 + w's 64 gathered bytes + sum's 4; never the resize's 64 and the copy's 64 at
            # once
            PeakBytes(132),
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
        name="autograd.write-with-history-into-another-chunk-gives-a-view-history",
        rules=["functionalize.reads.unwritten"],
        setup=lambda: _leaves(x=torch.tensor([5.0, 7.0])),
        args=["x"],
        program=_write_into_another_chunk,
        backward=True,
        # eager's head takes its history from t again once the copy_ moves t's version: it
        # requires grad, and x gets a zero gradient through it (zeros, not None)
        expect=[Values("out0", [2.0, 2.0]), RequiresGrad("out0"), Values("x.grad", [0.0, 0.0])],
    ),
    Case(
        name="autograd.copy-into-a-tensor-with-no-elements-gives-it-history",
        rules=["functionalize.reads.unwritten"],
        setup=lambda: _leaves(x=torch.tensor([5.0, 7.0])),
        args=["x"],
        program=_copy_into_no_elements,
        backward=True,
        # eager's copy_ broadcasts x into no element and still records CopyBackwards
        expect=[RequiresGrad("out0"), Values("x.grad", [0.0, 0.0])],
    ),
    Case(
        name="memory.write-into-no-element-keeps-its-empty-storage",
        rules=["functionalize.writes.whole-without-history"],
        setup=lambda: {"x": torch.ones(0), "s": torch.tensor(3.0)},
        args=["x", "s"],
        program=_copy_of_a_number_into_no_element,
        # eager's t keeps the 0 bytes x * 2 gave it; the 0-dim value's 4 are not its storage
        expect=[StorageBytes("out0", 0)],
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
        name="autograd.set-then-metadata-op-with-grad-raises",
        rules=["functionalize.metadata.set"],
        setup=_square_non_leaf_and_ones,
        args=["x", "y"],
        program=_set_without_grad_then_transpose,
        expect=[Raises(UnsupportedError, rule="functionalize.metadata.set")],
        skip=COMPILED_ONLY,
    ),
]


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


def _writes_a_view_then_reads_the_base(base, view):
    view.mul_(2)
    return base + 1


CASES.append(
    Case(
        name="functionalize.epilogue-advances-a-shared-version-counter-once",
        rules=["functionalize.epilogue.version", "boundary.export.versions"],
        setup=lambda: (lambda base: {"base": base, "view": base.view(2, 2)})(torch.ones(4)),
        args=["base", "view"],
        program=_writes_a_view_then_reads_the_base,
        # eager: one in-place op through the view advances the counter it shares with its base
        # once: both read version 1
        expect=[
            Values("base", [2.0, 2.0, 2.0, 2.0]),
            Values("out0", [3.0, 3.0, 3.0, 3.0]),
            Version("base", 1),
            Version("view", 1),
        ],
    )
)


def _transposes_a_detached_alias(x):
    alias = x.detach()
    alias.t_()
    return x * 2


CASES.append(
    Case(
        name="functionalize.metadata-op-through-a-detached-alias-advances-the-version",
        rules=["functionalize.epilogue.version"],
        setup=lambda: {"x": torch.arange(6.0).reshape(2, 3)},
        args=["x"],
        program=_transposes_a_detached_alias,
        # eager: detach() shares x's version counter, and transpose_ advances it; x keeps its
        # layout and bytes (only the alias was relaid out)
        expect=[
            Values("out0", torch.arange(0.0, 12.0, 2.0).reshape(2, 3)),
            Layout("x", shape=(2, 3), strides=(3, 1), offset=0),
            Version("x", 1),
        ],
    )
)


def _sets_itself(y):
    y.set_(y)
    return y + 1


CASES.append(
    Case(
        name="functionalize.set-to-itself-advances-the-version",
        rules=["functionalize.epilogue.version", "functionalize.epilogue.set"],
        setup=lambda: {"y": torch.arange(3.0)},
        args=["y"],
        program=_sets_itself,
        # eager: set_ advances y's counter, though y keeps its storage, layout and bytes
        expect=[Values("y", [0.0, 1.0, 2.0]), Values("out0", [1.0, 2.0, 3.0]), Version("y", 1)],
    )
)


def _writes_through_a_tensor_rebound_onto_base(base, other):
    other.set_(base)
    other.mul_(3)
    return base + 1


CASES.append(
    Case(
        name="functionalize.write-through-a-rebound-tensor-keeps-the-bases-version",
        rules=["functionalize.epilogue.version", "functionalize.epilogue.set"],
        setup=lambda: {"base": torch.ones(4), "other": torch.zeros(2)},
        args=["base", "other"],
        program=_writes_through_a_tensor_rebound_onto_base,
        # eager: set_ gives other base's storage but not base's counter, which is not a view's;
        # mul_ through other triples base's bytes and advances other's counter only
        expect=[
            Values("base", [3.0, 3.0, 3.0, 3.0]),
            Values("other", [3.0, 3.0, 3.0, 3.0]),
            Values("out0", [4.0, 4.0, 4.0, 4.0]),
            Shares("base", "other"),
            Version("base", 0),
        ],
        skip={
            "reference-eager": "the eager interpreter keeps one counter per storage "
            "(r[boundary.export.versions])"
        },
    )
)


def _rebinds_an_expanded_view(x, src):
    view = x.expand(2, 2)
    view.set_(src)
    return view * 1


CASES.append(
    Case(
        name="functionalize.set-of-a-view-advances-its-bases-version",
        rules=["functionalize.epilogue.version"],
        setup=lambda: {"x": torch.tensor([1.0, 2.0]), "src": torch.full((2, 2), 5.0)},
        args=["x", "src"],
        program=_rebinds_an_expanded_view,
        # eager: the view shares x's counter, which its set_ advances; x's bytes and layout stay
        # and src, read only, keeps its counter
        expect=[
            Values("x", [1.0, 2.0]),
            Values("out0", [[5.0, 5.0], [5.0, 5.0]]),
            Version("x", 1),
            Version("src", 0),
        ],
    )
)


def _three_writes_through_a_view_and_a_rebinding(base, view, other):
    view.mul_(2)
    base.add_(1)
    with torch.no_grad():
        other.set_(torch.zeros(3))
    return base.sum()


CASES.append(
    Case(
        name="boundary.eager-interpreter-advances-versions-once-per-write",
        rules=["boundary.export.versions"],
        setup=lambda: (lambda base: {"base": base, "view": base[1:], "other": torch.ones(2)})(
            torch.ones(4)
        ),
        args=["base", "view", "other"],
        program=_three_writes_through_a_view_and_a_rebinding,
        # eager: two in-place ops on the counter base and view share advance it to 2 (not 4);
        # set_ advances other's own counter once
        expect=[
            Values("base", [2.0, 3.0, 3.0, 3.0]),
            Values("other", [0.0, 0.0, 0.0]),
            Version("base", 2),
            Version("view", 2),
            Version("other", 1),
        ],
        skip={
            backend: "a compiled call advances a written counter once per call "
            "(r[functionalize.epilogue.version])"
            for backend in ("reference", "fast", "torch.compile")
        },
    )
)


def _doubles_in_place_then_reads(x, x_tail):
    x.mul_(2)
    return x + 1


def _ramp_and_its_tail(n):
    x = torch.arange(float(n))
    return {"x": x, "x_tail": x[1:]}


#: The sizes one compiled function is called at, in turn.
_RAMP_SIZES = (4, 8, 3)

CASES.append(
    Case(
        name="functionalize.input-write-reaches-the-caller-at-each-size",
        rules=[
            "functionalize.epilogue.data",
            "functionalize.epilogue.version",
            "aliasing.inputs.shared-storage",
            "sizes.symbolic.scope",
        ],
        setup=_ramp_and_its_tail,
        args=["x", "x_tail"],
        program=_doubles_in_place_then_reads,
        sizes=_RAMP_SIZES,
        dynamic=True,
        # eager at size n: x and its view read 2 * arange(n), the output 2 * arange(n) + 1, and
        # the one in-place op advances their shared counter once
        expect=[
            Version("x", 1),
            Version("x_tail", 1),
            Shares("x", "x_tail"),
            *[
                AtSize(n, expectation)
                for n in _RAMP_SIZES
                for expectation in (
                    Values("x", 2 * torch.arange(float(n))),
                    Values("x_tail", 2 * torch.arange(1.0, n)),
                    Values("out0", 2 * torch.arange(float(n)) + 1),
                    Layout("x_tail", shape=(n - 1,), strides=(1,), offset=1),
                )
            ],
            # x and x_tail share a storage: each size is planned at its own sizes
            *[AtSize(n, PlansTraced(k)) for k, n in enumerate(_RAMP_SIZES, start=1)],
        ],
    )
)


def _running_average_into(buffer, x):
    with torch.no_grad():
        buffer.mul_(0.5).add_(x, alpha=0.5)
    return x.sum()


CASES.append(
    Case(
        name="functionalize.whole-buffer-update-takes-the-written-values",
        rules=["functionalize.writes.whole-without-history", "memory.peak"],
        setup=lambda: {"buffer": torch.full((64,), 4.0), "x": torch.arange(64.0)},
        args=["buffer", "x"],
        program=_running_average_into,
        expect=[
            Values("buffer", 2.0 + torch.arange(64.0) / 2),
            Values("out0", 2016.0),
            # the inputs, 256 bytes each, and the two written values while add_ computes the
            # second from the first (256 each); each is the buffer's contents in turn, with no
            # scattered copy of either
            PeakBytes(1024),
        ],
        skip={
            "reference-eager": "the eager interpreter writes in place: its peak is the inputs "
            "and the output (516 bytes)"
        },
    )
)


def _rebind_then_copy_an_input(x, y):
    y.set_(x.neg())
    y.copy_(x)
    return y


CASES.append(
    Case(
        name="functionalize.whole-copy-of-an-input-keeps-its-own-storage",
        rules=["functionalize.writes.whole-without-history", "functionalize.epilogue.set"],
        setup=lambda: {"x": torch.arange(4.0), "y": torch.zeros(4)},
        args=["x", "y"],
        program=_rebind_then_copy_an_input,
        # eager: y is rebound to the fresh storage of x.neg(), then takes x's values there
        expect=[
            Values("y", [0.0, 1.0, 2.0, 3.0]),
            Values("x", [0.0, 1.0, 2.0, 3.0]),
            Separate("x", "y"),
            Separate("x", "out0"),
            StorageBytes("y", 16),
        ],
    )
)
