"""Memory timelines of one training step: live bytes after every step of the forward and of the
backward, for each way of running the same program.

Variants (`VARIANTS`):
- eager PyTorch, on real tensors, through `MemoryTracker`;
- the unboxed plan: the reference with each graph's argument list alive until it returns;
- the boxed plan, on the reference (its ledgers) and on the fast backend (the tracker);
- the boxed plan with the active saved-tensor hooks packed at last use, as the spec places them,
  and at the end of the forward, as PyTorch 2.13 does (reference; when the program has hooks).

The account is the ledgers' (`reference/ledger.py`), the one the memory benchmarks print:
- the forward counts the caller's inputs and every storage the forward makes (at its end, the
  outputs and the saved values);
- the backward counts what the backward holds: the saved values (the inputs among them), the
  incoming gradients and everything it makes, the gradients it returns included; the caller's
  other tensors are not counted.
The tracker keeps the same account on real tensors: the forward's tracker is given the inputs,
the backward's the storages autograd saved (read off the autograd graph) before it runs.
A step is one node of the plan (one aten op for eager PyTorch and the fast backend); each point
has the live bytes after the step and the most bytes live during it (an op's result is made
before its dead arguments go), whose maximum is the peak.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.utils._pytree as pytree
from attrs import frozen

from aotspec.api import compile
from aotspec.program_file import training_roots
from aotspec.reference.compiled import run_compiled
from aotspec.reference.runtime import _Call
from aotspec.tracker import MemoryTracker

EAGER = "eager PyTorch"
UNBOXED = "unboxed plan (reference)"
BOXED = "boxed plan (reference)"
BOXED_FAST = "boxed plan (fast)"
HOOKS_LAST_USE = "boxed, hooks packed at last use (reference)"
HOOKS_FORWARD_END = "boxed, hooks packed at forward end (reference)"
VARIANTS = (EAGER, UNBOXED, BOXED, BOXED_FAST, HOOKS_LAST_USE, HOOKS_FORWARD_END)


@frozen
class Point:
    step: int
    node: str
    #: Live bytes after the step, and the most live at any moment of it.
    live_bytes: int
    high_bytes: int


@frozen
class Pass:
    """The forward or the backward of one variant."""

    points: tuple[Point, ...]
    peak_bytes: int
    #: Live bytes when the pass ends (after the forward: what it leaves for the backward).
    end_bytes: int


@frozen
class Timeline:
    variant: str
    forward: Pass
    backward: Pass | None

    @property
    def peak_bytes(self) -> int:
        """The step's peak: the larger of the two passes' peaks."""
        return max(self.forward.peak_bytes, self.backward.peak_bytes if self.backward else 0)


def pass_of(account, intake: frozenset[str] = frozenset()) -> Pass:
    """A `Pass` from a ledger or a tracker (both keep `events`, `probes` and `peak_bytes`).

    `intake` names the steps that only take the graph's arguments in (a ledger's placeholders:
    the storages they count were alive before the graph began); they join the start point."""
    changes: dict[int, list[int]] = {}
    for event in account.events:
        changes.setdefault(event.step, []).append(event.live_bytes)
    start = changes.get(0, [0])[-1]
    high = max(changes.get(0, [0]))
    probes = [probe for probe in account.probes if probe.step > 0]
    while probes and probes[0].node in intake:
        high = max([high, *changes.get(probes[0].step, [])])
        start = probes.pop(0).live_bytes
    points = [Point(0, "<start>", start, max(high, start))]
    before = start
    for probe in probes:
        step_high = max([before, *changes.get(probe.step, [])])
        points.append(Point(probe.step, probe.node, probe.live_bytes, step_high))
        before = probe.live_bytes
    return Pass(tuple(points), account.peak_bytes, account.live_bytes)


# ---------------------------------------------------------------- measuring each variant


@frozen
class TrainingStep:
    """One training step of a program: a fresh set of arguments each time it is asked."""

    fn: Callable
    build_args: Callable[[], tuple]
    hooks: tuple[Callable, Callable] | None = None
    before_backward: Callable | None = None

    def backward(self, args: tuple, outputs) -> list[torch.Tensor]:
        """The roots the backward starts from (after the caller's `before_backward`)."""
        roots = training_roots(outputs)
        if roots and self.before_backward is not None:
            self.before_backward(*args)
        return roots


def timelines(step: TrainingStep, variants=VARIANTS) -> list[Timeline]:
    """One timeline per variant (the hooked ones only when `step` has hooks)."""
    measure = {
        EAGER: _eager,
        UNBOXED: lambda s: _reference(s, boxed=False),
        BOXED: lambda s: _reference(s, boxed=True),
        BOXED_FAST: _fast,
        HOOKS_LAST_USE: lambda s: _reference(s, boxed=True, placement="last-use"),
        HOOKS_FORWARD_END: lambda s: _reference(s, boxed=True, placement="forward-end"),
    }
    hooked = (HOOKS_LAST_USE, HOOKS_FORWARD_END)
    return [
        Timeline(variant, *measure[variant](step))
        for variant in variants
        if step.hooks is not None or variant not in hooked
    ]


def _eager(step: TrainingStep) -> tuple[Pass, Pass | None]:
    args = step.build_args()
    tracker = MemoryTracker()
    tracker.track(args)
    with tracker:
        outputs = step.fn(*args)
    forward = pass_of(tracker)
    return forward, _tracked_backward(step, args, outputs)


def _fast(step: TrainingStep) -> tuple[Pass, Pass | None]:
    compiled = compile(step.fn, backend="fast")
    _spend(step, compiled)  # compiles outside the tracker
    args = step.build_args()
    tracker = MemoryTracker()
    tracker.track(args)
    with tracker:
        outputs = compiled(*args)
    forward = pass_of(tracker)
    return forward, _tracked_backward(step, args, outputs)


def _tracked_backward(step: TrainingStep, args: tuple, outputs) -> Pass | None:
    roots = step.backward(args, outputs)
    if not roots:
        return None
    tracker = MemoryTracker()
    tracker.track(saved_tensors(roots))
    with tracker:
        torch.autograd.backward(roots)
    return pass_of(tracker)


def _reference(
    step: TrainingStep, boxed: bool, placement: str | None = None
) -> tuple[Pass, Pass | None]:
    compiled = compile(step.fn, backend="reference", hook_placement=placement or "last-use")
    hooks = step.hooks if placement is not None else None
    _spend(step, compiled, hooks)
    args = step.build_args()
    if boxed:
        with _hooks(hooks):
            outputs = compiled(*args)
        run = compiled.last_run
    else:
        (unboxed_plan,) = compiled.plans.values()
        tensors = [leaf for leaf in pytree.tree_leaves(args) if isinstance(leaf, torch.Tensor)]
        run = run_compiled(unboxed_plan, tensors, boxed=False)
        outputs = run.outputs
    roots = step.backward(args, outputs)
    if roots:
        torch.autograd.backward(roots)
    (plan,) = compiled.plans.values()
    forward = pass_of(run.ledger, _placeholder_names(plan.forward))
    if run.backward_ledger is None:
        return forward, None
    return forward, pass_of(run.backward_ledger, _placeholder_names(plan.backward))


def _placeholder_names(program) -> frozenset[str]:
    return frozenset(node.name for node in program.graph.nodes if node.op == "placeholder")


def _spend(step: TrainingStep, compiled, hooks=None) -> None:
    """One whole step on arguments of its own, so that what is measured next finds its plan."""
    args = step.build_args()
    with _hooks(hooks):
        outputs = compiled(*args)
    roots = step.backward(args, outputs)
    if roots:
        torch.autograd.backward(roots)


def _hooks(hooks):
    if hooks is None:
        return contextlib.nullcontext()
    return torch.autograd.graph.saved_tensors_hooks(*hooks)


def saved_tensors(roots: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors autograd saved for the backward of `roots`: every node's `_saved_*` tensors
    (eager), and the saved values of aotspec's compiled node (the runtime's `_Call`)."""
    found = []
    seen = set()
    stack = [root.grad_fn for root in roots if root.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        call = getattr(node, "call", None)
        if isinstance(call, _Call):
            found += [t for t in call.saved if isinstance(t, torch.Tensor)]
            found += list(call.saved_inputs.tensors.values())
        for attribute in dir(node):
            if attribute.startswith("_saved_"):
                value = getattr(node, attribute)
                leaves = value if isinstance(value, (list, tuple)) else [value]
                found += [t for t in leaves if isinstance(t, torch.Tensor)]
        stack += [next_node for next_node, _ in node.next_functions if next_node is not None]
    return found


# ---------------------------------------------------------------- showing them


def table(rows: list[Timeline], title: str):
    """A rich table: each variant's peaks and what its forward leaves for the backward."""
    from rich.table import Table

    grid = Table(title=title)
    grid.add_column("variant")
    for column in ("forward peak", "left for backward", "backward peak", "peak of the step"):
        grid.add_column(f"{column} (bytes)", justify="right")
    for row in rows:
        backward = row.backward.peak_bytes if row.backward else None
        grid.add_row(
            row.variant,
            f"{row.forward.peak_bytes:,}",
            f"{row.forward.end_bytes:,}",
            "-" if backward is None else f"{backward:,}",
            f"{row.peak_bytes:,}",
        )
    return grid


_STYLES = {
    EAGER: dict(color="black", linestyle="-", linewidth=2.2),
    UNBOXED: dict(color="tab:red", linestyle="--"),
    BOXED: dict(color="tab:blue", linestyle="-"),
    BOXED_FAST: dict(color="tab:cyan", linestyle=":", linewidth=2.2),
    HOOKS_LAST_USE: dict(color="tab:green", linestyle="-"),
    HOOKS_FORWARD_END: dict(color="tab:orange", linestyle="-."),
}


def plot(rows: list[Timeline], path: str, title: str) -> None:
    """Two panels, forward and backward: per variant, the most bytes live during each step, its
    peak marked; the legend gives both peaks. PNG or SVG, from `path`'s suffix."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    unit, scale = byte_unit(max(row.peak_bytes for row in rows))
    passes = ["forward"] + (["backward"] if any(row.backward for row in rows) else [])
    figure, axes = plt.subplots(
        1, len(passes), figsize=(7 * len(passes), 6.5), sharey=True, squeeze=False
    )
    subtitles = {
        "forward": "forward: the caller's inputs + what the forward makes",
        "backward": "backward: saved values + gradients + what the backward makes",
    }
    for which, ax in zip(passes, axes[0], strict=True):
        for row in rows:
            part = getattr(row, which)
            if part is None:
                continue
            high = [point.high_bytes / scale for point in part.points]
            steps = range(len(high))
            style = _STYLES[row.variant]
            ax.plot(steps, high, drawstyle="steps-post", label=_legend(row, scale, unit), **style)
            top = max(steps, key=high.__getitem__)
            ax.plot(top, high[top], "o", color=style["color"], markersize=8)
        ax.set_title(subtitles[which], fontsize=11)
        ax.set_xlabel(f"{which} step (one node of the plan; one aten op for eager and fast)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"live memory ({unit}): the most alive during each step")
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=2, fontsize=10, frameon=False)
    figure.suptitle(f"{title}  (dot: each variant's peak)", fontsize=13)
    figure.tight_layout(rect=(0, 0.14, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)


def byte_unit(peak: int) -> tuple[str, int]:
    """The unit to plot bytes up to `peak` in, and its size in bytes."""
    return ("MiB", 2**20) if peak >= 2**20 else ("KiB", 2**10) if peak >= 2**10 else ("B", 1)


def _legend(row: Timeline, scale: int, unit: str) -> str:
    peaks = f"forward peak {row.forward.peak_bytes / scale:,.2f} {unit}"
    if row.backward is not None:
        peaks += f", backward peak {row.backward.peak_bytes / scale:,.2f} {unit}"
    return f"{row.variant}: {peaks}"
