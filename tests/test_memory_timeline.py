"""`aotspec memory`: the timelines of one training step equal the memory benchmarks' figures on
the same program, order the variants as the spec says (`r[boxed.args-cleared]`,
`r[hooks.place.pack-after-last-use]`), and come out as a table, JSON and a plot."""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from aotspec.cli import main
from aotspec.memory_timeline import (
    BOXED,
    BOXED_FAST,
    EAGER,
    HOOKS_FORWARD_END,
    HOOKS_LAST_USE,
    UNBOXED,
    TrainingStep,
    plot,
    timelines,
)
from aotspec.tracker import MemoryTracker

ROOT = Path(__file__).parent.parent


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"memory_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def mlp_rows():
    """examples/mlp.py at the mlp_memory benchmark's batch (64), every variant."""
    example = load(ROOT / "examples" / "mlp.py")
    build = functools.partial(example.mlp_args, batch=64)
    step = TrainingStep(example.mlp, build, (example.pack_bf16, example.unpack_f32))
    return {row.variant: row for row in timelines(step)}, example


def test_mlp_peaks_equal_the_mlp_memory_benchmark(mlp_rows):
    rows, _ = mlp_rows
    benchmark = load(ROOT / "benchmarks" / "mlp_memory.py").measure(batch=64)
    for variant, name in ((BOXED, "boxed"), (UNBOXED, "unboxed")):
        assert benchmark[f"{name} forward peak"] == rows[variant].forward.peak_bytes
        assert benchmark[f"{name} backward peak"] == rows[variant].backward.peak_bytes


def test_mlp_training_step_boxed_at_most_eager_below_unboxed(mlp_rows):
    """r[boxed.args-cleared]: compiled at or below eager; holding the argument lists costs more;
    the fast backend's boxed code frees like the reference, up to eager's 4-byte scalars."""
    rows, _ = mlp_rows
    assert rows[BOXED].peak_bytes <= rows[EAGER].peak_bytes < rows[UNBOXED].peak_bytes
    assert rows[BOXED_FAST].peak_bytes <= rows[EAGER].peak_bytes
    # the unboxed backward holds every saved activation to its end: three relu outputs, 64 x 256
    # float32 each, plus the tangent, 4 x 65,536 bytes above the boxed one at its peak
    assert 4 * 65_536 == rows[UNBOXED].backward.peak_bytes - rows[BOXED].backward.peak_bytes


def test_hooks_at_last_use_peak_below_hooks_at_forward_end(mlp_rows):
    rows, _ = mlp_rows
    last_use, forward_end = rows[HOOKS_LAST_USE], rows[HOOKS_FORWARD_END]
    assert last_use.forward.peak_bytes < forward_end.forward.peak_bytes
    assert last_use.peak_bytes <= forward_end.peak_bytes
    # both leave the same bytes for the backward: the bfloat16 packs of the three activations
    assert last_use.forward.end_bytes == forward_end.forward.end_bytes


def test_eager_forward_equals_the_tracker_on_the_same_call(mlp_rows):
    rows, example = mlp_rows
    args = example.mlp_args(batch=64)
    tracker = MemoryTracker()
    tracker.track(args)
    with tracker:
        example.mlp(*args)
    assert tracker.peak_bytes == rows[EAGER].forward.peak_bytes
    # the inputs (64 x 256 + 4 x 256 x 256 float32) before the first op
    assert 4 * (64 * 256 + 4 * 256 * 256) == rows[EAGER].forward.points[0].live_bytes


def test_peak_is_the_highest_point_of_each_pass(mlp_rows):
    rows, _ = mlp_rows
    for row in rows.values():
        for part in (row.forward, row.backward):
            assert part.peak_bytes == max(point.high_bytes for point in part.points)


def test_hooked_chain_equals_the_hooks_memory_benchmark(monkeypatch):
    benchmark = load(ROOT / "benchmarks" / "hooks_memory.py")
    monkeypatch.setattr(benchmark, "LAYERS", 3)
    monkeypatch.setattr(benchmark, "BATCH", 32)
    monkeypatch.setattr(benchmark, "WIDTH", 16)
    step = TrainingStep(
        benchmark.chain,
        lambda: tuple(benchmark._inputs()),
        (benchmark.pack_bf16, benchmark.unpack_f32),
    )
    rows = {
        row.variant: row for row in timelines(step, (BOXED, HOOKS_LAST_USE, HOOKS_FORWARD_END))
    }
    for variant, hooks, placement in (
        (BOXED, False, "last-use"),
        (HOOKS_LAST_USE, True, "last-use"),
        (HOOKS_FORWARD_END, True, "forward-end"),
    ):
        expected = benchmark.measure(hooks, placement)
        row = rows[variant]
        assert expected == {
            "forward peak": row.forward.peak_bytes,
            "left for backward": row.forward.end_bytes,
            "backward peak": row.backward.peak_bytes,
        }


def test_memory_command_prints_table_json_and_plots(capsys, tmp_path):
    program = f"{__file__}:small"
    png, svg = tmp_path / "m.png", tmp_path / "m.svg"
    assert 0 == main(["memory", program, "--plot", str(png)])
    out = capsys.readouterr().out
    for variant in (EAGER, UNBOXED, BOXED, BOXED_FAST):
        assert variant in out
    assert png.read_bytes().startswith(b"\x89PNG")
    assert 0 == main(["memory", program, "--format", "json", "--plot", str(svg)])
    rows = json.loads(capsys.readouterr().out)
    assert [EAGER, UNBOXED, BOXED, BOXED_FAST] == [row["variant"] for row in rows]
    assert {"step", "node", "live_bytes", "high_bytes"} == set(rows[0]["forward"]["points"][0])
    assert b"<svg" in svg.read_bytes()[:400]


def small(x, w):
    return torch.tanh(x @ w)


def small_args():
    return torch.randn(4, 8), torch.randn(8, 8, requires_grad=True)


def test_plot_without_backward(tmp_path):
    step = TrainingStep(small, lambda: (torch.randn(4, 8), torch.randn(8, 8)))
    rows = timelines(step, (EAGER, BOXED))
    assert all(row.backward is None for row in rows)
    plot(rows, str(tmp_path / "forward.png"), "forward only")
    assert (tmp_path / "forward.png").stat().st_size > 0
