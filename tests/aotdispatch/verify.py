"""Shared machinery for the ports of PyTorch's AOTAutograd tests (issue 17).

PyTorch checks AOTAutograd with `verify_aot_autograd`: it builds the inputs twice, runs the
function eagerly on one copy and compiled on the other, and compares what a user can see. The
ports here do the same against aotspec, with eager PyTorch at test time as the only oracle:

- `verify(fn, make_inputs, backend, ...)`: the standard check. Outputs (values, dtype, shape,
  requires_grad, leafness, which inputs and which other outputs share their storage), the inputs
  after the call (values, shape, strides, storage offset, requires_grad), errors (the same
  exception type from both), then backward on the sum of every output that requires grad and the
  `.grad` of every autograd leaf behind the inputs (and of modules' parameters), and the inputs
  again after the backward (a backward may write into them).
- `same_as_eager(fn, scenario, backend, ...)`: for tests that do more than call once and
  backward: `scenario(call, rec)` drives the function and records what it sees with `rec`; both
  records must agree.

Each test runs for three backends: `aotspec.compile(fn, backend="reference")`, `"fast"`, and
Dynamo with `torch.compile(fn, backend="aotspec")` (`"dynamo"`). `per_backend` parametrizes a test
by backend and marks the pairs listed in `KNOWN_FAILURES` as strict xfails: when a bug is fixed,
its test XPASSes and fails the run until its line here is deleted. To see every failure as it
is, run with AOTDISPATCH_IGNORE_KNOWN=1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

import aotspec

BACKENDS = ("reference", "fast", "dynamo")
IGNORE_KNOWN = os.environ.get("AOTDISPATCH_IGNORE_KNOWN") == "1"

# (test name, backend) -> why it fails today. One entry per failing pair; delete it when
# the pair passes (strict xfail turns a fixed test into a failure until then).
# fmt: off
KNOWN_FAILURES: dict[tuple[str, str], str] = {
    # test_aotdispatch_autograd.py

    # test_aotdispatch_hooks.py

    # test_aotdispatch_misc.py

    # test_aotdispatch_mutations.py
}
# fmt: on


def per_backend(test: Callable) -> Callable:
    """Parametrize `test` by backend, marking the known failures of each pair (not with
    AOTDISPATCH_IGNORE_KNOWN=1 in the environment: then every failure shows as one)."""
    params = []
    for backend in BACKENDS:
        reason = None if IGNORE_KNOWN else KNOWN_FAILURES.get((test.__name__, backend))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(backend, id=backend, marks=marks))
    return pytest.mark.parametrize("backend", params)(test)


# ----------------------------------------------------------------------------------------------
# Compiling


def compile_fn(fn: Callable, backend: str, **options) -> Callable:
    """`fn` compiled by `backend`: aotspec's own entry point, or Dynamo with aotspec behind it."""
    if backend == "dynamo":
        torch._dynamo.reset()
        return torch.compile(fn, backend="aotspec", fullgraph=False, options=options or None)
    return aotspec.compile(fn, backend=backend, **options)


def compile_module(module: torch.nn.Module, backend: str, **options) -> Callable:
    """A module compiled the way AOTAutograd's `aot_module` does it: its parameters and buffers
    become inputs of the compiled program (`torch.func.functional_call`), so gradients reach
    `.grad` and buffer updates reach the module. Dynamo lifts them itself."""
    if backend == "dynamo":
        return compile_fn(module, backend, **options)
    params = dict(module.named_parameters(remove_duplicate=False))
    buffers = dict(module.named_buffers(remove_duplicate=False))

    def lifted(params, buffers, *args):
        return torch.func.functional_call(module, (params, buffers), args)

    compiled = compile_fn(lifted, backend, **options)

    def call(*args):
        return compiled(params, buffers, *args)

    call.module = module
    return call


# ----------------------------------------------------------------------------------------------
# Inputs


def ones(*shape, rg: bool = False, dtype=torch.float32) -> torch.Tensor:
    return torch.ones(*shape, dtype=dtype, requires_grad=rg)


def randn(*shape, rg: bool = False, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype, requires_grad=rg)


def interm(t: torch.Tensor) -> torch.Tensor:
    """A non-leaf made from `t` (when `t` requires grad), so the program may write into it."""
    return t.add(1)


@dataclasses.dataclass
class Case:
    """The arguments of a call, and tensors that are not arguments but whose state the call may
    change (the base of argument views): they are compared after the call like the arguments."""

    args: list
    watch: list = dataclasses.field(default_factory=list)


def _as_case(made) -> Case:
    return made if isinstance(made, Case) else Case(list(made))


def _tensors(tree) -> list[torch.Tensor]:
    return [leaf for leaf in pytree.tree_leaves(tree) if isinstance(leaf, torch.Tensor)]


def _grad_roots(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The autograd leaves that require grad behind `tensors`, in a deterministic order."""
    roots: list[torch.Tensor] = []
    seen_roots: set[int] = set()
    seen_nodes: set = set()

    def add(t):
        if id(t) not in seen_roots:
            seen_roots.add(id(t))
            roots.append(t)

    def walk(node):
        stack = [node]
        while stack:
            node = stack.pop()
            if node is None or node in seen_nodes:
                continue
            seen_nodes.add(node)
            if hasattr(node, "variable"):
                add(node.variable)
            stack.extend(reversed([nxt for nxt, _ in node.next_functions]))

    for t in tensors:
        if t.requires_grad and t.grad_fn is None:
            add(t)
        elif t.grad_fn is not None:
            walk(t.grad_fn)
    return roots


# ----------------------------------------------------------------------------------------------
# Facts: what a user can observe, captured so that two runs can be compared afterwards


@dataclasses.dataclass
class TensorFact:
    value: torch.Tensor | None  # None when the storage holds fewer bytes than the view needs
    dtype: torch.dtype
    shape: tuple
    stride: tuple | None
    offset: int | None
    requires_grad: bool
    is_leaf: bool | str
    storage_bytes: int | None


def _readable(t: torch.Tensor) -> bool:
    if t.layout != torch.strided:
        return True
    if t.numel() == 0:
        return True
    steps = zip(t.shape, t.stride(), strict=True)
    extent = t.storage_offset() + sum((n - 1) * s for n, s in steps) + 1
    return t.untyped_storage().nbytes() >= extent * t.element_size()


def _is_leaf(t: torch.Tensor):
    # Reading grad_fn raises for a view whose multi-output base was written: an observable too.
    try:
        return t.is_leaf
    except RuntimeError as e:
        return f"raises {type(e).__name__}"


def tensor_fact(t: torch.Tensor) -> TensorFact:
    strided = t.layout == torch.strided
    value = t.detach().clone() if _readable(t) else None
    return TensorFact(
        value=value,
        dtype=t.dtype,
        shape=tuple(t.shape),
        stride=tuple(t.stride()) if strided else None,
        offset=t.storage_offset() if strided else None,
        requires_grad=t.requires_grad,
        is_leaf=_is_leaf(t),
        storage_bytes=t.untyped_storage().nbytes() if strided else None,
    )


@dataclasses.dataclass
class Raised:
    """An exception, recorded by type (the message may differ)."""

    type: type
    message: str


def facts_of(value):
    return pytree.tree_map_only(torch.Tensor, tensor_fact, value)


def _storage_id(t: torch.Tensor):
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return None


def alias_facts(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> list[tuple]:
    """For each output: the inputs, then the other outputs, that share its storage."""
    input_ids = [_storage_id(t) for t in inputs]
    output_ids = [_storage_id(t) for t in outputs]
    facts = []
    for i, sid in enumerate(output_ids):
        if sid is None:
            facts.append(((), ()))
            continue
        facts.append(
            (
                tuple(j for j, other in enumerate(input_ids) if other == sid),
                tuple(k for k, other in enumerate(output_ids) if k != i and other == sid),
            )
        )
    return facts


@dataclasses.dataclass
class Tolerance:
    rtol: float | None = None
    atol: float | None = None
    values: bool = True  # False for random programs: everything but the values is compared


def _compare(got, want, where: str, tol: Tolerance) -> None:
    if isinstance(want, Raised) or isinstance(got, Raised):
        assert isinstance(got, Raised) and isinstance(want, Raised), (
            f"{where}: eager gave {_show(want)}, compiled gave {_show(got)}"
        )
        assert got.type is want.type, (
            f"{where}: eager raised {want.type.__name__}: {want.message}; compiled raised "
            f"{got.type.__name__}: {got.message}"
        )
        return
    got_leaves, got_spec = pytree.tree_flatten(got)
    want_leaves, want_spec = pytree.tree_flatten(want)
    assert got_spec == want_spec, f"{where}: structure {got_spec} != eager {want_spec}"
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves, strict=True)):
        here = f"{where}[{i}]"
        if isinstance(w, TensorFact):
            assert isinstance(g, TensorFact), f"{here}: eager gave a tensor, compiled {g!r}"
            _compare_tensor(g, w, here, tol)
        else:
            assert g == w, f"{here}: {g!r} != eager {w!r}"


def _compare_tensor(g: TensorFact, w: TensorFact, where: str, tol: Tolerance) -> None:
    assert g.dtype == w.dtype, f"{where}: dtype {g.dtype} != eager {w.dtype}"
    assert g.shape == w.shape, f"{where}: shape {g.shape} != eager {w.shape}"
    assert g.requires_grad == w.requires_grad, (
        f"{where}: requires_grad {g.requires_grad} != eager {w.requires_grad}"
    )
    assert g.is_leaf == w.is_leaf, f"{where}: is_leaf {g.is_leaf} != eager {w.is_leaf}"
    assert (g.value is None) == (w.value is None), (
        f"{where}: storage holds {g.storage_bytes} bytes, eager {w.storage_bytes}"
    )
    if tol.values and w.value is not None:
        torch.testing.assert_close(
            g.value,
            w.value,
            rtol=tol.rtol,
            atol=tol.atol,
            equal_nan=True,
            check_stride=False,
            msg=lambda m: f"{where}: {m}",
        )


def _compare_layout(g: TensorFact, w: TensorFact, where: str) -> None:
    assert (g.stride, g.offset) == (w.stride, w.offset), (
        f"{where}: stride/offset {g.stride}/{g.offset} != eager {w.stride}/{w.offset}"
    )
    assert g.storage_bytes == w.storage_bytes, (
        f"{where}: storage bytes {g.storage_bytes} != eager {w.storage_bytes}"
    )


def _show(fact) -> str:
    if isinstance(fact, Raised):
        return f"{fact.type.__name__}: {fact.message}"
    return "a result"


class Recorder:
    """What one run saw: a list of labelled facts."""

    def __init__(self):
        self.entries: list[tuple[str, Any]] = []

    def __call__(self, label: str, value) -> None:
        self.entries.append((label, facts_of(value)))

    def layout(self, label: str, tensors) -> None:
        """Record tensors whose strides, offsets and storage sizes must match too."""
        self.entries.append((label, ("layout", [tensor_fact(t) for t in _tensors(tensors)])))

    def attempt(self, label: str, thunk: Callable):
        """Run `thunk`; record its result, or the exception it raised (and return None)."""
        try:
            result = thunk()
        except Exception as e:  # noqa: BLE001 (any exception is an observable to compare)
            self.entries.append((label, Raised(type(e), str(e)[:500])))
            return None
        self(label, result)
        return result


def compare_records(got: Recorder, want: Recorder, tol: Tolerance) -> None:
    got_labels = [label for label, _ in got.entries]
    want_labels = [label for label, _ in want.entries]
    # The records may differ in length: compared up to the first label that differs, then the
    # labels as a whole.
    for (label, g), (want_label, w) in zip(got.entries, want.entries, strict=False):
        if label != want_label:
            break
        if isinstance(w, tuple) and len(w) == 2 and w[0] == "layout":
            assert isinstance(g, tuple) and g[0] == "layout", f"{label}: not a layout"
            assert len(g[1]) == len(w[1]), f"{label}: {len(g[1])} tensors != eager {len(w[1])}"
            for i, (gt, wt) in enumerate(zip(g[1], w[1], strict=True)):
                _compare_tensor(gt, wt, f"{label}[{i}]", tol)
                _compare_layout(gt, wt, f"{label}[{i}]")
        else:
            _compare(g, w, label, tol)
    if got_labels != want_labels:
        raised = [f"{label}: {_show(v)}" for label, v in want.entries if isinstance(v, Raised)]
        raise AssertionError(
            f"steps {got_labels} != eager {want_labels}" + (f" (eager {raised})" if raised else "")
        )


# ----------------------------------------------------------------------------------------------
# Running both sides


SEED = 1234


@contextlib.contextmanager
def _seeded(seed: int):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def same_as_eager(
    fn: Callable,
    scenario: Callable[[Callable, Recorder], None],
    backend: str,
    *,
    module: Callable[[], torch.nn.Module] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    values: bool = True,
    **options,
) -> None:
    """Run `scenario(call, rec)` with `call` the eager function, then with `call` compiled by
    `backend`, each from the same seed, and compare what `rec` recorded. With `module` (a
    factory), `fn` is ignored and the module built from the same seed is called."""
    records = []
    for side in ("eager", "compiled"):
        with _seeded(SEED):
            if module is not None:
                m = module()
                call = m if side == "eager" else compile_module(m, backend, **options)
            else:
                call = fn if side == "eager" else compile_fn(fn, backend, **options)
            rec = Recorder()
            try:
                scenario(call, rec)
            except Exception as e:  # noqa: BLE001
                if side == "compiled" and not any(
                    isinstance(v, Raised) and v.type is type(e) for _, v in records[0].entries[-1:]
                ):
                    raise
                rec.entries.append(("uncaught", Raised(type(e), str(e)[:500])))
            records.append(rec)
    if backend == "dynamo":
        torch._dynamo.reset()
    compare_records(records[1], records[0], Tolerance(rtol, atol, values))


def verify(
    fn: Callable | None,
    make_inputs: Callable[[], Any],
    backend: str,
    *,
    module: Callable[[], torch.nn.Module] | None = None,
    mutate_outputs: bool = False,
    backward: bool = True,
    loss: Callable | None = None,
    observe: Callable | None = None,
    retain_grad: bool = False,
    context: Callable[[], Any] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    values: bool = True,
    **options,
) -> None:
    """The standard check (see the module docstring). `make_inputs()` returns the arguments, or a
    `Case`. `mutate_outputs`: afterwards add to each output in place and compare again (PyTorch's
    `test_mutation`). `loss(view)` replaces the default loss (`view.args`, `.watch`, `.outs`);
    `observe(view)` returns more facts to compare after the forward. `retain_grad`: compare the
    `.grad` of non-leaf inputs too. `context` wraps the call and the backward (`torch.no_grad`,
    saved-tensor hooks). Other keyword arguments go to `aotspec.compile` (Dynamo's `options`)."""

    def scenario(call, rec: Recorder):
        case = _as_case(make_inputs())
        owner = _module_of(call)
        params = list(owner.parameters()) if owner is not None else []
        state = params + (list(owner.buffers()) if owner is not None else [])
        inputs = _tensors(case.args) + _tensors(case.watch)
        roots = _grad_roots(inputs) + [p for p in params if p.requires_grad]
        retained = [t for t in inputs if retain_grad and t.requires_grad and not t.is_leaf]
        for t in retained:
            t.retain_grad()
        with context() if context is not None else contextlib.nullcontext():
            torch.manual_seed(SEED + 1)
            outs = call(*case.args)
            rec("outputs", outs)
            out_tensors = _tensors(outs)
            rec("aliasing (inputs, other outputs)", repr(alias_facts(out_tensors, inputs)))
            rec.layout("inputs after the call", inputs + state)
            view = _View(case.args, case.watch, outs)
            if observe is not None:
                rec("observed", observe(view))
            if backward:
                total = loss(view) if loss is not None else _default_loss(out_tensors)
                if total is not None:
                    rec.attempt("backward", lambda: total.backward())
                    rec("grads", [r.grad for r in roots])
                    rec("retained grads", [t.grad for t in retained])
                    rec.layout("inputs after the backward", inputs + state)
            if mutate_outputs:
                for i, o in enumerate(out_tensors):
                    if rec.attempt(f"output {i} += 2", lambda o=o: o.add_(2) is o) is None:
                        continue
                    rec("outputs after the write", outs)
                    rec.layout("inputs after the write", inputs)
                    o.sub_(2)

    same_as_eager(
        fn, scenario, backend, module=module, rtol=rtol, atol=atol, values=values, **options
    )


@dataclasses.dataclass
class _View:
    args: list
    watch: list
    outs: Any


def _default_loss(outputs: list[torch.Tensor]):
    wanted = [o for o in outputs if o.requires_grad]
    if not wanted:
        return None
    return functools.reduce(torch.add, [o.sum() for o in wanted])


def _module_of(call) -> torch.nn.Module | None:
    if isinstance(call, torch.nn.Module):
        return call
    return getattr(call, "module", None)
