"""Backends a conformance case runs on.

A backend calls `program(*args)` its own way, leaving its effects on the caller's tensors, and
returns `(outputs, ledger)`; the ledger is None for backends that keep none (memory expectations
are then not checked there).
"""

from __future__ import annotations

from collections.abc import Callable

import aotspec.reference


def torch_eager(program: Callable, args: list):
    return program(*args), None


def reference_eager(program: Callable, args: list):
    run = aotspec.reference.run(program, *args)
    return run.outputs, run.ledger


BACKENDS: dict[str, Callable] = {
    "reference-eager": reference_eager,
    "torch-eager": torch_eager,
}


def get_backend(name: str) -> Callable:
    if name not in BACKENDS:
        raise ValueError(f"unknown conformance backend {name!r}; valid backends: {', '.join(BACKENDS)}")
    return BACKENDS[name]
