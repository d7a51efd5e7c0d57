"""Cases for specs/storage-resize.md: resize_storage_bytes_ in eager programs."""

import torch

from aotspec.errors import UnsupportedError

from ..case import (
    COMPILED_ONLY,
    AtSize,
    Case,
    Layout,
    PlansTraced,
    Raises,
    Shares,
    StorageBytes,
    Values,
    eager_only,
)

resize = torch.ops.inductor.resize_storage_bytes_


def _zero_storage_parameter():
    # FSDP's sharded state: the parameter object exists, its bytes do not.
    w = torch.zeros(4)
    resize(w, 0)
    return {"w": w, "w_alias": w.view(2, 2), "src": torch.arange(4.0), "x": torch.full((4,), 2.0)}


def _fsdp_pattern(w, src, x):
    resize(w, 16)
    w.copy_(src)
    out = x * w
    resize(w, 0)
    return out


def _up_and_fill(w, src, x):
    resize(w, 16)
    w.copy_(src)
    return x * w


def _down_to_zero(x):
    resize(x, 0)


def _shrink_keeps_prefix(x):
    resize(x, 8)
    return x[:2].clone()


def _with_alias():
    x = torch.arange(4.0)
    return {"x": x, "x_alias": x.view(2, 2)}


CASES = [
    Case(
        name="resize.down-to-zero-seen-by-all-aliases",
        rules=[
            "resize.eager.all-aliases",
            "resize.compiled.epilogue",
            "functionalize.epilogue.resize",
        ],
        setup=_with_alias,
        args=["x"],
        program=_down_to_zero,
        expect=[
            StorageBytes("x", 0),
            StorageBytes("x_alias", 0),
            Layout("x", shape=(4,), strides=(1,), offset=0),
            Layout("x_alias", shape=(2, 2), strides=(2, 1)),
            Shares("x", "x_alias"),
        ],
    ),
    Case(
        name="resize.shrink-keeps-prefix",
        rules=["resize.keeps-prefix", "memory.extent"],
        setup=_with_alias,
        args=["x"],
        program=_shrink_keeps_prefix,
        expect=[Values("out0", [0.0, 1.0]), StorageBytes("x", 8), StorageBytes("x_alias", 8)],
        skip=eager_only(
            "compiled programs resize only from or to 0 bytes (resize.compiled-shrink-rejected)"
        ),
    ),
    Case(
        name="resize.fsdp-up-fill-use-down",
        rules=[
            "resize.zero-then-back",
            "memory.storage",
            "aliasing.copy.writes-storage",
            "resize.compiled.epilogue",
        ],
        setup=_zero_storage_parameter,
        args=["w", "src", "x"],
        program=_fsdp_pattern,
        expect=[
            Values("out0", [0.0, 2.0, 4.0, 6.0]),
            StorageBytes("w", 0),
            StorageBytes("w_alias", 0),
            Layout("w", shape=(4,), strides=(1,)),
            Shares("w", "w_alias"),
        ],
    ),
    Case(
        name="resize.up-from-zero-and-fill",
        rules=[
            "resize.zero-then-back",
            "resize.eager.all-aliases",
            "resize.compiled.epilogue",
            "functionalize.epilogue.resize",
        ],
        setup=_zero_storage_parameter,
        args=["w", "src", "x"],
        program=_up_and_fill,
        expect=[
            Values("out0", [0.0, 2.0, 4.0, 6.0]),
            Values("w", [0.0, 1.0, 2.0, 3.0]),
            Values("w_alias", [[0.0, 1.0], [2.0, 3.0]]),
            StorageBytes("w_alias", 16),
            Shares("w", "w_alias"),
        ],
    ),
]


def _resize_intermediate(x):
    y = x + 1
    resize(y, 0)
    return x * 2


def _resize_view(x):
    resize(x[1:], 0)


CASES += [
    Case(
        name="resize.compiled-shrink-rejected",
        rules=["resize.compiled.zero-only", "functionalize.errors-before-running"],
        setup=_with_alias,
        args=["x"],
        program=_shrink_keeps_prefix,
        expect=[
            Raises(UnsupportedError, rule="resize.compiled.zero-only", match="from 16 to 8 bytes")
        ],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="resize.compiled-intermediate-rejected",
        rules=["resize.compiled.inputs-only"],
        setup=lambda: {"x": torch.arange(4.0)},
        args=["x"],
        program=_resize_intermediate,
        expect=[Raises(UnsupportedError, rule="resize.compiled.inputs-only")],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="resize.compiled-view-rejected",
        rules=["resize.compiled.base-only"],
        setup=_with_alias,
        args=["x"],
        program=_resize_view,
        expect=[Raises(UnsupportedError, rule="resize.compiled.base-only")],
        skip=COMPILED_ONLY,
    ),
]


def _zero_storage_parameter_of(n):
    # FSDP's sharded state at size n (even): the parameter object exists, its bytes do not.
    w = torch.zeros(n)
    resize(w, 0)
    return {
        "w": w,
        "w_alias": w.view(2, n // 2),
        "src": torch.arange(float(n)),
        "x": torch.full((n,), 2.0),
    }


def _fsdp_pattern_of_any_size(w, src, x):
    resize(w, w.numel() * w.element_size())  # the all-gather's bytes: 4n at size n
    w.copy_(src)
    out = x * w
    resize(w, 0)
    return out


#: Two sizes of FSDP's parameter, one compiled function called at each in turn.
_FSDP_SIZES = (4, 8)

def _fsdp_pattern_of_any_size_with_fsdp_copy(w, src, x):
    """The same, with the copy FSDP itself uses (`r[aliasing.copy.fsdp]`)."""
    resize(w, w.numel() * w.element_size())
    torch.ops.fsdp.copy_(w, src)
    out = x * w
    resize(w, 0)
    return out


def _zero_storage_parameter_of_with_fsdp(n):
    import torch.distributed.fsdp._fully_shard._fsdp_param  # noqa: F401  (defines fsdp.copy_)

    return _zero_storage_parameter_of(n)


def _fsdp_at_each_size(name: str, rules: list[str], setup, program) -> Case:
    """FSDP's pattern called at each of `_FSDP_SIZES` by one compiled function."""
    return Case(
        name=name,
        rules=[
            "resize.zero-then-back",
            "resize.compiled.epilogue",
            "sizes.symbolic.scope",
            *rules,
        ],
        setup=setup,
        args=["w", "src", "x"],
        program=program,
        sizes=_FSDP_SIZES,
        dynamic=True,
        # eager at size n: out = 2 * arange(n); w's storage, grown to 4n bytes and filled, is
        # 0 bytes again at the end, for w and its alias, which keep their shapes
        expect=[
            StorageBytes("w", 0),
            StorageBytes("w_alias", 0),
            Shares("w", "w_alias"),
            *[
                AtSize(n, expectation)
                for n in _FSDP_SIZES
                for expectation in (
                    Values("out0", 2 * torch.arange(float(n))),
                    Layout("w", shape=(n,), strides=(1,)),
                    Layout("w_alias", shape=(2, n // 2), strides=(n // 2, 1)),
                )
            ],
            # w's storage holds 0 bytes at the call: each size is planned at its own sizes
            *[AtSize(n, PlansTraced(k)) for k, n in enumerate(_FSDP_SIZES, start=1)],
        ],
    )


CASES += [
    _fsdp_at_each_size(
        "resize.fsdp-up-fill-use-down-at-each-size",
        [],
        _zero_storage_parameter_of,
        _fsdp_pattern_of_any_size,
    ),
    _fsdp_at_each_size(
        "resize.fsdp-copy-up-fill-use-down-at-each-size",
        ["aliasing.copy.fsdp"],
        _zero_storage_parameter_of_with_fsdp,
        _fsdp_pattern_of_any_size_with_fsdp_copy,
    ),
]
