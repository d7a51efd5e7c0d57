"""Backends a conformance case runs on.

A backend starts on a case (`start(case)`: a compiled backend compiles `case.program` once)
and returns a call: `call(args)` runs the program its own way, leaving its effects on the
caller's tensors, and returns `(outputs, run)`: `run.ledger` is the reference ledger of the
call (and, for compiled backends, `run.backward_ledger` the backward's once it ran), or `run`
is None for backends that keep no ledger (memory expectations are then not checked there). A
case with `sizes` makes one call per size. Compiled backends honour `case.steal`.

Backends by name (`resolve`):
- `fast`, `reference` (aotspec.compile), `reference-eager` (the eager interpreter), `torch-eager`;
- `torch.compile:NAME`: `torch.compile(program, backend=NAME)`, NAME any registered Dynamo
  backend (`aot_eager`, `inductor`, `aotspec`, a third party's);
- `MODULE:CALLABLE`: `torch.compile(program, backend=MODULE.CALLABLE)`, a user's own Dynamo
  backend `(graph_module, example_inputs) -> callable`.
The last two are *foreign*: they know nothing of aotspec, so a case that needs what only
`aotspec.compile` offers is mapped onto PyTorch's own mechanism, or skipped with the reason
(`Backend.skip_reason`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Callable

import torch
from attrs import frozen

import aotspec
import aotspec.reference

from .case import Raises, Warns

#: Why a foreign backend skips a case that steals a list.
NO_STEALING = (
    "steal= has no torch.compile equivalent: only compiled autograd hands its own inputs list "
    "over to be stolen, a caller cannot"
)
#: Why a foreign backend skips a case that expects an error or warning of aotspec's own.
ASPECT_OF_AOTSPEC = (
    "the program is outside the specification (rule {rules}): aotspec rejects it with its own "
    "{error}, and what another compiler does with it is left open"
)


def _hooks(case):
    """The case's saved-tensor hooks, active around the call (not around the backward)."""
    if case.hooks is None:
        return contextlib.nullcontext()
    return torch.autograd.graph.saved_tensors_hooks(*case.hooks)


#: What a backend's `start(case)` returns: `call(args) -> (outputs, run)`.
Call = Callable[[list], tuple]


def torch_eager(case) -> Call:
    def call(args: list):
        with _hooks(case):
            return case.program(*args), None

    return call


def reference_eager(case) -> Call:
    def call(args: list):
        with _hooks(case):
            run = aotspec.reference.run(case.program, *args)
        return run.outputs, run

    return call


def _warm_up(case, compiled: Callable) -> None:
    """With `case.warm_up_without_hooks`: one call of `compiled` without hooks, on a fresh world
    (of the case's first size, if it has sizes)."""
    if case.warm_up_without_hooks:
        world = case.world(case.sizes[0] if case.sizes else None)
        compiled(*[world[name] for name in case.args])


def _compiled(case, backend: str):
    compiled = aotspec.compile(
        case.program,
        backend=backend,
        steal=case.steal,
        hooks_filter=case.hooks_filter,
        dynamic=case.dynamic,
    )
    _warm_up(case, compiled)
    return compiled


def reference_compiled(case) -> Call:
    compiled = _compiled(case, "reference")

    def call(args: list):
        with _hooks(case):
            outputs = compiled(*args)
        return outputs, compiled.last_run

    call.plans = lambda: compiled.compilations
    return call


def fast_compiled(case) -> Call:
    compiled = _compiled(case, "fast")

    def call(args: list):
        with _hooks(case):
            return compiled(*args), None

    call.plans = lambda: compiled.compilations
    return call


BACKENDS: dict[str, Callable] = {
    "fast": fast_compiled,
    "reference": reference_compiled,
    "reference-eager": reference_eager,
    "torch-eager": torch_eager,
}

#: How the foreign kinds are spelled, for error messages.
FOREIGN_KINDS = ("torch.compile:NAME", "MODULE:CALLABLE")


# ---------------------------------------------------------------- foreign backends


def _graph_module_hook(hook: Callable) -> torch.fx.GraphModule | None:
    """`hook` as a `torch.fx.GraphModule`, which PyTorch needs to inline a saved-tensor hook
    (docs/torch-2.13.md section 4.1), or None when it cannot be traced."""
    try:
        return torch.fx.symbolic_trace(hook)
    except Exception:  # noqa: BLE001 (data-dependent Python: no graph, the case is skipped)
        return None


def _hooks_of_graphs(case):
    """The case's hooks as GraphModules, so that PyTorch inlines them as the spec says; with the
    spec's filter mapped onto PyTorch's own setting of the same name and meaning."""
    if case.hooks is None:
        return contextlib.nullcontext()
    pack, unpack = map(_graph_module_hook, case.hooks)
    stack = contextlib.ExitStack()
    stack.enter_context(
        torch._functorch.config.patch(saved_tensors_hooks_filtering_mode=case.hooks_filter)
    )
    stack.enter_context(torch.autograd.graph.saved_tensors_hooks(pack, unpack))
    return stack


def _foreign_skip(case) -> str | None:
    """Why a foreign backend cannot run `case`, or None."""
    if case.steal:
        return NO_STEALING
    for expectation in case.expect:
        if isinstance(expectation, Raises) and issubclass(
            expectation.error, (aotspec.UnsupportedError, aotspec.SpecViolation)
        ):
            return ASPECT_OF_AOTSPEC.format(
                rules=expectation.rule or ", ".join(case.rules), error=expectation.error.__name__
            )
        warns_ours = (
            isinstance(expectation, Warns) and expectation.category is aotspec.HooksWarning
        )
        if warns_ours:
            return ASPECT_OF_AOTSPEC.format(rules=expectation.rule, error="HooksWarning")
    if case.hooks is not None and None in map(_graph_module_hook, case.hooks):
        return (
            "a hook reads tensor data in Python, so it cannot become the torch.fx.GraphModule "
            "that PyTorch needs to inline it (docs/torch-2.13.md section 4.1)"
        )
    return None


def _torch_compiled(dynamo_backend) -> Callable:
    """A conformance backend that runs the case through `torch.compile(backend=dynamo_backend)`,
    on a fresh Dynamo cache (cases share programs, and settings such as the hooks filter are
    not part of Dynamo's guards). A case without sizes compiles static shapes; one with sizes
    compiles as a user's `torch.compile` does, marking a dimension dynamic when a second size
    of it comes."""

    def start(case) -> Call:
        torch._dynamo.reset()
        # r[sizes.symbolic.dynamo]: a dynamic case's sizes are symbols from its first call
        dynamic = True if case.dynamic else (None if case.sizes else False)
        compiled = torch.compile(case.program, backend=dynamo_backend, dynamic=dynamic)
        _warm_up(case, compiled)

        def call(args: list):
            with _hooks_of_graphs(case):
                return compiled(*args), None

        return call

    return start


def user_callable(spec: str) -> Callable:
    """`MODULE:CALLABLE`, imported with the working directory on the path (as `python -m`)."""
    module_name, _, attribute = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as error:
        raise ValueError(
            f"backend {spec!r}: cannot import {attribute!r} from {module_name!r} ({error}); "
            "name a Dynamo backend callable as MODULE:CALLABLE, importable from here"
        ) from None
    if not callable(found):
        raise ValueError(f"backend {spec!r} is a {type(found).__name__}, not a callable")
    return found


@frozen
class Backend:
    """A backend by name: how it starts on a case (`start(case) -> call`, see the module's
    docstring), and whether it is foreign to aotspec."""

    name: str
    start: Callable[..., Call]
    foreign: bool = False

    def skip_reason(self, case) -> str | None:
        """Why this backend does not run `case`, or None: the case's own skip entry (by name,
        or `torch.compile` for every torch.compile backend), then what a foreign backend
        cannot be asked."""
        kind = self.name.partition(":")[0]
        reason = case.skip.get(self.name) or (case.skip.get(kind) if self.foreign else None)
        if reason is None and self.foreign:
            reason = _foreign_skip(case)
        return reason


def resolve(name: str) -> Backend:
    """The backend `name` (see the module docstring); ValueError naming the valid ones."""
    if name in BACKENDS:
        return Backend(name, BACKENDS[name])
    if name.startswith("torch.compile:"):
        dynamo_name = name.removeprefix("torch.compile:")
        known = torch._dynamo.list_backends(exclude_tags=())
        if dynamo_name not in known:
            raise ValueError(
                f"unknown backend {name!r}: no Dynamo backend {dynamo_name!r} is registered; "
                f"registered: {', '.join(sorted(known))}"
            )
        return Backend(name, _torch_compiled(dynamo_name), foreign=True)
    if ":" in name:
        return Backend(name, _torch_compiled(user_callable(name)), foreign=True)
    raise ValueError(
        f"unknown backend {name!r}; valid backends: {', '.join([*BACKENDS, *FOREIGN_KINDS])}"
    )
