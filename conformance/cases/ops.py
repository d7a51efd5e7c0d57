"""Cases for specs/ops.md: opmath, fresh outputs, opaque custom ops."""

import torch

from aotspec.errors import UnsupportedError

from ..case import COMPILED_ONLY, Case, Layout, Raises, Separate, Values, eager_only

# A custom op pair registered with torch.library: schema, CPU kernel, fake kernel.


@torch.library.custom_op("aotspec_conformance::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, factor: float) -> None:
    x.mul_(factor)


@scale_.register_fake
def _(x, factor):
    return None


@torch.library.custom_op("aotspec_conformance::doubled", mutates_args=())
def doubled(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@doubled.register_fake
def _(x):
    return torch.empty_like(x)


def _opaque_program(x):
    torch.ops.aotspec_conformance.scale_(x, 3.0)
    return torch.ops.aotspec_conformance.doubled(x)


def _functional_opaque_program(x):
    return torch.ops.aotspec_conformance.doubled(x) + 1


def _bfloat16_sum(x):
    return x.sum()


def _clone_transposed(x):
    return x.t().clone()


CASES = [
    Case(
        name="ops.bfloat16-sum-accumulates-in-float32",
        rules=["ops.opmath"],
        # In bfloat16 256 + 1 rounds back to 256; accumulated in float32 the sum is 260.
        setup=lambda: {"x": torch.tensor([256.0, 1.0, 1.0, 1.0, 1.0], dtype=torch.bfloat16)},
        args=["x"],
        program=_bfloat16_sum,
        expect=[
            Values("out0", torch.tensor(260.0, dtype=torch.bfloat16)),
            Layout("out0", dtype=torch.bfloat16, shape=()),
        ],
    ),
    Case(
        name="ops.clone-keeps-dense-strides",
        rules=["ops.fresh-output"],
        setup=lambda: {"x": torch.arange(6.0).view(2, 3)},
        args=["x"],
        program=_clone_transposed,
        expect=[
            Values("out0", [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]),
            Layout("out0", shape=(3, 2), strides=(1, 3), offset=0),
            Separate("x", "out0"),
        ],
    ),
    Case(
        name="ops.custom-op-runs-opaquely",
        rules=["ops.opaque.schema"],
        setup=lambda: {"x": torch.arange(3.0)},
        args=["x"],
        program=_opaque_program,
        expect=[
            Values("x", [0.0, 3.0, 6.0]),
            Values("out0", [0.0, 6.0, 12.0]),
            Separate("x", "out0"),
        ],
        skip=eager_only("compiled programs reject mutating custom ops (the next case)"),
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
        name="ops.functional-custom-op",
        rules=["ops.opaque.schema"],
        setup=lambda: {"x": torch.arange(3.0)},
        args=["x"],
        program=_functional_opaque_program,
        expect=[
            Values("x", [0.0, 1.0, 2.0]),
            Values("out0", [1.0, 3.0, 5.0]),
            Separate("x", "out0"),
        ],
    ),
]
