"""aotspec: an executable specification of AOTAutograd's runtime semantics.

`aotspec.compile(fn, backend="reference")` runs `fn` the way the specification says a compiled
function must behave; `aotspec.explain(fn, *args)` prints its plan, each step with its rule.
`aotspec.reference` is the reference interpreter, `aotspec.fast` the fast backend,
`aotspec.conformance` the conformance suite. Errors: `UnsupportedError`, `SpecViolation`.
"""

from .api import CompiledFunction, compile
from .errors import HooksWarning, InternalError, SpecViolation, UnsupportedError
from .explain import explain

__all__ = [
    "CompiledFunction",
    "HooksWarning",
    "InternalError",
    "SpecViolation",
    "UnsupportedError",
    "compile",
    "explain",
]
