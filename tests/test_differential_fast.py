"""Differential tests: `aotspec.compile(backend="fast")` against `backend="reference"` on random
valid programs, every observable and the memory facts (DESIGN.md sections 5 and 7).

The reference is the oracle. Each program runs on both backends, each time on fresh caller
tensors, through tests/test_differential_compiled.py's `call_and_backward`: errors (type and
rule), outputs, the caller's tensors after the call, aliasing, requires_grad and gradients must
agree (`compare`). Generators: `programs(compiled=True)` (views, in-place ops, copy_, set_,
resizes, aliased arguments), `grad_programs()` (backward; also called inside bfloat16
saved-tensor hooks under each `hooks_filter`, so the inlined pack and unpack ops are compared
too), and tests/strategies/stealing.py's `stealing_programs()` (either kind after a stolen list
of activations).

Memory facts. The fast run happens under `aotspec.tracker.MemoryTracker`, once the plan is built
(a first call on other fresh tensors builds it, so tracing is not tracked). The test wraps the
plan's generated forward and backward code in a `Bracket` that marks where each graph's run
begins and ends in the tracker. Inside a bracket each op the tracker sees is one op node of the
graph, in order (checked), and the reference's ledger has a probe per node of the same graph, so:

- Storages are named the same way on both sides, by *label*: the node that first held the
  storage and its rank among the storages that node made (a placeholder's label is the
  placeholder; the reference's caller-held inputs are held before any node, as `<inputs>`).
- A storage is *the runtime's* when nothing outside the runtime holds it: not a storage of a
  caller's tensor before or after the call, of an output, nor of a tangent (the autograd engine
  holds tangents for the whole backward call, on fast as in PyTorch). The reference's ledgers
  count only what the runtime holds (its backward frees a saved input at its last use, though
  the caller still has it), so only the runtime's storages compare. They are the activations:
  stolen inputs, intermediates, saved values, gradients.
- Alive: after each op node (with the `getitem`s after it: the tracker's probe of an op is taken
  when the next op begins, so it includes the frees that follow), the runtime's storages alive
  are the same labels on both sides, and at the graph's end.
- Peak: the greatest sum of the runtime's storages' bytes during the graph's run is the same.
- A stolen list is empty after the call and its activations' storages are freed.

A failure prints the program and writes `repros/repro_fast_<hash>.py`, which reruns this check
on the same program (pickled, beside its Python source) and fails on its own.

Run: `.venv/bin/python -m pytest tests/test_differential_fast.py` (HYPOTHESIS_PROFILE picks the
number of examples; see tests/conftest.py).
"""

from __future__ import annotations

import base64
import collections
import hashlib
import pickle
import traceback
from pathlib import Path

import pytest
import torch
from attrs import define, field, frozen
from hypothesis import event, given, settings
from hypothesis import strategies as st
from torch.multiprocessing.reductions import StorageWeakRef

import aotspec
from aotspec.conformance.observe import world_of
from aotspec.fast.runtime import FastPlan
from aotspec.tracker import MemoryTracker
from repro import REPRO_DIR, is_final_run
from strategies.grad import grad_programs
from strategies.mutations import programs
from strategies.program import Base, Instr, Program, Setup, Var, as_function, build_inputs, source
from strategies.stealing import Stealing, as_stealing_function, make_activations
from strategies.stealing import stealing_programs, stealing_source
from test_differential_compiled import Outcome, call_and_backward, compare, numerically_explained
from test_differential_hooks import pack_bf16, unpack_bf16

#: A profile's examples (ci: 500) times 3/5, split: ci runs 100 programs with backward, 110
#: mutation programs, 60 with stolen lists and 50 with hooks (320 in all).
EXAMPLES = settings.default.max_examples * 3 // 5
Label = tuple[str, int]

# ---------------------------------------------------------------- one side's run


@define
class Bracket:
    """Stands in for a plan's boxed GraphModule: marks its run's start and end in the tracker."""

    graph_module: torch.fx.GraphModule
    tracker: MemoryTracker
    start: int | None = None
    end: int | None = None
    argument_ids: list[int | None] = field(factory=list)

    def __call__(self, arguments: list):
        self.start = self.tracker.mark("<graph>")
        self.argument_ids = [self.tracker.storage_id(t) for t in arguments]
        results = self.graph_module(arguments)  # clears `arguments`, as the plan's own call does
        self.end = self.tracker.mark("</graph>")
        return results


@frozen
class Account:
    """One graph's run on one side, in labels: the alive labels after the nodes where both
    sides probe, and each size change in order (label, bytes after; a free is 0 bytes)."""

    after: dict[str, frozenset[Label]]
    changes: tuple[tuple[Label | None, int], ...]
    #: Changes before this index happened before the graph began (allocations of saved values).
    start: int = 0

    def peak(self, owned: frozenset[Label]) -> int:
        """The greatest sum of the `owned` labels' bytes from the graph's start on."""
        sizes: dict[Label, int] = {}
        live, peak = 0, None
        for index, (label, nbytes) in enumerate(self.changes):
            if index == self.start:
                peak = live
            if label in owned:
                live += nbytes - sizes.get(label, 0)
                sizes[label] = nbytes
            if peak is not None:
                peak = max(peak, live)
        return live if peak is None else peak


@frozen
class Run:
    """What one backend did: the outcome (or the error), and the memory facts."""

    outcome: Outcome | None
    error: str | None
    #: By graph ("forward", "backward"): the run's account.
    accounts: dict[str, Account]
    #: By graph, the labels of the runtime's storages (fast side only: it can see the caller).
    owned: dict[str, frozenset[Label]]
    stolen_freed: bool | None


def _error_text(error: BaseException) -> str:
    rule = getattr(error, "rule", None)
    return f"{type(error).__name__}" + (f" [rule {rule}]" if rule else "")


@frozen
class Hooked:
    """A program with backward, called inside bfloat16 saved-tensor hooks with `hooks_filter`."""

    program: Program
    hooks_filter: str


class _Case:
    """A program, a stealing program or a hooked one, as something to build inputs for, compile
    and call."""

    def __init__(self, case: Program | Stealing | Hooked):
        self.case = case
        self.program = case.program if isinstance(case, (Stealing, Hooked)) else case

    def compile(self, backend: str):
        if isinstance(self.case, Stealing):
            return aotspec.compile(as_stealing_function(self.case), backend=backend, steal=("acts",))
        if isinstance(self.case, Hooked):
            return aotspec.compile(as_function(self.program), backend=backend, hooks_filter=self.case.hooks_filter)
        return aotspec.compile(as_function(self.program), backend=backend)

    def call(self, fn, named, args):
        """`call_and_backward`, inside the hooks of a hooked case."""
        if not isinstance(self.case, Hooked):
            return call_and_backward(fn, named, args)
        with torch.autograd.graph.saved_tensors_hooks(pack_bf16, unpack_bf16):
            return call_and_backward(fn, named, args)

    def inputs(self) -> tuple[dict[str, torch.Tensor], list, list | None]:
        named, args = build_inputs(self.program.setup)
        if isinstance(self.case, Stealing):
            acts = make_activations(self.case)
            return named, [acts, *args], acts
        return named, args, None

    @property
    def source(self) -> str:
        if isinstance(self.case, Stealing):
            return stealing_source(self.case)
        if isinstance(self.case, Hooked):
            hooks = f"called inside saved_tensors_hooks(pack_bf16, unpack_bf16), hooks_filter={self.case.hooks_filter!r}"
            return f"{source(self.program)}\n# {hooks}"
        return source(self.program)


def _stolen_refs(acts: list | None) -> list[StorageWeakRef]:
    return [StorageWeakRef(t.untyped_storage()) for t in acts or []]


def _stolen_freed(acts: list | None, refs: list[StorageWeakRef]) -> bool | None:
    if acts is None:
        return None
    return not acts and all(ref.expired() for ref in refs)


def run_reference(case: _Case):
    """The reference's run, and the compiled callable (its plan serves the fast run too)."""
    compiled = case.compile("reference")
    named, args, acts = case.inputs()
    refs = _stolen_refs(acts)
    del acts
    try:
        outcome = case.call(compiled, named, args)
    except Exception as error:  # noqa: BLE001 (an error is an observable)
        return Run(None, _error_text(error), {}, {}, None), compiled
    stolen_freed = _stolen_freed(args[0] if isinstance(case.case, Stealing) else None, refs)
    run = compiled.last_run
    ledgers = {"forward": run.ledger, "backward": run.backward_ledger}
    accounts = {name: _reference_account(ledger) for name, ledger in ledgers.items() if ledger is not None}
    return Run(outcome, None, accounts, {}, stolen_freed), compiled


def _reference_account(ledger) -> Account:
    labels: dict[int, Label] = {}
    made: collections.Counter[str] = collections.Counter()
    for e in ledger.events:
        if e.kind == "alloc" and e.storage not in labels:
            labels[e.storage] = (e.node, made[e.node])
            made[e.node] += 1
    after = {p.node: frozenset(labels[s] for s in p.alive) for p in ledger.probes}
    return Account(after, tuple((labels[e.storage], e.nbytes) for e in ledger.events))


class _Observed:
    """Calls `fn`, then notes which storages the caller can reach (before and after the call)."""

    def __init__(self, fn, tracker: MemoryTracker, named: dict[str, torch.Tensor]):
        self.fn, self.tracker, self.named = fn, tracker, named
        self.visible: set[int | None] = set(tracker.track(list(named.values())))

    def __call__(self, *args):
        outputs = self.fn(*args)
        world = world_of(self.named, outputs)
        self.visible |= {self.tracker.storage_id(t) for t in world.values() if isinstance(t, torch.Tensor)}
        return outputs


def run_fast(case: _Case, reference) -> Run:
    """The fast run, on the plan `reference` (the reference's compiled callable) built; with
    none (the reference raised), the fast callable builds its own, to raise its own error."""
    compiled = case.compile("fast")
    compiled._plans.update({key: FastPlan.of(plan) for key, plan in reference._plans.items()})
    if not compiled._plans:
        try:
            named, args, _ = case.inputs()
            case.call(compiled, named, args)
        except Exception as error:  # noqa: BLE001 (an error is an observable)
            return Run(None, _error_text(error), {}, {}, None)
        raise AssertionError(f"the reference raised and fast did not, on:\n{case.source}")
    (plan,) = compiled._plans.values()
    tracker = MemoryTracker()
    brackets = {"forward": Bracket(plan.forward, tracker)}
    plan.forward = brackets["forward"]
    if plan.backward is not None:
        brackets["backward"] = plan.backward = Bracket(plan.backward, tracker)
    named, args, acts = case.inputs()
    refs = _stolen_refs(acts)
    tracker.track(acts or [])
    del acts
    observed = _Observed(compiled, tracker, named)
    with tracker:
        outcome = case.call(observed, named, args)
    stolen_freed = _stolen_freed(args[0] if isinstance(case.case, Stealing) else None, refs)
    accounts, owned = {}, {}
    for name, bracket in brackets.items():
        if bracket.start is None:
            continue  # the backward did not run
        held_outside = set(observed.visible)
        if name == "backward":
            held_outside |= set(bracket.argument_ids[plan.plan.num_saved :])  # tangents
        accounts[name], owned[name] = _fast_account(tracker, bracket, held_outside)
    return Run(outcome, None, accounts, owned, stolen_freed)


def _is_op(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)


def _fast_account(tracker: MemoryTracker, bracket: Bracket, held_outside: set) -> tuple[Account, frozenset[Label]]:
    nodes = list(bracket.graph_module.graph.nodes)
    labels: dict[int, Label] = {}
    placeholders = [node for node in nodes if node.op == "placeholder"]
    for node, storage in zip(placeholders, bracket.argument_ids, strict=True):
        if storage is None:
            raise AssertionError(f"the tracker does not know the storage of placeholder {node.name}")
        labels.setdefault(storage, (node.name, 0))
    ops = [node for node in nodes if _is_op(node)]
    probes = [p for p in tracker.probes if bracket.start < p.step < bracket.end]
    ran, named = [p.node for p in probes], [str(node.target) for node in ops]
    if ran != named:
        raise AssertionError(f"the fast graph ran the ops {ran}, but its op nodes are {named}")
    node_at = {p.step: node.name for p, node in zip(probes, ops, strict=True)}
    made: collections.Counter[str] = collections.Counter()
    for e in tracker.events:
        if e.kind == "alloc" and e.step in node_at:
            labels[e.storage] = (node_at[e.step], made[node_at[e.step]])
            made[node_at[e.step]] += 1
    # An op's probe is the heap when the next op begins: compare it with the reference's probe
    # of the last node before that op (getitems in between), or of the output node.
    ends = {}
    for k, node in enumerate(nodes):
        if _is_op(node):
            following = nodes[k + 1 :]
            nxt = next((n for n in following if _is_op(n) or n.op == "output"), None)
            ends[node.name] = nxt.prev.name if _is_op(nxt) else nxt.name
    end_probe = next(p for p in tracker.probes if p.step == bracket.end)
    after = {ends[node_at[p.step]]: _labelled(p.alive, labels) for p in probes}
    after["output"] = _labelled(end_probe.alive, labels)
    start = next((i for i, e in enumerate(tracker.events) if e.step >= bracket.start), len(tracker.events))
    changes = tuple((labels.get(e.storage), e.nbytes) for e in tracker.events)
    owned = frozenset(label for storage, label in labels.items() if storage not in held_outside)
    return Account(after, changes, start), owned


def _labelled(alive: frozenset[int], labels: dict[int, Label]) -> frozenset[Label]:
    return frozenset(labels[s] for s in alive if s in labels)


# ---------------------------------------------------------------- comparing the two


def memory_differences(reference: Run, fast: Run) -> list[str]:
    found = []
    if reference.stolen_freed != fast.stolen_freed:
        found.append(f"stolen list emptied and freed: reference {reference.stolen_freed}, fast {fast.stolen_freed}")
    if set(reference.accounts) != set(fast.accounts):
        return found + [f"graphs run: reference {sorted(reference.accounts)}, fast {sorted(fast.accounts)}"]
    for name, fast_account in fast.accounts.items():
        owned, ref_account = fast.owned[name], reference.accounts[name]
        for node, fast_alive in fast_account.after.items():
            want, got = ref_account.after[node] & owned, fast_alive & owned
            if want != got:
                found.append(f"{name}, after {node}: alive {sorted(want)} on the reference, {sorted(got)} on fast")
        want, got = ref_account.peak(owned), fast_account.peak(owned)
        if want != got:
            found.append(f"{name} peak of the runtime's storages: {want} bytes on the reference, {got} on fast")
    return found


def divergence(case: Program | Stealing) -> list[str]:
    """How the fast backend differs from the reference on `case`; empty when they agree."""
    case = _Case(case)
    try:
        reference, compiled = run_reference(case)
    except Exception:
        raise AssertionError(f"the reference could not run:\n{case.source}\n{traceback.format_exc(limit=-4)}") from None
    try:
        fast = run_fast(case, compiled)
    except Exception as error:  # noqa: BLE001 (an error of the fast side is a divergence)
        return [f"the fast run raised {type(error).__name__}: {error}"]
    if reference.error or fast.error:
        if reference.error != fast.error:
            return [f"error: reference {reference.error}, fast {fast.error}"]
        event("both raised")
        return []
    found = compare(reference.outcome, fast.outcome)
    if found and numerically_explained(case.program, reference.outcome, fast.outcome, found):
        event("numeric disagreement explained by float64")
        found = []
    return found + memory_differences(reference, fast)


# ---------------------------------------------------------------- repros

_REPRO = '''\
"""Differential repro: aotspec.compile(backend="fast") and backend="reference" disagree.

Found by tests/test_differential_fast.py; run alone: .venv/bin/python {path}
It reruns that test's check on the program below (pickled; its Python source follows).
When found:
{found}
"""

import base64
import pickle
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from test_differential_fast import divergence  # noqa: E402

PROGRAM = pickle.loads(base64.b64decode({blob!r}))

# The program, as Python:
{source}

if __name__ == "__main__":
    found = divergence(PROGRAM)
    assert not found, "fast and the reference disagree:\\n" + "\\n".join(found)
    print("fast and the reference agree")
'''


def write_fast_repro(case: Program | Stealing, found: list[str], directory: Path = REPRO_DIR) -> Path:
    """Write `repro_fast_<hash>.py` for `case` and return its path."""
    text = _Case(case).source
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"repro_fast_{digest}.py"
    commented = "\n".join(f"# {line}".rstrip() for line in text.splitlines())
    blob = base64.b64encode(pickle.dumps(case)).decode()
    found_lines = "\n".join(f"    {line}" for line in found)
    path.write_text(_REPRO.format(path=path.name, found=found_lines, blob=blob, source=commented))
    return path


def _check(case: Program | Stealing) -> None:
    found = divergence(case)
    if not found:
        return
    where = f"\nstandalone repro: .venv/bin/python {write_fast_repro(case, found)}" if is_final_run() else ""
    raise AssertionError(
        "the fast backend disagrees with the reference:\n"
        + "\n".join(f"  {line}" for line in found)
        + f"\nprogram:\n{_Case(case).source}{where}"
    )


# ---------------------------------------------------------------- properties


@settings(max_examples=max(EXAMPLES * 10 // 30, 20))
@given(grad_programs())
def test_fast_backward_agrees_with_reference(program):
    """Outputs, caller tensors, gradients; alive storages and peaks of forward and backward."""
    _check(program)


@settings(max_examples=max(EXAMPLES * 11 // 30, 20))
@given(programs(compiled=True))
def test_fast_mutations_agree_with_reference(program):
    """Views, in-place ops, copy_, set_, resizes: observables and the forward's memory facts."""
    _check(program)


@settings(max_examples=max(EXAMPLES * 6 // 30, 10))
@given(st.booleans().flatmap(lambda backward: stealing_programs(backward=backward)))
def test_fast_stolen_lists_agree_with_reference(stealing):
    """A stolen list is emptied and its activations freed after their last use, on both, with
    autograd and without."""
    _check(stealing)


@pytest.mark.filterwarnings("ignore::aotspec.HooksWarning")  # donated may select nothing
@settings(max_examples=max(EXAMPLES * 5 // 30, 10))
@given(grad_programs(), st.sampled_from(["donated", "no_static", "all"]))
def test_fast_hooks_agree_with_reference(program, hooks_filter):
    """bfloat16 saved-tensor hooks inlined: observables, and the storages alive after every node,
    pack and unpack included, and the peaks of forward and backward."""
    _check(Hooked(program, hooks_filter))


def test_fast_frees_stolen_activations_at_last_use_with_autograd():
    """With autograd too: one stolen activation read by exp, beside a leaf (apply's arguments
    once held it to the end of the call)."""
    setup = Setup((Base("b0", (3,), (1.0, 1.0, 1.0), requires_grad=True),), (), ("b0",))
    program = Program(setup, (Instr("view", ("v0",), (Var("x0"), (3,))),), ("v0",))
    assert divergence(Stealing(program, ((1.0, 1.0, 1.0, 1.0),), ("exp",))) == []


def test_repro_reruns_the_check(tmp_path):
    """A written repro runs alone and passes on a program the backends agree on."""
    setup = Setup((Base("b0", (2,), (1.0, 2.0)),), (), ("b0",))
    program = Program(setup, (Instr("neg", ("v0",), (Var("x0"),)),), ("v0",))
    path = write_fast_repro(program, ["(none)"], tmp_path)
    namespace = {"__name__": "repro", "__file__": str(REPRO_DIR / path.name)}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 (ours)
    assert namespace["divergence"](namespace["PROGRAM"]) == []

