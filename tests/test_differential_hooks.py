"""Differential tests of saved-tensor hooks (`specs/saved-tensor-hooks.md`) against eager PyTorch.

Programs with backward come from `grad_programs()` (`strategies/grad.py`). Each runs on eager
and through `aotspec.compile(backend="reference")`, both called inside `saved_tensors_hooks`:
- lossless hooks (pack widens to float64 and remembers the dtype, unpack narrows back), under each
  `hooks_filter`: the compiled gradients equal eager's without hooks, and every other observable
  agrees, so inlining the hooks changes nothing but memory;
- a lossy pair (pack rounds to bfloat16) with `hooks_filter="all"`: compiled gradients equal eager
  gradients under the same hooks, which holds only when the compiled forward saves exactly the
  tensors eager autograd saves (`r[hooks.eager.saved-set]`) and unpacks each of them;
- the same pack with an unpack that leaves the bfloat16 as it is, so that the backward reads
  another dtype than it was traced with (`r[hooks.compiled.unpack-dtype]`), with
  `hooks_filter="all"`: the compiled program agrees with eager under the same hooks, or is
  refused by `r[hooks.compiled.unpack-dtype.refused]`. Programs whose eager backward raises are
  not compared: the reference computes an `mm` of float32 and bfloat16, which eager's kernel
  rejects (that rule's Note).
Both sides compute in float32 from the same rounded values, so assert_close's float32 tolerances
apply. A failure prints the program and hypothesis's `@reproduce_failure` blob, and writes a
standalone `repros/repro_hooks_<hash>.py`.

Run: `.venv/bin/python -m pytest tests/test_differential_hooks.py`
(HYPOTHESIS_PROFILE=ci|dev|nightly).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import aotspec
from aotspec.fuzz import coverage

from harness import (
    call_and_backward,
    compare,
    eager_as_specified,
    pack_bf16,
    pack_bf16_kept,
    pack_lossless,
    unpack_bf16,
    unpack_bf16_kept,
    unpack_lossless,
)
from repro import is_final_run, write_hooks_repro
from strategies.grad import grad_programs
from strategies.program import as_function, build_inputs, source

EXAMPLES = max(settings.default.max_examples // 5, 10)
LOSSLESS = (pack_lossless, unpack_lossless)
LOSSY = (pack_bf16, unpack_bf16)
KEPT = (pack_bf16_kept, unpack_bf16_kept)


def _outcome(program, hooks, hooks_filter: str | None):
    """Eager when `hooks_filter` is None, else compiled with that filter; hooks around the call."""
    named, args = build_inputs(program.setup, torch.float32)
    fn = as_function(program)
    if hooks_filter is None:
        fn = eager_as_specified(fn)
    else:
        fn = aotspec.compile(fn, backend="reference", hooks_filter=hooks_filter)
    if hooks is None:
        return call_and_backward(fn, named, args, **program.call_options)
    with torch.autograd.graph.saved_tensors_hooks(*hooks):
        return call_and_backward(fn, named, args, **program.call_options)


def _check(program, *, eager_hooks, hooks, hooks_filter: str, refusal: str | None = None) -> None:
    """Compiled against eager; a compiled `UnsupportedError` of rule `refusal` agrees, and so
    does anything, given `refusal`, where eager raises."""
    try:
        expected = _outcome(program, eager_hooks, None)
    except Exception:
        if refusal is None:
            raise
        return
    try:
        actual = _outcome(program, hooks, hooks_filter)
    except aotspec.UnsupportedError as error:
        if error.rule == refusal:
            return
        found = [f"the compiled program raised UnsupportedError: {error}"]
    except Exception as error:  # noqa: BLE001 (any error of the compiled side is a divergence)
        found = [f"the compiled program raised {type(error).__name__}: {error}"]
    else:
        found = compare(expected, actual)
    if not found:
        return
    where = ""
    if is_final_run():
        pack = hooks[0].__name__
        path = write_hooks_repro(program, found, pack, hooks_filter, eager_hooks is not None)
        where = f"\nstandalone repro: .venv/bin/python {path}"
    raise AssertionError(
        f"aotspec.compile (reference, hooks {hooks[0].__name__}/{hooks[1].__name__}, "
        f"hooks_filter={hooks_filter!r}) disagrees with eager "
        f"{'under the same hooks' if eager_hooks else 'without hooks'}:\n"
        + "\n".join(f"  {line}" for line in found)
        + f"\nprogram:\n{source(program)}{where}"
    )


# donated may select nothing: r[hooks.filter.donated-empty]
@pytest.mark.filterwarnings("ignore::aotspec.HooksWarning")
@settings(max_examples=EXAMPLES)
@given(grad_programs(), st.sampled_from(["donated", "no_static", "all"]))
def test_lossless_hooks_change_no_gradient(program, hooks_filter):
    coverage.note("hooks_lossless", coverage.program_items(program))
    _check(program, eager_hooks=None, hooks=LOSSLESS, hooks_filter=hooks_filter)


@settings(max_examples=EXAMPLES)
@given(grad_programs())
def test_lossy_hooks_on_everything_match_eager_under_the_same_hooks(program):
    coverage.note("hooks_lossy", coverage.program_items(program))
    _check(program, eager_hooks=LOSSY, hooks=LOSSY, hooks_filter="all")


@settings(max_examples=EXAMPLES)
@given(grad_programs())
def test_an_unpack_that_changes_the_dtype_matches_eager_or_is_refused(program):
    coverage.note("hooks_unpack_dtype", coverage.program_items(program))
    _check(
        program,
        eager_hooks=KEPT,
        hooks=KEPT,
        hooks_filter="all",
        refusal="hooks.compiled.unpack-dtype.refused",
    )
