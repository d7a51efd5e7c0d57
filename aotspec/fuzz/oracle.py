"""The oracles of differential fuzzing: how a program's run is observed and two runs compared.

- One side's run: `call_and_backward` calls a program, observes the caller's tensors and the
  outputs, backpropagates the sum of the outputs that require grad and observes again, into an
  `Outcome`; `outcome` does it for a generated program, on eager or compiled.
- Comparing two sides: `compare` lists every observable of docs/design.md section 5 that
  differs but memory facts; `numerically_explained` forgives value differences that eager
  float64 runs show to be rounding.
- Saved-tensor hooks: a lossless pair and a bfloat16 pair, by name, so that repros import them.
- The fast backend against the reference: `fast_divergence` runs a `FuzzCase` on both and lists
  what differs, memory facts included (tests/test_differential_fast.py says which).
- One compiled function at several sizes: `sizes_divergence` calls one reference and one fast
  callable at each size of a `Sized` program in turn, and lists where the reference differs
  from eager, or fast from the reference (memory facts included), at each size.

The differential tests (through tests/harness.py) and `aotspec fuzz` use them; the standalone
repros both write import from here too.
"""

from __future__ import annotations

import collections
import functools
import re
import traceback

import torch
import torch.utils._pytree as pytree
from attrs import define, evolve, field, frozen
from hypothesis import currently_in_test_context, event
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

import aotspec
from aotspec.conformance.observe import (
    Observation,
    differences,
    observe,
    same_values,
    world_of,
)
from aotspec.tracker import MemoryTracker

from .strategies.program import Program, as_function, build_inputs, source
from .strategies.sizes import Sized
from .strategies.stealing import Stealing, as_stealing_function, make_activations, stealing_source

# ---------------------------------------------------------------- one side's run


@frozen
class Outcome:
    """What one side did with a program."""

    #: The caller's tensors and the outputs (`out0`, ...) right after the call.
    world: Observation
    #: The same names after the backward (the same as `world` when there was none).
    after_backward: Observation
    requires_grad: dict[str, bool]
    #: `.grad` of every leaf the caller made that requires grad, by name (None: no gradient).
    grads: dict[str, torch.Tensor | None]
    backward: bool
    #: With two backwards: `grads` after the first, which retained the graph.
    retained_grads: dict[str, torch.Tensor | None] | None = None
    #: By the name of each caller's tensor: whether the call advanced its version counter.
    advanced: dict[str, bool] = field(factory=dict)


#: Reduced losses (`reduction="mean"` or `"sum"`) whose CPU kernel leaves the 0-dim result on a
#: storage of every term, where the meta kernel gives it a storage of its own.
_REDUCED_ON_THEIR_TERMS = frozenset(
    {
        torch.ops.aten.mse_loss.default,
        torch.ops.aten.smooth_l1_loss.default,
        torch.ops.aten.soft_margin_loss.default,
        torch.ops.aten.binary_cross_entropy.default,
    }
)


class _MetaStorages(TorchDispatchMode):
    """Eager PyTorch with the storage clause of r[ops.fresh-output.meta-layout]: a reduced loss's
    result on a storage of one element, as its meta kernel has it and aotspec's backends give
    it. Its value, the storage's first element, stays."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func in _REDUCED_ON_THEIR_TERMS and result.dim() == 0 and not result.storage_offset():
            result.untyped_storage().resize_(result.element_size())
        return result


def eager_as_specified(fn):
    """`fn` on eager PyTorch as the oracle runs it: where eager's kernel and the spec disagree
    on the bytes of a fresh storage, the spec's (`_MetaStorages`)."""

    @functools.wraps(fn)
    def call(*args):
        with _MetaStorages():
            return fn(*args)

    return call


def outcome(program: Program, *, compiled: bool, dtype: torch.dtype = torch.float32) -> Outcome:
    """`program` on fresh caller tensors, on eager (as specified) or through the reference
    compiled; `dtype`: float64 only for the numeric oracle."""
    named, args = build_inputs(program.setup, dtype)
    fn = as_function(program)
    fn = aotspec.compile(fn, backend="reference") if compiled else eager_as_specified(fn)
    return call_and_backward(fn, named, args, **program.call_options)


def eager_outcome(subject: Program | Stealing, dtype: torch.dtype = torch.float32) -> Outcome:
    """`subject` on eager: a program, or a stealing program with its list of activations (its
    outputs are their reads' sum `out0`, then the program's). `dtype`: as for `outcome`."""
    if not isinstance(subject, Stealing):
        return outcome(subject, compiled=False, dtype=dtype)
    named, args = build_inputs(subject.program.setup, dtype)
    acts = make_activations(subject, named, dtype)
    options = subject.program.call_options
    fn = eager_as_specified(as_stealing_function(subject))
    return call_and_backward(fn, named, [acts, *args], **options)


def call_and_backward(
    fn,
    named: dict[str, torch.Tensor],
    args: list,
    *,
    grad_enabled: bool = True,
    retain_graph: bool = False,
) -> Outcome:
    """Call `fn` under `grad_enabled`, observe, backpropagate the sum of the outputs that
    require grad (twice, retaining the graph the first time, with `retain_graph`), observe."""
    versions = {name: t._version for name, t in named.items()}
    with torch.set_grad_enabled(grad_enabled):
        outputs = fn(*args)
    advanced = {name: t._version != versions[name] for name, t in named.items()}
    world = world_of(named, outputs)
    before = _unseen(observe, world)
    requires_grad = {name: t.requires_grad for name, t in world.items()}
    losses = [out.sum() for out in outputs if out.requires_grad]
    leaves = {name: t for name, t in named.items() if t.is_leaf and t.requires_grad}
    retained = None
    if losses:
        if retain_graph:
            _backpropagate_the_sum(losses, retain_graph=True)
            retained = {name: _unseen(_copy, t.grad) for name, t in leaves.items()}
        _backpropagate_the_sum(losses)
    grads = {name: _unseen(_copy, t.grad) for name, t in leaves.items()}
    after = _unseen(observe, world)
    return Outcome(before, after, requires_grad, grads, bool(losses), retained, advanced)


def _backpropagate_the_sum(losses: list[torch.Tensor], *, retain_graph: bool = False) -> None:
    """Backpropagate the sum of `losses` (the outputs' sums), each loss's gradient a 1 of its
    own. Not as `sum(losses).backward()`: its backward hands every loss one tensor's views, and
    eager's AccumulateGrad keeps a view it alone holds as a leaf's `.grad`, so two leaves
    returned (or passed through) as 0-dim outputs got `.grad`s on one storage, and a second
    backward added into both (fuzz seed 76: `b0.grad` 3 after two backwards of 1)."""
    ones = [torch.ones_like(loss) for loss in losses]
    torch.autograd.backward(losses, ones, retain_graph=retain_graph)


def _unseen(observing, value):
    """`observing(value)` out of sight of the dispatch modes around the call: the copies an
    observation keeps are no ops of the run. `run_fast`'s memory tracker would note each, out of
    the graphs' brackets (its accounts would not change), and sweep its storages twice an op:
    ~1 ms of a fuzz program."""
    with _disable_current_modes():
        return observing(value)


def _copy(grad: torch.Tensor | None) -> torch.Tensor | None:
    return None if grad is None else grad.detach().clone()


def _grad_differences(expected: dict, actual: dict) -> list[str]:
    found = []
    for name in sorted(expected):
        want, got = expected[name], actual.get(name)
        if want is None or got is None:
            if (want is None) != (got is None):
                found.append(f"{name}.grad: expected {_short(want)}, got {_short(got)}")
        elif (want.dtype, want.shape) != (got.dtype, got.shape):
            found.append(f"{name}.grad: expected {_short(want)}, got {_short(got)}")
        elif not same_values(want, got):
            try:
                torch.testing.assert_close(got, want, equal_nan=True, check_stride=False)
            except AssertionError as error:
                found.append(
                    f"{name}.grad values: {_summary(error)}; "
                    f"expected {want.tolist()}, got {got.tolist()}"
                )
    return found


def _short(grad: torch.Tensor | None) -> str:
    return "None" if grad is None else f"{grad.dtype} {tuple(grad.shape)}"


def _summary(error: AssertionError) -> str:
    """assert_close's message on one line: mismatched elements and the greatest differences."""
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip())


_RETAINED = "after the first backward: "


def compare(expected: Outcome, actual: Outcome) -> list[str]:
    """Every observable of docs/design.md section 5 but memory facts; empty when they agree."""
    found = differences(expected.world, actual.world)
    found += [
        f"{name}.requires_grad: expected {want}, got {actual.requires_grad.get(name)}"
        for name, want in expected.requires_grad.items()
        if actual.requires_grad.get(name) != want
    ]
    # r[functionalize.epilogue.version], r[ops.aten-mutations.versions]: a compiled call may
    # advance a counter once where eager's ops advance it once each, but not where they leave it
    found += [
        f"{name}._version: expected {'advanced' if want else 'unchanged'} by the call, "
        f"got {'advanced' if not want else 'unchanged'}"
        for name, want in expected.advanced.items()
        if actual.advanced.get(name, want) != want
    ]
    if expected.backward != actual.backward:
        found.append(f"backward ran: expected {expected.backward}, got {actual.backward}")
    found += _grad_differences(expected.grads, actual.grads)
    if expected.retained_grads is not None:
        retained = _grad_differences(expected.retained_grads, actual.retained_grads or {})
        found += [f"{_RETAINED}{line}" for line in retained]
    # Eager's backward leaves the caller's tensors alone; so must the compiled one.
    changed = differences(actual.world, actual.after_backward)
    found += [f"changed by the compiled backward: {line}" for line in changed]
    return found


# ---------------------------------------------------------------- numeric disagreements

_VALUES = re.compile(rf"^((?:{_RETAINED})?\S+) values: ")
ATOL, RTOL = 1e-5, 1.3e-6  # assert_close's float32 defaults


def _values_of(run: Outcome, name: str) -> torch.Tensor:
    if name.startswith(_RETAINED):
        return run.retained_grads[name.removeprefix(_RETAINED).removesuffix(".grad")]
    if name.endswith(".grad"):
        return run.grads[name.removesuffix(".grad")]
    return run.world.tensors[name].values


def _error(x: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    x = x.double()
    same = (x == exact) | (x.isnan() & exact.isnan())
    error = (x - exact).abs().nan_to_num(nan=torch.inf)
    return torch.where(same, torch.zeros_like(error), error)


def _sizes_storages_in_bytes(subject: Program | Stealing) -> bool:
    """Whether the program resizes a storage to a byte count other than 0: a float32 count, which
    in float64 holds half the elements, so that the program would write past the storage's end
    (there is no float64 oracle for it)."""
    program = subject.program if isinstance(subject, Stealing) else subject
    return any(i.op == "resize_storage_bytes_" and i.args[1] != 0 for i in program.body)


def numerically_explained(
    subject: Program | Stealing, expected: Outcome, actual: Outcome, found: list[str]
) -> bool:
    """True when every difference is one of values, and for each the compiled float32 result is
    no farther from eager's float64 result than twice the farther of eager's float32 result and
    float64 runs that put each result an ulp of float32 off (`_AnUlpOff`), with the slack of
    assert_close's float32 tolerances: rounding, not a wrong rule. A stealing program's float64
    run steals nothing, but computes the same outputs under the same names."""
    names = [_VALUES.match(line) for line in found]
    if not all(names) or _sizes_storages_in_bytes(subject):
        return False
    try:
        oracle = eager_outcome(subject, torch.float64)
    except Exception:  # noqa: BLE001 (no float64 oracle for this program: blame stands)
        return False
    names = [match.group(1) for match in names]
    if all(_no_farther(actual, [expected], oracle, name) for name in names):
        return True
    runs = (_an_ulp_off(subject, seed) for seed in range(_ULP_OFF_RUNS))
    off = [run for run in runs if run is not None]
    return all(_no_farther(actual, [expected, *off], oracle, name) for name in names)


def _no_farther(actual: Outcome, others: list[Outcome], oracle: Outcome, name: str) -> bool:
    """Whether `actual`'s value `name` is, elementwise, no farther from `oracle`'s (float64)
    than twice the farthest of `others`' is, with assert_close's float32 slack."""
    exact = _values_of(oracle, name)
    spread = torch.stack([_error(_values_of(other, name), exact) for other in others]).amax(0)
    slack = ATOL + RTOL * exact.abs().nan_to_num(posinf=0.0, neginf=0.0)
    return bool((_error(_values_of(actual, name), exact) <= 2 * spread + slack).all())


#: How many float64 runs with each result an ulp off the judge makes (each way at random).
_ULP_OFF_RUNS = 4


def _an_ulp_off(subject: Program | Stealing, seed: int) -> Outcome | None:
    """`subject`'s float64 run with every op's results an ulp of float32 off (`_AnUlpOff`);
    None where that run fails."""
    try:
        with _AnUlpOff(seed):
            return eager_outcome(subject, torch.float64)
    except Exception:  # noqa: BLE001 (a run that fails so explains nothing)
        return None


class _AnUlpOff(TorchDispatchMode):
    """Moves each element of every floating result an op computes (not a view's) by one ulp of
    float32, up or down at random, unless float32 holds it exactly.

    Eager's float32 run rounds every result: IEEE's basic arithmetic to the nearer float32 value,
    its exp, sums and matmuls to within about an ulp (vectorized libm, summation order); another
    implementation, as right, rounds them otherwise, and an ill-conditioned program amplifies
    that: in exp(2 * exp(x) + 2) at x = 2.0 an ulp of the argument 16.78 is a relative 1.9e-6 of
    the result, over assert_close's 1.3e-6 (fuzz seed 60, where numpy's exp(2) is an ulp below
    eager's). How far eager's own result lands from float64's is then luck, and bounds nothing;
    these runs show how far rounding alone may move the results. A value float32 holds exactly
    (a sum of equal dyadics, exp(0), a std of 0) is one every implementation gives, and stays:
    what a comparison or a mask decides on such values is still judged."""

    def __init__(self, seed: int):
        super().__init__()
        self.generator = torch.Generator().manual_seed(seed)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        returns = func._schema.returns
        if any(r.alias_info is not None and not r.alias_info.is_write for r in returns):
            return result  # a view: its base was moved when it was computed
        for tensor in pytree.tree_leaves(result):
            if _moved(tensor):
                tensor.copy_(self._off(tensor))
        return result

    def _off(self, values: torch.Tensor) -> torch.Tensor:
        nearest = values.float()
        magnitude = nearest.abs()
        ulp = torch.nextafter(magnitude, torch.tensor(torch.inf)).double() - magnitude.double()
        up = torch.rand(values.shape, generator=self.generator) < 0.5
        moved = values + torch.where(up, ulp, -ulp)
        # below float32's least subnormal an ulp would flip the sign, which no rounding does
        moved = torch.where(moved * values > 0, moved, nearest.double())
        inexact = (nearest.double() != values) & nearest.isfinite()
        return torch.where(inexact, moved, values)


def _moved(value) -> bool:
    """Whether `_AnUlpOff` moves `value`: a dense float64 tensor."""
    return (
        isinstance(value, torch.Tensor)
        and value.dtype == torch.float64
        and value.layout == torch.strided
    )


# ---------------------------------------------------------------- saved-tensor hooks
#
# Lossless: pack widens to float64 and remembers the dtype, unpack narrows back. bf16: pack
# rounds float32 to bfloat16, unpack widens back. bf16 kept: unpack leaves it bfloat16.


def pack_lossless(x):
    return (x.dtype, x.to(torch.float64))


def unpack_lossless(packed):
    dtype, x = packed
    return x.to(dtype)


def pack_bf16(x):
    # Only float32 is rounded: eager's backward of `where` needs its saved condition to stay bool.
    return x.to(torch.bfloat16) if x.dtype == torch.float32 else x


def unpack_bf16(x):
    return x.to(torch.float32) if x.dtype == torch.bfloat16 else x


def pack_bf16_kept(x):
    return pack_bf16(x)


def unpack_bf16_kept(x):
    # The backward reads the bfloat16 itself: a dtype change (r[hooks.compiled.unpack-dtype]).
    return x


# ---------------------------------------------------------------- fast against the reference
#
# tests/test_differential_fast.py's docstring says what is compared, and how storages are
# labelled and accounted on each side.

Label = tuple[str, int]


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
        self.argument_ids = [
            self.tracker.storage_id(t) if isinstance(t, torch.Tensor) else None for t in arguments
        ]  # a symbolic plan's backward also reads sizes, saved as numbers (sizes.symbolic.saved)
        results = self.graph_module(arguments)  # clears `arguments`, as the plan's own call does
        self.end = self.tracker.mark("</graph>")
        return results


class _BracketedBackwards(dict):
    """A fast plan's backward codes for backwards that did not reach every output
    (`r[autograd.unreached-outputs.terms]`): each is bracketed as the plan makes it, and the
    bracket of the one made last is the backward's."""

    def __init__(self, tracker: MemoryTracker, brackets: dict[str, Bracket]):
        super().__init__()
        self.tracker, self.brackets = tracker, brackets

    def __setitem__(self, reached: tuple[bool, ...], code) -> None:
        self.brackets["backward"] = bracket = Bracket(code, self.tracker)
        super().__setitem__(reached, bracket)


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
    """A program with backward, called inside saved-tensor hooks with `hooks_filter`: the
    bfloat16 pair, or with `lossless` the float64 one (then eager without hooks is its oracle)."""

    program: Program
    hooks_filter: str
    lossless: bool = False

    @property
    def hooks(self) -> tuple:
        return (pack_lossless, unpack_lossless) if self.lossless else (pack_bf16, unpack_bf16)


class FuzzCase:
    """A program, a stealing program or a hooked one, as something to build inputs for, compile
    and call."""

    def __init__(self, case: Program | Stealing | Hooked):
        self.case = case
        self.program = case.program if isinstance(case, (Stealing, Hooked)) else case

    def compile(self, backend: str, dynamic: bool = False):
        if isinstance(self.case, Stealing):
            return aotspec.compile(
                as_stealing_function(self.case), backend=backend, steal=("acts",), dynamic=dynamic
            )
        if isinstance(self.case, Hooked):
            return aotspec.compile(
                as_function(self.program),
                backend=backend,
                hooks_filter=self.case.hooks_filter,
                dynamic=dynamic,
            )
        return aotspec.compile(as_function(self.program), backend=backend, dynamic=dynamic)

    def call(self, fn, named, args):
        """`call_and_backward`, inside the hooks of a hooked case."""
        options = self.program.call_options
        if not isinstance(self.case, Hooked):
            return call_and_backward(fn, named, args, **options)
        with torch.autograd.graph.saved_tensors_hooks(*self.case.hooks):
            return call_and_backward(fn, named, args, **options)

    def inputs(self) -> tuple[dict[str, torch.Tensor], list, list | None]:
        named, args = build_inputs(self.program.setup)
        if isinstance(self.case, Stealing):
            acts = make_activations(self.case, named)  # the caller keeps their leaves
            return named, [acts, *args], acts
        return named, args, None

    @property
    def source(self) -> str:
        if isinstance(self.case, Stealing):
            return stealing_source(self.case)
        if isinstance(self.case, Hooked):
            pack, unpack = (hook.__name__ for hook in self.case.hooks)
            hooks = f"called inside saved_tensors_hooks({pack}, {unpack})"
            return f"{source(self.program)}\n# {hooks}, hooks_filter={self.case.hooks_filter!r}"
        return source(self.program)


def _stolen_refs(acts: list | None) -> list[StorageWeakRef]:
    return [StorageWeakRef(t.untyped_storage()) for t in acts or []]


def _stolen_freed(acts: list | None, refs: list[StorageWeakRef]) -> bool | None:
    if acts is None:
        return None
    return not acts and all(ref.expired() for ref in refs)


def run_reference(case: FuzzCase, compiled=None):
    """The reference's run, and the compiled callable (its plan serves the fast run too);
    `compiled`: a reference callable to call, made for `case`'s program, instead of a new one."""
    compiled = case.compile("reference") if compiled is None else compiled
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
    accounts = {
        name: _reference_account(ledger) for name, ledger in ledgers.items() if ledger is not None
    }
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
        tensors = [t for t in world.values() if isinstance(t, torch.Tensor)]
        self.visible |= {self.tracker.storage_id(t) for t in tensors}
        return outputs


def run_fast(case: FuzzCase, reference, compiled=None) -> Run:
    """The fast run, on the plans `reference` (the reference's compiled callable) built;
    `compiled`: a fast callable to call, made for `case`'s program, instead of a new one. With
    no plan (the reference raised), the fast callable builds its own, to raise its own
    error."""
    compiled = case.compile("fast") if compiled is None else compiled
    compiled.adopt_plans(reference)
    if not compiled.plans:
        try:
            named, args, _ = case.inputs()
            case.call(compiled, named, args)
        except Exception as error:  # noqa: BLE001 (an error is an observable)
            return Run(None, _error_text(error), {}, {}, None)
        raise AssertionError(f"the reference raised and fast did not, on:\n{case.source}")
    tracker = MemoryTracker()
    bracketed = [(plan, _bracketed(plan, tracker)) for plan in compiled.plans.values()]
    named, args, acts = case.inputs()
    refs = _stolen_refs(acts)
    tracker.track(acts or [])
    del acts
    observed = _Observed(compiled, tracker, named)
    with tracker:
        outcome = case.call(observed, named, args)
    stolen_freed = _stolen_freed(args[0] if isinstance(case.case, Stealing) else None, refs)
    ran = [(plan, b) for plan, b in bracketed if b["forward"].start is not None]
    if len(ran) != 1:
        raise AssertionError(f"the call ran {len(ran)} of the fast callable's plans, not one")
    ((plan, brackets),) = ran
    accounts, owned = {}, {}
    for name, bracket in brackets.items():
        if bracket.start is None:
            continue  # the backward did not run
        held_outside = set(observed.visible)
        if name == "backward":
            held_outside |= set(bracket.argument_ids[plan.plan.num_saved :])  # tangents
        accounts[name], owned[name] = _fast_account(tracker, bracket, held_outside)
    return Run(outcome, None, accounts, owned, stolen_freed)


def _bracketed(plan, tracker: MemoryTracker) -> dict[str, Bracket]:
    """`plan`'s graphs, each replaced by a `Bracket` around it, by graph."""
    brackets = {"forward": Bracket(plan.forward, tracker)}
    plan.forward = brackets["forward"]
    if plan.backward is not None:
        brackets["backward"] = plan.backward = Bracket(plan.backward, tracker)
        plan.backwards_reaching = _BracketedBackwards(tracker, brackets)
    return brackets


def _is_op(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)


def _fast_account(
    tracker: MemoryTracker, bracket: Bracket, held_outside: set
) -> tuple[Account, frozenset[Label]]:
    nodes = list(bracket.graph_module.graph.nodes)
    labels: dict[int, Label] = {}
    placeholders = [node for node in nodes if node.op == "placeholder"]
    for node, storage in zip(placeholders, bracket.argument_ids, strict=True):
        if not isinstance(node.meta.get("val"), torch.Tensor):
            continue  # a number: a size the forward read (r[sizes.symbolic.saved])
        if storage is None:
            raise AssertionError(
                f"the tracker does not know the storage of placeholder {node.name}"
            )
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
    events = _relayouts_folded(tracker.events)
    start = next((i for i, e in enumerate(events) if e.step >= bracket.start), len(events))
    changes = tuple((labels.get(e.storage), e.nbytes) for e in events)
    owned = frozenset(label for storage, label in labels.items() if storage not in held_outside)
    return Account(after, changes, start), owned


def _relayouts_folded(events: list) -> list:
    """The tracker's events, a resize of a storage in the step that made it folded into its
    alloc: the op's own relayout of its fresh output, which the generated code runs after the
    kernel returns (`mse_loss`'s mean, moved off the storage of every term to one of its own:
    r[ops.fresh-output.meta-layout]), so the storage is born with the bytes the spec gives it."""
    folded, born = [], {}
    for e in events:
        if e.kind == "resize" and e.storage in born and folded[born[e.storage]].step == e.step:
            folded[born[e.storage]] = evolve(folded[born[e.storage]], nbytes=e.nbytes)
            continue
        if e.kind == "alloc":
            born[e.storage] = len(folded)
        folded.append(e)
    return folded


def _labelled(alive: frozenset[int], labels: dict[int, Label]) -> frozenset[Label]:
    return frozenset(labels[s] for s in alive if s in labels)


def memory_differences(reference: Run, fast: Run) -> list[str]:
    found = []
    if reference.stolen_freed != fast.stolen_freed:
        found.append(
            f"stolen list emptied and freed: reference {reference.stolen_freed}, "
            f"fast {fast.stolen_freed}"
        )
    if set(reference.accounts) != set(fast.accounts):
        graphs = f"reference {sorted(reference.accounts)}, fast {sorted(fast.accounts)}"
        return found + [f"graphs run: {graphs}"]
    for name, fast_account in fast.accounts.items():
        owned, ref_account = fast.owned[name], reference.accounts[name]
        for node, fast_alive in fast_account.after.items():
            want, got = ref_account.after[node] & owned, fast_alive & owned
            if want != got:
                found.append(
                    f"{name}, after {node}: alive {sorted(want)} on the reference, "
                    f"{sorted(got)} on fast"
                )
        want, got = ref_account.peak(owned), fast_account.peak(owned)
        if want != got:
            found.append(
                f"{name} peak of the runtime's storages: {want} bytes on the reference, "
                f"{got} on fast"
            )
    return found


def fast_divergence(case: Program | Stealing | Hooked) -> list[str]:
    """How the fast backend differs from the reference on `case`; empty when they agree."""
    case = FuzzCase(case)
    try:
        reference, compiled = run_reference(case)
    except Exception:
        trace = traceback.format_exc(limit=-4)
        raise AssertionError(f"the reference could not run:\n{case.source}\n{trace}") from None
    try:
        fast = run_fast(case, compiled)
    except Exception as error:  # noqa: BLE001 (an error of the fast side is a divergence)
        return [f"the fast run raised {type(error).__name__}: {error}"]
    if reference.error or fast.error:
        if reference.error != fast.error:
            return [f"error: reference {reference.error}, fast {fast.error}"]
        _note("both raised")
        return []
    found = compare(reference.outcome, fast.outcome)
    subject = case.case if isinstance(case.case, Stealing) else case.program
    if found and numerically_explained(subject, reference.outcome, fast.outcome, found):
        _note("numeric disagreement explained by float64")
        found = []
    return found + memory_differences(reference, fast)


def sizes_divergence(sized: Sized, dynamic: bool = False) -> list[str]:
    """How one reference callable and one fast callable, each called at every size of `sized`
    in turn (a fresh caller's world each time), differ at each size: the reference from eager
    (every observable, rounding forgiven as `numerically_explained` says), and fast from the
    reference (those and the memory facts, as `fast_divergence`). Each line names its size.
    With `dynamic`, both are compiled with dynamic sizes (`r[sizes.symbolic.dims]`), and the
    reference's peaks at each size are also those of a reference compiled for that size alone."""
    first = FuzzCase(sized.at(sized.sizes[0]))
    reference_fn = first.compile("reference", dynamic)
    fast_fn = first.compile("fast", dynamic)
    found = []
    for size in sized.sizes:
        case = FuzzCase(sized.at(size))
        eager = eager_outcome(case.program)
        reference, _ = run_reference(case, reference_fn)
        if reference.error is not None:
            found.append(f"at size {size}: eager returned, the reference raised {reference.error}")
            continue
        if dynamic:
            found += [f"at size {size}: {line}" for line in _peaks_differ(case, reference_fn)]
        lines = compare(eager, reference.outcome)
        if lines and numerically_explained(case.program, eager, reference.outcome, lines):
            lines = []
        found += [f"at size {size}, reference against eager: {line}" for line in lines]
        try:
            fast = run_fast(case, reference_fn, fast_fn)
        except Exception as error:  # noqa: BLE001 (an error of the fast side is a divergence)
            found.append(f"at size {size}: the fast run raised {type(error).__name__}: {error}")
            continue
        if fast.error is not None:
            found.append(f"at size {size}: the reference returned, fast raised {fast.error}")
            continue
        lines = compare(reference.outcome, fast.outcome)
        if lines and numerically_explained(case.program, reference.outcome, fast.outcome, lines):
            lines = []
        lines += memory_differences(reference, fast)
        found += [f"at size {size}, fast against the reference: {line}" for line in lines]
    if dynamic:  # how often the sizes share a symbolic plan, in hypothesis's statistics
        _note(f"plans traced for {len(sized.sizes)} sizes: {reference_fn.compilations}")
    return found


def _peaks_differ(case: FuzzCase, symbolic) -> list[str]:
    """r[sizes.symbolic.per-call]: the peaks of the symbolic reference's latest call against
    those of a reference compiled for this size alone, on a fresh world."""
    run = symbolic.last_run
    alone = case.compile("reference")
    named, args, _ = case.inputs()
    case.call(alone, named, args)
    found = []
    for graph in ("ledger", "backward_ledger"):
        mine, theirs = getattr(run, graph), getattr(alone.last_run, graph)
        if (mine is None) != (theirs is None):
            found.append(f"{graph}: the symbolic plan's is {mine}, one size's {theirs}")
        elif mine is not None and mine.peak_bytes != theirs.peak_bytes:
            found.append(
                f"{graph} peak: {mine.peak_bytes} bytes with the symbolic plan, "
                f"{theirs.peak_bytes} with a plan for this size alone"
            )
    return found


def _note(text: str) -> None:
    """hypothesis's `event`, inside a test; a standalone repro runs outside any, where `event`
    raises."""
    if currently_in_test_context():
        event(text)
