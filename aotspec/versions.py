"""What differs between the torch releases aotspec supports, in one place.

aotspec runs on every torch release of `SUPPORTED_TORCH` (and the Triton each one brings). Code
elsewhere never compares version numbers: where releases differ (an internal module's path, an
op's schema, what Dynamo or fake tensors do, the functional collectives), it asks this module,
and this module detects the difference by feature wherever a feature can be probed, by release
only where nothing else tells.

Each difference is one small named function or constant with a docstring saying which releases
do what, and one test in `tests/test_versions.py` that fails if the detection is wrong on the
torch the tests run on. A feature aotspec cannot support on some release raises a named
`UnsupportedError` there, never a wrong result.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import re
import sys
import traceback
from collections.abc import Callable, Generator, Iterator

import sympy
import torch
import torch.fx._symbolic_trace
import torch.fx.proxy
import torch.utils.checkpoint
from torch.autograd.function import _SingleLevelFunction
from torch.fx.experimental import proxy_tensor
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.shape_prop import TensorMetadata

#: The torch releases aotspec supports, as pyproject.toml's dependency says: 2.11 up to 2.15.
SUPPORTED_TORCH = ">=2.11,<2.16"
_OLDEST = (2, 11)
_FIRST_UNSUPPORTED = (2, 16)


def torch_release(version: str | None = None) -> tuple[int, int]:
    """(major, minor) of a torch version string (`"2.13.0+cpu"`, `"2.16.0.dev20260101"`);
    torch's own by default."""
    text = str(torch.__version__ if version is None else version)
    found = re.match(r"(\d+)\.(\d+)", text)
    if found is None:
        raise ImportError(f"aotspec cannot read the torch version {text!r}")
    return int(found[1]), int(found[2])


def check_torch(version: str | None = None) -> None:
    """Raise ImportError, naming the supported range, for a torch release outside it.

    A pre-release of the first unsupported release (2.16.0a0, a nightly) is outside too: what
    differs there is not known yet."""
    release = torch_release(version)
    if not _OLDEST <= release < _FIRST_UNSUPPORTED:
        found = torch.__version__ if version is None else version
        raise ImportError(
            f"aotspec supports torch {SUPPORTED_TORCH} (2.11 to 2.15), and this is torch "
            f"{found}: install a supported release (`pip install 'torch{SUPPORTED_TORCH}'`)"
        )


# ---------------------------------------------------------------- tracing


@contextlib.contextmanager
def stack_traces_of(fn: Callable) -> Iterator[None]:
    """Inside, `make_fx(..., record_stack_traces=True)` keeps the frames of `fn` in each node's
    stack trace (`node.meta["stack_trace"]`, where `aotspec explain` finds the user's lines).

    make_fx keeps only frames it knows for user code: those of a function named `forward`, and,
    from torch 2.13, those of functions registered with
    `torch.fx.proxy._register_stack_trace_anchor`, which is used where it exists. Before 2.13
    (torch 2.11, 2.12) the tracer's frame filter is widened for the duration to keep `fn`'s
    frames as well, as the registration does."""
    register = getattr(torch.fx.proxy, "_register_stack_trace_anchor", None)
    if register is not None:
        register(fn)
        with _anchored_frames_only():
            yield
        return
    code = getattr(fn, "__code__", None)
    tracer = torch.fx.proxy.TracerBase
    original = tracer._filter_traceback_frames

    def keeping_fn(self, summary: traceback.StackSummary) -> traceback.StackSummary:
        kept = original(self, summary)
        if code is None or not self._record_forward_stack_traces_only:
            return kept
        anchor = (code.co_filename, code.co_name)
        return traceback.StackSummary.from_list(
            [frame for frame in summary if frame in kept or (frame.filename, frame.name) == anchor]
        )

    tracer._filter_traceback_frames = keeping_fn
    try:
        yield
    finally:
        tracer._filter_traceback_frames = original



@contextlib.contextmanager
def _anchored_frames_only() -> Iterator[None]:
    """make_fx's tracer builds each node's stack trace from `CapturedTraceback.extract()`'s
    summary, every frame of the stack with its source line read, and then keeps those of user
    code: frames of functions named `forward`, of torch/__init__.py or registered as anchors
    (`_STACK_TRACE_ANCHORS`), a tenth of a capture. Inside, a tracer that keeps only those
    (`_record_forward_stack_traces_only`) is given only those frames, summarized as the full
    summary has them (file, line number, function name, source line): it keeps the same."""
    full = torch.fx.proxy.CapturedTraceback
    anchors = torch.fx.proxy._STACK_TRACE_ANCHORS

    class AnchoredFrames:
        __slots__ = ("frame",)

        def __init__(self, frame):
            self.frame = frame

        @staticmethod
        def extract(*, script=False, cpp=False, skip=0):
            caller = sys._getframe(1)
            filters = getattr(caller.f_locals.get("self"), "_record_forward_stack_traces_only", 0)
            if script or cpp or skip or not filters:
                return full.extract(script=script, cpp=cpp, skip=skip + 1)
            return AnchoredFrames(caller)

        def summary(self) -> traceback.StackSummary:
            kept, frame = [], self.frame
            while frame is not None:
                code = frame.f_code
                name, filename = code.co_name, code.co_filename
                if (
                    name == "forward"
                    or filename.endswith("torch/__init__.py")
                    or (filename, name) in anchors
                ):
                    kept.append(traceback.FrameSummary(filename, frame.f_lineno, name))
                frame = frame.f_back
            return traceback.StackSummary.from_list(kept[::-1])

    torch.fx.proxy.CapturedTraceback = AnchoredFrames
    try:
        yield
    finally:
        torch.fx.proxy.CapturedTraceback = full


@functools.cache
def traces_generators() -> bool:
    """Does make_fx record a `torch.Generator` the traced function reads (`generator=g`) as a
    constant of the graph?

    From torch 2.13 `torch.Generator` is an opaque reference type of torch's library, which the
    tracer keeps as a graph attribute; torch 2.11's tracer raises NotImplementedError ("argument
    of type: <class 'torch._C.Generator'>"), so such a program is refused there
    (`r[ops.random.generator-capture]`)."""
    from torch._library import opaque_object

    is_reference = getattr(opaque_object, "is_opaque_reference_type", None)
    return is_reference is not None and bool(is_reference(torch.Generator))



def make_fx_keeping_detach(fn: Callable, **options) -> Callable[..., torch.fx.GraphModule]:
    """`make_fx(fn, **options)` that records `aten.detach` as `aten.detach`.

    From torch 2.14, make_fx given no decomposition table decomposes `aten.detach` into
    `aten.alias` (a no-op decomposition, pytorch/pytorch#186845): the graph it returns lets a
    gradient through where eager's detach stops it. An explicit table, even an empty one, keeps
    detach on every release; aotspec's passes differentiate the graphs they trace, so they pass
    one.

    The traces leave out make_fx's torch-function metadata mode (`node.meta["torch_fn"]`, which
    no pass reads): with it, every tensor method a pass calls while it traces (`.shape`,
    `.stride()`) goes through a Python mode, 5-10% of a trace. A symbolic size the trace did not
    make (a storage's bytes) is rebuilt from the sizes it did, two terms at a time
    (`_sums_and_products_in_pairs`), and `nn.Module`'s methods stay as they are
    (`_module_methods_kept`)."""
    traced = make_fx(
        fn,
        decomposition_table=options.pop("decomposition_table", {}),
        _disable_torch_fn_metadata_mode=True,
        **options,
    )

    @functools.wraps(traced)
    def tracing(*args):
        with _sums_and_products_in_pairs(), _module_methods_kept(), _memory_formats_remembered():
            return traced(*args)

    return tracing


@contextlib.contextmanager
def _memory_formats_remembered() -> Iterator[None]:
    """make_fx records each value's `tensor_meta` (`_extract_tensor_metadata`), whose memory
    format it finds by testing the value's contiguity in three formats, in Python: 4% of a
    fuzz program's CPU time. The format depends on sizes and strides alone; inside, it is found
    once for each sizes and strides that are integers (`_MEMORY_FORMATS`), the rest of the
    record as before, and symbolic sizes, sparse and quantized tensors as before."""
    original = getattr(proxy_tensor, "_extract_tensor_metadata", None)
    if original is None:
        yield
        return

    def extract(result: torch.Tensor, include_contiguity: bool = True):
        if not include_contiguity or result.layout != torch.strided or result.is_quantized:
            return original(result, include_contiguity)
        shape, stride = result.shape, result.stride()
        if not all(type(n) is int for n in (*shape, *stride)):
            return original(result, include_contiguity)
        key = (tuple(shape), stride)
        memory_format = _MEMORY_FORMATS.get(key, _UNKNOWN)
        if memory_format is _UNKNOWN:
            found = original(result, include_contiguity)
            if len(_MEMORY_FORMATS) >= 4096:
                _MEMORY_FORMATS.clear()
            _MEMORY_FORMATS[key] = found.memory_format
            return found
        return TensorMetadata(
            shape, result.dtype, result.requires_grad, stride, memory_format, False, {}
        )

    proxy_tensor._extract_tensor_metadata = extract
    try:
        yield
    finally:
        proxy_tensor._extract_tensor_metadata = original


#: The memory format `_extract_tensor_metadata` finds, by sizes and strides.
_MEMORY_FORMATS: dict[tuple, torch.memory_format | None] = {}
_UNKNOWN = object()


@contextlib.contextmanager
def _module_methods_kept() -> Iterator[None]:
    """At every trace, torch.fx's tracer replaces `nn.Module.__call__` and `__getattr__` with
    wrappers that ask the tracer what a module call or a module attribute becomes, and puts them
    back when the trace ends (`_Patcher.patch_method`). make_fx's tracer answers with the call's
    and the attribute's own results (it records aten ops, not module calls), so the wrappers
    change nothing, but assigning an attribute of `nn.Module` invalidates the attribute caches of
    every Module subclass: in a process that has imported Dynamo, 0.3 ms an assignment, four a
    trace, and slower attribute reads after. Within aotspec's traces (make_fx's tracer only)
    they are not installed. A release without `_Patcher.patch_method` traces as it does."""
    patcher = getattr(torch.fx._symbolic_trace, "_Patcher", None)
    original = getattr(patcher, "patch_method", None)
    if original is None:
        yield
        return

    def patch_method(self, cls, name, new_fn, deduplicate=True):
        if cls is not torch.nn.Module:
            original(self, cls, name, new_fn, deduplicate)

    patcher.patch_method = patch_method
    try:
        yield
    finally:
        patcher.patch_method = original


@contextlib.contextmanager
def _sums_and_products_in_pairs() -> Iterator[None]:
    """make_fx rebuilds a symbolic size it meets untraced (a storage's bytes, `4*s0*s1`) from
    the sizes it traced, term by term (`_build_proxy_for_sym_expr`). Through torch 2.13 (at
    least) it calls `operator.mul` or `operator.add` with every term of a product or sum of three
    or more, which takes two ("mul expected 2 arguments, got 3"). Within aotspec's traces such
    a sum or product is built two terms at a time."""
    original = proxy_tensor._build_proxy_for_sym_expr

    def build(tracer, expr, out=None):
        if not (isinstance(expr, (sympy.Add, sympy.Mul)) and len(expr.args) > 2):
            return original(tracer, expr, out)
        first = build(tracer, expr.func(*expr.args[:-1]))
        last = build(tracer, expr.args[-1])
        if first is None or last is None:
            return None
        pair = operator.add if isinstance(expr, sympy.Add) else operator.mul
        if out is None:
            return pair(first, last)
        proxy_tensor._sym_register(tracer, pair, (first, last), out)
        return out

    proxy_tensor._build_proxy_for_sym_expr = build
    try:
        yield
    finally:
        proxy_tensor._build_proxy_for_sym_expr = original


def custom_function_apply_owner() -> type:
    """The class on whose `apply` capture intercepts every custom autograd.Function's apply.

    Through torch 2.13, `Function.apply` is Python: it binds the forward's defaults, leaves
    functorch transforms to their own path, and calls autograd's C apply as `super().apply`, which
    `_SingleLevelFunction`, next in every Function's MRO, can intercept. From torch 2.14,
    `Function.apply` is the C apply itself, which does both: it is intercepted on `Function`."""
    function = torch.autograd.Function
    if function.__dict__.get("apply") is torch._C._FunctionBase.__dict__["apply"]:
        return function
    return _SingleLevelFunction


@contextlib.contextmanager
def checkpoint_generator_replaced(region: Callable[[Callable], Generator]) -> Iterator[None]:
    """While active, `checkpoint(fn, ..., use_reentrant=False)` runs the generator
    `region(context_fn)` around `fn` in place of its own, which enters saved_tensors_hooks.

    Through torch 2.13, checkpoint calls `_checkpoint_without_reentrant_generator(fn,
    preserve_rng_state, context_fn, determinism_check, debug, *args, **kwargs)`. From torch 2.14
    it calls `_checkpoint_without_reentrant_generator_impl(fn, args, kwargs, *, context_fn, ...)`
    (the old name stays for other callers), and replacing the old name alone leaves checkpoint
    entering its hooks inside the captured function."""
    module = torch.utils.checkpoint
    name = "_checkpoint_without_reentrant_generator_impl"
    if hasattr(module, name):

        def generator(fn, args, kwargs, *, context_fn=module.noop_context_fn, **options):
            return region(context_fn)

    else:
        name = "_checkpoint_without_reentrant_generator"

        def generator(fn, preserve_rng_state=True, context_fn=module.noop_context_fn, *a, **k):
            return region(context_fn)

    original = getattr(module, name)
    setattr(module, name, generator)
    try:
        yield
    finally:
        setattr(module, name, original)


def apply_references_intercepted() -> bool:
    """Whether capture sees a custom Function applied through a reference to its `apply` taken
    before capture (`op = MyFunction.apply`, as libraries write it); where it does not, such a
    Function is refused (`r[capture.custom-function.refused]`).

    Through torch 2.13 that reference is the Python `Function.apply`, which reaches the class
    capture patches through `super().apply`. From torch 2.14 it is autograd's C apply bound to
    the Function, which no patch of a class reaches."""
    return custom_function_apply_owner() is not torch.autograd.Function


# ---------------------------------------------------------------- Triton releases


@functools.cache
def interpreter_fma_rounds_once() -> bool:
    """Does Triton's interpreter (TRITON_INTERPRET=1) round `tl.fma(x, y, z)` once, as the GPU
    does? Triton 3.9 (torch 2.13's) does; Triton 3.6 (torch 2.11's) and 3.7 multiply and add in
    float32, rounding twice, so a fused `x + alpha * y` may be one unit in the last place away
    from eager's there. Only kernels run on CPU by the interpreter, in tests, see it.

    Probed on the interpreter's own fma: (1 + 2**-12)**2 - (1 + 2**-11) is 2**-24, once rounded;
    the float32 product alone rounds its 2**-24 away."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

    def handle(value: float) -> TensorHandle:
        return TensorHandle(np.array([value], np.float32), tl.float32)

    builder = InterpreterBuilder.__new__(InterpreterBuilder)  # create_fma reads no state
    fused = builder.create_fma(handle(1 + 2**-12), handle(1 + 2**-12), handle(-(1 + 2**-11)))
    return bool(fused.data[0] == np.float32(2**-24))


# ---------------------------------------------------------------- Dynamo's C entry points


def _dynamo_frame_api():
    """Dynamo's frame hook and per-code strategies (`torch._C._dynamo.eval_frame`), or None on
    a release without them as named here: private, checked on 2.13 only."""
    try:
        from torch._C._dynamo import eval_frame

        return (
            eval_frame.set_eval_frame,
            eval_frame.set_code_exec_strategy,
            eval_frame._FrameExecStrategy(
                eval_frame._FrameAction.SKIP, eval_frame._FrameAction.DEFAULT
            ),
        )
    except (ImportError, AttributeError, TypeError):
        return None


DYNAMO_FRAME_API = _dynamo_frame_api()


def untraced_by_dynamo(fn: Callable) -> Callable:
    """`fn` as `torch._disable_dynamo` leaves it (Dynamo traces neither it nor what it runs),
    without its Python frames at each call where this torch has Dynamo's frame hook in C: its
    code is marked skipped, and the hook is off while it runs. Importing Dynamo waits, either
    way, until something compiles."""
    if DYNAMO_FRAME_API is None:
        return torch._disable_dynamo(fn)
    set_eval_frame, set_code_exec_strategy, skipped = DYNAMO_FRAME_API

    @functools.wraps(fn)
    def untraced(*args):
        hook = set_eval_frame(None)
        try:
            return fn(*args)
        finally:
            set_eval_frame(hook)

    set_code_exec_strategy(untraced.__code__, skipped)
    untraced._torchdynamo_disable = True
    return untraced


def _tensor_guards():
    """Dynamo's C++ check of tensors' metadata (`torch._C._dynamo.guards.TensorGuards`), or None
    on a release without it as used here: private, checked on 2.13 only."""
    try:
        from torch._C._dynamo.guards import TensorGuards

        probe = torch.zeros(1)
        TensorGuards(probe, dynamic_dims_sizes=[[1]], dynamic_dims_strides=[[1]]).check(probe)
        return TensorGuards
    except (ImportError, AttributeError, TypeError, RuntimeError):
        return None


TENSOR_GUARDS = _tensor_guards()


# ---------------------------------------------------------------- Python releases


def add_note(error: BaseException, note: str) -> None:
    """`error.add_note(note)`, on Python 3.10 too.

    Python 3.11 added `BaseException.add_note`, which appends to `error.__notes__` and prints
    the notes under the traceback. On 3.10 the note goes into the same `__notes__` list, which
    pytest and aotspec's differential tests print, though 3.10's own traceback does not."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:
        error.__notes__ = [*getattr(error, "__notes__", ()), note]
