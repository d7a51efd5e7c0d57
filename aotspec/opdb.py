"""PyTorch's op database as a test of a compiler (`aotspec opdb`, tests/test_op_database.py).

PyTorch checks AOTAutograd against eager on every OpInfo of its op database
(`torch.testing._internal.common_methods_invocations.op_db`): each sample input runs eagerly and
compiled, and what a user sees must agree. This module does the same for aotspec and for any
`torch.compile` backend, with these observations of each call, eager's being the oracle:

1. the outputs: pytree structure, dtype, shape, strides, values (`torch.testing.assert_close`
   defaults; integers and booleans exactly; not the values of the `empty` family, which the
   spec leaves unspecified), `requires_grad`; or the error, of the same type;
2. the inputs after the call (a sample may write into them): shape, strides, values, and
   version counters (what autograd's check of saved tensors reads: batch norm's running
   statistics keep theirs, `r[ops.aten-mutations.versions]`);
3. the gradients: `torch.autograd.grad` of the outputs that require grad, with random
   cotangents drawn from a fixed seed, against every input that requires grad (their values:
   their strides are no contract, as `.grad` takes its leaf's layout); or the error;
4. a second call of the same compiled function on new values (floating inputs perturbed, so a
   program specialized on the data of its first call is caught), observed the same way; skipped
   when eager itself fails on them (a perturbed matrix may no longer be invertible).

Floating values that differ by more than those tolerances are judged against the program run in
float64 (floating inputs widened, the same cotangents): the compiled value passes when it is
within the tolerances of that value widened by eager's own largest error, where that error is
float32's rounding (`FLOAT64_JUDGES_UP_TO`). A compiler may compute an op with another kernel
than eager's (the reference's table ops are numpy's: another summation order in `mm` and `bmm`,
numpy's `exp` in `softmax`), and on an ill-conditioned sample a few units in the last place per
op grow past 1e-5: the reference's gradients of `ormqr` and of multi-head attention on the second
call, where they are closer to float64 than eager's. PyTorch's own exhaustive test of
AOTAutograd needs no such judge, since `aot_eager` runs eager's kernels.

Where the spec defines an op's derivative otherwise than eager's formula, because that formula
is not the op's derivative (`SPEC_EQUIVALENTS`: `as_strided_scatter`, whose formula keeps the
gradient of `self` inside the overwritten window), eager runs the composite the rule defines the
op by, and its observations are the oracle; the compiled program still calls the op.

Each op gets one status per backend: `pass`, `wrong` (an observation differs), `refused`
(`aotspec.UnsupportedError`: the program is outside the spec; its rule is the reason) or `crash`
(any other exception, a timeout included). Both calls start from the same seed of the global
generator (0, not the 42 the database's random ops seed themselves with, so a compiled program
that drops their `torch.manual_seed` is caught).

An *expectations file* says which ops are refused or known wrong, one op a line:
`OP BACKENDS STATUS RULE-OR-NOTE...`, BACKENDS `*` or a comma-separated list, STATUS `refused`
(then the next word is the rule the refusal names) or `wrong` / `crash` (the rest is the note:
which issue fixes it, and what is wrong). `judge` checks results against it both ways.

Short names: `op` an OpInfo, `sample` a SampleInput, `obs` an Observation.
"""

from __future__ import annotations

import contextlib
import copy
import signal
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.utils._pytree as pytree
from attrs import frozen

from aotspec.errors import UnsupportedError

#: What `compiler` may name: aotspec's two backends, and each of them behind Dynamo.
BACKENDS = ("reference", "fast", "dynamo")
STATUSES = ("pass", "wrong", "refused", "crash")
DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
}


#: Ops whose values are unspecified (`specs/ops.md`: the bytes of `empty` and its kin): their
#: outputs are compared without values.
UNSPECIFIED_VALUES = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
)


def _write_through_window(x, src, size, stride, storage_offset=None):
    out = x.clone()
    out.as_strided(size, stride, storage_offset).copy_(src)
    return out


#: Ops whose derivative the spec defines otherwise than eager's formula: the rule, and the
#: composite eager runs for the oracle (eager differentiates it as the rule says).
SPEC_EQUIVALENTS: dict[str, tuple[str, Callable]] = {
    "as_strided_scatter": ("ops.as-strided-scatter.derivative", _write_through_window),
}


@frozen
class OpResult:
    op: str
    backend: str
    dtype: str
    status: str
    #: The refusal's rules (refused), what differs (wrong), the exception (crash).
    reason: str
    samples: int
    seconds: float
    #: Whether the op supports autograd (PyTorch's own exhaustive test runs only those).
    autograd: bool


class OpTimeout(Exception):
    """An op ran past its time limit (a crash)."""


# ---------------------------------------------------------------- the database


def op_name(op) -> str:
    """The op's name as PyTorch's tests spell it: `name` or `name.variant`."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def database(dtype: str = "float32", names: list[str] | None = None) -> list:
    """The OpInfos of op_db that support `dtype` on CPU (those named by `names`, when given: an
    exact name or a prefix ending in `.`), in op_db's order."""
    from torch.testing._internal.common_methods_invocations import op_db

    wanted = DTYPES[dtype]
    ops = [op for op in op_db if wanted in op.supported_dtypes("cpu")]
    if names is not None:
        ops = [op for op in ops if any(_matches(op_name(op), name) for name in names)]
    return ops


def _matches(name: str, pattern: str) -> bool:
    return name == pattern or (pattern.endswith(".") and name.startswith(pattern))


def spread(ops: list, count: int) -> list:
    """A deterministic spread of `count` ops: those whose names hash lowest, so that adding an
    op to the database changes the choice by at most one op."""
    return sorted(ops, key=lambda op: zlib.crc32(op_name(op).encode()))[:count]


def samples(op, dtype: str, count: int) -> list:
    """The first `count` sample inputs of `op`, requiring grad where the op supports autograd
    and the dtype is floating."""
    wanted = DTYPES[dtype]
    requires_grad = op.supports_autograd and wanted.is_floating_point
    torch.manual_seed(0)  # samples draw their values from the global generator
    iterator = op.sample_inputs("cpu", wanted, requires_grad=requires_grad)
    return [sample for _, sample in zip(range(count), iterator, strict=False)]


# ---------------------------------------------------------------- compiling


def compiler(backend: str) -> Callable[[Callable], Callable]:
    """What compiles a program for `backend`: `reference`, `fast`, or `dynamo` (Dynamo with the
    aotspec backend, which runs `fast` unless `dynamo:reference` is named), or any registered
    Dynamo backend as `torch.compile:NAME`."""
    import aotspec

    if backend in ("reference", "fast"):
        return lambda fn: aotspec.compile(fn, backend=backend)
    if backend.startswith("dynamo"):
        options = {"backend": backend.partition(":")[2] or "fast"}
        return lambda fn: torch.compile(fn, backend="aotspec", options=options)
    if backend.startswith("torch.compile:"):
        return lambda fn: torch.compile(fn, backend=backend.partition(":")[2])
    raise ValueError(f"unknown backend {backend!r}: one of {', '.join(BACKENDS)}")


def _program(op, sample, function=None) -> tuple[Callable, list[torch.Tensor]]:
    """The sample's call of `function` (the op's, by default) as a function of its tensors alone
    (the other arguments constants)."""
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    where = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    function = function or op.op

    def program(*tensors):
        filled = list(leaves)
        for i, t in zip(where, tensors, strict=True):
            filled[i] = t
        first, args, kwargs = pytree.tree_unflatten(filled, spec)
        return function(first, *args, **kwargs)

    program.__qualname__ = program.__name__ = op_name(op).replace(".", "_")
    return program, [leaves[i] for i in where]


def _copies(tensors: list[torch.Tensor], perturb: bool = False) -> list[torch.Tensor]:
    """Fresh tensors like `tensors`: the same layouts and storage sharing, leaves requiring grad
    where the originals do; floating values moved by a fixed random amount when `perturb`."""
    # deepcopy keeps layouts and which tensors share a storage; a sparse tensor has no storage
    deep = iter(copy.deepcopy([t.detach() for t in tensors if t.layout == torch.strided]))
    copies = [next(deep) if t.layout == torch.strided else t.detach().clone() for t in tensors]
    if perturb:
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for t in copies:
                # an expanded tensor (a stride of 0) cannot be written in place
                if t.layout == torch.strided and t.is_floating_point() and 0 not in t.stride():
                    noise = torch.randn(t.shape, generator=generator, dtype=torch.float32)
                    t.add_(noise.to(t.dtype), alpha=0.5)
    return [c.requires_grad_(t.requires_grad) for c, t in zip(copies, tensors, strict=True)]


# ---------------------------------------------------------------- observing a call


@frozen
class Observation:
    outputs: object  # the outputs' pytree, detached, or None when the call raised
    requires_grad: tuple
    error: BaseException | None
    inputs_after: tuple
    grads: tuple | None  # None: no gradient asked for
    grad_error: BaseException | None
    #: The inputs' version counters after the call (when it returned).
    versions: tuple = ()


def observe(
    fn: Callable, tensors: list[torch.Tensor], seed: int = 0, rounded_to: list | None = None
) -> Observation:
    """Call `fn` on `tensors` and record what a user sees (module docstring). The cotangents are
    drawn from `seed`, rounded to `rounded_to` (a dtype per output that requires grad), when
    given, before they take the output's dtype: a widened run gets the cotangents of the run it
    widens."""
    torch.manual_seed(seed)
    try:
        outputs = fn(*tensors)
    except (OpTimeout, KeyboardInterrupt):
        raise
    except Exception as error:  # the error is the observation
        return Observation(None, (), error, _snapshot(tensors), None, None)
    flat = [leaf for leaf in pytree.tree_leaves(outputs) if isinstance(leaf, torch.Tensor)]
    requires_grad = tuple(t.requires_grad for t in flat)
    inputs_after = _snapshot(tensors)
    versions = tuple(t._version for t in tensors)
    grads, grad_error = None, None
    differentiable = [t for t in flat if t.requires_grad]
    wrt = [t for t in tensors if t.requires_grad]
    if differentiable and wrt:
        generator = torch.Generator().manual_seed(seed + 1)
        dtypes = rounded_to or [t.dtype for t in differentiable]
        cotangents = [
            torch.randn(t.shape, generator=generator, dtype=torch.float64).to(dtype).to(t.dtype)
            for t, dtype in zip(differentiable, dtypes, strict=True)
        ]
        try:
            found = torch.autograd.grad(differentiable, wrt, cotangents, allow_unused=True)
            grads = tuple(None if g is None else g.detach() for g in found)
        except (OpTimeout, KeyboardInterrupt):
            raise
        except Exception as error:
            grad_error = error
    detached = pytree.tree_map_only(torch.Tensor, torch.Tensor.detach, outputs)
    return Observation(detached, requires_grad, None, inputs_after, grads, grad_error, versions)


def _snapshot(tensors: list[torch.Tensor]) -> tuple:
    return tuple(t.detach().clone() if t.layout == torch.strided else t for t in tensors)


#: The dtype a floating tensor is widened to for the float64 run.
WIDER = {
    torch.float16: torch.float64,
    torch.bfloat16: torch.float64,
    torch.float32: torch.float64,
    torch.complex64: torch.complex128,
}


def _widened(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """`tensors` with floating values in float64 (complex128), leaves requiring grad as they do."""
    return [
        t.detach().to(WIDER[t.dtype]).requires_grad_(t.requires_grad)
        if t.layout == torch.strided and t.dtype in WIDER
        else t
        for t in tensors
    ]


def _differentiable_dtypes(obs: Observation) -> list:
    leaves = [leaf for leaf in pytree.tree_leaves(obs.outputs) if isinstance(leaf, torch.Tensor)]
    return [t.dtype for t, wanted in zip(leaves, obs.requires_grad, strict=True) if wanted]


# ---------------------------------------------------------------- comparing


def refusal(error: BaseException | None) -> UnsupportedError | None:
    """The UnsupportedError behind `error` (Dynamo wraps what a backend raises)."""
    while error is not None:
        if isinstance(error, UnsupportedError):
            return error
        error = getattr(error, "inner_exception", None) or error.__cause__
    return None


def differences(
    expected: Observation,
    actual: Observation,
    values: bool = True,
    exact: Observation | None = None,
) -> list[str]:
    """What differs between eager's observation and the compiled one's, first things first
    (the outputs' values only when `values`); floating values beyond the tolerances are judged
    against `exact`, the program run in float64, when given (module docstring)."""
    if expected.error is not None or actual.error is not None:
        if type(expected.error) is not type(actual.error):
            return [f"eager raised {_short(expected.error)}, compiled {_short(actual.error)}"]
        return []
    exact = exact or Observation(None, (), None, None, None, None)
    found = _compare_trees(
        expected.outputs, actual.outputs, "output", values=values, exact=exact.outputs
    )
    if expected.requires_grad != actual.requires_grad:
        found.append(
            f"outputs' requires_grad: eager {expected.requires_grad}, "
            f"compiled {actual.requires_grad}"
        )
    found += _compare_trees(
        expected.inputs_after,
        actual.inputs_after,
        "input after the call",
        exact=exact.inputs_after,
    )
    if expected.versions != actual.versions:
        found.append(
            f"inputs' versions after the call: eager {expected.versions}, "
            f"compiled {actual.versions}"
        )
    if (expected.grad_error is None) != (actual.grad_error is None):
        found.append(
            f"backward: eager raised {_short(expected.grad_error)}, "
            f"compiled {_short(actual.grad_error)}"
        )
    elif expected.grads is not None or actual.grads is not None:
        found += _compare_trees(
            expected.grads, actual.grads, "gradient", strides=False, exact=exact.grads
        )
    return found


def _short(error: BaseException | None) -> str:
    if error is None:
        return "nothing"
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}({first[:120]})"


def _compare_trees(
    expected, actual, what: str, strides=True, values=True, exact=None
) -> list[str]:
    expected_leaves, expected_spec = pytree.tree_flatten(expected)
    actual_leaves, actual_spec = pytree.tree_flatten(actual)
    if expected_spec != actual_spec:
        return [f"{what}s: eager gives {expected_spec}, compiled {actual_spec}"]
    exact_leaves, exact_spec = pytree.tree_flatten(exact)
    if exact_spec != expected_spec:
        exact_leaves = [None] * len(expected_leaves)
    found = []
    for i, (e, a, x) in enumerate(zip(expected_leaves, actual_leaves, exact_leaves, strict=True)):
        difference = _compare_leaf(e, a, strides, values, x)
        if difference:
            found.append(f"{what} {i}: {difference}")
    return found


def _compare_leaf(e, a, strides: bool, values: bool, in_float64=None) -> str | None:
    if not isinstance(e, torch.Tensor) or not isinstance(a, torch.Tensor):
        if isinstance(e, torch.Tensor) or isinstance(a, torch.Tensor):
            return f"eager gives {type(e).__name__}, compiled {type(a).__name__}"
        return None if _same_constant(e, a) else f"eager gives {e!r}, compiled {a!r}"
    if (e.dtype, e.shape) != (a.dtype, a.shape):
        return f"eager gives {e.dtype}{list(e.shape)}, compiled {a.dtype}{list(a.shape)}"
    if e.layout != torch.strided or a.layout != torch.strided:
        return None if e.layout == a.layout else f"layout {e.layout} vs {a.layout}"
    if strides and e.numel() > 1 and e.stride() != a.stride():
        return f"strides: eager {e.stride()}, compiled {a.stride()}"
    if not values:
        return None
    integral = not (e.is_floating_point() or e.is_complex())
    try:
        torch.testing.assert_close(
            a, e, equal_nan=True, rtol=0 if integral else None, atol=0 if integral else None
        )
    except AssertionError as error:
        if _as_close_to_float64_as_eager(e, a, in_float64):
            return None
        lines = [line.strip() for line in str(error).splitlines() if "Greatest" in line]
        return "values differ" + (f" ({'; '.join(lines)})" if lines else "")
    return None


#: The largest error of eager's value from the float64 run, relative to the value's largest
#: magnitude, for which the float64 run judges: ~1000 units in the last place of float32.
#: Beyond it the float64 run computed something else (a random op that draws otherwise in
#: float64), and judging by it would pass anything.
FLOAT64_JUDGES_UP_TO = 1e-4


def _as_close_to_float64_as_eager(e, a, exact) -> bool:
    """Whether the compiled value `a` is within the default tolerances of the float64 value
    `exact`, widened by eager's largest error `|e - exact|` (module docstring)."""
    if not isinstance(exact, torch.Tensor) or exact.shape != e.shape or exact.dtype == e.dtype:
        return False
    if not (exact.is_floating_point() or exact.is_complex()) or e.numel() == 0:
        return False
    rtol, atol = torch.testing._comparison.default_tolerances(e)
    eager_error = (e.to(exact.dtype) - exact).abs().nan_to_num(0.0).amax().item()
    largest = exact.abs().nan_to_num(0.0, 0.0, 0.0).amax().item()
    if eager_error > FLOAT64_JUDGES_UP_TO * max(largest, 1.0):
        return False
    try:
        torch.testing.assert_close(
            a.to(exact.dtype), exact, rtol=rtol, atol=atol + eager_error, equal_nan=True
        )
    except AssertionError:
        return False
    return True


def _same_constant(e, a) -> bool:
    if isinstance(e, float) and isinstance(a, float) and e != e and a != a:
        return True  # both NaN
    return type(e) is type(a) and e == a


# ---------------------------------------------------------------- one op


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise OpTimeout in this (main) thread after `seconds`; no limit when None."""
    if not seconds:
        yield
        return

    def expire(signum, frame):
        raise OpTimeout(f"ran past its limit of {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_op(
    op, backend: str, dtype: str = "float32", count: int = 2, timeout: float | None = 120
) -> OpResult:
    """`op`'s first `count` samples, eager against `backend`: the op's status (module docstring).
    The first sample that is not a pass decides it."""
    compile_fn = compiler(backend)
    start = time.perf_counter()
    status, reason, done = "pass", "", 0
    try:
        with time_limit(timeout):
            for sample in samples(op, dtype, count):
                status, reason = check_sample(op, sample, compile_fn)
                done += 1
                if status != "pass":
                    break
    except OpTimeout as error:
        status, reason = "crash", f"timeout: {error}"
    except Exception as error:  # outside the calls: making samples, copying or comparing them
        status, reason = "crash", f"around the calls: {_short(error)}"
    finally:
        if backend != "reference" and backend != "fast":
            torch._dynamo.reset()
    seconds = time.perf_counter() - start
    return OpResult(
        op_name(op), backend, dtype, status, reason, done, seconds, op.supports_autograd
    )


def check_sample(op, sample, compile_fn: Callable[[Callable], Callable]) -> tuple[str, str]:
    """(status, reason) of one sample: the program compiled by `compile_fn`, called twice."""
    program, tensors = _program(op, sample)
    compiled = compile_fn(program)
    oracle = program
    if op.name in SPEC_EQUIVALENTS:
        oracle, _ = _program(op, sample, SPEC_EQUIVALENTS[op.name][1])
    for call, perturb in (("first call", False), ("second call", True)):
        expected = observe(oracle, _copies(tensors, perturb))
        if perturb and (expected.error is not None or expected.grad_error is not None):
            break  # eager fails on the new values: nothing to compare
        actual = observe(compiled, _copies(tensors, perturb))
        for error in (actual.error, actual.grad_error):
            refused = refusal(error)
            if refused is not None:
                return "refused", refusal_rules(refused)
        values = op.name not in UNSPECIFIED_VALUES
        found = differences(expected, actual, values)
        if any("values differ" in difference for difference in found):
            exact = observe(
                oracle,
                _widened(_copies(tensors, perturb)),
                rounded_to=_differentiable_dtypes(expected),
            )
            if exact.error is None and exact.grad_error is None:
                found = differences(expected, actual, values, exact)
        if found:
            errors = [e for e in (actual.error, actual.grad_error) if e is not None]
            if errors and not any(e is not None for e in (expected.error, expected.grad_error)):
                return "crash", f"{call}: {_short(errors[0])}"
            return "wrong", f"{call}: {found[0]}"
    return "pass", ""


def refusal_rules(error: UnsupportedError) -> str:
    """The rules a refusal names (several when one error stands for several refusals), and the
    first problem: `rule[,rule]: problem`."""
    rules = sorted({refused.rule for refused in error.refusals})
    return f"{','.join(rules)}: {error.refusals[0].problem}"


def run(
    ops: list,
    backends: list[str],
    dtype: str = "float32",
    count: int = 2,
    timeout: float | None = 120,
    progress: Callable[[OpResult], None] | None = None,
) -> list[OpResult]:
    """Every op of `ops` on every backend of `backends`, one process, one op at a time."""
    results = []
    for backend in backends:
        for op in ops:
            result = check_op(op, backend, dtype, count, timeout)
            results.append(result)
            if progress is not None:
                progress(result)
    return results


# ---------------------------------------------------------------- expectations


@frozen
class Expectation:
    op: str
    backends: tuple[str, ...]  # ("*",): every backend
    status: str
    #: refused: the rule the refusal names; wrong or crash: the note (issue, what is wrong).
    detail: str
    line: int

    def covers(self, backend: str) -> bool:
        return self.backends == ("*",) or backend in self.backends


def read_expectations(path: str | Path) -> list[Expectation]:
    """The lines of an expectations file (module docstring); `#` starts a comment."""
    expectations = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        words = text.split(maxsplit=3)
        if len(words) < 4 or words[2] not in ("refused", "wrong", "crash"):
            raise ValueError(
                f"{path}:{number}: expected `OP BACKENDS refused RULE [PROBLEM]` or "
                f"`OP BACKENDS wrong|crash NOTE`, got {line.strip()!r}"
            )
        op, backends, status, rest = words
        detail = rest.split()[0] if status == "refused" else rest
        expectations.append(Expectation(op, tuple(backends.split(",")), status, detail, number))
    return expectations


def expected_for(expectations: list[Expectation], op: str, backend: str) -> Expectation | None:
    return next((e for e in expectations if e.op == op and e.covers(backend)), None)


def judge(result: OpResult, expectations: list[Expectation]) -> str | None:
    """Why `result` disagrees with the expectations, or None. Checked both ways: a listed op
    must have the listed status (and a refusal the listed rules), an unlisted op must pass."""
    listed = expected_for(expectations, result.op, result.backend)
    if listed is None:
        if result.status == "pass":
            return None
        return f"{result.op} on {result.backend}: {result.status} ({result.reason}), not listed"
    if result.status != listed.status:
        return (
            f"{result.op} on {result.backend}: {result.status} ({result.reason or 'no reason'}), "
            f"listed {listed.status} on line {listed.line}: update the list"
        )
    if listed.status == "refused" and result.reason.split(":")[0] != listed.detail:
        return (
            f"{result.op} on {result.backend}: refused by {result.reason}, listed as refused by "
            f"{listed.detail} on line {listed.line}"
        )
    return None


# ---------------------------------------------------------------- tables


def counts(results: list[OpResult], backend: str) -> dict[str, int]:
    tally = Counter(result.status for result in results if result.backend == backend)
    return {status: tally[status] for status in STATUSES}


def refusal_counts(results: list[OpResult], backend: str) -> Counter:
    return Counter(
        result.reason.split(":")[0]
        for result in results
        if result.backend == backend and result.status == "refused"
    )


def tables(results: list[OpResult], backends: list[str]) -> list:
    """rich tables: counts per backend, refusals per rule and backend, and each op that was
    wrong or crashed."""
    from rich.table import Table

    totals = Table(title="op database: ops per status")
    totals.add_column("backend")
    for status in (*STATUSES, "ops", "seconds"):
        totals.add_column(status, justify="right")
    for backend in backends:
        c = counts(results, backend)
        seconds = sum(result.seconds for result in results if result.backend == backend)
        totals.add_row(
            backend, *(str(c[s]) for s in STATUSES), str(sum(c.values())), f"{seconds:.0f}"
        )
    by_rule = Table(title="refusals per rule")
    by_rule.add_column("rule")
    for backend in backends:
        by_rule.add_column(backend, justify="right")
    per_backend = {backend: refusal_counts(results, backend) for backend in backends}
    for rule in sorted(set().union(*per_backend.values())):
        by_rule.add_row(rule, *(str(per_backend[backend][rule]) for backend in backends))
    bad = Table(title="wrong and crashed")
    for column in ("op", "backend", "status", "reason"):
        bad.add_column(column, overflow="fold")
    for result in results:
        if result.status in ("wrong", "crash"):
            bad.add_row(result.op, result.backend, result.status, result.reason)
    return [totals, by_rule, bad]
