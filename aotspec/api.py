"""`aotspec.compile`: the public contract of docs/contract.md.

The returned callable behaves like `fn` in eager PyTorch. It is specialized to what it has seen:
each call computes a guard from its arguments (layouts, storage sharing and sizes, requires_grad,
constants, grad mode) and compiles again when the guard is new.
"""

from __future__ import annotations

import collections
import inspect
import os
import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.utils._pytree as pytree
from attrs import define

from aotspec.errors import UnsupportedError
from aotspec.guard import facts_guard, metadata_check
from aotspec.reference.boundary import (
    autocast_state,
    refuse_inference_tensors,
    refuse_transformed,
)
from aotspec.reference.compiled import run_compiled
from aotspec.reference.dynamic import at_sizes, size_binding
from aotspec.reference.lift import NOTHING_LIFTED, Lifter, lift
from aotspec.reference.optable import collecting_refusals
from aotspec.reference.pipeline import (
    HOOK_FILTERS,
    HooksRequest,
    SavedTensorHooks,
    build_plan,
    trace_symbolically,
)
from aotspec.reference.plan_records import Placement, Plan
from aotspec.reference.program_records import input_facts
from aotspec.reference.synthetic_bases import bases_key

if TYPE_CHECKING:  # the fast backend loads when first used (`_FastRuntime`)
    from aotspec.fast.runtime import FastPlan

BACKENDS = ("reference", "fast")


def _resolve_backend(backend: str | None) -> str:
    if backend is None:
        backend = os.environ.get("AOTSPEC_BACKEND", "fast")
    if backend not in BACKENDS:
        raise ValueError(
            f"unknown aotspec backend {backend!r}; "
            f"valid backends: {', '.join(map(repr, BACKENDS))}"
        )
    return backend


def compile(
    fn: Callable,
    *,
    backend: str | None = None,
    steal=(),
    hooks_filter: str = "donated",
    hook_placement: str = "last-use",
    dynamic: bool = False,
) -> CompiledFunction:
    """Compile `fn` for `backend` (`"reference"` or `"fast"`; default `$AOTSPEC_BACKEND`, else
    `"fast"`). `hook_placement` says where inlined pack hooks go: `"last-use"`, the spec's
    placement (`r[hooks.place.pack-after-last-use]`), or `"forward-end"`, PyTorch 2.13's, kept
    for comparisons. With `dynamic=True`, the sizes of the tensor arguments (not of parameters
    or of tensors `fn` reaches by itself) are symbols: one plan serves every size that keeps
    what tracing decided about them (`r[sizes.symbolic.dims]`)."""
    backend = _resolve_backend(backend)
    placement = Placement(hook_placement)
    if hooks_filter not in HOOK_FILTERS:
        raise ValueError(
            f"unknown hooks_filter {hooks_filter!r}; "
            f"valid filters: {', '.join(map(repr, HOOK_FILTERS))}"
        )
    steal = (steal,) if isinstance(steal, str) else tuple(steal)
    parameters = _parameters(fn) if steal else {}
    unknown = [name for name in steal if name not in parameters]
    if unknown:  # r[boxed.steal.lists-only]
        raise ValueError(
            f"steal names {unknown}, which are not parameters of "
            f"{getattr(fn, '__qualname__', fn)} "
            f"(its parameters: {list(parameters)}) [rule boxed.steal.lists-only]"
        )
    if not isinstance(dynamic, bool):
        raise ValueError(
            f"dynamic={dynamic!r}: pass True (every size of the tensor arguments is a symbol) "
            "or False (a plan per size) [rule sizes.symbolic.dims]"
        )
    compiled = CompiledFunction(fn, backend, steal, hooks_filter, placement)
    if dynamic:
        compiled.dynamic = EveryDimOfArguments()
    return compiled


def check(fn: Callable, *args, **kwargs) -> list[UnsupportedError]:
    """What `aotspec.compile(fn)` would refuse for this call, without running it: every op of the
    program that is not supported, each an UnsupportedError naming the op, the user's source line
    and the rule (`r[ops.unsupported-all]`), then what its backward refuses (refused ops stand
    in without a gradient), and last the first pattern refused after capture. Empty when the
    call compiles. `fn` is traced on fake tensors: the arguments are not touched. A
    module's parameters and buffers are inputs of the program, as Dynamo makes them."""
    if isinstance(fn, torch.nn.Module):
        module = fn
        state = {**dict(module.named_parameters()), **dict(module.named_buffers())}

        def fn(state, *args, **kwargs):
            return torch.func.functional_call(module, state, args, kwargs)

        args = (state, *args)
    else:
        lifted = lift(fn)
        if lifted.tensors:  # r[capture.lift]: as a compiled call lifts them
            fn, args = lifted.wrap(fn), (list(lifted.tensors), *args)
    leaves, _ = _flatten(args, kwargs)
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    with collecting_refusals() as refusals:
        try:
            build_plan(fn, args, kwargs, tensors, frozenset(), None)
        except UnsupportedError as error:  # a pattern refused: the compile can go no further
            for refusal in error.refusals:
                refusals.note(refusal)
        except Exception:
            if not refusals.errors:
                raise
            # what a refused op's stand-in led to: the refusals found are what there is to say
    return refusals.errors


def _parameters(fn) -> dict:
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # builtins without a signature: nothing can be stolen by name
        return {}


def _flatten(args: tuple, kwargs: dict):
    """The flat leaves of (args, kwargs), and what the guard keeps of their structure. Where
    every argument is a tensor or a list of tensors (the lifted tensors come as one), that is
    a tuple of ints, cheap to hash: -1 for a tensor, a list's length for a list; else pytree's
    spec."""
    if not kwargs:
        leaves: list = []
        structure = []
        for arg in args:
            if isinstance(arg, torch.Tensor):
                leaves.append(arg)
                structure.append(-1)
            elif type(arg) is list and all(isinstance(t, torch.Tensor) for t in arg):
                leaves += arg
                structure.append(len(arg))
            else:
                break
        else:
            return leaves, tuple(structure)
    return pytree.tree_flatten((tuple(args), dict(kwargs)))


#: A call that steals no input, and the static inputs of a call without `no_static` hooks.
_NONE_STOLEN = _NONE_STATIC = frozenset()

_IS_INFERENCE = torch.Tensor.is_inference


def _constant_key(leaf):
    try:
        hash(leaf)
        return (type(leaf), leaf)
    except TypeError:
        return (type(leaf), repr(leaf))


class CompiledFunction:
    """What `aotspec.compile` returns: call it like `fn`."""

    def __init__(
        self,
        fn: Callable,
        backend: str,
        steal: tuple[str, ...],
        hooks_filter: str,
        hook_placement: Placement = Placement.LAST_USE,
    ):
        self.fn = fn
        self.backend = backend
        self.steal = steal
        self.hooks_filter = hooks_filter
        #: Where inlined pack hooks go (`compile`'s `hook_placement`).
        self.hook_placement = hook_placement
        self._runtime = _RUNTIMES[backend]
        #: Guard key -> what the backend runs: a Plan (reference) or a FastPlan (fast).
        self._plans: dict = {}
        #: Guard key -> the flat inputs whose values its latest specialization read at capture
        #: (`r[capture.data-dependent.input-values]`).
        self._values_read: dict = {}
        #: Guard key -> its tensor facts as a generated check (`aotspec.guard`).
        self._guards: dict = {}
        #: The latest call's specialization, which the next call checks first.
        self._latest: _Latest | None = None
        self.last_run = None
        #: Which sizes of a call are symbols (`r[sizes.symbolic.dims]`): None for none, else
        #: what says which dims of the flat tensors and which numbers among the flat leaves.
        self.dynamic: DynamicSizes | None = None
        #: Symbolic plans, by what their guard keeps besides sizes (`_symbolic_key`), each with
        #: the ids of its records that hold no symbol (`at_sizes`).
        self._symbolic: dict = {}
        #: The guard keys of symbolic plans at a call's sizes, the latest used last: at most
        #: `AT_SIZES_KEPT` are kept, as a new size costs milliseconds, not a trace.
        self._at_sizes: collections.OrderedDict = collections.OrderedDict()
        #: How many plans this callable traced.
        self._traced = 0
        self._lifter = Lifter(fn)
        #: The key's structure of a `call_held_first`, by the lengths of its two parts.
        self._held_first: dict[tuple[int, int], tuple] = {}
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", "compiled")

    @property
    def compilations(self) -> int:
        """How many plans this callable traced: a symbolic plan counts once, whatever the sizes
        it served."""
        return self._traced

    @property
    def plans(self) -> Mapping:
        """Its specializations, read-only: guard key -> what the backend runs, a `Plan`
        (reference) or a `FastPlan` (fast, whose `source` is the generated code)."""
        return types.MappingProxyType(self._plans)

    def adopt_plans(self, other: CompiledFunction) -> None:
        """Run the specializations `other`, compiled for the reference backend, has built, from
        now on, prepared for this backend, instead of compiling them again: the fuzzer and the
        differential tests compare two backends on one plan."""
        if other.backend != "reference":
            raise ValueError("adopt_plans takes a function compiled for the reference backend")
        for key, plan in other._plans.items():
            self._plans[key] = self._runtime.prepare(plan)
        self._latest = None

    def __call__(self, *args, **kwargs):
        stolen_lists = self._stolen_lists(args, kwargs) if self.steal else []
        lifted = self._lifter.lift()
        if lifted.tensors:  # r[capture.lift]: looked up again at every call
            args = (list(lifted.tensors), *args)
        leaves, structure = _flatten(args, kwargs)
        if type(structure) is tuple:  # tensors and lists of tensors only
            tensors, constants = leaves, ()
        else:
            tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
            constants = tuple(
                _constant_key(leaf) for leaf in leaves if not isinstance(leaf, torch.Tensor)
            )
        # this frame lets go of the arguments: a stolen tensor dies at its last use in the graph
        call = [args, kwargs, leaves]
        del args, kwargs, leaves, tensors
        return self._call(call, structure, constants, lifted, stolen_lists)

    def call_held_first(self, held: list[torch.Tensor], tensors: tuple) -> Any:
        """`fn(held, *tensors)`, where `fn` reaches no tensor from its code and steals nothing
        (the Dynamo backend's graph runner, `aotspec.dynamo`): the call `__call__` makes, with
        what it finds known beforehand: nothing to lift (`r[capture.lift]`), and the flat
        leaves `held` then `tensors`, all tensors."""
        lengths = (len(held), len(tensors))
        structure = self._held_first.get(lengths)
        if structure is None:
            structure = self._held_first[lengths] = _flatten((held, *tensors), {})[1]
        call = [(held, *tensors), {}, [*held, *tensors]]
        return self._call(call, structure, (), NOTHING_LIFTED, [])

    def _call(self, call: list, structure, constants: tuple, lifted, stolen_lists) -> Any:
        """The call of `call`: [args, kwargs, their flat leaves], which it empties, of which
        the key keeps `structure` and `constants`; with the tensors `lifted` and the caller's
        lists it steals."""
        args, kwargs, leaves = call
        call.clear()
        tensors = leaves if not constants else [t for t in leaves if isinstance(t, torch.Tensor)]
        refuse_transformed(tensors)
        if any(map(_IS_INFERENCE, tensors)):  # (one pass in C; the refusal names the tensor)
            refuse_inference_tensors(tensors, len(lifted.tensors))
        stolen = self._stolen_indices(leaves, stolen_lists) if stolen_lists else _NONE_STOLEN
        grad_enabled = torch.is_grad_enabled()
        autocast = autocast_state()  # r[capture.autocast]: casts are recorded at capture
        default_dtype = torch.get_default_dtype()  # r[capture.default-dtype]
        # r[hooks.compiled.respecialize]: what the hooks in effect compute is part of the key;
        # under torch.no_grad() too, as they apply to what ops inside torch.enable_grad() save
        # (r[autograd.grad-mode-inside]).
        hooks = SavedTensorHooks.active()
        static = (
            _static_inputs(tensors)
            if hooks is not None and self.hooks_filter == "no_static"
            else _NONE_STATIC
        )
        context = (
            structure,
            constants,
            grad_enabled,
            autocast,
            default_dtype,
            None if hooks is None else hooks.key,
            static,
            lifted.key,
        )
        latest = self._latest
        if latest is not None and latest.holds(context, tensors):
            compiled = latest.compiled  # the key of the latest call, checked in one pass
        else:
            compiled = self._look_up(
                context, tensors, (args, kwargs, stolen, hooks, static, lifted, leaves)
            )
        del args, kwargs, leaves
        for stolen_list in stolen_lists:
            stolen_list.clear()  # r[boxed.steal]: the caller's list is emptied by the call
        bases = compiled.bases  # r[autograd.input-writes.synthetic-base]
        if bases.groups:
            inputs = bases.inputs(tensors)
            for i in stolen:
                if bases.program_index(i) >= len(bases.groups):  # not a view of a base
                    # r[boxed.steal.freed-at-last-use]: only the program's list holds it
                    tensors[i] = None
            stolen = frozenset(bases.program_index(i) for i in stolen)
            outputs = self._runtime.run(self, compiled, inputs, stolen, callers=tensors)
            outputs = bases.with_caller_objects(outputs, tensors)
        else:
            outputs = self._runtime.run(self, compiled, tensors, stolen)
        return compiled.functional.captured.unflatten_outputs(outputs)

    def _look_up(self, context: tuple, tensors: list, call: tuple):
        """The plan for the call's key (`context`, then the facts of `tensors`), compiled for
        `call` (its arguments, stolen inputs, hooks, lifted tensors and flat leaves) when the
        key is new; remembered as the latest, with the key's tensor facts as a generated
        check."""
        facts = input_facts(tensors)
        key = (context, facts, bases_key(tensors, facts))
        # r[capture.data-dependent.input-values]: the values capture read are part of the key
        reads = self._values_read.get(key, ()) if self._values_read else ()
        compiled = self._plans.get((key, _values_at(tensors, reads)) if reads else key)
        if compiled is None:
            args, kwargs, stolen, hooks, static, lifted, leaves = call
            hooks_request = None
            if hooks is not None:
                hooks_request = HooksRequest(hooks, self.hooks_filter, static, self.hook_placement)
            unserved = (args, kwargs, tensors, leaves, facts, stolen)
            plan = self._plan(context, unserved, lifted, hooks_request)
            compiled = self._runtime.prepare(plan)
            read = plan.functional.captured.values_read  # the program's flat inputs
            reads = tuple(i for i in range(len(tensors)) if plan.bases.program_index(i) in read)
            if reads:
                self._values_read[key] = reads
                key = (key, _values_at(tensors, reads))
            self._plans[key] = compiled
            if plan.sizes:
                self._keep_at_sizes(key)
        elif key in self._at_sizes:
            self._at_sizes.move_to_end(key)
        if reads:
            self._latest = None  # r[capture.data-dependent.input-values]: values, not facts
        else:
            metadata = None if key in self._guards else metadata_check(tensors)
            self._latest = _Latest(context, key, self._guards, compiled, metadata)
        return compiled

    def _keep_at_sizes(self, key) -> None:
        """Keeps `key`'s symbolic plan at a call's sizes, dropping the least recently used one
        past `AT_SIZES_KEPT`: a loop over ever new sizes (an inference server's) would otherwise
        keep one per size (about 40 kB each on a transformer layer's step)."""
        self._at_sizes[key] = None
        if len(self._at_sizes) > AT_SIZES_KEPT:
            dropped, _ = self._at_sizes.popitem(last=False)
            del self._plans[dropped]
            self._guards.pop(dropped, None)

    def _plan(self, context: tuple, call: tuple, lifted, hooks_request) -> Plan:
        """The plan of a `call` (arguments, flat tensors and leaves, input facts, stolen inputs)
        that no plan of this function serves yet: a symbolic plan at the call's sizes, with
        dynamic sizes asked for and in scope (`r[sizes.symbolic.scope]`), else one traced at
        them."""
        args, kwargs, tensors, leaves, facts, stolen = call
        fn = lifted.wrap(self.fn) if lifted.tensors else self.fn
        if self.dynamic is not None and hooks_request is None:
            plan = self._serve_symbolically(
                context, fn, args, kwargs, tensors, leaves, facts, stolen, len(lifted.tensors)
            )
            if plan is not None:
                return plan
        # r[functionalize.errors-before-running]: before the call touches any input
        plan = build_plan(fn, args, kwargs, tensors, stolen, hooks_request)
        self._traced += 1
        return plan

    def _serve_symbolically(
        self, context, fn, args, kwargs, tensors, leaves, facts, stolen, lifted: int
    ) -> Plan | None:
        """A symbolic plan at this call's sizes: one traced before that serves them, else one
        traced now; None where the call is planned at its sizes (`r[sizes.symbolic.scope]`).
        Symbolic plans are kept by what the guard keeps besides sizes and symbolic numbers."""
        numbers = self.dynamic.numbers(len(leaves))
        constants = tuple(
            _constant_key(leaf)
            for i, leaf in enumerate(leaves)
            if i not in numbers and not isinstance(leaf, torch.Tensor)
        )
        plans = self._symbolic.setdefault((context[0], constants, *context[2:]), [])
        for plan, constant in plans:
            binding = size_binding(plan, facts, leaves)
            if binding is not None:
                return at_sizes(plan, binding, constant)
        dims = self.dynamic.dims(tensors, lifted)
        plan = trace_symbolically(fn, args, kwargs, tensors, dims, numbers, facts, stolen)
        if plan is None:
            return None
        self._traced += 1
        constant: set[int] = set()  # the plan's records found to hold no symbol (`at_sizes`)
        plans.append((plan, constant))
        return at_sizes(plan, size_binding(plan, facts, leaves), constant)

    def _stolen_lists(self, args, kwargs) -> list[list]:
        bound = inspect.signature(self.fn).bind(*args, **kwargs)
        lists = []
        for name in self.steal:
            value = bound.arguments.get(name)
            # r[boxed.steal.lists-only]
            if not isinstance(value, list) or not all(isinstance(t, torch.Tensor) for t in value):
                raise TypeError(
                    f"steal={self.steal!r}: argument {name!r} must be a list of tensors, got "
                    f"{type(value).__name__} [rule boxed.steal.lists-only]. "
                    "Pass a list the call may empty, or drop "
                    f"{name!r} from steal"
                )
            lists.append(value)
        return lists

    @staticmethod
    def _stolen_indices(leaves, stolen_lists) -> frozenset[int]:
        stolen_ids = {id(t) for stolen_list in stolen_lists for t in stolen_list}
        tensor_leaves = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        return frozenset(i for i, t in enumerate(tensor_leaves) if id(t) in stolen_ids)


@define
class _Latest:
    """The specialization the latest call ran: the non-tensor part of its key, its whole key
    and what the backend runs. The check of its tensor facts (`aotspec.guard.facts_guard`) is
    generated when a call first asks it, once per key (`guards`, the compiled function's): a
    function called once, as the fuzzer calls each, does without. Until then it keeps the
    check of the metadata of the tensors that made the key (`metadata_check`), where the
    key's check is not made yet."""

    context: tuple
    key: tuple
    guards: dict
    compiled: object
    metadata_holds: Callable[..., bool] | None
    facts_hold: Callable[[list], bool] | None = None

    def holds(self, context: tuple, tensors: list) -> bool:
        """Whether a call with `context` and `tensors` has this specialization's key."""
        if self.context != context:
            return False
        if self.facts_hold is None:
            if self.key not in self.guards:
                self.guards[self.key] = facts_guard(*self.key[1:], self.metadata_holds)
            self.metadata_holds = None
            self.facts_hold = self.guards[self.key]
        return self.facts_hold(tensors)


#: Symbolic plans at a call's sizes a compiled function keeps (the latest used); a size it no
#: longer keeps is served again by its symbolic plan, with no trace.
AT_SIZES_KEPT = 64


class DynamicSizes(Protocol):
    """Which sizes of a call are symbols (`r[sizes.symbolic.dims]`): `EveryDimOfArguments`, or
    the Dynamo backend's `DynamoSizes`."""

    def dims(self, tensors: list[torch.Tensor], lifted: int) -> list[frozenset[int]]:
        """Per flat tensor of a call (the first `lifted` lifted), its dims that are symbols."""

    def numbers(self, leaves: int) -> frozenset[int]:
        """Positions among a call's `leaves` flat leaves of the numbers that are symbols."""


class EveryDimOfArguments:
    """`aotspec.compile(fn, dynamic=True)` (`r[sizes.symbolic.dims]`): every dim of the tensor
    arguments is a symbol; parameters and the tensors the function reaches by itself (lifted,
    first among the flat tensors) keep their sizes, and numbers are constants."""

    @staticmethod
    def numbers(leaves: int) -> frozenset[int]:
        """Positions among a call's `leaves` flat leaves of the numbers that are symbols."""
        return frozenset()

    @staticmethod
    def dims(tensors: list[torch.Tensor], lifted: int) -> list[frozenset[int]]:
        """Per flat tensor, its dims that are symbols."""
        return [
            frozenset()
            if i < lifted or isinstance(t, torch.nn.Parameter)
            else frozenset(range(t.dim()))
            for i, t in enumerate(tensors)
        ]


def _values_at(tensors: list[torch.Tensor], reads: tuple[int, ...]) -> tuple:
    """The values of the flat inputs `reads`, hashable (r[capture.data-dependent.input-values])."""
    return tuple((i, tuple(tensors[i].reshape(-1).tolist())) for i in reads)


def _static_inputs(tensors: list[torch.Tensor]) -> frozenset[int]:
    """Parameters, and inputs marked static (`r[hooks.filter.no-static]`)."""
    return frozenset(
        i
        for i, t in enumerate(tensors)
        if isinstance(t, torch.nn.Parameter) or hasattr(t, "_dynamo_static_input_type")
    )


class _ReferenceRuntime:
    """The reference backend: plans run on the interpreter; each call keeps its ledgers."""

    @staticmethod
    def prepare(plan: Plan) -> Plan:
        return plan

    @staticmethod
    def run(
        compiled_function: CompiledFunction, plan: Plan, tensors: list, stolen, callers=()
    ) -> list:
        run = run_compiled(plan, tensors, stolen=stolen, callers=callers)
        outputs, run.outputs = run.outputs, []  # the caller's alone, as eager's outputs are
        #: The latest call's run (its ledgers: memory facts of the reference backend).
        compiled_function.last_run = run
        return outputs


class _FastRuntime:
    """The fast backend: plans compiled to boxed Python code on real tensors."""

    @staticmethod
    def prepare(plan: Plan) -> FastPlan:
        # Imported when first used: importing aotspec (or its reference) loads neither the fast
        # backend nor Triton.
        from aotspec.fast.runtime import FastPlan

        return FastPlan.of(plan)

    @staticmethod
    def run(
        compiled_function: CompiledFunction, fast: FastPlan, tensors: list, stolen, callers=()
    ) -> list:
        return fast.runner(tensors, stolen, callers)  # (`fast.run`, one frame less)


_RUNTIMES = {"reference": _ReferenceRuntime, "fast": _FastRuntime}
