"""Triton kernels for chains of pointwise ops: the program a kernel runs, its source, its launch.

A `KernelProgram` is a straight line of `Step`s over tensors of one shape: each step is one aten
pointwise op whose operands are the kernel's tensor arguments (`Input`), earlier steps' results
(`Value`) or Python scalars. The generated kernel runs over the flat, contiguous index range of
that shape, BLOCK elements per program instance:

1. load each input at the index (broadcast inputs through their strides, masked past the end);
2. compute each step as eager PyTorch does (`r[ops.opmath]`): float16 and bfloat16 operands are
   widened to float32, and the result is rounded to the step's dtype right after the step, so a
   chain rounds once per op exactly like eager, never once per chain;
3. store the program's outputs, contiguous.

Differences from eager PyTorch: transcendental functions (`exp`, `sin`, `erf`, `rsqrt`, ...)
come from Triton's math library (numpy's under TRITON_INTERPRET=1), not from PyTorch's, so a
float32 result may differ in its last bits, and a float16/bfloat16 result by one unit in the last
place where that float32 difference crosses a rounding boundary; within assert_close's default
tolerances (checked in CI under the interpreter only). Square root (`sqrt_rn`) rounds correctly;
eager float32 `sqrt` on CPU need not: PyTorch built with MKL calls MKL's vector math, accurate to
one unit in the last place, and on some x86-64 CPUs (AMD EPYC, for one) about one value in six
comes out one unit away (float16 and bfloat16 eager square roots do not go through MKL and round
correctly). Everything else is bit-exact: addition, multiplication and division (`div_rn`) round
correctly in float32 as in eager (on a GPU, a division by a Python number is a product with its
reciprocal, as eager's on CUDA), `x + alpha * y` is one fused multiply-add as in eager's
vectorized kernels (eager's scalar loop over a float16 or bfloat16 tensor's last elements rounds
it twice), and each rounding to bfloat16 is done by `to_bfloat16`, to nearest even, as c10 does.

Kernels are compiled once per process for each (program, input layouts, interpreter mode), from a
source file (Triton reads a kernel's source from its file). The file lies in one cache directory
shared by every process, like Triton's and inductor's caches, named by a hash of its contents:

- `$AOTSPEC_CACHE_DIR/triton` if AOTSPEC_CACHE_DIR is set;
- else `$XDG_CACHE_HOME/aotspec/triton` if XDG_CACHE_HOME is set (to an absolute path);
- else `~/.cache/aotspec/triton`.

A process that finds its kernel's file there reads it as it is; one that does not writes it
atomically (a temporary file in the same directory, then `os.replace`), so processes racing to
write one kernel never read half a file. Nothing is ever removed from the directory; deleting
it between runs is safe (the kernels are written again).
"""

from __future__ import annotations

import collections
import enum
import functools
import hashlib
import importlib.util
import math
import os
import threading
from collections.abc import Callable
from pathlib import Path

import torch
from attrs import frozen

from aotspec.reference.optable import bind

aten = torch.ops.aten

#: Elements per program instance.
BLOCK = 1024

#: Dtypes a kernel loads, computes and stores (float64 and complex stay with torch).
KERNEL_DTYPES = {
    torch.float32: "tl.float32",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.int8: "tl.int8",
    torch.int16: "tl.int16",
    torch.int32: "tl.int32",
    torch.int64: "tl.int64",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
}

#: Kernels launched in this process, by kernel name (`triton_mul_sin`): the tests check that a
#: fused path they asked for ran its kernels, since falling back to torch ops gives the same
#: values.
LAUNCHES: collections.Counter[str] = collections.Counter()

#: Reduced floats compute in float32 (`r[ops.opmath]`).
REDUCED_FLOATS = frozenset({torch.float16, torch.bfloat16})


def opmath(dtype: torch.dtype) -> torch.dtype:
    """The dtype eager PyTorch computes a `dtype` op in: float32 for reduced floats."""
    return torch.float32 if dtype in REDUCED_FLOATS else dtype


# ---------------------------------------------------------------- programs


@frozen
class Input:
    """An operand: the kernel's `index`-th tensor argument."""

    index: int


@frozen
class Value:
    """An operand: the result of the program's `index`-th step."""

    index: int


@frozen
class Step:
    """One pointwise op, `op(*args, **kwargs)`, with Input/Value operands among its arguments."""

    op: torch._ops.OpOverload
    args: tuple
    kwargs: tuple[tuple[str, object], ...]
    #: The dtype of the step's result.
    dtype: torch.dtype
    #: The dtype the step computes in (see `ComputeIn`).
    compute_dtype: torch.dtype


@frozen(cache_hash=True)
class KernelProgram:
    """Steps over tensors of one `shape`; the results of the steps in `outputs` are stored."""

    steps: tuple[Step, ...]
    outputs: tuple[int, ...]
    shape: tuple[int, ...]

    @property
    def name(self) -> str:
        """`mul_sin_relu_add`: the program's distinct ops in order, the first four."""
        names = dict.fromkeys(step.op.overloadpacket.__name__.lstrip("_") for step in self.steps)
        return "_".join(list(names)[:4])

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@frozen
class InputLayout:
    """How a kernel reads one input: its dtype, its strides broadcast to the program's shape."""

    dtype: torch.dtype
    strides: tuple[int, ...]

    @classmethod
    def of(cls, tensor: torch.Tensor, shape: tuple[int, ...]) -> InputLayout:
        """`tensor` (real or fake) read at `shape`: stride 0 along broadcast dims; a dim of size 1
        is never stepped along, so it takes its contiguous stride, whatever the tensor's."""
        lead = len(shape) - tensor.dim()
        strides = list(contiguous_strides(shape))
        for d, size in enumerate(shape):
            if size != 1:
                stretched = d < lead or tensor.shape[d - lead] != size
                strides[d] = 0 if stretched else tensor.stride(d - lead)
        return cls(tensor.dtype, tuple(strides))


def contiguous_strides(shape) -> tuple[int, ...]:
    """Row-major strides; a dim of size 0 or 1 counts as size 1, as in PyTorch."""
    strides, stride = [], 1
    for size in reversed(shape):
        strides.append(stride)
        stride *= max(size, 1)
    return tuple(reversed(strides))


# ---------------------------------------------------------------- the op table


class ComputeIn(enum.Enum):
    """Which dtype a step computes in."""

    #: opmath of the result's dtype: arithmetic (`add`, `sin`, `where`, ...).
    RESULT = "result"
    #: opmath of the operands' promoted dtype: comparisons, whose result is bool.
    OPERANDS = "operands"
    #: the operand's own dtype: copies and casts, which convert once, to the result's dtype.
    SOURCE = "source"


@frozen
class PointwiseRule:
    """How one aten op becomes a Triton expression.

    `expression` takes the op's schema arguments in order: operands as Triton expressions already
    cast to the step's compute dtype, other arguments as the Python values of the graph.
    """

    expression: Callable[..., str]
    compute_in: ComputeIn = ComputeIn.RESULT
    #: The expression's dtype is bool (a comparison), not the compute dtype.
    gives_bool: bool = False
    #: Transcendental and rounding functions: Triton has them for floats only.
    floats_only: bool = False
    #: Schema positions of operands read as they are, never cast (where's condition).
    uncast: frozenset[int] = frozenset()
    #: `expression` takes the step's compute dtype too, as the keyword `dtype`.
    takes_dtype: bool = False
    #: `expression` takes whether the kernel runs on a GPU, as the keyword `gpu`: eager computes
    #: the op differently there.
    takes_gpu: bool = False


#: aten op -> its rule. Every op here is an `OpKind.COMPUTE` entry of `reference/optable.py`.
POINTWISE_RULES: dict[torch._ops.OpOverload, PointwiseRule] = {}


def pointwise(*overloads, **options):
    """Register `expression` as the Triton rule of each overload."""

    def register(expression):
        for overload in overloads:
            POINTWISE_RULES[overload] = PointwiseRule(expression, **options)
        return expression

    return register


def _function(overload, function: str) -> None:
    """A float op that is one Triton math function of its one operand."""
    pointwise(overload, floats_only=True)(lambda x: f"{function}({x})")


for _overload, _function_name in [
    (aten.exp.default, "tl.exp"),
    (aten.exp2.default, "tl.exp2"),
    (aten.log.default, "tl.log"),
    (aten.log2.default, "tl.log2"),
    (aten.sin.default, "tl.sin"),
    (aten.cos.default, "tl.cos"),
    (aten.sqrt.default, "tl.sqrt_rn"),
    (aten.rsqrt.default, "tl.rsqrt"),
    (aten.erf.default, "tl.erf"),
    (aten.floor.default, "tl.floor"),
    (aten.ceil.default, "tl.ceil"),
]:
    _function(_overload, _function_name)


@pointwise(aten.abs.default)
def abs_(x):
    return f"tl.abs({x})"


@pointwise(aten.neg.default)
def neg(x):
    return f"-{x}"


@pointwise(aten.relu.default)
def relu(x):
    # Not `x > 0 ? x : 0`: a NaN passes through relu, as through clamp_min.
    return f"tl.where({x} < 0, 0, {x})"


@pointwise(aten.sigmoid.default, floats_only=True)
def sigmoid(x):
    # Spelled out: tl.sigmoid is a jit function of triton.language, which runs in the interpreter
    # only if TRITON_INTERPRET=1 was set before triton.language was imported.
    return f"tl.div_rn(1.0, 1.0 + tl.exp(-{x}))"


@pointwise(aten.reciprocal.default, floats_only=True)
def reciprocal(x):
    return f"tl.div_rn(1.0, {x})"


@pointwise(aten.add.Tensor, aten.add.Scalar, takes_dtype=True)
def add(x, y, alpha, dtype):
    return f"{x} + {y}" if alpha == 1 else _plus_scaled(x, alpha, y, dtype)


@pointwise(aten.sub.Tensor, aten.sub.Scalar, takes_dtype=True)
def sub(x, y, alpha, dtype):
    return f"{x} - {y}" if alpha == 1 else _plus_scaled(x, -alpha, y, dtype)


def _plus_scaled(x, alpha, y, dtype: torch.dtype) -> str:
    # Eager computes a float `x + alpha * y` as one fused multiply-add, rounding once (the CPU's
    # vectorized kernels call fmadd, and CUDA contracts it): so does the kernel.
    if dtype.is_floating_point:
        return f"tl.fma({float(alpha)!r}, {y}, {x})"
    return f"{x} + {alpha} * {y}"


@pointwise(aten.mul.Tensor, aten.mul.Scalar)
def mul(x, y):
    return f"{x} * {y}"


@pointwise(aten.div.Tensor, aten.div.Scalar, floats_only=True, takes_dtype=True, takes_gpu=True)
def div(x, y, dtype, gpu):
    if gpu and isinstance(y, int | float) and not isinstance(y, bool):
        # Eager on CUDA divides by a number as a product with its reciprocal, the reciprocal
        # rounded in the compute dtype (div_true_kernel_cuda), one unit in the last place from
        # the quotient for many values (13 of 35 float32 values divided by 7 on an H200, where
        # the kernel divided correctly). The CPU divides. A reciprocal that overflows is left to
        # the division.
        reciprocal = (torch.tensor(1.0, dtype=dtype, device="cpu") / float(y)).item()
        if math.isfinite(reciprocal):
            return f"{x} * {reciprocal!r}"
    return f"tl.div_rn({x}, {y})"


def _maximum(x, y) -> str:
    # torch.maximum, clamp and clamp_min propagate a NaN from either side.
    return f"tl.maximum({x}, {y}, propagate_nan=tl.PropagateNan.ALL)"


def _minimum(x, y) -> str:
    return f"tl.minimum({x}, {y}, propagate_nan=tl.PropagateNan.ALL)"


pointwise(aten.maximum.default, aten.clamp_min.default)(_maximum)
pointwise(aten.minimum.default, aten.clamp_max.default)(_minimum)


@pointwise(aten.clamp.default, aten.clamp.Tensor)
def clamp(x, low, high):
    # PyTorch applies the lower bound, then the upper one: low > high gives high everywhere.
    if low is not None:
        x = _maximum(x, low)
    return x if high is None else _minimum(x, high)


@pointwise(aten.where.self, uncast=frozenset({0}))
def where(condition, x, y):
    return f"tl.where({condition}, {x}, {y})"


@pointwise(aten.threshold_backward.default)
def threshold_backward(grad, x, threshold):
    return f"tl.where({x} <= {threshold}, 0, {grad})"


def _comparison(symbol: str):
    return lambda x, y: f"{x} {symbol} {y}"


for _overloads, _symbol in [
    ((aten.eq.Tensor, aten.eq.Scalar), "=="),
    ((aten.ne.Tensor, aten.ne.Scalar), "!="),
    ((aten.lt.Tensor, aten.lt.Scalar), "<"),
    ((aten.le.Tensor, aten.le.Scalar), "<="),
    ((aten.gt.Tensor, aten.gt.Scalar), ">"),
    ((aten.ge.Tensor, aten.ge.Scalar), ">="),
]:
    pointwise(*_overloads, compute_in=ComputeIn.OPERANDS, gives_bool=True)(_comparison(_symbol))


@pointwise(aten.isnan.default, compute_in=ComputeIn.OPERANDS, gives_bool=True)
def isnan(x):
    return f"{x} != {x}"


@pointwise(aten.logical_not.default, compute_in=ComputeIn.OPERANDS, gives_bool=True)
def logical_not(x):
    return f"{x} == 0"


@pointwise(aten.logical_and.default, compute_in=ComputeIn.OPERANDS, gives_bool=True)
def logical_and(x, y):
    return f"({x} != 0) & ({y} != 0)"


@pointwise(aten.logical_or.default, compute_in=ComputeIn.OPERANDS, gives_bool=True)
def logical_or(x, y):
    return f"({x} != 0) | ({y} != 0)"


@pointwise(aten._to_copy.default, aten.clone.default, compute_in=ComputeIn.SOURCE)
def copy(x, *_):
    # The conversion to the result's dtype is the step's final cast (see `_converted`).
    return x


# ---------------------------------------------------------------- source


def kernel_source(program: KernelProgram, layouts: tuple[InputLayout, ...], *, gpu: bool) -> str:
    """The `@triton.jit` kernel computing `program` from inputs laid out as `layouts`, on a GPU
    (`gpu`) or in Triton's interpreter, on CPU tensors (each matches eager on its device)."""
    contiguous = contiguous_strides(program.shape)
    pointers = [
        f"in{i}_ptr,  # {_describe(layout, contiguous)}" for i, layout in enumerate(layouts)
    ]
    pointers += [f"out{k}_ptr,  # v{v}, contiguous" for k, v in enumerate(program.outputs)]
    lines = [
        "@triton.jit",
        f"def triton_{program.name}(",
        *(f"    {pointer}" for pointer in pointers),
        "    n_elements,  # of the output",
        "    BLOCK: tl.constexpr,",
        "):",
        "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
        "    mask = offsets < n_elements  # the last block runs past the end",
    ]
    for i, layout in enumerate(layouts):
        lines.append(f"    in{i} = {_load(f'in{i}_ptr', layout.strides, program.shape)}")
    dtypes = {Input(i): layout.dtype for i, layout in enumerate(layouts)}
    for v, step in enumerate(program.steps):
        lines.append(f"    # {_describe_step(v, step)}")
        lines.append(f"    v{v} = {_step_expression(step, dtypes, gpu)}")
        dtypes[Value(v)] = step.dtype
    for k, v in enumerate(program.outputs):
        lines.append(f"    tl.store(out{k}_ptr + offsets, v{v}, mask=mask)")
    body = "\n".join(lines) + "\n"
    helpers = TO_BFLOAT16 + "\n" if "to_bfloat16(" in body else ""
    return f"import triton\nimport triton.language as tl\n\n{helpers}\n{body}"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _describe(layout: InputLayout, contiguous: tuple[int, ...]) -> str:
    if layout.strides == contiguous:
        return f"{_dtype_name(layout.dtype)}, contiguous"
    return f"{_dtype_name(layout.dtype)}, strides {layout.strides}"


def _describe_step(v: int, step: Step) -> str:
    arguments = [*map(_name, step.args), *(f"{key}={_name(value)}" for key, value in step.kwargs)]
    rule = POINTWISE_RULES[step.op]
    computed = rule.compute_in is not ComputeIn.SOURCE and step.compute_dtype != step.dtype
    opmath = f", computed in {_dtype_name(step.compute_dtype)}" if computed else ""
    return f"v{v} = {step.op}({', '.join(arguments)}) -> {_dtype_name(step.dtype)}{opmath}"


def _name(argument) -> str:
    if isinstance(argument, Input):
        return f"in{argument.index}"
    if isinstance(argument, Value):
        return f"v{argument.index}"
    return str(argument)


def _load(pointer: str, strides: tuple[int, ...], shape: tuple[int, ...]) -> str:
    """A masked load at the flat index of each output element. A value broadcast to every element
    is a block too, every element loading its one address: Triton's interpreter turns a scalar's
    comparison, broadcast into a block, into a value `&` and `|` refuse."""
    if strides == contiguous_strides(shape):
        return f"tl.load({pointer} + offsets, mask=mask)"
    terms = []
    inner = 1  # output elements per step along dim d
    for d in reversed(range(len(shape))):
        if shape[d] != 1 and strides[d] != 0:
            index = "offsets" if inner == 1 else f"offsets // {inner}"
            index = index if d == 0 else f"{index} % {shape[d]}"
            terms.append(index if strides[d] == 1 else f"({index}) * {strides[d]}")
        inner *= shape[d]
    if not terms:
        return f"tl.load({pointer} + offsets * 0, mask=mask)"
    return f"tl.load({pointer} + {' + '.join(reversed(terms))}, mask=mask)"


def _step_expression(step: Step, dtypes: dict, gpu: bool) -> str:
    rule = POINTWISE_RULES[step.op]
    arguments = []
    for position, argument in enumerate(bind(step.op._schema, step.args, dict(step.kwargs))):
        if isinstance(argument, Input | Value) and position not in rule.uncast:
            arguments.append(_converted(_name(argument), dtypes[argument], step.compute_dtype))
        elif isinstance(argument, Input | Value):
            arguments.append(_name(argument))
        else:
            arguments.append(argument)
    options = {"dtype": step.compute_dtype} if rule.takes_dtype else {}
    if rule.takes_gpu:
        options["gpu"] = gpu
    expression = rule.expression(*arguments, **options)
    return _converted(
        expression, torch.bool if rule.gives_bool else step.compute_dtype, step.dtype
    )


def _converted(expression: str, source: torch.dtype, target: torch.dtype) -> str:
    """`expression`, of dtype `source`, converted to `target` as PyTorch converts."""
    if source == target:
        return expression
    if source in REDUCED_FLOATS or (target in REDUCED_FLOATS and source != torch.float32):
        # PyTorch converts to and from float16 and bfloat16 through float32 (c10::BFloat16(float)).
        expression, source = f"{_atom(expression)}.to(tl.float32)", torch.float32
        if source == target:
            return expression
    if target == torch.bool:
        return f"{_atom(expression)} != 0"  # nonzero is True
    if target == torch.bfloat16:
        return f"to_bfloat16({expression})"
    return f"{_atom(expression)}.to({KERNEL_DTYPES[target]})"


def _atom(expression: str) -> str:
    """`expression`, parenthesized unless it is a name."""
    return expression if expression.isidentifier() else f"({expression})"


#: float32 -> bfloat16, rounding to nearest, ties to even, as c10::BFloat16(float) does. Not
#: `.to(tl.bfloat16)`: Triton's interpreter truncates there, where the GPU rounds.
TO_BFLOAT16 = """
@triton.jit
def to_bfloat16(x):
    bits = x.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    is_nan = (bits & 0x7FFFFFFF) > 0x7F800000
    return tl.where(is_nan, 0x7FC0, rounded).to(tl.uint16).to(tl.bfloat16, bitcast=True)
"""


# ---------------------------------------------------------------- compile and launch


def interpreting() -> bool:
    """Is TRITON_INTERPRET=1 set: do kernels run in Triton's numpy interpreter (on CPU tensors)?"""
    # Imported here, as in `launch`: importing aotspec loads no Triton until a kernel may run.
    from triton import knobs

    return knobs.runtime.interpret


def launch(program: KernelProgram, tensors) -> list[torch.Tensor]:
    """Run `program`'s kernel on `tensors` (all on one device); returns its outputs."""
    import triton

    layouts = tuple(InputLayout.of(t, program.shape) for t in tensors)
    kernel = _compiled(program, layouts, interpreting())
    device = tensors[0].device
    outputs = [
        torch.empty(program.shape, dtype=program.steps[v].dtype, device=device)
        for v in program.outputs
    ]
    if program.numel > 0:
        kernel[(triton.cdiv(program.numel, BLOCK),)](
            *tensors, *outputs, program.numel, BLOCK=BLOCK
        )
        LAUNCHES[f"triton_{program.name}"] += 1
    return outputs


@functools.cache
def _compiled(program: KernelProgram, layouts: tuple[InputLayout, ...], interpret: bool):
    # `interpret` is part of the key: triton.jit reads TRITON_INTERPRET when it wraps the kernel.
    name = f"triton_{program.name}"
    path = kernel_file(name, kernel_source(program, layouts, gpu=not interpret))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def cache_directory() -> Path:
    """The directory of generated kernel sources (see the module docstring); read at each call."""
    if configured := os.environ.get("AOTSPEC_CACHE_DIR"):
        return Path(configured) / "triton"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG base directory specification: a relative path is invalid and is ignored.
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "aotspec" / "triton"


def kernel_file(name: str, source: str) -> Path:
    """`<name>_<hash of source>.py` in the cache directory, holding `source`: written if absent."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    directory = cache_directory()
    path = directory / f"{name}_{digest}.py"
    try:
        if path.read_text() == source:  # written by this or an earlier process
            return path
    except FileNotFoundError:
        pass
    directory.mkdir(parents=True, exist_ok=True)
    # Unique to this process and thread; hidden, and not `*.py`, so never taken for a kernel.
    temporary = directory / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        temporary.write_text(source)
        os.replace(temporary, path)  # atomic: a reader sees the old file or the whole new one
    finally:
        temporary.unlink(missing_ok=True)
    return path
