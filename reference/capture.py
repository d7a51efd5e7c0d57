"""Capture: a user's function and example inputs become an aten-level torch.fx graph.

`r[capture.aten-graph]`: the graph is what `make_fx` records on fake tensors: the aten ops eager
runs, each kernel one op, composite ops decomposed as PyTorch's dispatcher decomposes them, and
every mutation kept (`add_`, `copy_`, `set_.source_Tensor`, `inductor.resize_storage_bytes_`;
an ATen-valued op that writes its arguments as its functional variant and copy_).
`r[capture.detach-in-place]`: `detach_()`, which no kernel sees, is recorded as its own node.
`r[capture.no-side-effects]`: tracing runs on fake tensors, so the caller's tensors are never
written, resized or rebound by capture.
`r[capture.flat-inputs]`: arguments are flattened with pytree; tensor leaves become placeholders
in order, other leaves are baked into the program as constants.
"""

from __future__ import annotations

import builtins
import contextlib
import dis
import functools
import itertools
import os
import re
import sys
import traceback
import unittest.mock
from collections.abc import Callable
from operator import getitem
from typing import Any

import torch
import torch._higher_order_ops.wrap
import torch.fx
import torch.utils._pytree as pytree
import torch.utils.checkpoint
from attrs import define, field, frozen
from torch._C._functorch import TransformType
from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
)
from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot
from torch.fx.experimental.symbolic_shapes import (
    GuardOnDataDependentSymNode,
    PendingUnbackedSymbolNotFound,
    free_unbacked_symbols,
)
from torch.overrides import TorchFunctionMode

import aotspec.errors
from aotspec import rng_state
from aotspec.errors import UnsupportedError
from aotspec.versions import (
    add_note,
    apply_references_intercepted,
    checkpoint_generator_replaced,
    make_fx_keeping_detach,
    stack_traces_of,
    traces_generators,
)

from . import effects, ops  # noqa: F401  (importing them fills the op table)
from .aten import mutation_decompositions, shapes_from_arguments
from .collectives import check_collective
from .custom_functions import (
    Interception,
    custom_function_call,
    intercepting_apply,
)
from .decompositions import DECOMPOSITIONS
from .graph import source_line
from .optable import DERIVATIVES, METADATA_OPS, OpEntry, lookup
from .program_records import (
    NUMBER,
    TENSOR,
    CapturedProgram,
    ValueCheck,
    refuse_layout,
    refuse_lazy_bits,
)
from .sparse import CONSTRUCTORS as SPARSE_CONSTRUCTORS
from .sparse import SparseMadeInside

aten = torch.ops.aten


@functools.cache
def decompositions() -> dict:
    """What capture decomposes: every aten op that writes its arguments and is outside the table,
    by its functional variant and copy_ (`r[ops.aten-mutations]`). Every other op is recorded as
    eager calls it: one kernel stays one op (`r[capture.aten-graph]`)."""
    return mutation_decompositions()  # r[ops.aten-mutations]


def _decompositions() -> dict:
    """`decompositions()`, and `prims.fma` as its definition, `a * b + c`, once Dynamo has
    registered it: Dynamo rewrites `addcmul_` (an optimizer's update) into it."""
    fma = getattr(getattr(torch.ops.prims, "fma", None), "default", None)
    if fma is None:
        return decompositions()
    return decompositions() | {fma: lambda a, b, c: a * b + c}


class NodeMarks:
    """A mark each node of a graph being traced by make_fx was recorded under: `note` the mark
    whenever it changes while tracing; `annotate` the graph after (`node.meta[key]`).

    Each node gets the mark current when it was recorded, kept by node: with symbolic sizes
    make_fx records size nodes (`sym_size`, ...) that it drops by the end, so a node's place in
    the traced graph is not its place while it was traced."""

    def __init__(self, key: str, initial):
        self._key = key
        self._mark = initial
        #: The mark of every node recorded before the latest change.
        self._marks: dict[torch.fx.Node, Any] = {}

    def note(self, mark) -> None:
        # the nodes recorded since the last change, which make_fx appends, under the old mark
        for node in reversed(get_proxy_mode().tracer.graph.nodes):
            if node in self._marks:
                break
            self._marks[node] = self._mark
        self._mark = mark

    def annotate(self, graph: torch.fx.Graph) -> None:
        for node in graph.nodes:
            node.meta[self._key] = self._marks.get(node, self._mark)  # r[sizes.symbolic.marks]


class GradModes(NodeMarks):
    """The grad mode each node was recorded under (`r[capture.grad-mode]`)."""

    def __init__(self):
        super().__init__("grad_enabled", torch.is_grad_enabled())


class CheckpointRegions(NodeMarks):
    """The checkpointed region (a number) each node was recorded in, or None
    (`r[checkpoint.region]`)."""

    def __init__(self):
        super().__init__("checkpoint_region", None)


def checkpoint_region(node: torch.fx.Node) -> int | None:
    """The checkpointed region `node` belongs to (`r[checkpoint.region]`), or None."""
    return node.meta.get("checkpoint_region")


def _checkpoints_everything(context_fn) -> bool:
    """Whether `context_fn` recomputes every op: checkpoint's default, or the policy Dynamo's
    checkpoint op wraps (`context_fn_with_graph_id`, around an always-recompute policy)."""
    if context_fn is torch.utils.checkpoint.noop_context_fn:
        return True
    code = getattr(context_fn, "__code__", None)
    if code is None:  # a callable other than a function: functools.partial(policy contexts)
        return False
    cells = zip(code.co_freevars, context_fn.__closure__ or (), strict=True)
    inner = {name: cell.cell_contents for name, cell in cells}.get("context_fn")
    return isinstance(inner, functools.partial) and inner.args[:1] == (
        torch._higher_order_ops.wrap._always_prefer_recompute,
    )


@contextlib.contextmanager
def _checkpoint_regions_noted(regions: CheckpointRegions):
    """r[checkpoint.region]: while the function runs, `torch.utils.checkpoint.checkpoint(...,
    use_reentrant=False)` (and Dynamo's checkpoint higher-order op, which calls it) marks the
    ops of its function instead of entering its saved-tensor hooks."""
    count = itertools.count()
    depth = 0

    def region(context_fn):
        nonlocal depth
        if not _checkpoints_everything(context_fn):
            raise UnsupportedError(
                "checkpoint(..., context_fn=...) inside a compiled function (a selective "
                "checkpointing policy)",
                rule="checkpoint.region",
                fix="checkpoint the whole region (no context_fn), or call the checkpoint "
                "around the compiled function",
            )
        depth += 1
        if depth == 1:  # r[checkpoint.region]: a region nested in another is part of it
            regions.note(next(count))
        try:
            yield
        finally:
            depth -= 1
            if depth == 0:
                regions.note(None)

    with checkpoint_generator_replaced(region):
        yield


@frozen
class _RequiresGradCall:
    """`tensor.requires_grad_(flag)` changing the flag, after `position` nodes of the graph."""

    tensor: torch.Tensor
    flag: bool
    position: int


#: What computes gradients (r[capture.backward-inside]).
_BACKWARD_CALLS = (torch.Tensor.backward, torch.autograd.backward)

#: What registers a hook on a tensor, or asks it to keep its gradient (r[capture.tensor-hooks]).
_TENSOR_HOOK_CALLS = (
    torch.Tensor.register_hook,
    torch.Tensor.register_post_accumulate_grad_hook,
    torch._C.TensorBase.retain_grad,
)

#: The `.grad` attribute of tensors, whose getter and setter reach torch-function modes.
_GRAD_ATTRIBUTE = torch._C.TensorBase.__dict__["grad"]
#: The `.data` attribute of tensors, whose setter reaches torch-function modes.
_DATA_ATTRIBUTE = torch._C.TensorBase.__dict__["data"]


def _is_grad_attribute(func) -> bool:
    return getattr(func, "__self__", None) is _GRAD_ATTRIBUTE


def _grad_of(t: torch.Tensor) -> torch.Tensor | None:
    return _GRAD_ATTRIBUTE.__get__(t)


#: The functorch transforms that compute gradients (r[capture.gradient-transforms]).
_GRADIENT_TRANSFORMS = (TransformType.Grad, TransformType.Jvp)


def _gradient_transform_active() -> bool:
    if torch._C._functorch.peek_interpreter_stack() is None:
        return False
    interpreters = retrieve_all_functorch_interpreters()
    return any(level.key() in _GRADIENT_TRANSFORMS for level in interpreters)


def _accumulated_leaves(roots: tuple) -> list[torch.Tensor]:
    """The leaves whose `.grad` a backward from `roots` accumulates into."""
    leaves = [t for t in roots if t.grad_fn is None and t.requires_grad]
    seen: set = set()
    pending = [t.grad_fn for t in roots if t.grad_fn is not None]
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):  # AccumulateGrad
            leaves.append(node.variable)
        pending.extend(next_node for next_node, _ in node.next_functions)
    return leaves


class _WatchGradMode(TorchFunctionMode):
    """Notes the user function's grad-mode changes (`torch.no_grad()`, `set_grad_enabled`), and
    the `requires_grad_()` calls that change a tensor's flag (`r[autograd.requires-grad-inside]`);
    records `detach_()` calls (`r[capture.detach-in-place]`).
    """

    def __init__(self, modes: GradModes, requires_grad_calls: list[_RequiresGradCall]):
        super().__init__()
        self.modes = modes
        self.requires_grad_calls = requires_grad_calls
        #: While a custom Function's backward is traced into a graph of its own, nothing it does
        #: belongs to the captured graph: the Function's name, else None.
        self.paused: str | None = None
        #: The ids of the tensors that backward made so far.
        self.made_while_paused: set[int] = set()
        #: Storages of tensors that an in-place metadata op relaid out while they required grad
        #: or were views (whose own replay starts from their base).
        self.relaid: set[int] = set()
        #: id(traced flat input) -> the caller's tensor it stands for.
        self.callers: dict[int, _CallerInput] = {}
        #: Flat inputs whose values the program is specialized on
        #: (`r[capture.data-dependent.input-values]`).
        self.values_read: set[int] = set()
        #: The value checks that only decide whether the function raises, in order, each with
        #: the node of the copy of its tensor (`r[capture.data-dependent.checks]`).
        self.checks: list[tuple[torch.fx.Node, _RaisingBranch]] = []

    @contextlib.contextmanager
    def pausing(self, function: str):
        """While the backward of the custom Function named `function` is traced."""
        self.paused = function
        self.made_while_paused = set()
        try:
            yield
        finally:
            self.paused = None
            self.made_while_paused = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.paused is not None:
            if func in _BACKWARD_CALLS:
                self._refuse_outside_accumulation(func, args, kwargs)
            result = func(*args, **kwargs)
            made = pytree.tree_leaves(result)
            self.made_while_paused.update(id(t) for t in made if isinstance(t, torch.Tensor))
            return result
        self._note(func, args, kwargs)
        if func in _VALUE_COMPARISONS:
            return _VALUE_COMPARISONS[func](*args, **kwargs)
        args, kwargs = self._read_as_numbers(func, args, kwargs)
        sparse_constructor = SPARSE_CONSTRUCTORS.get(getattr(func, "__name__", None))
        if sparse_constructor is not None:
            return sparse_constructor(*args, **kwargs)  # r[memory.layout.sparse-made-inside]
        try:
            result = self._decomposed(func, args, kwargs)
        except (RuntimeError, ValueError, IndexError) as error:
            self._refuse_stale_view(args, kwargs, error)
            if _UNALLOCATED in str(error):
                # r[capture.data-dependent]: a kernel read a traced tensor's values (in C++:
                # tensor_split by a tensor of indices), which exist only when the call runs
                raise DataDependentOutputException(func) from error
            raise
        if has_value_dependent_sizes(result):
            # r[capture.data-dependent]: refused here, at the user's line, before the value
            # reaches code that needs its sizes, or its values, as numbers: a packed sequence's
            # batch sizes, float32 to PyTorch's fake kernel, make nn.LSTM's torch.zeros raise a
            # TypeError
            raise DynamicOutputShapeException(func)
        if func in (torch._C.TensorBase.detach_, aten.detach_.default):
            _record_detach_(args[0])
        if func in METADATA_OPS and (args[0].requires_grad or args[0]._is_view()):
            self.relaid.add(args[0].untyped_storage()._cdata)
        return result

    def _note(self, func, args, kwargs) -> None:
        if _gradient_transform_active():
            # r[capture.gradient-transforms]
            raise UnsupportedError(
                "the function applies a functorch gradient transform (torch.func.grad, "
                "grad_and_value, vjp, jacrev, jacfwd, hessian) while it is captured; capture "
                "records the ops, not the transform's levels, so the transform's gradient would "
                "not be computed",
                rule="capture.gradient-transforms",
                fix="compute the gradient with torch.autograd.grad(outputs, inputs, "
                "create_graph=True) inside the function, which is captured like any op, or run "
                "the transform eagerly",
            )
        if getattr(func, "__name__", None) in _SPARSE_MAKERS:
            # r[memory.layout.strided-only]: other than by r[memory.layout.sparse-made-inside]
            refuse_layout(f"{func.__name__}()", "makes a sparse tensor")
        if func is torch._C._set_grad_enabled:
            self.modes.note(bool(args[0]))
        elif func in _BACKWARD_CALLS:
            raise UnsupportedError(
                f"the function calls {func.__qualname__}() while it is captured; it would "
                "accumulate into the .grad of the trace's stand-ins, not of the caller's tensors",
                rule="capture.backward-inside",
                fix="call backward() on the compiled function's result after it returns, or "
                "use torch.compile(fn, backend='aotspec'), which runs the backward between two "
                "compiled graphs",
            )
        elif _is_grad_attribute(func) and (
            func.__name__ == "__set__" or _grad_of(args[0]) is not None
        ):
            # r[capture.lift.grad]
            access = "assigns" if func.__name__ == "__set__" else "reads"
            raise UnsupportedError(
                f"the function {access} the .grad of one of its inputs or of a tensor it reaches "
                "(a module's parameter, as clip_grad_norm_, optimizer.step() and zero_grad() "
                "do); capture lifts the tensors, not their gradients, so it would see a made-up "
                "stand-in of the gradient and never the caller's",
                rule="capture.lift.grad",
                fix="pass the gradients as arguments ([p.grad for p in model.parameters()]) and "
                "write into them in place, or compile the whole step with "
                "torch.compile(step, backend='aotspec')",
            )
        elif getattr(func, "__self__", None) is _DATA_ATTRIBUTE and func.__name__ == "__set__":
            # r[capture.data-assignment]
            raise UnsupportedError(
                "the function assigns a tensor's .data while it is captured (t.data = ..., as "
                "vector_to_parameters does); the assignment rebinds capture's stand-in, which no "
                "op of the trace records, so neither the caller's tensor nor what the function "
                "computes from it afterwards would see it",
                rule="capture.data-assignment",
                fix="write the new values in place under torch.no_grad() (t.copy_(new)), or "
                "assign .data outside the compiled function",
            )
        elif func in _TENSOR_HOOK_CALLS and args[0].requires_grad:
            name = func.__name__
            raise UnsupportedError(
                f"the function calls Tensor.{name}() while it is captured; it would reach "
                "capture's stand-in for the tensor, which the compiled backward never sees, so "
                "the gradients would be computed as if it had not been called",
                rule="capture.tensor-hooks",
                fix=f"return the tensor from the function and call {name}() on the compiled "
                "function's output after the call, or call it on the caller's tensor before the "
                "call",
            )
        elif func is torch._C.TensorBase.requires_grad_:
            flag = bool(args[1] if len(args) > 1 else kwargs.get("requires_grad", True))
            if flag != args[0].requires_grad:
                position = len(get_proxy_mode().tracer.graph.nodes)
                self.requires_grad_calls.append(_RequiresGradCall(args[0], flag, position))

    def _refuse_outside_accumulation(self, func, args, kwargs) -> None:
        """r[capture.custom-function.backward-accumulates]: the traced backward of a custom
        Function may run autograd's backward only into leaves it made itself."""
        roots = args[0] if func is torch.autograd.backward else args[:1]
        roots = (roots,) if isinstance(roots, torch.Tensor) else tuple(roots)
        given = kwargs.get("inputs")
        if given is not None:
            leaves = [given] if isinstance(given, torch.Tensor) else list(given)
        else:
            leaves = _accumulated_leaves(roots)
        if all(id(leaf) in self.made_while_paused for leaf in leaves):
            return
        raise UnsupportedError(
            f"the backward of the custom autograd.Function {self.paused} calls "
            f"{func.__qualname__}(), which accumulates gradients into the .grad of tensors it "
            "did not make (parameters it closes over, as checkpoint(use_reentrant=True) does); "
            "the compiled backward would compute them but never accumulate them",
            rule="capture.custom-function.backward-accumulates",
            fix="use torch.utils.checkpoint.checkpoint(..., use_reentrant=False), or return "
            "those gradients from the backward as gradients of the Function's inputs",
        )

    @contextlib.contextmanager
    def checking_values(self):
        """r[capture.data-dependent.checks]: while the function is traced, the bool of a traced
        tensor that only decides whether the code raises is the bool that does not raise.
        `Tensor.__bool__` itself is replaced: this mode does not see the calls inside a function
        that it handles as a whole (`F.gaussian_nll_loss` has its own torch-function override)."""
        original = torch.Tensor.__bool__

        def checked_bool(t: torch.Tensor) -> bool:
            if isinstance(t, FakeTensor) and self.paused is None:
                passing = self._value_check(t, sys._getframe(1))
                if passing is not None:
                    return passing
            return original(t)

        with unittest.mock.patch.object(torch.Tensor, "__bool__", checked_bool):
            yield

    @contextlib.contextmanager
    def patching(self):
        """The attributes of torch the mode replaces while the function is traced."""
        with self.checking_values(), self.refusing_node_hooks():
            yield

    @contextlib.contextmanager
    def refusing_node_hooks(self):
        """r[capture.tensor-hooks]: a hook registered on an autograd node (`grad_fn.register_hook`
        or `register_prehook`, as `Module.register_backward_hook` does) while the function is
        traced. Autograd registers every node's hook through `Function._register_hook`."""
        original = torch.autograd.Function._register_hook

        def refused(hooks, hook):
            if self.paused is not None:
                return original(hooks, hook)
            raise UnsupportedError(
                "the function registers a hook on an autograd node (grad_fn.register_hook or "
                "register_prehook, as Module.register_backward_hook does) while it is captured; "
                "it would reach a node of capture's stand-ins, which the compiled backward never "
                "runs, so the gradients would be computed as if it had not been registered",
                rule="capture.tensor-hooks",
                fix="register the hook on the grad_fn of the compiled function's output after "
                "the call, or use Module.register_full_backward_hook on a module you call the "
                "compiled function from",
            )

        with unittest.mock.patch.object(torch.autograd.Function, "_register_hook", refused):
            yield

    def _value_check(self, t: torch.Tensor, frame) -> bool | None:
        """r[capture.data-dependent.checks]: where `bool(t)` only decides whether the code of
        `frame` raises, the bool that does not raise, with a copy of `t` taken for the call to
        read; None for any other bool of a tensor's values."""
        branch = _raising_branch(frame)
        if branch is None or t.numel() != 1:
            return None
        copy = t.detach().clone()  # recorded in the graph, when `t` is a value of it
        slot = get_proxy_slot(copy, get_proxy_mode().tracer, None)
        if slot is None:
            return None
        self.checks.append((slot.proxy.node, branch))
        return not branch.raises_when

    @staticmethod
    def _decomposed(func, args, kwargs):
        """r[capture.data-dependent.decompositions]: `func` by capture's own decomposition where
        it has one that decides the case, else as PyTorch runs it."""
        decomposition = DECOMPOSITIONS.get(getattr(func, "__name__", None))
        if decomposition is not None:
            result = decomposition(*args, **kwargs)
            if result is not NotImplemented:
                return result
        return func(*args, **kwargs)

    def _read_as_numbers(self, func, args, kwargs) -> tuple[tuple, dict]:
        """r[capture.data-dependent.input-values]: the arguments `func` reads as numbers, where
        they are flat inputs not written so far, become the caller's values."""
        arguments = _READ_AS_NUMBERS.get(getattr(func, "__name__", None), ())
        args, kwargs = list(args), dict(kwargs)
        for position, keywords in arguments:
            if position < len(args):
                args[position] = self._caller_values(args[position])
            for keyword in keywords:
                if keyword in kwargs:
                    kwargs[keyword] = self._caller_values(kwargs[keyword])
        return tuple(args), kwargs

    def _caller_values(self, value):
        """The caller's values of `value`, a number or a (nested) list of them, when it is an
        integer flat input the function has not written; else `value` as it is."""
        caller = self.callers.get(id(value)) if _is_tensor(value) else None
        if caller is None or value._version != caller.version:
            return value
        if value.dtype.is_floating_point or value.dtype.is_complex:
            return value  # eager refuses those as indices and lengths
        self.values_read.add(caller.index)
        return caller.tensor.tolist()

    def _refuse_stale_view(self, args, kwargs, error: Exception) -> None:
        """r[capture.metadata-views]: fake tensors regenerate a view's history by replaying its
        view ops on its base, which may fail once an in-place metadata op relaid the base out,
        or relaid out a view the failing view was taken of (eager regenerates it by address)."""
        tensors = [a for a in pytree.tree_leaves((args, kwargs)) if _is_tensor(a)]
        if any(t._is_view() and t.untyped_storage()._cdata in self.relaid for t in tensors):
            raise UnsupportedError(
                "the function uses, with grad mode on, a view whose history an in-place "
                "metadata op (t_, transpose_, unsqueeze_, ...) made stale: a view taken before "
                "the op of the tensor it relaid out, or a view of a view it relaid out; tracing "
                f"cannot regenerate that view's history ({error})",
                rule="capture.metadata-views",
                fix="use a view op (x.t()) instead of the in-place one, or take the view again "
                "after the in-place op from a tensor that is no view",
            ) from None


@frozen
class _RaisingBranch:
    """A conditional jump one of whose ways only raises `error(*error_args)`, taken when the
    bool it reads is `raises_when`."""

    raises_when: bool
    error: type[BaseException]
    error_args: tuple[Any, ...]


#: The jumps that read the bool of the value on top of the stack, by whether they jump on True.
_CONDITIONAL_JUMPS = {
    f"POP_JUMP{way}_IF_{flag}": flag == "TRUE"
    for way in ("", "_FORWARD", "_BACKWARD")
    for flag in ("TRUE", "FALSE")
}

#: What code that only makes an exception of a global class with constant arguments may run.
_MAKING_AN_EXCEPTION = frozenset(
    ["LOAD_GLOBAL", "LOAD_CONST", "PUSH_NULL", "PRECALL", "CALL", "CALL_FUNCTION"]
    + ["EXTENDED_ARG", "NOP"]
)


def _raising_branch(frame) -> _RaisingBranch | None:
    """r[capture.data-dependent.checks]: the branch `frame` is taking on a bool it converts now,
    when one way of it does nothing but `raise SomeError(constants...)`: `if torch.any(x < 0):
    raise ValueError("...")`. The bool must go straight to the jump (no `and`, `not` or
    variable in between); else None."""
    instructions = list(dis.get_instructions(frame.f_code))
    at = {instruction.offset: k for k, instruction in enumerate(instructions)}
    k = at.get(frame.f_lasti)
    if k is not None and instructions[k].opname == "TO_BOOL":  # Python 3.13
        k += 1
    if k is None or instructions[k].opname not in _CONDITIONAL_JUMPS:
        return None
    jumps_when = _CONDITIONAL_JUMPS[instructions[k].opname]
    for raises_when, start in ((jumps_when, at[instructions[k].argval]), (not jumps_when, k + 1)):
        error = _raise_from(instructions[start:], frame)
        if error is not None:
            return _RaisingBranch(raises_when, *error)
    return None


def _raise_from(instructions: list, frame) -> tuple[type, tuple] | None:
    """The exception class and constant arguments that `instructions` make and raise, when they
    do nothing else; else None."""
    loaded: list = []
    for instruction in instructions:
        if instruction.opname == "RAISE_VARARGS":
            break
        if instruction.opname not in _MAKING_AN_EXCEPTION:
            return None
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_CONST"):
            loaded.append(instruction)
    else:
        return None
    if instruction.arg != 1 or not loaded or loaded[0].opname != "LOAD_GLOBAL":
        return None
    if any(load.opname != "LOAD_CONST" for load in loaded[1:]):
        return None
    name = loaded[0].argval
    error = frame.f_globals.get(name, getattr(builtins, name, None))
    if not (isinstance(error, type) and issubclass(error, BaseException)):
        return None
    return error, tuple(load.argval for load in loaded[1:])


def _equal(a: torch.Tensor, b: torch.Tensor):
    """r[capture.data-dependent.comparisons]: `torch.equal` as eager's kernel decides it, the
    sizes at capture, the values as a number read from a tensor."""
    if a.shape != b.shape:
        return False
    return torch.eq(a, b).all().item()


def _allclose(a: torch.Tensor, b: torch.Tensor, rtol=1e-05, atol=1e-08, equal_nan=False):
    """r[capture.data-dependent.comparisons]: `torch.allclose`, eager's `isclose` of every
    element, as a number read from a tensor."""
    return torch.isclose(a, b, rtol, atol, equal_nan).all().item()


#: The comparisons that return a bool read from tensor values, as functions and methods.
_VALUE_COMPARISONS = {
    torch._C._VariableFunctions.equal: _equal,
    torch._C.TensorBase.equal: _equal,
    torch._C._VariableFunctions.allclose: _allclose,
    torch._C.TensorBase.allclose: _allclose,
}


@frozen
class _CallerInput:
    """A flat input of the traced function: its index, the caller's tensor, and the version of
    the traced tensor at the start of the trace (a later one means the function wrote it)."""

    index: int
    tensor: torch.Tensor
    version: int


#: r[capture.data-dependent.input-values]: by function name, the arguments it reads as numbers:
#: their position (a method's `self` counted) and their keywords.
_READ_AS_NUMBERS: dict[str, tuple[tuple[int, tuple[str, ...]], ...]] = {
    "narrow": ((2, ("start",)),),
    "tensor_split": ((1, ("tensor_indices_or_sections", "indices_or_sections")),),
    "ctc_loss": ((2, ("input_lengths",)), (3, ("target_lengths",))),
}


#: What PyTorch raises when C++ code reads the values of a traced tensor, which has none.
_UNALLOCATED = "its data is not allocated yet"


#: Functions that make sparse tensors, by name (torch.sparse_bsr_tensor, Tensor.to_sparse, ...),
#: other than the constructors of `sparse.py`.
_SPARSE_MAKERS = frozenset(
    [f"sparse_{kind}_tensor" for kind in ("csc", "bsr", "bsc", "compressed")]
    + [f"to_sparse{suffix}" for suffix in ("", "_csr", "_csc", "_bsr", "_bsc")]
)


def _record_detach_(t: torch.Tensor) -> None:
    """r[capture.detach-in-place]: a node `aten.detach_.default(t)` at the end of the graph so
    far (a tensor the trace does not follow, a constant, has nothing to record)."""
    tracer = get_proxy_mode().tracer
    slot = get_proxy_slot(t, tracer, None)
    if slot is not None:
        tracer.create_proxy("call_function", aten.detach_.default, (slot.proxy,), {})


def grad_enabled(node: torch.fx.Node) -> bool:
    """Whether `node` ran with grad mode on (`r[capture.grad-mode]`)."""
    return node.meta.get("grad_enabled", True)




def program_of_graph(graph_module: torch.fx.GraphModule, name: str) -> CapturedProgram:
    """A graph traced apart from the user's function (a custom Function's backward), taking and
    returning flat tensors, as a captured program."""
    graph = graph_module.graph
    n_in = sum(node.op == "placeholder" for node in graph.nodes)
    n_out = len(next(iter(reversed(graph.nodes))).args[0])
    entries = {
        node: lookup(node.target, where=source_line(node))
        for node in graph.nodes
        if node.op == "call_function" and node.target is not getitem
    }
    return CapturedProgram(
        graph_module,
        pytree.tree_flatten(((None,) * n_in, {}))[1],
        (TENSOR,) * n_in,
        pytree.tree_flatten([None] * n_out)[1],
        (TENSOR,) * n_out,
        entries,
        name,
    )


@define
class _TracedInputs:
    """The fake tensors the function is traced on, with their version counters before it ran."""

    tensors: list[torch.Tensor] = field(factory=list)
    versions: list[int] = field(factory=list)

    def note(self, tensors) -> None:
        self.tensors.extend(tensors)
        self.versions.extend(t._version for t in tensors)

    def advanced(self) -> tuple[int, ...]:
        """r[functionalize.epilogue.version]: the flat inputs whose counters the function's ops
        advanced. A fake's counter moves as eager's ops move the caller's; a write an op makes
        without advancing it (`r[ops.aten-mutations.versions]`) is traced below autograd and
        moves none."""
        pairs = zip(self.tensors, self.versions, strict=True)
        return tuple(i for i, (t, version) in enumerate(pairs) if t._version != version)


@define
class _Returned:
    """How the traced function's return value is built from its tensors, found while tracing."""

    spec: pytree.TreeSpec | None = None
    leaves: tuple[Any, ...] = ()
    #: The returned numbers read from tensor values, in order.
    numbers: list = field(factory=list)

    def note(self, out: list, spec: pytree.TreeSpec) -> None:
        """The flat return value `out`: tensors, numbers read from tensor values, constants."""
        self.spec = spec
        if any(isinstance(leaf, SparseMadeInside) for leaf in out):
            raise UnsupportedError(  # r[memory.layout.sparse-made-inside.no-escape]
                "the function returns a sparse tensor it made: a compiled program's outputs are "
                "strided tensors",
                rule="memory.layout.sparse-made-inside.no-escape",
                fix="return its to_dense(), or make the sparse tensor from the returned parts "
                "outside the compiled function",
            )
        self.leaves = tuple(
            TENSOR if _is_tensor(leaf) else NUMBER if _is_read_number(leaf) else leaf
            for leaf in out
        )
        self.numbers = [leaf for leaf in out if _is_read_number(leaf)]


def _is_tensor(leaf) -> bool:
    return isinstance(leaf, torch.Tensor)


def _is_read_number(leaf) -> bool:
    """Whether `leaf` is a number read from tensor values: a symbol of the trace."""
    return isinstance(leaf, torch.SymInt | torch.SymFloat | torch.SymBool)


def _copy_where_read(graph: torch.fx.Graph, read: torch.fx.Node) -> torch.fx.Node:
    """A copy of the tensor `read` reads a number from, taken where it reads it (later writes
    into the tensor do not change the number), detached (the number carries no gradient)."""
    tensor = read.args[0]
    with graph.inserting_after(read):
        detached = graph.call_function(torch.ops.aten.detach.default, (tensor,))
    with graph.inserting_after(detached):
        copy = graph.call_function(torch.ops.aten.clone.default, (detached,))
    detached.meta = {**read.meta, "val": tensor.meta["val"].detach()}
    copy.meta = {**read.meta, "val": detached.meta["val"].clone()}
    return copy


def _return_tensors_read(graph_module: torch.fx.GraphModule, numbers: list) -> None:
    """r[capture.data-dependent.returned]: the graph returns, after its tensor outputs, a copy of
    the tensor each returned number is read from, for the call to read it when it returns."""
    if not numbers:
        return
    graph = graph_module.graph
    reads = {
        node.meta["val"].node.expr: node
        for node in graph.nodes
        if node.target is torch.ops.aten._local_scalar_dense.default
    }
    output = graph.output_node()
    read_from = []
    for number in numbers:
        read = reads.get(number.node.expr)
        if read is None:
            # r[capture.data-dependent.returned-arithmetic]
            raise UnsupportedError(
                f"the function returns a number computed from numbers read from tensor values "
                f"({number} at capture)",
                rule="capture.data-dependent.returned-arithmetic",
                fix="compute on the tensor and return the number read from the result "
                "((x.sum() * 2).item() rather than x.sum().item() * 2)",
            )
        read_from.append(_copy_where_read(graph, read))
    output.args = ([*output.args[0], *read_from],)
    for read in reads.values():
        if not read.users:
            graph.erase_node(read)  # the call reads the number, the graph does not
    graph_module.recompile()


def _return_checks(
    graph_module: torch.fx.GraphModule, checks: list[tuple[torch.fx.Node, _RaisingBranch]]
) -> tuple[ValueCheck, ...]:
    """r[capture.data-dependent.checks]: the graph returns, after all its other outputs, the copy
    of each checked tensor, for the call to read before it touches the caller's tensors. No op
    before the first check may write a tensor (eager keeps the write when the check fails), nor
    any op after it act beyond its outputs (draw random numbers, communicate, run an opaque op),
    which eager would not have done when the check fails."""
    if not checks:
        return ()
    graph = graph_module.graph
    first = checks[0][0]
    before = itertools.takewhile(lambda node: node is not first, graph.nodes)
    for node in before:
        if node.op == "call_function" and _mutates(node):
            raise UnsupportedError(
                f"the function writes a tensor with {node.target} ({source_line(node)}) before "
                "it checks tensor values, raising when the check fails: eager keeps that write "
                "when it raises, a compiled call writes nothing back",
                rule="capture.data-dependent.checks",
                fix="write after the check, or check the values outside the compiled function",
            )
    after = itertools.dropwhile(lambda node: node is not first, graph.nodes)
    for node in after:
        if node.op == "call_function" and _acts_beyond_outputs(node.target):
            raise UnsupportedError(
                f"the function checks tensor values, raising when the check fails, then runs "
                f"{node.target} ({source_line(node)}), which a failed check would not have let "
                "run",
                rule="capture.data-dependent.checks",
                fix="make the check after that op, or check the values outside the compiled "
                "function",
            )
    output = graph.output_node()
    n_outputs = len(output.args[0])
    output.args = ([*output.args[0], *(node for node, _ in checks)],)
    graph_module.recompile()
    return tuple(
        ValueCheck(n_outputs + k, branch.raises_when, branch.error, branch.error_args)
        for k, (_, branch) in enumerate(checks)
    )


def _acts_beyond_outputs(target) -> bool:
    """Whether an op of the graph acts on more than the values it returns and writes: draws from
    a generator, or is no aten op (collectives, the generator's own ops, opaque custom ops)."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    return target.namespace != "aten" or torch.Tag.nondeterministic_seeded in target.tags


def _caller_inputs(traced: tuple, tensors: list) -> dict[int, _CallerInput]:
    """The flat inputs whose values capture may read (`r[capture.data-dependent.input-values]`),
    by the id of their traced tensor."""
    return {
        id(t): _CallerInput(i, caller, t._version)
        for i, (t, caller) in enumerate(zip(traced, tensors, strict=True))
        if _holds_values(caller)
    }


@contextlib.contextmanager
def _tracing_errors_named(tensors: list[torch.Tensor]):
    """Tracing's errors for what the spec refuses, raised as `UnsupportedError`s naming the rule
    and the user's line; other errors pass unchanged."""
    try:
        yield
    except NotImplementedError as error:
        if traces_generators() or "Generator" not in str(error):
            raise
        # r[ops.random.generator-capture]
        raise UnsupportedError(
            f"the function reads a torch.Generator, which torch {torch.__version__}'s tracer "
            "cannot record in a graph",
            rule="ops.random.generator-capture",
            fix="draw from the default generator (seed it with torch.manual_seed) instead of "
            "passing one, or use torch 2.13 or later",
        ) from None
    except _DATA_DEPENDENT as error:
        # r[capture.data-dependent]
        raise UnsupportedError(
            f"the function's control flow or an output's shape depends on tensor values "
            f"({_user_line(error)})",
            rule="capture.data-dependent",
            fix="compute on tensors only (torch.where for a branch, masks for a selection), or "
            "take the decision outside the compiled function and pass its result in",
        ) from None
    except AssertionError as error:
        if _NOT_AN_INPUT not in str(error):
            raise
        raise UnsupportedError(
            f"the function reads a tensor that is not one of its inputs ({_op_of(error)}, "
            f"{_user_line(error)}): "
            "one reached other than through an argument, a closure variable, a global name or "
            "a module attribute",
            rule="capture.lift.unreachable",
            fix="pass the tensor as an argument, or hold it in a closure variable, a global or "
            "a module attribute",
        ) from None
    except RuntimeError as error:
        _refuse_leaf_view_writes(error, tensors)
        raise


def _refuse_leaf_view_writes(error: RuntimeError, tensors: list[torch.Tensor]) -> None:
    """r[capture.leaf-view-writes]: autograd's internal assert, where tracing writes a leaf that
    is a view while a view of it is an input too, raised as the rule's refusal."""
    pairs = _leaf_views_with_their_views(tensors)
    if "INTERNAL ASSERT FAILED" not in str(error) or not pairs:
        return
    leaf, view = pairs[0]
    raise UnsupportedError(
        f"flat input {leaf} is a leaf that is a view of another tensor, flat input {view} is a "
        "view taken from it, and the function writes in place through them",
        rule="capture.leaf-view-writes",
        fix=f"make flat input {leaf} a tensor of its own (base[1:].clone().requires_grad_()), or "
        "pass only it and take the view inside the function",
    ) from None


def _leaf_views_with_their_views(tensors: list[torch.Tensor]) -> list[tuple[int, int]]:
    """(leaf, view) positions: a leaf that requires grad and is a view, and an input with
    history on the same root base."""
    leaf_views = {
        id(t._base): i
        for i, t in enumerate(tensors)
        if t.is_leaf and t.requires_grad and t._is_view()
    }
    return [
        (leaf_views[id(t._base)], j)
        for j, t in enumerate(tensors)
        if t.grad_fn is not None and t._is_view() and id(t._base) in leaf_views
    ]


def capture(fn: Callable, args, kwargs=None) -> CapturedProgram:
    """Trace `fn(*args, **kwargs)` to an aten graph without touching the caller's tensors."""
    kwargs = {} if kwargs is None else kwargs
    # r[capture.flat-inputs]: tensor leaves are placeholders, the other leaves constants.
    leaves, in_spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    in_leaves = tuple(TENSOR if _is_tensor(leaf) else leaf for leaf in leaves)
    tensors = [leaf for leaf in leaves if _is_tensor(leaf)]
    _refuse_unlaid_out(tensors)
    on_cuda = any(t.is_cuda for t in tensors)
    returned = _Returned()
    grad_modes = GradModes()
    regions = CheckpointRegions()
    requires_grad_calls: list[_RequiresGradCall] = []
    requires_grad_inputs: set[int] = set()
    requires_grad_outputs: set[int] = set()
    traced = _TracedInputs()
    watch = _WatchGradMode(grad_modes, requires_grad_calls)
    interception = Interception(grad_modes, watch.pausing)
    # r[collectives.derivatives]: the collectives' library autograd is the table's to replace
    interception.passes_through = lambda cls: cls.__name__ in _table_ops_with_library_autograd()

    def flat_fn(*flat_tensors):
        it = iter(flat_tensors)
        rebuilt = [next(it) if leaf is TENSOR else leaf for leaf in in_leaves]
        call_args, call_kwargs = pytree.tree_unflatten(rebuilt, in_spec)
        histories_before = [_history(t) for t in flat_tensors]
        traced.note(flat_tensors)
        watch.callers = _caller_inputs(flat_tensors, tensors)
        with (
            watch,
            watch.patching(),
            intercepting_apply(interception),
            _checkpoint_regions_noted(regions),
            _rng_state_recorded(),
            _kernels_with_cpu_variants(on_cuda),
        ):
            result = fn(*call_args, **call_kwargs)
        out, out_spec = pytree.tree_flatten(result)
        outputs = [leaf for leaf in out if _is_tensor(leaf)]
        histories_after = [_history(t) for t in [*outputs, *flat_tensors]]
        _refuse_custom_functions(histories_after, histories_before, interception.handled)
        returned.note(out, out_spec)
        set_inputs, set_outputs = _set_to_require_grad(requires_grad_calls, flat_tensors, outputs)
        requires_grad_inputs.update(set_inputs)
        requires_grad_outputs.update(set_outputs)
        return outputs

    generator_before = torch.default_generator.get_state()
    # make_fx keeps stack traces only for frames it knows are user code: tell it `fn`'s.
    # r[capture.data-dependent.shapes-from-arguments]
    with _tracing_errors_named(tensors), stack_traces_of(fn), shapes_from_arguments():
        graph_module = make_fx_keeping_detach(
            flat_fn,
            decomposition_table=_decompositions(),  # r[capture.aten-graph]
            # r[capture.no-side-effects]: the caller's tensors are not run on
            tracing_mode="fake",
            record_stack_traces=True,
        )(*tensors)
    _refuse_other_generator_changes(generator_before)
    grad_modes.annotate(graph_module.graph)
    regions.annotate(graph_module.graph)
    _check_traced(graph_module.graph)
    _return_tensors_read(graph_module, returned.numbers)
    _drop_view_replays(graph_module)
    return CapturedProgram(
        graph_module=graph_module,
        in_spec=in_spec,
        in_leaves=in_leaves,
        out_spec=returned.spec,
        out_leaves=returned.leaves,
        entries=_entries(graph_module.graph),
        name=getattr(fn, "__qualname__", repr(fn)),
        requires_grad_inputs=frozenset(requires_grad_inputs),
        requires_grad_outputs=frozenset(requires_grad_outputs),
        custom_functions=tuple(interception.functions),
        values_read=frozenset(watch.values_read),
        checks=_return_checks(graph_module, watch.checks),
        advanced_inputs=traced.advanced(),
        traced_inputs=tuple(traced.tensors),
    )


def _refuse_unlaid_out(tensors: list[torch.Tensor]) -> None:
    """Refuse flat inputs that are not strided tensors (`r[memory.layout.strided-only]`) or
    carry a lazy conjugate or negative bit."""
    for i, t in enumerate(tensors):
        if t.layout != torch.strided:
            refuse_layout(f"flat input {i}", f"has layout {t.layout}")
        refuse_lazy_bits(i, t)


def _holds_values(t: torch.Tensor) -> bool:
    """Whether the caller's tensor `t` has values to read (a fake or meta tensor has none)."""
    return not isinstance(t, FakeTensor) and t.device.type != "meta"


#: What FakeTensorMode says of a real tensor reaching an op while it traces.
_NOT_AN_INPUT = "Please convert all Tensors to FakeTensors first"


def _op_of(error: AssertionError) -> str:
    """The op FakeTensorMode names in `error`: `aten.mul.Tensor`."""
    found = re.search(r"Found in (\S+?)\(", str(error))
    return f"read by {found.group(1)}" if found else "read by an op"


@contextlib.contextmanager
def _kernels_with_cpu_variants(on_cuda: bool):
    """r[ops.aten-values.device-choices]: on CUDA inputs, the kernels eager picks there that
    have no CPU kernel are not picked: cuDNN is off (batch norm and RNNs trace their native
    ops) and attention traces its math; on CPU nothing changes."""
    if not on_cuda:
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cudnn_enabled = torch.backends.cudnn.enabled
    torch._C._set_cudnn_enabled(False)
    try:
        with sdpa_kernel([SDPBackend.MATH]):
            yield
    finally:
        torch._C._set_cudnn_enabled(cudnn_enabled)


@contextlib.contextmanager
def _rng_state_recorded():
    """r[capture.rng-state]: while the function is traced, `torch.manual_seed`, `torch.seed`,
    `torch.get_rng_state` and `torch.set_rng_state` (and their `torch.random` names) record an op
    that acts on the generator when the program runs, and leave the caller's generator alone.
    They record even inside `no_dispatch()` (PyTorch's `freeze_rng_state` reads and restores the
    state there), under the dispatch state of the trace."""
    include = torch._C._dispatch_tls_local_include_set()
    exclude = torch._C._dispatch_tls_local_exclude_set()

    def recorded(op, *args):
        with torch._C._ForceDispatchKeyGuard(include, exclude):
            return op(*args)

    def manual_seed(seed):
        recorded(rng_state.manual_seed, int(seed))
        return torch.default_generator

    def seed():
        return recorded(rng_state.seed).item()

    replacements = {
        "manual_seed": manual_seed,
        "seed": seed,
        "get_rng_state": lambda: recorded(rng_state.get_rng_state),
        "set_rng_state": lambda state: recorded(rng_state.set_rng_state, state),
    }
    with contextlib.ExitStack() as stack:
        for module in (torch, torch.random):
            for name, replacement in replacements.items():
                stack.enter_context(unittest.mock.patch.object(module, name, replacement))
        yield


def _refuse_other_generator_changes(before: torch.Tensor) -> None:
    """r[capture.rng-state]: a function that changed the caller's generator while traced reached
    it otherwise (`torch.default_generator.manual_seed`): the change is undone and refused."""
    if torch.equal(torch.default_generator.get_state(), before):
        return
    torch.default_generator.set_state(before)  # r[capture.no-side-effects]
    raise UnsupportedError(
        "the function changes the default generator's state other than through "
        "torch.manual_seed, torch.seed or torch.set_rng_state (torch.default_generator's own "
        "methods), which capture does not record",
        rule="capture.rng-state",
        fix="seed with torch.manual_seed(...) or set the state with torch.set_rng_state(...)",
    )


def _refuse_random_ops_in_regions(graph: torch.fx.Graph) -> None:
    """r[checkpoint.random]: a checkpointed region's recomputation would draw other values."""
    for node in graph.nodes:
        tags = getattr(node.target, "tags", ())
        if checkpoint_region(node) is not None and torch.Tag.nondeterministic_seeded in tags:
            raise UnsupportedError(
                f"random op {node.target} inside a checkpointed region "
                f"({source_line(node)})",
                rule="checkpoint.random",
                fix="draw the random values outside the checkpointed function and pass them in",
            )


#: What tracing on tensors without values raises where the program needs their values.
_DATA_DEPENDENT = (
    GuardOnDataDependentSymNode,
    DataDependentOutputException,
    DynamicOutputShapeException,
)

#: What tracing raises for a value of sizes that depend on tensor values, when a symbol for them
#: cannot be made or kept.
VALUE_DEPENDENT = (*_DATA_DEPENDENT, PendingUnbackedSymbolNotFound)


def has_value_dependent_sizes(value) -> bool:
    """Whether a tensor of `value` has sizes that tracing left as symbols, with no value."""
    tensors = [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]
    return any(free_unbacked_symbols(t.shape) for t in tensors)


def _check_traced(graph: torch.fx.Graph) -> None:
    """What tracing lets pass that a compiled call may not run."""
    _refuse_random_ops_in_regions(graph)
    _refuse_value_dependent_shapes(graph)
    _raise_kernel_dtype_errors(graph)


def _refuse_value_dependent_shapes(graph: torch.fx.Graph) -> None:
    """r[capture.data-dependent]: no value's shape depends on tensor values (`nonzero`, masked
    selection), which tracing leaves as symbols with no value."""
    for node in graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and free_unbacked_symbols(value.shape):
            raise UnsupportedError(
                f"the shape of {node.name} depends on tensor values ({source_line(node)})",
                rule="capture.data-dependent",
                fix="compute on tensors only (masks with torch.where rather than selections), "
                "or take the selection outside the compiled function and pass its result in",
            )


#: The ops whose CPU kernel, not their meta kernel, rejects operands of two dtypes.
_ONE_DTYPE_OPERANDS = (aten.mm.default, aten.addmm.default, aten.addbmm.default, aten.mv.default)


def _raise_kernel_dtype_errors(graph: torch.fx.Graph) -> None:
    """r[ops.kernel-dtype-checks]: eager's error for operands of two dtypes, which tracing on
    meta kernels let pass, raised by the kernel itself on uninitialized tensors like them."""
    for node in graph.nodes:
        if node.op != "call_function" or node.target not in _ONE_DTYPE_OPERANDS:
            continue
        operands = [arg.meta["val"] for arg in node.args if isinstance(arg, torch.fx.Node)]
        if len({operand.dtype for operand in operands}) == 1:
            continue
        try:
            node.target(*map(_uninitialized_like, node.args), **node.kwargs)
        except RuntimeError as error:
            add_note(error, f"in {node.format_node()} ({source_line(node)})")
            raise


def _uninitialized_like(arg):
    if not isinstance(arg, torch.fx.Node):
        return arg
    t = arg.meta["val"]
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)


def _user_line(error: BaseException) -> str:
    """`called from file.py:12 in f: y = x * w`: the innermost frame of `error`'s traceback that
    is the user's, not PyTorch's or aotspec's."""
    library = (
        os.path.dirname(torch.__file__),
        os.path.dirname(__file__),  # the reference
        os.path.dirname(aotspec.errors.__file__),  # the public API
    )
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not frame.filename.startswith(library)
    ]
    if not frames:
        return "called from code aotspec cannot name"
    frame = frames[-1]
    return f"called from {frame.filename}:{frame.lineno} in {frame.name}: {frame.line}"


def _entries(graph: torch.fx.Graph) -> dict[torch.fx.Node, OpEntry]:
    """The op table entry of every op of the graph; r[ops.unsupported-all]: every op that has
    none is refused in one UnsupportedError, each once per line of the user's source."""
    entries: dict[torch.fx.Node, OpEntry] = {}
    refusals: dict[str, UnsupportedError] = {}
    for node in graph.nodes:
        if node.op != "call_function" or node.target in (getitem, custom_function_call):
            continue
        where = source_line(node)
        try:
            entries[node] = lookup(node.target, where=where)
            check_collective(node, where)  # r[collectives.group], r[collectives.wait]
        except UnsupportedError as error:
            refusals.setdefault(error.problem, error)
    if len(refusals) == 1:
        raise next(iter(refusals.values()))
    if refusals:
        first = next(iter(refusals.values()))
        listed = "\n".join(f"- {e.problem} [rule {e.rule}]" for e in refusals.values())
        raise UnsupportedError(
            f"{len(refusals)} ops of the program are not supported:\n{listed}\n",
            rule=first.rule,
            fix=first.fix,
            refusals=tuple(refusals.values()),
        )
    return entries


def _set_to_require_grad(
    calls: list[_RequiresGradCall], inputs: tuple, outputs: list
) -> tuple[set[int], set[int]]:
    """r[autograd.requires-grad-inside]: the flat inputs that `requires_grad_()` sets to require
    grad before any op reads them, and the flat outputs it sets to require grad after the last op
    that reads them (`r[autograd.requires-grad-inside.outputs]`); every other call changing a flag
    is refused."""
    tracer = get_proxy_mode().tracer
    index = {node: k for k, node in enumerate(tracer.graph.nodes)}
    placeholders = [node for node in tracer.graph.nodes if node.op == "placeholder"]
    found_inputs: set[int] = set()
    found_outputs: set[int] = set()
    for call in calls:
        which = {k for k, t in enumerate(inputs) if t is call.tensor}
        read_before = any(
            index[user] < call.position for k in which for user in placeholders[k].users
        )
        if call.flag and which and not read_before:
            found_inputs |= which
            continue
        returned = {k for k, t in enumerate(outputs) if t is call.tensor}
        slot = get_proxy_slot(call.tensor, tracer, None)
        users = slot.proxy.node.users if slot is not None else {}
        read_after = any(index[user] >= call.position for user in users)
        if call.flag and returned and not which and not read_after:
            found_outputs |= returned  # r[autograd.requires-grad-inside.outputs]
            continue
        if not which:
            problem = (
                "a tensor the function made (or a view it took), which it does not return or "
                "reads afterwards"
            )
        elif read_before:
            problem = f"flat input {min(which)} after an op read it"
        else:
            problem = f"flat input {min(which)}, which requires grad, to stop requiring it"
        raise UnsupportedError(
            f"the function calls requires_grad_() on {problem}",
            rule="autograd.requires-grad-inside",
            fix="call requires_grad_() on the caller's tensor before the call, or, inside the "
            "function, on an input before any op reads it, or on a tensor it returns after its "
            "last use",
        )
    return found_inputs, found_outputs


_HOOKS_INSIDE = "saved_tensors_hooks entered inside a function the reference captures"


@contextlib.contextmanager
def hooks_silenced_while_tracing(rule: str = "hooks.eager.innermost"):
    """Capture runs autograd on fake tensors: the caller's hooks must not fire on them. Hooks that
    the function enters itself cannot be attributed to ops of the captured graph, so they raise
    `UnsupportedError` naming `rule` (eager: `hooks.eager.innermost`; compiled:
    `hooks.compiled.traced`)."""
    previous = torch._C._autograd._saved_tensors_hooks_get_disabled_error_message()
    torch._C._autograd._saved_tensors_hooks_disable(_HOOKS_INSIDE, False)
    try:
        yield
    except RuntimeError as error:
        if str(error) != _HOOKS_INSIDE:
            raise
        raise UnsupportedError(
            "the function enters torch.autograd.graph.saved_tensors_hooks itself; the captured "
            "graph does not say which of its ops run inside the context",
            rule=rule,
            fix="enter the context around the call instead",
        ) from None
    finally:
        if previous is None:
            torch._C._autograd._saved_tensors_hooks_enable()
        else:
            torch._C._autograd._saved_tensors_hooks_disable(previous, False)


def _history(t: torch.Tensor):
    """The tensor's grad_fn; None when autograd refuses to regenerate it (a view made under
    torch.no_grad() whose base was written since): eager raises only where something reads it,
    and anything in the function that does raises the same while capturing. Nor can tracing
    regenerate the history of a view whose base an in-place metadata op relaid out since
    (`r[capture.metadata-views]`): a view the function returns is left so, and the ops the
    failed replay traced, which feed nothing, leave the graph."""
    graph = get_proxy_mode().tracer.graph
    before = len(graph.nodes)
    try:
        return t.grad_fn
    except (RuntimeError, ValueError):
        for node in list(itertools.islice(reversed(graph.nodes), len(graph.nodes) - before)):
            graph.erase_node(node)
        return None


def _refuse_custom_functions(after: list, before: list, handled: set) -> None:
    """r[capture.custom-function.refused]: a custom autograd.Function a gradient can reach from
    the outputs or the inputs' new histories (`after`), applied where capture does not intercept
    autograd's apply (so not `handled`: inside a functorch transform), is refused (one walk over
    the autograd graph, which stops at the histories the inputs had `before` the call)."""
    seen: set = {node for node in before if node is not None}
    stack = [node for node in after if node is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if (
            isinstance(node, torch.autograd.function.BackwardCFunction)
            and node not in handled
            and not _differentiated_by_the_table(node)
        ):
            name = getattr(node._forward_cls, "__qualname__", type(node).__name__)
            raise UnsupportedError(
                f"the function applies the custom autograd.Function {name} where capture "
                f"does not intercept it ({_UNINTERCEPTED}), and a gradient can reach it: "
                "capture sees its forward's ops, not its backward",
                rule="capture.custom-function.refused",
                fix=f"{_INTERCEPTED}, apply it under torch.no_grad(), or write it with ops whose "
                "derivatives the op table knows",
            )
        stack.extend(next_node for next_node, _ in node.next_functions if next_node is not None)


#: Where capture does not see autograd apply a Function, and how to apply one where it does.
if apply_references_intercepted():
    _UNINTERCEPTED = "inside a functorch transform"
    _INTERCEPTED = "apply it outside the transform"
else:
    _UNINTERCEPTED = (
        "inside a functorch transform, or through a reference to its apply taken before the "
        "call, `op = MyFunction.apply`, which this torch does not let capture see"
    )
    _INTERCEPTED = "call MyFunction.apply(...) itself, outside any functorch transform"


def _differentiated_by_the_table(node) -> bool:
    """The autograd node torch.library makes for an op registered with `register_autograd` that
    has a derivative rule in the table (the functional collectives, `r[collectives.derivatives]`):
    capture records the op itself, which its rule differentiates."""
    return node._forward_cls.__name__ in _table_ops_with_library_autograd()


@functools.cache
def _table_ops_with_library_autograd() -> frozenset[str]:
    """The names torch.library gives the autograd.Function of each non-aten op with a derivative
    rule (`torch/_library/autograd.py`)."""
    return frozenset(
        f"GeneratedBackwardFor_{op.namespace}_{op._opname}_{op._overloadname}"
        for op in DERIVATIVES
        if op.namespace != "aten"
    )


def _drop_view_replays(graph_module: torch.fx.GraphModule) -> None:
    """r[capture.view-replays]: after a write under torch.no_grad() into an input that is a view
    of a tensor requiring grad, autograd replays the view's history from its base, which the
    trace only has as a fake constant; those ops feed nothing the function computes."""
    graph = graph_module.graph
    made_up = {
        node.target
        for node in graph.nodes
        if node.op == "get_attr" and isinstance(getattr(graph_module, node.target), FakeTensor)
    }
    # A replay may read one made-up constant through several nodes (one per history regenerated).
    replays = [node for node in graph.nodes if node.op == "get_attr" and node.target in made_up]
    replayed = set().union(*(_computed_from(node) for node in replays))
    if any(user.op == "output" or _mutates(user) for user in replayed):
        raise UnsupportedError(
            "the function reads a tensor the trace made up while replaying a view's history",
            rule="capture.view-replays",
            fix="pass the view's base, and take the view inside the function",
        )
    for user in reversed(list(graph.nodes)):
        if user in replayed:
            graph.erase_node(user)
    for target in made_up:
        delattr(graph_module, target)
    graph_module.recompile()


def _mutates(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return schema is not None and schema.is_mutable


def _computed_from(node: torch.fx.Node) -> set[torch.fx.Node]:
    """`node` and every node computed from it."""
    found = {node}
    stack = [node]
    while stack:
        for user in stack.pop().users:
            if user not in found:
                found.add(user)
                stack.append(user)
    return found
