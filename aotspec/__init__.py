"""aotspec: an executable specification of AOTAutograd's runtime semantics.

`aotspec.compile(fn, backend="reference")` runs `fn` the way the specification says a compiled
function must behave; `aotspec.explain(fn, *args)` prints its plan, each step with its rule, and
`aotspec.check(fn, *args)` lists what a call would be refused for, without running it.
`aotspec.reference` is the reference interpreter, `aotspec.fast` the fast backend,
`aotspec.conformance` the conformance suite. Errors: `UnsupportedError`, `SpecViolation`.
"""

from .versions import check_torch

check_torch()  # before anything that depends on torch's internals

from .api import CompiledFunction, check, compile  # noqa: E402
from .errors import HooksWarning, InternalError, SpecViolation, UnsupportedError  # noqa: E402
from .explain import explain  # noqa: E402

__all__ = [
    "CompiledFunction",
    "HooksWarning",
    "InternalError",
    "SpecViolation",
    "UnsupportedError",
    "check",
    "compile",
    "explain",
]
