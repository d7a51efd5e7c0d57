"""aotspec.reference: the executable specification of AOTAutograd's runtime semantics.

Written for clarity, not speed: it defines the exact semantics that `specs/` states in prose, and
the fast backend must agree with it. Modules, from the ground floor up (each imports only
modules above it in this list):

- storage.py (storages, layouts, tensors), ledger.py (live, freed, peak), lifetimes.py (where
  each value dies), boundary.py (torch tensors in and out)
- optable.py (the op table), ops.py (value, view and derivative rules), effects.py, opaque.py,
  aten.py (ATen-valued ops: aten ops outside the table)
- graph.py (a graph with its op table entries), interpreter.py (the evaluator)
- capture.py (make_fx on fakes: a function becomes an aten graph)
- eager.py (the eager interpreter), with rules.py (derivative rules traced), aten_autograd.py
  (eager's derivatives of ATen-valued ops), tape.py (the autograd tape) and eager_backward.py
  (the tape's backward)
- functionalize.py, autograd.py (joint graph and partition), hooks.py (saved-tensor hooks
  inlined): the compile passes
- plan.py (the pipeline and its rule checks: one frozen Plan), epilogue.py and runtime.py (the
  runtime skeleton both backends share), compiled.py (the reference's graph runner)
"""

from .capture import Program, capture
from .eager import EagerRun, execute, run

__all__ = ["EagerRun", "Program", "capture", "execute", "run"]
