"""Backends a conformance case runs on.

A backend calls `case.program(*args)` its own way, leaving its effects on the caller's tensors,
and returns `(outputs, run)`: `run.ledger` is the reference ledger of the call (and, for compiled
backends, `run.backward_ledger` the backward's once it ran), or `run` is None for backends that
keep no ledger (memory expectations are then not checked there). Compiled backends honour
`case.steal`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

import aotspec
import aotspec.reference


def _hooks(case):
    """The case's saved-tensor hooks, active around the call (not around the backward)."""
    if case.hooks is None:
        return contextlib.nullcontext()
    return torch.autograd.graph.saved_tensors_hooks(*case.hooks)


def torch_eager(case, args: list):
    with _hooks(case):
        return case.program(*args), None


def reference_eager(case, args: list):
    with _hooks(case):
        run = aotspec.reference.run(case.program, *args)
    return run.outputs, run


def _compiled(case, backend: str):
    compiled = aotspec.compile(
        case.program, backend=backend, steal=case.steal, hooks_filter=case.hooks_filter
    )
    if case.warm_up_without_hooks:
        world = case.setup()
        compiled(*[world[name] for name in case.args])
    return compiled


def reference_compiled(case, args: list):
    compiled = _compiled(case, "reference")
    with _hooks(case):
        outputs = compiled(*args)
    return outputs, compiled.last_run


def fast_compiled(case, args: list):
    compiled = _compiled(case, "fast")
    with _hooks(case):
        return compiled(*args), None


BACKENDS: dict[str, Callable] = {
    "fast": fast_compiled,
    "reference": reference_compiled,
    "reference-eager": reference_eager,
    "torch-eager": torch_eager,
}


def get_backend(name: str) -> Callable:
    if name not in BACKENDS:
        raise ValueError(
            f"unknown conformance backend {name!r}; valid backends: {', '.join(BACKENDS)}"
        )
    return BACKENDS[name]
