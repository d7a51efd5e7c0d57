"""aotspec.reference: the executable specification of AOTAutograd's runtime semantics.

Written for clarity, not speed: it defines the exact semantics that `specs/` states in prose, and
the fast backend must agree with it. Module map (spec chapter -> module):

- memory-model.md  -> storage.py (storages, layouts, tensors), ledger.py (live, freed, peak)
- ops.md           -> optable.py (the table), ops.py (value and view rules), effects.py, opaque.py
- aliasing.md, storage-resize.md -> effects.py, boundary.py
- capture          -> capture.py (make_fx on fakes), eager.py (the eager interpreter)
"""

from .capture import Program, capture
from .eager import EagerRun, execute, run

__all__ = ["EagerRun", "Program", "capture", "execute", "run"]
