"""Every conformance case, gathered from the modules of this package (one module per chapter)."""

from . import aliasing, autograd, capture, collectives, hooks, memory, ops, resize

ALL_CASES = [
    *memory.CASES,
    *capture.CASES,
    *ops.CASES,
    *aliasing.CASES,
    *resize.CASES,
    *autograd.CASES,
    *hooks.CASES,
    *collectives.CASES,
]

_names = [case.name for case in ALL_CASES]
if len(set(_names)) != len(_names):
    raise ValueError(
        "conformance case names must be unique: "
        f"{sorted(n for n in _names if _names.count(n) > 1)}"
    )
