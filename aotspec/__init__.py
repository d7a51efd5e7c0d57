"""aotspec: an executable specification of AOTAutograd's runtime semantics.

`aotspec.reference` is the reference interpreter, `aotspec.fast` the fast backend, and
`aotspec.conformance` the conformance suite. Errors: `UnsupportedError`, `SpecViolation`.
"""

from .errors import InternalError, SpecViolation, UnsupportedError

__all__ = ["InternalError", "SpecViolation", "UnsupportedError"]
