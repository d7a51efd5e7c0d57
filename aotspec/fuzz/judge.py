"""One fuzz program judged on one backend: what `aotspec fuzz` runs in a worker per program.

A *subject* is what the generators (`aotspec.fuzz.strategies`) draw, of one of four kinds:
`mutation` (views, in-place ops, `copy_`, `set_`, resizes over aliased inputs), `grad` (with
backward), `hooks` (with backward, inside lossless saved-tensor hooks under a random
`hooks_filter`) and `stealing` (after a stolen list of activations). Program `index` of a
campaign with `seed` is drawn from a random generator seeded with both, so any process draws
the same program for it; `from_choices` replays hypothesis's choices (the shrinker's input).

The oracles (docs/design.md sections 5 and 7):
- eager PyTorch, for values, input mutations, aliasing, requires_grad and gradients (a hooks
  program compiled with lossless hooks must match eager without any); a numeric difference is
  forgiven when the compiled value is no farther from an eager float64 run than eager's is, or
  than float64 runs that put each result an ulp of float32 off are (`numerically_explained`);
- the reference, for memory facts, where the backend allows measuring them on real tensors:
  on `fast`, the runtime's storages alive after each op and the peaks of forward and backward
  (tracked with `aotspec.tracker`), and stolen lists emptied and freed.

The backend runs the program as rendered Python (`strategies.program.source`), so Dynamo sees
ordinary code, each program with a code object of its own.
"""

from __future__ import annotations

import functools
import random
import re
import warnings

import torch
from attrs import frozen
from hypothesis import strategies as st
from hypothesis.errors import StopTest
from hypothesis.internal.conjecture.data import ConjectureData
from torch.fx._lazy_graph_module import _use_lazy_graph_module

import aotspec

from .oracle import (
    FuzzCase,
    Hooked,
    call_and_backward,
    compare,
    eager_as_specified,
    memory_differences,
    numerically_explained,
    run_fast,
    run_reference,
)
from .strategies.grad import grad_programs
from .strategies.mutations import programs
from .strategies.program import Program, source
from .strategies.sampling import sampled_from
from .strategies.stealing import Stealing, make_activations, stealing_programs, stealing_source

#: Kinds of programs, and how many of each in a hundred.
KINDS = {"mutation": 40, "grad": 35, "hooks": 15, "stealing": 10}
#: What only aotspec.compile can be asked: torch.compile has no stolen lists.
AOTSPEC_ONLY_KINDS = ("stealing",)
HOOK_FILTERS = ("donated", "no_static", "all")


@st.composite
def _hooked(draw) -> Hooked:
    return Hooked(draw(grad_programs()), draw(sampled_from(HOOK_FILTERS)), lossless=True)


def _strategy(kind: str):
    if kind == "mutation":
        return programs(compiled=True)
    if kind == "grad":
        return grad_programs()
    if kind == "hooks":
        return _hooked()
    return st.booleans().flatmap(lambda backward: stealing_programs(backward=backward))


STRATEGIES = {kind: _strategy(kind) for kind in KINDS}


def kinds_for(backend: str) -> dict[str, int]:
    """The kinds a backend is fuzzed with (foreign backends: no stolen lists)."""
    if backend in ("fast", "reference"):
        return dict(KINDS)
    return {kind: n for kind, n in KINDS.items() if kind not in AOTSPEC_ONLY_KINDS}


def draw_at(seed: int, index: int, kinds: dict[str, int]) -> tuple[str, object, list]:
    """Program `index` of the campaign `seed`: (kind, subject, hypothesis's choices)."""
    rng = random.Random(f"aotspec-fuzz:{seed}:{index}")
    kind = rng.choices(list(kinds), weights=list(kinds.values()))[0]
    data = ConjectureData(random=rng)
    subject = data.draw(STRATEGIES[kind])
    data.freeze()
    return kind, subject, list(data.choices)


def from_choices(kind: str, choices: list) -> object | None:
    """The subject that `choices` draw for `kind`, or None when they draw none (too few, or a
    value the draw cannot take)."""
    data = ConjectureData.for_choices(choices)
    try:
        subject = data.draw(STRATEGIES[kind])
        data.freeze()
    except (StopTest, Exception):  # noqa: BLE001 (too few choices, or unfit ones: no program)
        return None
    return subject


def program_of(subject) -> Program:
    return subject.program if isinstance(subject, (Stealing, Hooked)) else subject


def subject_source(subject) -> str:
    """The subject as Python: `make_inputs`, `program` (and `make_activations`, `stealing`)."""
    if isinstance(subject, Stealing):
        return stealing_source(subject)
    text = source(program_of(subject))
    if isinstance(subject, Hooked):
        pack, unpack = (hook.__name__ for hook in subject.hooks)
        text += (
            f"\n# called inside saved_tensors_hooks({pack}, {unpack}), "
            f"hooks_filter={subject.hooks_filter!r}\n"
        )
    return text


# ---------------------------------------------------------------- verdicts


@frozen
class Verdict:
    #: "pass"; "fail" (the backend disagrees with an oracle); "invalid" (eager rejected the
    #: program: a bug of the generators, not of the backend).
    status: str
    found: tuple[str, ...] = ()
    signature: str = ""


def _role(name: str) -> str:
    base = name.split(".")[0]
    if re.fullmatch(r"out\d+", base):
        return "an output"
    return "a caller's tensor"


def signature(found: list[str]) -> str:
    """What tells one failure from another: the error's type and first words, or the kind of
    the first differing observable (which tensor, which fact), without names or numbers."""
    first = found[0]
    error = re.match(r"the backend raised (\w+): ?(.*)", first)
    if error:
        kind, words = error.groups()
        # torch.compile wraps what its backend raised: the same error on any backend.
        wrapped = re.match(r"backend=\S+ raised: (\w+): ?(.*)", words)
        if kind == "BackendCompilerFailed" and wrapped:
            kind, words = wrapped.groups()
        words = re.sub(r"\[[^\]]*\]", "[...]", words)
        return f"error {kind}: {re.sub(r'[0-9]+', '#', words)[:72]}"
    if first.startswith(("forward", "backward", "stolen list", "graphs run")):
        # Not which node: one bug of the runtime's lifetimes shows after many different nodes.
        fact = re.sub(r", after \S+", ", storages alive after a node", first.split(":")[0])
        return "memory " + re.sub(r"\d+|\(.*|\[.*", "#", fact)[:60]
    if first.startswith("after the first backward"):
        first = first.split(": ", 1)[1]
    name = first.split(" ")[0].split(":")[0]
    if ".grad" in name:
        return "gradient " + ("values" if "values" in first else "presence or layout")
    if name.endswith(".requires_grad"):
        return f"requires_grad of {_role(name)}"
    if first.startswith("storage sharing"):
        return "storage sharing"
    if first.startswith("changed by the compiled backward"):
        return "the backward changed a caller's tensor"
    fact = re.match(r"\S+?\.(\w+):", first)
    what = fact.group(1) if fact else ("values" if " values:" in first else first[:40])
    return f"{what} of {_role(name)}"


def _error_line(error: BaseException) -> str:
    """The error's type and its first two lines (a compiler's wrapper says little in its first:
    `backend='aot_eager' raised:`)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"the backend raised {type(error).__name__}: {' '.join(lines[:2])[:300]}"


# ---------------------------------------------------------------- running a subject


def _functions(subject) -> dict:
    """The subject's rendered Python, executed: its `make_inputs`, `program` and friends."""
    namespace = {"torch": torch, "__name__": "aotspec_fuzz_program"}
    exec(_compiled(subject_source(subject)), namespace)  # noqa: S102
    return namespace


@functools.lru_cache(maxsize=4)
def _compiled(source: str):
    """A subject's rendered Python, compiled once: each subject runs more than once (eager,
    then the backend), each time in a namespace of its own."""
    return compile(source, "<fuzz program>", "exec")


def _eager(subject):
    """Eager PyTorch's outcome, without hooks; None when eager rejects the program."""
    try:
        return _aotspec_outcome(subject, "torch-eager", hooks=False)
    except Exception:  # noqa: BLE001 (the generators made an invalid program)
        return None


def _graph_hooks(subject):
    """Lossless hooks as GraphModules, which PyTorch inlines (docs/torch-2.13.md section 4)."""
    return tuple(torch.fx.symbolic_trace(hook) for hook in subject.hooks)


def _foreign_outcome(subject, dynamo_backend):
    """The subject through `torch.compile(backend=dynamo_backend)`, on a fresh Dynamo."""
    functions = _functions(subject)
    torch._dynamo.reset()
    compiled = torch.compile(functions["program"], backend=dynamo_backend, dynamic=False)
    named, args = functions["make_inputs"]()
    options = program_of(subject).call_options
    if not isinstance(subject, Hooked):
        return call_and_backward(compiled, named, args, **options)
    mode = torch._functorch.config.patch(saved_tensors_hooks_filtering_mode=subject.hooks_filter)
    with mode, torch.autograd.graph.saved_tensors_hooks(*_graph_hooks(subject)):
        return call_and_backward(compiled, named, args, **options)


def _aotspec_outcome(subject, backend: str, hooks: bool = True):
    """The subject through `aotspec.compile(backend=...)`, or eager itself (`torch-eager`);
    with its hooks around the call, unless `hooks` is False."""
    functions = _functions(subject)
    options = program_of(subject).call_options
    named, args = functions["make_inputs"]()
    if isinstance(subject, Stealing):
        fn = functions["stealing"]
        if backend == "torch-eager":
            fn = eager_as_specified(fn)
        else:
            fn = aotspec.compile(fn, backend=backend, steal=("acts",))
        acts = make_activations(subject, named)  # the caller keeps their leaves, as the oracles
        return call_and_backward(fn, named, [acts, *args], **options)
    fn = functions["program"]
    if backend == "torch-eager":
        fn = eager_as_specified(fn)
    else:
        hooks_filter = subject.hooks_filter if isinstance(subject, Hooked) else "donated"
        fn = aotspec.compile(fn, backend=backend, hooks_filter=hooks_filter)
    if not isinstance(subject, Hooked) or not hooks:
        return call_and_backward(fn, named, args, **options)
    with torch.autograd.graph.saved_tensors_hooks(*subject.hooks):
        return call_and_backward(fn, named, args, **options)


def _explained(subject, expected, actual, found: list[str]) -> bool:
    """The float64 rule (a stealing program's rerun includes its stolen list's sum, `out0`)."""
    rerun = subject if isinstance(subject, Stealing) else program_of(subject)
    return numerically_explained(rerun, expected, actual, found)


def _judge_values(subject, expected, run) -> list[str]:
    """The backend's outcome (`run()`) against eager's, with the float64 rule."""
    try:
        actual = run()
    except Exception as error:  # noqa: BLE001 (an error where eager has none is a failure)
        return [_error_line(error)]
    found = compare(expected, actual)
    return [] if found and _explained(subject, expected, actual, found) else found


def _judge_fast(subject, expected) -> list[str]:
    """fast: values against eager; memory facts against the reference, on the same plan."""
    case = FuzzCase(subject)
    try:
        reference, compiled = run_reference(case)
        fast = run_fast(case, compiled)
    except Exception as error:  # noqa: BLE001
        return [_error_line(error)]
    if fast.error is not None:
        return [f"the backend raised {fast.error}"]
    found = compare(expected, fast.outcome)
    if found and _explained(subject, expected, fast.outcome, found):
        found = []
    if reference.error is None:
        found += memory_differences(reference, fast)
    return found


def judge(subject, backend: str) -> Verdict:
    """`subject` on `backend` (a name `aotspec fuzz --backend` takes), against the oracles.
    Warnings (hooks that apply to nothing, say) are the program's business: not shown."""
    with warnings.catch_warnings(), _lazy_graph_code(backend):
        warnings.simplefilter("ignore")
        return _judge(subject, backend)


def _lazy_graph_code(backend: str):
    """On aotspec's own backends, the graphs that tracing makes write their Python code only
    when something calls them or reads it, as under Dynamo: the reference interprets its
    graphs and the fast backend writes code of its own, so most graphs never need theirs.
    Foreign backends run as their users run them."""
    return _use_lazy_graph_module(backend in ("fast", "reference"))


def _judge(subject, backend: str) -> Verdict:
    expected = _eager(subject)
    if expected is None:
        return Verdict("invalid", ("eager PyTorch rejects the program",), "invalid program")
    if backend == "fast":
        found = _judge_fast(subject, expected)
    elif backend in ("reference", "torch-eager"):
        found = _judge_values(subject, expected, lambda: _aotspec_outcome(subject, backend))
    else:
        dynamo_backend = _dynamo_backend(backend)
        found = _judge_values(subject, expected, lambda: _foreign_outcome(subject, dynamo_backend))
    if not found:
        return Verdict("pass")
    return Verdict("fail", tuple(found), signature(found))


_DYNAMO_BACKENDS: dict = {}


def _dynamo_backend(backend: str):
    """What `torch.compile(backend=...)` takes for a foreign backend name (resolved once)."""
    if backend not in _DYNAMO_BACKENDS:
        from aotspec.conformance.backends import resolve, user_callable

        resolve(backend)  # refuses unknown names, with the list of valid ones
        name = backend.removeprefix("torch.compile:")
        _DYNAMO_BACKENDS[backend] = name if backend != name else user_callable(backend)
    return _DYNAMO_BACKENDS[backend]


def check_index(backend: str, seed: int, index: int) -> tuple[str, Verdict]:
    """A worker's task: program `index` of campaign `seed` on `backend`: (kind, verdict)."""
    kind, subject, _ = draw_at(seed, index, kinds_for(backend))
    return kind, judge(subject, backend)


def check_choices(backend: str, kind: str, choices: list) -> Verdict | None:
    """A worker's task while shrinking: the subject `choices` draw, or None for no subject."""
    subject = from_choices(kind, choices)
    return None if subject is None else judge(subject, backend)
