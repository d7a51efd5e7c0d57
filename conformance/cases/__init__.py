"""Every conformance case, gathered from the modules of this package: one module per chapter of
`specs/` (`autograd.md` has one per section), each case in the module of its first rule."""

from . import (
    aliasing,
    autograd,
    autograd_custom_functions,
    autograd_input_writes,
    autograd_metadata,
    boxed_calls,
    capture,
    checkpoint,
    collectives,
    functionalization,
    hooks,
    memory,
    ops,
    resize,
    sizes,
)

ALL_CASES = [
    *memory.CASES,
    *capture.CASES,
    *ops.CASES,
    *collectives.CASES,
    *aliasing.CASES,
    *resize.CASES,
    *functionalization.CASES,
    *autograd.CASES,
    *autograd_custom_functions.CASES,
    *autograd_input_writes.CASES,
    *autograd_metadata.CASES,
    *checkpoint.CASES,
    *hooks.CASES,
    *boxed_calls.CASES,
    *sizes.CASES,
]

_names = [case.name for case in ALL_CASES]
if len(set(_names)) != len(_names):
    raise ValueError(
        "conformance case names must be unique: "
        f"{sorted(n for n in _names if _names.count(n) > 1)}"
    )
