"""aotspec.reference: the executable specification of AOTAutograd's runtime semantics.

Written for clarity, not speed: it defines the exact semantics that `specs/` states in prose, and
the fast backend must agree with it. Modules, from the ground floor up (each imports only
modules above it in this list):

- symbols.py (sizes as symbols, and their numbers at a call), storage.py (storages, layouts,
  tensors), ledger.py (live, freed, peak), lifetimes.py (where
  each value dies), boundary.py (torch tensors in and out), lift.py (tensors a function reads
  through globals and closures)
- optable.py (the op table), opaque.py (custom ops run opaquely), ops.py (value, view and
  derivative rules), effects.py, aten.py (ATen-valued ops: aten ops outside the table),
  collectives.py (functional collectives), custom_functions.py (custom autograd Functions),
  synthetic_bases.py (aliasing arguments compiled as views of a base), decompositions.py
  (composite ops capture decomposes itself), sparse.py (sparse tensors a traced function makes)
- graph.py (a graph with its op table entries), interpreter.py (the evaluator),
  unreached_terms.py (a backward graph without the terms of outputs a backward did not reach)
- program_records.py (the captured and the functional program, the input facts, the epilogue
  and output records), plan_records.py (`Differentiated` and the `Plan`): the records the
  passes hand on, apart from the passes
- capture.py (make_fx on fakes: a function becomes an aten graph)
- eager.py (the eager interpreter), with traced_rules.py (derivative rules traced),
  aten_autograd.py (eager's derivatives of ATen-valued ops), tape.py (the autograd tape) and
  eager_backward.py (the tape's backward)
- functionalize.py, autograd.py (joint graph and partition), hooks.py (saved-tensor hooks
  inlined): the compile passes; dynamic.py (symbolic plans: the fakes they are traced on, the
  guard, a plan at a call's sizes)
- epilogue.py and runtime.py (the runtime skeleton both backends share), compiled.py (the
  reference's graph runner): beside the passes, on the records alone
- pipeline.py (the pipeline and its rule checks: one frozen Plan)
"""

from .capture import capture
from .eager import EagerRun, execute, run
from .program_records import CapturedProgram

__all__ = ["CapturedProgram", "EagerRun", "capture", "execute", "run"]
