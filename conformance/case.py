"""Conformance cases: a small torch program, the caller's tensors, and what the spec says happens.

A case is data, in the spirit of the WebAssembly `.wast` scripts: `setup` builds the caller's
world (named tensors, aliases included), `args` says which names are passed to `program`, and
`expect` is a flat list of expectations written by hand from the rules the case names and from
eager PyTorch, never from the reference's output. One runner takes any backend.

A case with `sizes` calls one compiled function several times: once per size, in order, each
time on a fresh world that `setup(size)` builds, checking its expectations after each call
(`AtSize` says what holds at one size only).

Outputs join the world as `out0`, `out1`, ... (the program's return value, pytree-flattened).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from attrs import field, frozen

from .observe import Observation, TensorFacts, addressing_strides, differences


@frozen
class Outcome:
    """What a backend's call left behind, as the expectations see it."""

    #: The caller's named values after the call, outputs included as out0, out1, ...
    world: dict
    after: Observation
    before: Observation
    error: BaseException | None
    #: The run of a backend that keeps ledgers (`.ledger`, maybe `.backward_ledger`), else None.
    ledger: object | None
    #: Warnings the call issued.
    warnings: tuple = ()
    #: What the backward raised, when the call returned and the backward (`Case.backward`) failed.
    backward_error: BaseException | None = None
    #: How many plans the backend's compiled function has traced so far, for a backend that
    #: says (aotspec's own), else None.
    plans: int | None = None


class Expectation:
    """Something the spec fixes about an outcome. `check` returns a failure message or None."""

    #: True when the check needs a ledger (memory facts); backends without one skip it.
    needs_ledger = False
    #: True when the check needs the count of plans traced; backends that do not say skip it.
    needs_plans = False

    def check(self, outcome: Outcome) -> str | None:
        raise NotImplementedError


def _facts(outcome: Outcome, name: str) -> TensorFacts | str:
    if outcome.error is not None:
        return f"the call raised {type(outcome.error).__name__}: {outcome.error}"
    if name not in outcome.after.tensors:
        return (
            f"{name} is not in the world after the call (names: {sorted(outcome.after.tensors)})"
        )
    return outcome.after.tensors[name]


def _missing(outcome: Outcome, *names: str) -> str | None:
    """Why some of `names` cannot be looked at after the call, or None."""
    for name in names:
        facts = _facts(outcome, name)
        if isinstance(facts, str):
            return facts
    return None


@frozen
class Values(Expectation):
    """`name` holds these values and shape (assert_close defaults; dtype is `Layout`'s
    business)."""

    name: str
    expected: object

    def check(self, outcome):
        facts = _facts(outcome, self.name)
        if isinstance(facts, str):
            return facts
        if facts.values is None:
            return f"{self.name} is unreadable: its storage holds {facts.storage_nbytes} bytes"
        expected = torch.as_tensor(self.expected, device="cpu")  # observed values are the CPU's
        try:
            torch.testing.assert_close(
                facts.values, expected.to(facts.values.dtype), equal_nan=True
            )
        except AssertionError as error:
            return (
                f"{self.name}: {str(error).splitlines()[0]} expected {expected.tolist()}, "
                f"got {facts.values.tolist()}"
            )
        return None


def _rank() -> int:
    """This process's rank in the group a case of `ranks` > 1 runs on (`conformance/ranks.py`)."""
    return torch.distributed.get_rank()


@frozen
class SparseValues(Expectation):
    """`name` is a sparse COO tensor of `shape` whose values, duplicates summed, are `values`
    at `indices` (`coalesce()`'s, so two runs that sum the same entries in another order
    agree)."""

    name: str
    shape: tuple
    indices: object
    values: object

    def check(self, outcome):
        if outcome.error is not None:
            return f"the call raised {type(outcome.error).__name__}: {outcome.error}"
        t = outcome.world.get(self.name)
        if not isinstance(t, torch.Tensor) or t.layout != torch.sparse_coo:
            return f"{self.name} is {getattr(t, 'layout', t)}, expected a sparse COO tensor"
        if tuple(t.shape) != tuple(self.shape):
            return f"{self.name}.shape is {tuple(t.shape)}, expected {tuple(self.shape)}"
        t = t.detach().to("cpu").coalesce()
        if t.indices().tolist() != torch.as_tensor(self.indices).tolist():
            return f"{self.name} has indices {t.indices().tolist()}, expected {self.indices}"
        try:
            torch.testing.assert_close(t.values(), torch.as_tensor(self.values, dtype=t.dtype))
        except AssertionError as error:
            return f"{self.name}: {str(error).splitlines()[0]} got {t.values().tolist()}"
        return None


@frozen
class RankValues(Expectation):
    """On rank k of the case's group, `name` holds `expected[k]` (see `Values`)."""

    name: str
    expected: tuple = field(converter=tuple)

    def check(self, outcome):
        return Values(self.name, self.expected[_rank()]).check(outcome)


@frozen
class OnRank(Expectation):
    """`expectation` holds on rank `rank` of the case's group; the other ranks skip it."""

    rank: int
    expectation: Expectation

    def applies(self) -> bool:
        return _rank() == self.rank

    def check(self, outcome):
        return self.expectation.check(outcome)


@frozen
class PlansTraced(Expectation):
    """The compiled function has traced `count` plans in all, by this call (`specs/sizes.md`);
    not observable on a backend that does not say how many plans it traced."""

    count: int
    needs_plans = True

    def check(self, outcome):
        if outcome.plans != self.count:
            return f"{outcome.plans} plans traced by this call, expected {self.count}"
        return None


@frozen
class AtSize(Expectation):
    """`expectation` holds after the call at `size` of a case with `sizes`; the calls at the
    other sizes skip it."""

    size: int
    expectation: Expectation

    def check(self, outcome):
        return self.expectation.check(outcome)


@frozen
class Layout(Expectation):
    """`name` has this dtype, shape, strides and offset (any left as None is not checked); strides
    are compared where they address elements (`r[memory.layout.unaddressed-strides]`)."""

    name: str
    dtype: torch.dtype | None = None
    shape: tuple | None = None
    strides: tuple | None = None
    offset: int | None = None

    def check(self, outcome):
        facts = _facts(outcome, self.name)
        if isinstance(facts, str):
            return facts
        for attribute in ("dtype", "shape", "offset"):
            want = getattr(self, attribute)
            if want is not None and tuple_or(want) != tuple_or(getattr(facts, attribute)):
                return f"{self.name}.{attribute} is {getattr(facts, attribute)}, expected {want}"
        if self.strides is not None:
            expected = addressing_strides(facts.shape, self.strides)
            if expected != addressing_strides(facts.shape, facts.strides):
                return f"{self.name}.strides is {facts.strides}, expected {self.strides}"
        return None


def tuple_or(value):
    return tuple(value) if isinstance(value, (list, tuple)) else value


@frozen
class StorageBytes(Expectation):
    """The storage `name` reads holds exactly `nbytes` bytes."""

    name: str
    nbytes: int

    def check(self, outcome):
        facts = _facts(outcome, self.name)
        if isinstance(facts, str):
            return facts
        if facts.storage_nbytes != self.nbytes:
            return (
                f"{self.name}'s storage holds {facts.storage_nbytes} bytes, expected {self.nbytes}"
            )
        return None


@frozen
class Shares(Expectation):
    """`a` and `b` read one storage (they alias)."""

    a: str
    b: str

    def check(self, outcome):
        missing = _missing(outcome, self.a, self.b)
        if missing:
            return missing
        if not outcome.after.shares_storage(self.a, self.b):
            return (
                f"{self.a} and {self.b} should share a storage; sharing is {outcome.after.sharing}"
            )
        return None


@frozen
class Separate(Expectation):
    """`a` and `b` read different storages."""

    a: str
    b: str

    def check(self, outcome):
        missing = _missing(outcome, self.a, self.b)
        if missing:
            return missing
        if outcome.after.shares_storage(self.a, self.b):
            return (
                f"{self.a} and {self.b} should not share a storage; "
                f"sharing is {outcome.after.sharing}"
            )
        return None


@frozen
class SavedFreedDuringBackward(Expectation):
    """Every saved value's storage died during the backward, before its last step, unless the
    backward returned it (`r[autograd.saved-freed-in-backward]`)."""

    needs_ledger = True

    def check(self, outcome):
        if outcome.error is not None:
            return f"the call raised {type(outcome.error).__name__}: {outcome.error}"
        ledger = getattr(outcome.ledger, "backward_ledger", None)
        if ledger is None:
            return "no backward ran (or the backend keeps no backward ledger)"
        freed_before_end = {
            e.storage for e in ledger.events if e.kind == "free" and e.step < ledger.step
        }
        returned = ledger.probes[-1].alive
        kept = sorted(outcome.ledger.saved_storages - freed_before_end - returned)
        if kept:
            return (
                f"backward inputs (storages {kept}) were still alive at the backward's last step"
            )
        return None


@frozen
class RequiresGrad(Expectation):
    """`name` requires grad, or does not (`expected`)."""

    name: str
    expected: bool = True

    def check(self, outcome):
        missing = _missing(outcome, self.name)
        if missing:
            return missing
        if outcome.world[self.name].requires_grad != self.expected:
            return f"{self.name}.requires_grad is {not self.expected}, expected {self.expected}"
        return None


@frozen
class History(Expectation):
    """`name`'s autograd history: the class name of its `grad_fn` (`"TBackward1"`), or None
    for a tensor without one (a leaf)."""

    name: str
    grad_fn: str | None

    def check(self, outcome):
        missing = _missing(outcome, self.name)
        if missing:
            return missing
        grad_fn = outcome.world[self.name].grad_fn
        actual = None if grad_fn is None else type(grad_fn).__name__
        if actual != self.grad_fn:
            return f"{self.name}.grad_fn is {actual}, expected {self.grad_fn}"
        return None


@frozen
class Absent(Expectation):
    """`name` is not in the world after the call (for example `x.grad` when x gets no gradient)."""

    name: str

    def check(self, outcome):
        if outcome.error is not None:
            return f"the call raised {type(outcome.error).__name__}: {outcome.error}"
        if self.name in outcome.world:
            return f"{self.name} should not exist after the call"
        return None


@frozen
class Length(Expectation):
    """The non-tensor value `name` of the caller's world (a list) has `n` items after the call."""

    name: str
    n: int

    def check(self, outcome):
        if outcome.error is not None:
            return f"the call raised {type(outcome.error).__name__}: {outcome.error}"
        if len(outcome.world[self.name]) != self.n:
            return f"{self.name} has {len(outcome.world[self.name])} items, expected {self.n}"
        return None


@frozen
class Number(Expectation):
    """The non-tensor value `name` of the caller's world (a returned number) is `expected`, and
    of its type (`-2.0` is not `-2`, `True` is not `1`)."""

    name: str
    expected: float | int | bool

    def check(self, outcome):
        if outcome.error is not None:
            return f"the call raised {type(outcome.error).__name__}: {outcome.error}"
        got = outcome.world.get(self.name)
        if type(got) is not type(self.expected) or got != self.expected:
            return f"{self.name}: expected {self.expected!r}, got {got!r}"
        return None


@frozen
class Version(Expectation):
    """The version counter of tensor `name` after the call is `expected` (what autograd's check
    of saved tensors reads)."""

    name: str
    expected: int

    def check(self, outcome):
        missing = _missing(outcome, self.name)
        if missing:
            return missing
        got = outcome.world[self.name]._version
        return None if got == self.expected else f"{self.name}: version {got}, not {self.expected}"


@frozen
class ViewOf(Expectation):
    """`name` is a view of tensor `base` for autograd (its `_base`), or is no view (`base` None:
    `_is_view()` False, as an op's result in eager)."""

    name: str
    base: str | None

    def check(self, outcome):
        missing = _missing(outcome, self.name, *([self.base] if self.base else []))
        if missing:
            return missing
        t = outcome.world[self.name]
        if self.base is None:
            return f"{self.name} is a view, expected none" if t._is_view() else None
        if t._base is not outcome.world[self.base]:
            return f"{self.name} is not a view of {self.base}"
        return None


@frozen
class Identical(Expectation):
    """`a` and `b` are the very same tensor object (an output that is an argument)."""

    a: str
    b: str

    def check(self, outcome):
        missing = _missing(outcome, self.a, self.b)
        if missing:
            return missing
        if outcome.world[self.a] is not outcome.world[self.b]:
            return f"{self.a} and {self.b} are different tensor objects"
        return None


@frozen
class Raises(Expectation):
    """The call raises `error` (a subclass of it), naming `rule` if given, matching `match` if
    given; and every tensor of the world is as it was before the call
    (`r[boundary.failed-call]`)."""

    error: type
    rule: str | None = None
    match: str | None = None

    def check(self, outcome):
        if outcome.error is None:
            return f"expected {self.error.__name__}, but the call returned"
        if not isinstance(outcome.error, self.error):
            return (
                f"expected {self.error.__name__}, "
                f"got {type(outcome.error).__name__}: {outcome.error}"
            )
        if self.rule is not None and f"rule {self.rule}" not in str(outcome.error):
            return f"the error does not name rule {self.rule}: {outcome.error}"
        if self.match is not None and self.match not in str(outcome.error):
            return f"the error does not say {self.match!r}: {outcome.error}"
        changed = differences(outcome.before, outcome.after)
        if changed:
            return f"a failed call changed the caller's tensors: {changed}"
        return None


@frozen
class BackwardRaises(Expectation):
    """The call returns, and the backward raises `error` (a subclass of it), naming `rule`
    if given and matching `match` if given. What the call did to the caller's tensors stays
    done."""

    error: type
    rule: str | None = None
    match: str | None = None

    def check(self, outcome):
        if outcome.error is not None:
            return f"the call raised {type(outcome.error).__name__}: {outcome.error}"
        raised = outcome.backward_error
        if raised is None:
            return f"expected the backward to raise {self.error.__name__}, but it ran"
        if not isinstance(raised, self.error):
            return (
                f"expected {self.error.__name__} from the backward, "
                f"got {type(raised).__name__}: {raised}"
            )
        if self.rule is not None and f"rule {self.rule}" not in str(raised):
            return f"the backward's error does not name rule {self.rule}: {raised}"
        if self.match is not None and self.match not in str(raised):
            return f"the backward's error does not say {self.match!r}: {raised}"
        return None


def _graph_ledger(outcome: Outcome, graph: str):
    """The ledger of the compiled run's `graph` ("forward" or "backward"), or why there is none."""
    if outcome.error is not None:
        return f"the call raised {type(outcome.error).__name__}: {outcome.error}"
    ledger = (
        outcome.ledger.ledger
        if graph == "forward"
        else getattr(outcome.ledger, "backward_ledger", None)
    )
    return f"no {graph} ledger (did a backward run?)" if ledger is None else ledger


@frozen
class Steps(Expectation):
    """The `graph`'s ledger runs steps named `names` one right after the other (graph node names:
    the order of ops in the compiled graph)."""

    graph: str
    names: tuple[str, ...] = field(converter=tuple)
    needs_ledger = True

    def check(self, outcome):
        ledger = _graph_ledger(outcome, self.graph)
        if isinstance(ledger, str):
            return ledger
        steps = [probe.node for probe in ledger.probes]
        width = len(self.names)
        if any(tuple(steps[i : i + width]) == self.names for i in range(len(steps) - width + 1)):
            return None
        return f"{self.graph} steps {list(self.names)} are not consecutive in {steps}"


@frozen
class FreedBy(Expectation):
    """In the `graph`'s ledger, the storage that appeared at step `made_by` (an op's result, or a
    graph input) is freed at step `freed_by`."""

    graph: str
    made_by: str
    freed_by: str
    needs_ledger = True

    def check(self, outcome):
        ledger = _graph_ledger(outcome, self.graph)
        if isinstance(ledger, str):
            return ledger
        made = [e.storage for e in ledger.events if e.kind == "alloc" and e.node == self.made_by]
        if not made:
            return f"no storage appeared at {self.graph} step {self.made_by}"
        freed = [e.node for e in ledger.events if e.kind == "free" and e.storage == made[0]]
        if freed != [self.freed_by]:
            where = f"at steps {freed}" if freed else "never"
            return (
                f"the storage made at {self.made_by} is freed {where}, expected at {self.freed_by}"
            )
        return None


@frozen
class Warns(Expectation):
    """The call warned with `category`, naming `rule`."""

    category: type
    rule: str

    def check(self, outcome):
        if outcome.error is not None:
            return f"the call raised {type(outcome.error).__name__}: {outcome.error}"
        for warning in outcome.warnings:
            if issubclass(warning.category, self.category) and f"rule {self.rule}" in str(
                warning.message
            ):
                return None
        messages = [str(w.message) for w in outcome.warnings]
        return f"expected a {self.category.__name__} naming rule {self.rule}; got {messages}"


@frozen
class PeakBytes(Expectation):
    """The ledger's peak live bytes over the call, inputs included (`r[memory.peak]`)."""

    nbytes: int
    needs_ledger = True

    def check(self, outcome):
        if outcome.error is not None:
            return f"the call raised {type(outcome.error).__name__}: {outcome.error}"
        if outcome.ledger.ledger.peak_bytes != self.nbytes:
            return f"peak live bytes {outcome.ledger.ledger.peak_bytes}, expected {self.nbytes}"
        return None


@frozen
class LiveBytesAfter(Expectation):
    """Live bytes right after the graph step named `step` (a captured node name such as `cos`)."""

    step: str
    nbytes: int
    needs_ledger = True

    def check(self, outcome):
        if outcome.error is not None:
            return f"the call raised {type(outcome.error).__name__}: {outcome.error}"
        all_probes = outcome.ledger.ledger.probes
        probes = [p for p in all_probes if p.node == self.step]
        if not probes:
            return f"no step named {self.step}; steps are {[p.node for p in all_probes]}"
        if probes[0].live_bytes != self.nbytes:
            return (
                f"live bytes after {self.step} are {probes[0].live_bytes}, expected {self.nbytes}"
            )
        return None


@frozen
class Case:
    """One conformance case: a small program, the caller's world it runs on, the rules it pins,
    and the observables eager PyTorch and the spec fix for it (`CONTRIBUTING.md`)."""

    name: str
    rules: tuple[str, ...] = field(converter=tuple)
    #: The caller's world: `setup()`, or `setup(size)` for a case with `sizes`.
    setup: Callable[..., dict[str, torch.Tensor]]
    args: tuple[str, ...] = field(converter=tuple)
    program: Callable
    expect: tuple[Expectation, ...] = field(converter=tuple)
    #: backend name -> why the case cannot run there (for example: eager segfaults on it).
    skip: dict[str, str] = field(factory=dict)
    #: Parameters whose list arguments a compiled backend steals (`r[boxed.steal]`).
    steal: tuple[str, ...] = field(default=(), converter=tuple)
    #: World tensors that stay on the CPU when the case runs on another device (tensor_split's
    #: indices must be there); the runner moves the others to the device.
    on_cpu: tuple[str, ...] = field(default=(), converter=tuple)
    #: After the call, backpropagate the sum of every output that requires grad; each world tensor
    #: with a gradient then has it in the world as `name.grad`.
    backward: bool = False
    #: With `backward`: the `retain_graph` of each backward pass through that sum, in order
    #: (`r[autograd.retain-graph]`); `.grad` accumulates over the passes.
    retain_graph: tuple[bool, ...] = field(default=(False,), converter=tuple)
    #: The grad mode the call runs under (`torch.set_grad_enabled`); the backward runs with it on.
    grad_enabled: bool = True
    #: A dtype: the call runs under `torch.autocast("cpu", dtype=autocast)`; the backward, after
    #: it, without (`r[capture.autocast]`).
    autocast: torch.dtype | None = None
    #: A dtype: the call runs with it as `torch.get_default_dtype()` (`r[capture.default-dtype]`).
    default_dtype: torch.dtype | None = None
    #: (pack, unpack): the call runs inside
    #: `torch.autograd.graph.saved_tensors_hooks(pack, unpack)`.
    hooks: tuple[Callable, Callable] | None = None
    #: `hooks_filter` of compiled backends (`specs/saved-tensor-hooks.md`).
    hooks_filter: str = "donated"
    #: Compiled backends first call the compiled function once without hooks, on a fresh world.
    warm_up_without_hooks: bool = False
    #: What the caller does to its world between the call and the backward (FSDP's re-gather);
    #: an error it raises counts as the backward's.
    before_backward: Callable[[dict], None] | None = None
    #: Processes the case runs on: more than one for a program with collectives, which runs on
    #: every rank of a gloo group the runner spawns (`conformance/ranks.py`); `setup` and
    #: `program` may ask `torch.distributed.get_rank()`, and `RankValues` and `OnRank` say what
    #: differs by rank.
    ranks: int = 1
    #: The sizes of one dimension at which one compiled function is called, in order: each
    #: backend compiles `program` once (a `torch.compile` backend with Dynamo's automatic
    #: dynamic shapes, so the second size marks the dimension dynamic) and calls it once per
    #: size, on a fresh world `setup(size)`; the backward, if any, follows each call. Every
    #: expectation is checked after every call, but an `AtSize`, checked at its size only.
    #: Empty: one call, on `setup()`.
    sizes: tuple[int, ...] = field(default=(), converter=tuple)
    #: With `sizes`: compiled backends trace the sizes as symbols (`aotspec.compile(...,
    #: dynamic=True)`, `torch.compile(..., dynamic=True)`; `r[sizes.symbolic.dims]`).
    dynamic: bool = False

    def world(self, size: int | None = None) -> dict:
        """The caller's world of the call at `size` (None for a case without `sizes`)."""
        return self.setup() if size is None else self.setup(size)

    def expectations(self, size: int | None = None) -> tuple[Expectation, ...]:
        """The expectations that apply in this process, after the call at `size`: `OnRank`s of
        other ranks and `AtSize`s of other sizes are left out, and the others stand for what
        they wrap."""
        applying = []
        for e in self.expect:
            if isinstance(e, OnRank) and not e.applies():
                continue
            if isinstance(e, AtSize) and e.size != size:
                continue
            applying.append(e.expectation if isinstance(e, (OnRank, AtSize)) else e)
        return tuple(applying)


#: Skip entries for cases that pin compiled semantics only (eager has no such notion).
COMPILED_ONLY = {
    "reference-eager": "pins a rule of compiled programs",
    "torch-eager": "pins a rule of compiled programs",
}


def eager_only(reason: str) -> dict[str, str]:
    """Skip entries for a case whose program compiled backends reject by rule (`reason`)."""
    return {"reference": reason, "fast": reason}


#: Skip entries for cases that pin the eager interpreter's ledger steps
#: (`r[memory.eager.last-use]`).
EAGER_LEDGER = {
    "reference": "pins the eager interpreter's ledger steps; compiled graphs have other steps"
}
