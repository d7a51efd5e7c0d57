"""Pointwise fusion and its Triton kernels, on CPU under TRITON_INTERPRET=1 (or on a GPU).

Each case traces a function with make_fx, fuses it (`fast.fusion.fuse_pointwise`, Triton kernels
on) and runs the fused module twice: through Triton's interpreter, and through the torch-op path
(TRITON_INTERPRET unset). Both must give eager PyTorch's values, dtypes, shapes and strides: the
torch path exactly, the kernels exactly too unless a transcendental function (`sin`, `exp`, ...)
is in the chain, whose float32 values come from another math library (assert_close tolerances),
or the op is float32 `sqrt`, which the kernel rounds correctly and eager may not (one unit in the
last place; see `EAGER_WITHIN_ONE_ULP`). An exact comparison is one that holds on every x86-64
CPU: only ops whose IEEE result is correctly rounded in eager as in the kernel.

Triton reads TRITON_INTERPRET when a kernel is wrapped (`triton.jit`), not at import, so a
fixture sets it per test, whatever imported triton or torch before. (triton.language's own jit
helpers, `tl.sigmoid` and the like, are wrapped at import; the generated kernels call none.)

With AOTSPEC_TEST_DEVICE=cuda (`benchmarks/gpu_check.py` sets it) the same tests run their
kernels on the GPU for real: tensors are made there (torch's default device), no interpreter, and
the torch-op path is taken by turning the kernels off, since on CUDA a fused kernel always runs.
"""

from __future__ import annotations

import collections
import math
import operator
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import aotspec
from aotspec import versions
from aotspec.fast import fusion, triton_kernels
from aotspec.fast.fusion import FusedKernel, fuse_pointwise, triton_requested

aten = torch.ops.aten

# Triton's interpreter computes with numpy, which warns where PyTorch is silent (log of -1, ...).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


#: Where the kernels run: the CPU under Triton's interpreter, or a GPU (see the docstring).
DEVICE = torch.device(os.environ.get("AOTSPEC_TEST_DEVICE", "cpu"))
ON_GPU = DEVICE.type != "cpu"


@pytest.fixture(autouse=True)
def triton_interpreter(monkeypatch):
    monkeypatch.delenv("AOTSPEC_TRITON", raising=False)
    if not ON_GPU:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        yield
        return
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    torch.set_default_device(DEVICE)
    try:
        yield
    finally:
        torch.set_default_device(None)


def fused(fn, *inputs) -> torch.fx.GraphModule:
    return fuse_pointwise(make_fx(fn, tracing_mode="fake")(*inputs), use_triton=True)


def kernels(graph_module: torch.fx.GraphModule) -> list[FusedKernel]:
    return [
        node.target for node in graph_module.graph.nodes if isinstance(node.target, FusedKernel)
    ]


def assert_like_eager(
    fn, *inputs, exact: bool = False, ulps: int = 0, expected_kernels: int = 1
) -> torch.fx.GraphModule:
    """Fuse `fn`, then check both paths of the fused module against eager `fn`.

    The torch path must be exact. The kernels: with `exact`, exact, or at most `ulps` units in the
    last place away; else within assert_close's default tolerances."""
    module = fused(fn, *inputs)
    assert len(kernels(module)) == expected_kernels, module.code
    expected = fn(*inputs)
    through_triton = launched(module, *inputs, expected=kernels(module))
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("TRITON_INTERPRET", raising=False)
        if ON_GPU:
            patch.setattr(fusion, "_triton_runs_on", lambda tensors: False)
        through_torch = module(*inputs)
    tolerance = {"rtol": 0, "atol": 0} if exact else {}
    for got in (through_triton, through_torch):
        for e, g in zip(_flat(expected), _flat(got), strict=True):
            assert g.stride() == e.stride() or e.numel() <= 1
            if exact and ulps:
                assert_within_ulps(g, e, ulps)
            else:
                torch.testing.assert_close(g, e, equal_nan=True, **tolerance)
    for e, g in zip(_flat(expected), _flat(through_torch), strict=True):
        torch.testing.assert_close(g, e, equal_nan=True, rtol=0, atol=0)
    return module


#: Floating dtype -> the signed integer dtype of its bits.
_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def assert_within_ulps(got: torch.Tensor, expected: torch.Tensor, ulps: int) -> None:
    """`got` is `expected` but for at most `ulps` units in the last place per element: the same
    dtype and shape, NaN where it is NaN, the same infinities, every other value at most `ulps`
    representable values of the dtype away (counting -0.0 and 0.0 as one)."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.dtype not in _BITS:
        torch.testing.assert_close(got, expected, equal_nan=True, rtol=0, atol=0)
        return
    nan = expected.isnan()
    assert torch.equal(got.isnan(), nan), (got, expected)
    infinite = expected.isinf() | got.isinf()
    assert torch.equal(got[infinite], expected[infinite]), (got, expected)
    distance = (_ordered(got) - _ordered(expected)).abs().masked_fill(nan, 0)
    worst = distance.max().item() if distance.numel() else 0
    apart = f"{worst} units in the last place apart (at most {ulps})"
    assert worst <= ulps, f"{apart}:\n{got}\n{expected}"


def _ordered(t: torch.Tensor) -> torch.Tensor:
    """The float `t` as integers in the order of its values, consecutive for adjacent floats."""
    bits = _BITS[t.dtype]
    signed = t.view(bits).to(torch.int64)  # sign and magnitude: a negative value's bits are < 0
    return torch.where(signed < 0, torch.iinfo(bits).min - signed, signed)


def launched(module: torch.fx.GraphModule, *inputs, expected: list[FusedKernel]):
    """`module(*inputs)`, which must launch each of the `expected` kernels once (those with
    elements): a kernel that falls back to torch ops computes the same values."""
    before = triton_kernels.LAUNCHES.copy()
    result = module(*inputs)
    wanted = collections.Counter(
        f"triton_{kernel.program.name}" for kernel in expected if kernel.program.numel > 0
    )
    assert triton_kernels.LAUNCHES - before == wanted, "Triton did not run the fused kernels"
    return result


def _flat(value) -> list[torch.Tensor]:
    return list(value) if isinstance(value, tuple | list) else [value]


def sample(shape, dtype, seed=0) -> torch.Tensor:
    """The same values on every device: drawn on the CPU, then moved to DEVICE."""
    generator = torch.Generator().manual_seed(seed)
    cpu = {"generator": generator, "device": "cpu"}
    if dtype == torch.bool:
        values = torch.rand(shape, **cpu) > 0.5
    elif not dtype.is_floating_point:
        values = torch.randint(-50, 50, shape, dtype=dtype, **cpu)
    else:
        values = (torch.randn(shape, **cpu) * 3).to(dtype)
    return values.to(DEVICE)


#: Special values each op alone meets, in its first input at these flat positions and in its
#: second shifted by two: NaN against a number and against -inf, -0.0 against 0.0, ...
SPECIALS = [math.nan, math.inf, -math.inf, -0.0, 0.0]


def with_specials(t: torch.Tensor, shift: int = 0) -> torch.Tensor:
    """`t` (5 elements or more) with SPECIALS from flat position `shift` on, if it is a float."""
    if not t.dtype.is_floating_point:
        return t
    flat = t.clone().reshape(-1)
    flat[shift : shift + len(SPECIALS)] = torch.tensor(SPECIALS, dtype=t.dtype)
    return flat.reshape(t.shape)


# ---------------------------------------------------------------- each op alone

UNARY = {
    "abs": aten.abs.default,
    "neg": aten.neg.default,
    "exp": aten.exp.default,
    "exp2": aten.exp2.default,
    "log": aten.log.default,
    "log2": aten.log2.default,
    "sin": aten.sin.default,
    "cos": aten.cos.default,
    "sqrt": aten.sqrt.default,
    "rsqrt": aten.rsqrt.default,
    "erf": aten.erf.default,
    "sigmoid": aten.sigmoid.default,
    "floor": aten.floor.default,
    "ceil": aten.ceil.default,
    "relu": aten.relu.default,
    "reciprocal": aten.reciprocal.default,
    "isnan": aten.isnan.default,
    "logical_not": aten.logical_not.default,
}
BINARY = {
    "add": aten.add.Tensor,
    "sub": aten.sub.Tensor,
    "mul": aten.mul.Tensor,
    "div": aten.div.Tensor,
    "maximum": aten.maximum.default,
    "minimum": aten.minimum.default,
    "eq": aten.eq.Tensor,
    "ne": aten.ne.Tensor,
    "lt": aten.lt.Tensor,
    "le": aten.le.Tensor,
    "gt": aten.gt.Tensor,
    "ge": aten.ge.Tensor,
    "logical_and": aten.logical_and.default,
    "logical_or": aten.logical_or.default,
}
WITH_SCALARS = {
    "add.Scalar-alpha": lambda x: aten.add.Tensor(x, 2.5, alpha=2),
    "sub.Scalar": lambda x: aten.sub.Scalar(x, 0.5),
    "sub-alpha": lambda x: aten.sub.Tensor(x, x * x, alpha=3),
    "mul.Scalar": lambda x: aten.mul.Scalar(x, -3),
    "div.Scalar": lambda x: aten.div.Scalar(x, 7),
    "clamp": lambda x: aten.clamp.default(x, -1.0, 2.0),
    "clamp-max-only": lambda x: aten.clamp.default(x, None, 0.5),
    "clamp-min-above-max": lambda x: aten.clamp.default(x, 2.0, -1.0),  # max everywhere, NaN kept
    "clamp_min": lambda x: aten.clamp_min.default(x, 0.25),
    "clamp_max": lambda x: aten.clamp_max.default(x, 0.25),
    "lt.Scalar": lambda x: aten.lt.Scalar(x, 0.5),
    "eq.Scalar": lambda x: aten.eq.Scalar(x, 0),
    "threshold_backward": lambda x: aten.threshold_backward.default(x, x - 1, 0),
    "where": lambda x: aten.where.self(x > 0, x, x * 3),
    "clamp.Tensor": lambda x: aten.clamp.Tensor(x, x - 1, x * x),
}
FLOATS = [torch.float32, torch.bfloat16, torch.float16]
#: `x + alpha * y` of floats: the kernel rounds once (a fused multiply-add), as eager's vectorized
#: CPU kernels do; for float16 and bfloat16 eager's scalar loop over the last elements of a tensor
#: rounds twice, in float32, which may leave those elements one unit in the last place away.
ALPHA_ROUNDED_TWICE_IN_EAGERS_TAIL = {"sub-alpha"}
#: The ops of WITH_SCALARS a kernel computes with `tl.fma`.
ALPHA_FUSED = {"sub-alpha"}
INT_CAPABLE = {
    "abs",
    "neg",
    "relu",
    "add",
    "sub",
    "mul",
    "maximum",
    "minimum",
    "eq",
    "lt",
    "logical_and",
}


def _then_clone(op):
    # One op alone is no group; a clone after it makes two, and changes no value.
    return lambda *xs: aten.clone.default(op(*xs))


def _cases(names) -> list[tuple[str, torch.dtype]]:
    return [
        (name, dtype)
        for name in names
        for dtype in [*FLOATS, torch.int32]
        if dtype in FLOATS or name in INT_CAPABLE
    ]


#: Ops whose kernel differs from eager in the last bits: their math functions are Triton's.
TRANSCENDENTAL = {"exp", "exp2", "log", "log2", "sin", "cos", "rsqrt", "erf", "sigmoid"}

#: (op, dtype) whose kernel rounds correctly where eager is only within one unit in the last
#: place, depending on the CPU. Eager float32 `sqrt` on CPU calls MKL's vector math (`vmsSqrt`,
#: in PyTorch built with MKL), which is not correctly rounded on every CPU: on an AMD EPYC, 17% of
#: uniform random float32 values come out one unit away from IEEE sqrt (never more), where other
#: x86-64 machines give IEEE's value for these inputs. float16 and bfloat16 eager `sqrt` does not
#: go through MKL (it rounds the CPU instruction's float32 square root): exact, the kernel's value
#: for every float16 and every normal bfloat16 value.
EAGER_WITHIN_ONE_ULP = {("sqrt", torch.float32)}


@pytest.mark.parametrize("name, dtype", _cases(UNARY))
def test_unary_op(name, dtype):
    exact = name not in TRANSCENDENTAL
    ulps = 1 if (name, dtype) in EAGER_WITHIN_ONE_ULP else 0
    x = with_specials(sample((5, 7), dtype))
    assert_like_eager(_then_clone(UNARY[name]), x, exact=exact, ulps=ulps)


def test_ulp_distance():
    one = torch.tensor([1.0])
    above, below = torch.nextafter(one, one * 2), torch.nextafter(one, one * 0)
    assert_within_ulps(above, one, 1)
    assert_within_ulps(below, one, 1)  # across a power of two: half the distance above
    with pytest.raises(AssertionError, match="2 units in the last place"):
        assert_within_ulps(above, below, 1)
    tiny = torch.tensor([torch.finfo(torch.float32).tiny * 2**-23])  # the least subnormal
    assert_within_ulps(-tiny, tiny, 2)  # -tiny, -0.0 and 0.0, tiny
    with pytest.raises(AssertionError):
        assert_within_ulps(-tiny, tiny, 1)
    with pytest.raises(AssertionError):
        assert_within_ulps(torch.tensor([float("nan")]), one, 1)
    big = torch.tensor([torch.finfo(torch.float32).max])
    with pytest.raises(AssertionError):
        assert_within_ulps(big * 2, big, 1)  # inf is no unit away from the largest float
    for dtype in (torch.float16, torch.bfloat16):
        one = torch.tensor([1.0], dtype=dtype)
        assert_within_ulps(torch.nextafter(one, one * 2), one, 1)


@pytest.mark.parametrize("name, dtype", _cases(BINARY))
def test_binary_op(name, dtype):
    inputs = with_specials(sample((5, 7), dtype)), with_specials(sample((5, 7), dtype, 1), 2)
    assert_like_eager(_then_clone(BINARY[name]), *inputs, exact=True)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", list(WITH_SCALARS))
def test_op_with_scalars(name, dtype):
    x = with_specials(sample((5, 7), dtype))
    ulps = 1 if name in ALPHA_ROUNDED_TWICE_IN_EAGERS_TAIL and dtype != torch.float32 else 0
    # Before Triton 3.9 the interpreter's fma rounds twice: near a cancellation that is many
    # units in the last place, within assert_close's tolerances (the GPU's fma rounds once).
    exact = ON_GPU or versions.interpreter_fma_rounds_once() or name not in ALPHA_FUSED
    assert_like_eager(_then_clone(WITH_SCALARS[name]), x, exact=exact, ulps=ulps)


# ---------------------------------------------------------------- chains


def pack_unpack(x):
    """A saved-tensor hook pair's casts: pack to bfloat16, unpack to float32."""
    return aten._to_copy.default(
        aten._to_copy.default(x, dtype=torch.bfloat16), dtype=torch.float32
    )


def relu_backward(x, grad):
    return aten.threshold_backward.default(grad, aten.relu.default(x), 0) * 0.5


def bf16_opmath_chain(x, w):
    # Only correctly rounded ops: eager rounds to bfloat16 after each, and so must the kernel.
    return ((x * w + 1) / 3 - x).relu()


#: name -> (program, is the kernel bit-exact: no transcendental function in it?)
CHAINS = {
    "mul-sin-relu-add": (lambda x, w: (x * w).sin().relu() + 1, False),
    "where-comparison": (lambda x, w: torch.where(x > w, x.exp(), w.sigmoid()), False),
    "pack-unpack": (lambda x, w: pack_unpack(x * w), True),
    "relu-backward": (relu_backward, True),
    "mixed-dtypes": (lambda x, w: x.to(torch.float16) * w.to(torch.float32), True),
    "to-int-and-back": (lambda x, w: (x * 10).to(torch.int32).to(x.dtype) + w, True),
    "to-bool": (lambda x, w: (x * w).to(torch.bool).logical_not(), True),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", list(CHAINS))
def test_chain(name, dtype):
    fn, exact = CHAINS[name]
    assert_like_eager(fn, sample((5, 7), dtype), sample((5, 7), dtype, seed=1), exact=exact)


def test_bfloat16_chain_rounds_after_each_op_like_eager():
    x, w = sample((64,), torch.bfloat16), sample((64,), torch.bfloat16, seed=1)
    assert_like_eager(bf16_opmath_chain, x, w, exact=True)
    # Rounding once, at the end of the chain, would differ: the kernel is exact only per op.
    once = ((x.float() * w.float() + 1) / 3 - x.float()).relu().bfloat16()
    assert not torch.equal(once, bf16_opmath_chain(x, w))


def test_pack_unpack_casts_fuse_into_one_kernel():
    x = sample((5, 7), torch.float32)
    module = assert_like_eager(pack_unpack, x, exact=True)
    (kernel,) = kernels(module)
    assert [step.op for step in kernel.program.steps] == [aten._to_copy.default] * 2
    assert "to_bfloat16(" in kernel.source


def test_single_cast_is_a_kernel():
    (kernel,) = kernels(
        assert_like_eager(
            lambda x: aten._to_copy.default(x, dtype=torch.bfloat16),
            sample((9,), torch.float32),
            exact=True,
        )
    )
    assert kernel.name == "fused_to_copy_0"


# ---------------------------------------------------------------- sizes and layouts


@pytest.mark.parametrize("shape", [(0,), (3, 0), (), (1,), (3000,), (4096,)], ids=str)
def test_sizes(shape):
    """Empty tensors, 0-dim tensors, several blocks, sizes that are not a multiple of BLOCK."""
    assert_like_eager(
        lambda x, w: (x * w).sin() + 1,
        sample(shape, torch.float32),
        sample(shape, torch.float32, 1),
    )


@pytest.mark.parametrize(
    "x_shape, w_shape",
    [((4, 5, 3), (3,)), ((4, 1, 3), (5, 3)), ((4, 5, 3), ()), ((5, 1), (1, 7)), ((2, 3), (1, 1))],
    ids=str,
)
def test_broadcasting_inputs(x_shape, w_shape):
    assert_like_eager(
        lambda x, w: (x * w).cos() - w,
        sample(x_shape, torch.float32),
        sample(w_shape, torch.float32, 1),
    )


def test_strided_input():
    x = sample((5, 14), torch.bfloat16)[:, ::2]  # read through its strides: (14, 2)
    module = assert_like_eager(lambda x, w: (x + w).relu(), x, sample((5, 7), torch.bfloat16, 1))
    assert (
        "tl.load(in0_ptr + (offsets // 7) * 14 + (offsets % 7) * 2, mask=mask)"
        in kernels(module)[0].source
    )


def test_a_value_broadcast_to_every_element_in_a_logical_op():
    """A 0-dim input, compared and combined with a block by `&`: found by pointwise_programs, when
    its load was a scalar, which Triton's interpreter broadcast into a block `&` refuses."""
    module = assert_like_eager(
        lambda x, w: torch.logical_and(x, w).logical_not(),
        sample((), torch.float32),
        sample((5, 3), torch.bfloat16, 1),
        exact=True,
    )
    assert "tl.load(in0_ptr + offsets * 0, mask=mask)" in kernels(module)[0].source


def test_an_int_compared_with_a_float_compares_in_float():
    """An int32 tensor against a float tensor or scalar: eager promotes both to float, so 0 < 0.5
    and 0 != 0.5 (in the int's dtype 0.5 would truncate to 0)."""
    x, w = torch.arange(-2, 3, dtype=torch.int32), torch.full((5,), 0.5)
    assert_like_eager(lambda x, w: torch.logical_or(x < w, x.eq(0.5)), x, w, exact=True)


def test_bool_arithmetic_stays_with_torch():
    """Eager's add of bools is a logical or; a kernel's `+` on int1 wraps (True + True is False):
    the add runs as a torch op between the kernels that make the masks and the one after it."""
    x, w = torch.tensor([1.0, 1.0, -1.0, -1.0]), torch.tensor([1.0, -1.0, 1.0, -1.0])

    def fn(x, w):
        return ((x * 2 > 0) + (w * 2 > 0)).logical_not().clone()

    module = assert_like_eager(fn, x, w, exact=True, expected_kernels=3)
    assert aten.add.Tensor in [node.target for node in module.graph.nodes], module.code


def test_complex_arithmetic_stays_with_torch():
    """Triton has no complex type: a complex chain runs as torch ops, and the real chain after
    `abs` of it fuses on its own (`r[ops.complex.aten-values]` holds on the fast backend because
    its complex ops are eager's)."""
    x = torch.tensor([1.0 + 2.0j, -0.5 + 1.0j, 3.0 - 1.0j])

    def fn(x):
        return ((x * 2 + 1).exp().abs() * 2 + 1).sin()

    module = assert_like_eager(fn, x, ulps=4, expected_kernels=1)
    (kernel,) = kernels(module)
    assert aten.exp.default in [node.target for node in module.graph.nodes], module.code
    assert "exp" not in kernel.name, module.code


def test_an_output_eager_lays_out_otherwise_stays_with_torch():
    x = sample((7, 5), torch.bfloat16).t()  # eager's sum of x and w is laid out like x
    assert_like_eager(
        lambda x, w: (x + w).relu(), x, sample((5, 7), torch.bfloat16, 1), expected_kernels=0
    )


def test_kernel_source_reads_like_the_ops():
    x, w = sample((4, 3), torch.bfloat16), sample((3,), torch.bfloat16, 1)
    (kernel,) = kernels(fused(lambda x, w: (x * w).sin(), x, w))
    source = kernel.source
    assert "@triton.jit\ndef triton_mul_sin(" in source
    assert "in1 = tl.load(in1_ptr + offsets % 3, mask=mask)" in source
    assert "# v0 = aten.mul.Tensor(in0, in1) -> bfloat16, computed in float32" in source
    assert "v1 = to_bfloat16(tl.sin(v0.to(tl.float32)))" in source
    assert repr(kernel) == "FusedKernel('fused_mul_sin_0', aten.mul.Tensor, aten.sin.default)"


def test_division_by_a_number_is_eagers_on_each_device():
    """Eager on CUDA multiplies by the number's reciprocal, rounded in float32; the CPU divides.
    On an H200 a kernel that divided was one unit in the last place from eager's in 13 of 35
    values. Whichever source runs, the other device's is checked here by its text."""
    x = sample((5, 7), torch.float32)
    (kernel,) = kernels(fused(lambda x: aten.div.Scalar(x, 7) + 1, x))
    reciprocal = (torch.tensor(1.0, device="cpu") / 7).item()  # 0.1428571492433548, not 1/7
    sources = {
        gpu: triton_kernels.kernel_source(kernel.program, kernel.input_layouts, gpu=gpu)
        for gpu in (True, False)
    }
    assert f"v0 = in0 * {reciprocal!r}" in sources[True]
    assert "v0 = tl.div_rn(in0, 7)" in sources[False]
    assert kernel.source == sources[not triton_kernels.interpreting()]
    divided, multiplied = x / 7, x * torch.tensor(reciprocal)
    assert not torch.equal(divided, multiplied)  # the test tells the two apart


def cache_sin(x):
    return (x * 2).sin()


#: Another process builds `cache_sin`'s kernel, in the cache directory of its environment.
BUILD_IN_ANOTHER_PROCESS = f"""
import sys, tempfile, torch
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_triton import cache_sin, fused, sample
x = sample((5, 7), torch.float32)
fused(cache_sin, x)(x)
print(tempfile.gettempdir())
"""


def test_kernels_are_written_once_to_one_cache_directory(tmp_path, monkeypatch):
    """Every build of a kernel, in this process or another, imports one file named by its source's
    hash, in $AOTSPEC_CACHE_DIR/triton; none writes a directory of its own in the temp dir."""
    monkeypatch.setenv("AOTSPEC_CACHE_DIR", str(tmp_path / "cache"))
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))  # for the other process
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    x = sample((5, 7), torch.float32)

    def build() -> Path:
        triton_kernels._compiled.cache_clear()  # build again, as a new process would
        fused(cache_sin, x)(x)
        (path,) = (tmp_path / "cache" / "triton").glob("*.py")
        return path

    path = build()
    (kernel,) = kernels(fused(cache_sin, x))
    assert path.read_text() == kernel.source
    assert path.name.startswith("triton_mul_sin_")
    written = path.stat()
    assert build() == path
    command = [sys.executable, "-c", BUILD_IN_ANOTHER_PROCESS]
    child = subprocess.run(command, capture_output=True, text=True, check=True)
    assert child.stdout.strip() == str(temp)
    assert [*(tmp_path / "cache" / "triton").glob("*.py")] == [path]
    # Read, never written again: the same file (a rewrite would be another inode, os.replace'd).
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    assert not [*(tmp_path / "cache" / "triton").glob(".*.tmp")]
    assert not [*temp.glob("aotspec-triton-*")]


def test_cache_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("AOTSPEC_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert triton_kernels.cache_directory() == tmp_path / ".cache" / "aotspec" / "triton"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # invalid: ignored
    assert triton_kernels.cache_directory() == tmp_path / ".cache" / "aotspec" / "triton"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert triton_kernels.cache_directory() == tmp_path / "xdg" / "aotspec" / "triton"
    monkeypatch.setenv("AOTSPEC_CACHE_DIR", str(tmp_path / "mine"))
    assert triton_kernels.cache_directory() == tmp_path / "mine" / "triton"


def test_a_kernel_file_is_replaced_whole(monkeypatch, tmp_path):
    """A file that is not the source its name hashes (say, a hash collision) is replaced."""
    monkeypatch.setenv("AOTSPEC_CACHE_DIR", str(tmp_path))
    path = triton_kernels.kernel_file("triton_k", "source\n")
    assert path.parent == tmp_path / "triton" and path.read_text() == "source\n"
    path.write_text("sou")
    assert triton_kernels.kernel_file("triton_k", "source\n") == path
    assert path.read_text() == "source\n"
    assert [p.name for p in path.parent.iterdir()] == [path.name]


# ---------------------------------------------------------------- the fusion pass


def test_one_kernel_replaces_the_chain():
    x, w = sample((4, 3), torch.float32), sample((3,), torch.float32, 1)
    module = assert_like_eager(lambda x, w: (x * w).sin().relu() + 1, x, w)
    assert "add = fused_mul_sin_relu_add_0(x_1, w_1)" in module.code
    ops = [node.target for node in module.graph.nodes if node.op == "call_function"]
    assert len(ops) == 1


def test_values_read_outside_become_outputs():
    def fn(x):
        y = x.sin()
        z = (y * 2).cos()
        return z + y.sum(), y

    module = assert_like_eager(fn, sample((6,), torch.float32))
    (kernel,) = kernels(module)
    assert [step.op for step in kernel.program.steps] == [
        aten.sin.default,
        aten.mul.Tensor,
        aten.cos.default,
    ]
    assert kernel.program.outputs == (0, 2)
    getitems = [node for node in module.graph.nodes if node.target is operator.getitem]
    assert [node.name for node in getitems] == ["sin", "cos"]


def test_a_value_read_between_two_ops_splits_the_group():
    # `sum` reads `mul`'s value before `exp` runs: a kernel of mul and exp would run after the sum.
    def fn(x):
        y = x * 2
        total = y.sum()
        return y.exp() + total

    module = assert_like_eager(fn, sample((6,), torch.float32))
    assert [str(node.target) for node in module.graph.nodes if node.op == "call_function"] == [
        "aten.mul.Tensor",
        "aten.sum.default",
        "FusedKernel('fused_exp_add_0', aten.exp.default, aten.add.Tensor)",
    ]


def test_a_node_joins_every_group_it_reads():
    module = assert_like_eager(lambda x: x.sin() + x.cos(), sample((6,), torch.bfloat16))
    (kernel,) = kernels(module)
    assert kernel.name == "fused_sin_cos_add_0"


def test_the_pass_is_linear_in_graph_size():
    def long_chain(x):
        for _ in range(400):
            x = (x * 1.5).sin()
        return x

    traced = make_fx(long_chain, tracing_mode="fake")(sample((4,), torch.float32))
    started = time.perf_counter()
    module = fuse_pointwise(traced)
    assert time.perf_counter() - started < 5.0
    (kernel,) = kernels(module)
    assert len(kernel.program.steps) == 800


def test_every_node_keeps_its_meta_value():
    module = fused(lambda x: ((x * 2).sin(), x.sin().sum()), sample((6,), torch.float32))
    for node in module.graph.nodes:
        assert node.op == "output" or "val" in node.meta, node.format_node()


def test_the_argument_module_is_left_as_it_is():
    traced = make_fx(lambda x: (x * 2).sin(), tracing_mode="fake")(sample((3,), torch.float32))
    before = traced.code
    fuse_pointwise(traced)
    assert traced.code == before


STAYS_WITH_TORCH = {
    "views": (lambda x: (x * 2).t().sin(), aten.t.default),
    "reductions": (lambda x: (x * 2).sum(0).exp(), aten.sum.dim_IntList),
    "matmuls": (lambda x: ((x * 2) @ x).relu(), aten.mm.default),
    "in-place": (lambda x: (x * 2).add_(1).sin(), aten.add_.Tensor),
    # dropout is native_dropout on CUDA tensors, a bernoulli_ into a mask on the CPU's
    "random": (
        lambda x: torch.nn.functional.dropout(x * 2, 0.5).sin(),
        aten.native_dropout.default if ON_GPU else aten.bernoulli_.float,
    ),
    "float64": (lambda x: (x * 2).double().sin().cos(), aten.sin.default),
}


@pytest.mark.parametrize("name", list(STAYS_WITH_TORCH))
def test_what_stays_with_torch(name):
    fn, op = STAYS_WITH_TORCH[name]
    module = fused(fn, sample((4, 4), torch.float32))
    assert op in [node.target for node in module.graph.nodes], module.code


@pytest.mark.skipif(ON_GPU, reason="about CPU inputs: CUDA inputs always request Triton")
def test_triton_requested(monkeypatch):
    traced = make_fx(lambda x: x.sin(), tracing_mode="fake")(sample((3,), torch.float32))
    assert not triton_requested(traced)
    monkeypatch.setenv("AOTSPEC_TRITON", "1")
    assert triton_requested(traced)


def test_without_triton_a_kernel_runs_torch_ops():
    x, w = sample((4, 3), torch.float32), sample((3,), torch.float32, 1)
    traced = make_fx(lambda x, w: (x * w).sin(), tracing_mode="fake")(x, w)
    module = fuse_pointwise(traced, use_triton=False)
    torch.testing.assert_close(module(x, w), (x * w).sin(), rtol=0, atol=0)


# ---------------------------------------------------------------- end to end

RUNTIME = Path(__file__).parents[1] / "fast" / "runtime.py"


def chain_then_sum(x, w):
    return ((x * w).sin() * x).relu().sum()


def bfloat16_pack(t):
    return t.to(torch.bfloat16)


def float32_unpack(t):
    return t.to(torch.float32)


@pytest.mark.skipif(
    "fuse_pointwise" not in RUNTIME.read_text(),
    reason="fast/runtime.py does not call fuse_pointwise yet",
)
@pytest.mark.parametrize(
    "hooks", [None, (bfloat16_pack, float32_unpack)], ids=["no-hooks", "bfloat16-hooks"]
)
def test_compiled_function_runs_fused_kernels(monkeypatch, hooks):
    """aotspec.compile(backend="fast") with AOTSPEC_TRITON=1 agrees with the reference backend,
    forward and backward; with bfloat16 saved-tensor hooks, their pack casts run in kernels."""
    monkeypatch.setenv("AOTSPEC_TRITON", "1")
    x, w = sample((8, 16), torch.float32), sample((16,), torch.float32, 1)
    results = {}
    for backend in ("reference", "fast"):
        # The reference runs on the CPU, on the same values, whatever DEVICE is.
        on = torch.device("cpu") if backend == "reference" else DEVICE
        with on:  # the default device of what the backend makes
            xb, wb = (t.to(on, copy=True).requires_grad_() for t in (x, w))
            compiled = aotspec.compile(chain_then_sum, backend=backend)
            before = triton_kernels.LAUNCHES.copy()
            if hooks is None:
                out = compiled(xb, wb)
            else:
                with torch.autograd.graph.saved_tensors_hooks(*hooks):
                    out = compiled(xb, wb)
            out.backward()
        results[backend] = tuple(t.cpu() for t in (out.detach(), xb.grad, wb.grad))
    torch.testing.assert_close(results["fast"], results["reference"])
    (plan,) = compiled.plans.values()
    ran = kernels(plan.forward) + kernels(plan.backward)
    wanted = collections.Counter(f"triton_{kernel.program.name}" for kernel in ran)
    assert triton_kernels.LAUNCHES - before == wanted, "Triton did not run the fused kernels"
    forward_steps = [step for kernel in kernels(plan.forward) for step in kernel.program.steps]
    assert forward_steps, plan.source
    if hooks is not None:
        assert any(
            step.op == aten._to_copy.default and step.dtype == torch.bfloat16
            for step in forward_steps
        )
