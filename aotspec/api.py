"""`aotspec.compile`: the public contract of DESIGN.md section 3.

The returned callable behaves like `fn` in eager PyTorch. It is specialized to what it has seen:
each call computes a guard from its arguments (layouts, storage sharing and sizes, requires_grad,
constants, grad mode) and compiles again when the guard is new.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable

import torch
import torch.utils._pytree as pytree
from attrs import frozen

from aotspec.fast.runtime import run_fast
from aotspec.reference.compiled import run_compiled
from aotspec.reference.functionalize import input_facts
from aotspec.reference.hooks import FILTERS as HOOK_FILTERS
from aotspec.reference.hooks import Placement, SavedTensorHooks

BACKENDS = ("reference", "fast")


def _resolve_backend(backend: str | None) -> str:
    if backend is None:
        backend = os.environ.get("AOTSPEC_BACKEND", "fast")
    if backend not in BACKENDS:
        raise ValueError(f"unknown aotspec backend {backend!r}; valid backends: {', '.join(map(repr, BACKENDS))}")
    return backend


def compile(fn: Callable, *, backend: str | None = None, steal=(), hooks_filter: str = "donated") -> CompiledFunction:
    """Compile `fn` for `backend` (`"reference"` or `"fast"`; default `$AOTSPEC_BACKEND`, else `"fast"`)."""
    backend = _resolve_backend(backend)
    if hooks_filter not in HOOK_FILTERS:
        raise ValueError(f"unknown hooks_filter {hooks_filter!r}; valid filters: {', '.join(map(repr, HOOK_FILTERS))}")
    steal = (steal,) if isinstance(steal, str) else tuple(steal)
    parameters = _parameters(fn) if steal else {}
    unknown = [name for name in steal if name not in parameters]
    if unknown:
        raise ValueError(
            f"steal names {unknown}, which are not parameters of {getattr(fn, '__qualname__', fn)} "
            f"(its parameters: {list(parameters)}) [rule boxed.steal]"
        )
    return CompiledFunction(fn, backend, steal, hooks_filter)


def _parameters(fn) -> dict:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # builtins without a signature: nothing can be stolen by name
        return {}


def _flatten(args: tuple, kwargs: dict):
    """The flat leaves of (args, kwargs), and what the guard keeps of their structure: the number of
    arguments when they are all tensors (cheap to hash), else pytree's spec."""
    if not kwargs and all(isinstance(arg, torch.Tensor) for arg in args):
        return list(args), len(args)
    return pytree.tree_flatten((tuple(args), dict(kwargs)))


def _constant_key(leaf):
    try:
        hash(leaf)
        return (type(leaf), leaf)
    except TypeError:
        return (type(leaf), repr(leaf))


class CompiledFunction:
    """What `aotspec.compile` returns: call it like `fn`."""

    def __init__(self, fn: Callable, backend: str, steal: tuple[str, ...], hooks_filter: str):
        self.fn = fn
        self.backend = backend
        self.steal = steal
        self.hooks_filter = hooks_filter
        self._plans: dict = {}
        #: Where inlined pack hooks go; the spec's placement is the default (see reference/hooks.py).
        self.hook_placement = "last-use"
        self.last_ledger = None
        self.last_run = None
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", "compiled")

    @property
    def compilations(self) -> int:
        """How many specializations this callable holds."""
        return len(self._plans)

    def __call__(self, *args, **kwargs):
        stolen_lists = self._stolen_lists(args, kwargs)
        leaves, structure = _flatten(args, kwargs)
        tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        stolen = self._stolen_indices(leaves, stolen_lists)
        constants = tuple(_constant_key(leaf) for leaf in leaves if not isinstance(leaf, torch.Tensor))
        grad_enabled = torch.is_grad_enabled()
        # r[hooks.compiled.respecialize]: the hooks in effect are part of the key (and the key keeps
        # them alive, so their identities stay unique).
        hooks = SavedTensorHooks.active() if grad_enabled else None
        static = _static_inputs(tensors) if hooks is not None and self.hooks_filter == "no_static" else frozenset()
        key = (structure, constants, input_facts(tensors), grad_enabled, hooks, static)
        plan = self._plans.get(key)
        if plan is None:
            hooks_plan = None if hooks is None else _HooksPlan(hooks, self.hooks_filter, static, Placement(self.hook_placement))
            plan = _build_plan(self.fn, args, kwargs, tensors, stolen, hooks_plan)
            if self.backend == "fast":
                from aotspec.fast.runtime import FastPlan

                plan = FastPlan.of(plan)
            self._plans[key] = plan
        del args, kwargs, leaves
        for stolen_list in stolen_lists:
            stolen_list.clear()  # r[boxed.steal]: the caller's list is emptied by the call
        if self.backend == "fast":
            outputs = run_fast(plan, tensors, stolen)
        else:
            run = run_compiled(plan, tensors, stolen=stolen)
            #: The latest call's run (its ledgers: memory facts of the reference backend).
            self.last_run = run
            self.last_ledger = run.ledger
            outputs = run.outputs
        return _functional(plan).captured.unflatten_outputs(outputs)

    def _stolen_lists(self, args, kwargs) -> list[list]:
        if not self.steal:
            return []
        bound = inspect.signature(self.fn).bind(*args, **kwargs)
        lists = []
        for name in self.steal:
            value = bound.arguments.get(name)
            if not isinstance(value, list) or not all(isinstance(t, torch.Tensor) for t in value):
                raise TypeError(
                    f"steal={self.steal!r}: argument {name!r} must be a list of tensors, got "
                    f"{type(value).__name__} [rule boxed.steal]. Pass a list the call may empty, or drop "
                    f"{name!r} from steal"
                )
            lists.append(value)
        return lists

    @staticmethod
    def _stolen_indices(leaves, stolen_lists) -> frozenset[int]:
        if not stolen_lists:
            return frozenset()
        stolen_ids = {id(t) for stolen_list in stolen_lists for t in stolen_list}
        tensor_leaves = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        return frozenset(i for i, t in enumerate(tensor_leaves) if id(t) in stolen_ids)


def _functional(plan):
    return plan.functional if hasattr(plan, "functional") else plan


def _static_inputs(tensors: list[torch.Tensor]) -> frozenset[int]:
    """Parameters, and inputs marked static (`r[hooks.filter.no-static]`)."""
    return frozenset(
        i for i, t in enumerate(tensors) if isinstance(t, torch.nn.Parameter) or hasattr(t, "_dynamo_static_input_type")
    )


@frozen
class _HooksPlan:
    hooks: SavedTensorHooks
    hooks_filter: str
    static_inputs: frozenset[int]
    placement: Placement


def _build_plan(fn, args, kwargs, tensors, stolen, hooks: _HooksPlan | None):
    from aotspec.reference.eager_autograd import hooks_silenced_while_tracing

    with hooks_silenced_while_tracing(rule="hooks.compiled.traced"):
        return _build_plan_without_hooks_firing(fn, args, kwargs, tensors, stolen, hooks)


def _build_plan_without_hooks_firing(fn, args, kwargs, tensors, stolen, hooks: _HooksPlan | None):
    """Capture, functionalize, and with autograd build the forward and backward graphs."""
    from aotspec.errors import UnsupportedError
    from aotspec.reference.autograd import build_training_plan
    from aotspec.reference.capture import capture
    from aotspec.reference.functionalize import Rebind, functionalize
    from aotspec.reference.hooks import inline_hooks

    program = functionalize(capture(fn, args, kwargs), tensors)
    _check_stolen(program, stolen)
    needs_grad = [i for i, meta in enumerate(program.inputs) if meta.requires_grad]
    if not (torch.is_grad_enabled() and needs_grad):
        return program
    # r[autograd.mutated-grad-input]: only writes and set_ under torch.no_grad(), and resizes.
    mutated = sorted(
        i for i in needs_grad if program.inputs[i].storage in program.written_with_grad or i in program.rebound_with_grad
    )
    if mutated:
        raise UnsupportedError(
            f"flat inputs {mutated} require grad and the program writes or rebinds them with grad mode on",
            rule="autograd.mutated-grad-input",
            fix="write or set_ such inputs under torch.no_grad() (as FSDP's all-gather does), mutate them "
            "outside the compiled function, or call it under torch.no_grad()",
        )
    for step in program.epilogue:
        entry = program.inputs[step.input_index]
        if isinstance(step, Rebind) and entry.requires_grad and (step.layout.sizes, step.layout.dtype) != (entry.layout.sizes, entry.layout.dtype):
            raise UnsupportedError(
                f"set_ gives flat input {step.input_index}, which requires grad, sizes {step.layout.sizes} and "
                f"dtype {step.layout.dtype} where it had {entry.layout.sizes} and {entry.layout.dtype}",
                rule="autograd.no-grad-set",
                fix="set_ a tensor that requires grad only to a source of its own sizes and dtype",
            )
    plan = build_training_plan(program, tensors)
    if hooks is None:
        return plan
    return inline_hooks(plan, hooks.hooks, hooks.hooks_filter, hooks.static_inputs, hooks.placement)


def _check_stolen(plan, stolen: frozenset[int]) -> None:
    """A stolen input is only read: the caller gave it away, so nothing may reach it afterwards."""
    from aotspec.errors import UnsupportedError
    from aotspec.reference.functionalize import CallerStorage, OutputIsInput, Rebind

    touched = set()
    for step in plan.epilogue:
        touched.add(step.input_index)
        if isinstance(step, Rebind) and isinstance(step.storage, CallerStorage):
            touched.add(step.storage.input_index)
    for output in plan.outputs:
        if isinstance(output, OutputIsInput):
            touched.add(output.input_index)
        elif isinstance(output.storage, CallerStorage):
            touched.add(output.storage.input_index)
    storages_of_stolen = {plan.inputs[i].storage for i in stolen}
    bad = sorted(i for i in touched if plan.inputs[i].storage in storages_of_stolen)
    if bad:
        raise UnsupportedError(
            f"flat inputs {bad} of a stolen list are written, resized, rebound or returned",
            rule="boxed.steal",
            fix="steal only lists whose tensors the function reads (activations handed over to be freed)",
        )
