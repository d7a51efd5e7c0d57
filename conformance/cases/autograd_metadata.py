"""Cases for specs/autograd.md's "In-place metadata ops": transposes and as_strided in place on
tensors with history, and the gradients through them.

Expected gradients are worked out by hand, or computed by eager PyTorch on private copies.
"""

import torch

from aotspec.errors import UnsupportedError

from ..case import (
    COMPILED_ONLY,
    Absent,
    BackwardRaises,
    Case,
    History,
    Layout,
    Raises,
    RequiresGrad,
    Values,
)
from ._autograd_common import _EAGER_INTERPRETER_KEEPS_HISTORIES, _leaves, _non_leaf_and_weight


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


CASES = [
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
]


def _as_strided_beside_a_slice(x):
    return x.mul(2)[1:2].as_strided((2,), (1,), 0)


def _as_strided_in_place_after_a_write(x):
    v = x.mul(2)[1:2]
    v.sub_(1.0)
    v.as_strided_((2,), (1,), 0)
    return v


def _as_strided_beside_a_slice_then_written(x):
    v = x.mul(2)
    w = v[1:2].as_strided((2,), (1,), 0)
    v.add_(1.0)
    return w


CASES += [
    Case(
        name="autograd.as-strided-beside-its-input-then-written-raises",
        rules=["autograd.as-strided.outside", "functionalize.errors-before-running"],
        setup=lambda: _leaves(x=torch.tensor([1.0, 2.0, 3.0, 4.0])),
        args=["x"],
        program=_as_strided_beside_a_slice_then_written,
        expect=[Raises(UnsupportedError, rule="autograd.as-strided.outside")],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="autograd.as-strided-beside-its-input-returned",
        rules=["autograd.as-strided.outside"],
        setup=lambda: _leaves(x=torch.tensor([1.0, 2.0, 3.0, 4.0])),
        args=["x"],
        program=_as_strided_beside_a_slice,
        backward=True,
        # eager: the view reads 2x[0], 2x[1]; only 2x[1] is the slice's, so x.grad = [0, 2, 0, 0]
        expect=[Values("out0", [2.0, 4.0]), Values("x.grad", [0.0, 2.0, 0.0, 0.0])],
    ),
    Case(
        name="autograd.as-strided-in-place-beside-a-written-view",
        rules=["autograd.as-strided.outside", "autograd.metadata"],
        setup=lambda: _leaves(x=torch.tensor([1.0, 2.0, 3.0, 4.0])),
        args=["x"],
        program=_as_strided_in_place_after_a_write,
        backward=True,
        # eager: v reads the storage [2, 3, 6, 8] from 0 after the write; its gradient reaches
        # only its old element, through the sub: x.grad = [0, 2, 0, 0]
        expect=[Values("out0", [2.0, 3.0]), Values("x.grad", [0.0, 2.0, 0.0, 0.0])],
    ),
]
