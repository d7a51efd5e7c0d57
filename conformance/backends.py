"""Backends a conformance case runs on.

A backend calls `case.program(*args)` its own way, leaving its effects on the caller's tensors,
and returns `(outputs, run)`: `run.ledger` is the reference ledger of the call (and, for compiled
backends, `run.backward_ledger` the backward's once it ran), or `run` is None for backends that
keep no ledger (memory expectations are then not checked there). Compiled backends honour
`case.steal`.
"""

from __future__ import annotations

from collections.abc import Callable

import aotspec
import aotspec.reference


def torch_eager(case, args: list):
    return case.program(*args), None


def reference_eager(case, args: list):
    run = aotspec.reference.run(case.program, *args)
    return run.outputs, run


def reference_compiled(case, args: list):
    compiled = aotspec.compile(case.program, backend="reference", steal=case.steal)
    outputs = compiled(*args)
    return outputs, compiled.last_run


def fast_compiled(case, args: list):
    return aotspec.compile(case.program, backend="fast", steal=case.steal)(*args), None


BACKENDS: dict[str, Callable] = {
    "fast": fast_compiled,
    "reference": reference_compiled,
    "reference-eager": reference_eager,
    "torch-eager": torch_eager,
}


def get_backend(name: str) -> Callable:
    if name not in BACKENDS:
        raise ValueError(f"unknown conformance backend {name!r}; valid backends: {', '.join(BACKENDS)}")
    return BACKENDS[name]
