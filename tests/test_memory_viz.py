"""`aotspec memory --memory-viz`: the reference's ledgers as a `torch.cuda.memory._dump_snapshot`
pickle, read back by PyTorch 2.13's own offline functions in `torch.cuda._memory_viz`."""

from __future__ import annotations

import base64
import contextlib
import io
import pickle
import re

import pytest
import torch
import torch.cuda._memory_viz as memory_viz

import aotspec
from aotspec.cli import main
from aotspec.memory_viz import snapshot


def layers(x, w1, w2):
    h = torch.relu(x @ w1)
    return h @ w2


def layers_args():
    torch.manual_seed(0)
    return (
        torch.randn(16, 32),
        torch.randn(32, 32).requires_grad_(),
        torch.randn(32, 32).requires_grad_(),
    )


@pytest.fixture(scope="module")
def ledgers():
    compiled = aotspec.compile(layers, backend="reference")
    compiled(*layers_args()).sum().backward()
    (plan,) = compiled.plans.values()
    run = compiled.last_run
    return [
        ("forward", plan.forward.graph, run.ledger),
        ("backward", plan.backward.graph, run.backward_ledger),
    ]


def embedded(html: str) -> dict:
    """The snapshot a viewer page carries, as `_format_viz` embeds it."""
    encoded = re.search(r'"base64": "([^"]+)"', html).group(1)
    return pickle.loads(base64.b64decode(encoded).rstrip(b"\x00"))


def test_pytorch_viewer_functions_load_the_snapshot(ledgers, tmp_path):
    path = tmp_path / "snapshot.pickle"
    with open(path, "wb") as file:
        pickle.dump(snapshot(ledgers), file)
    with open(path, "rb") as file:
        data = pickle.load(file)
    # each ledger is one device's trace; adding allocations and taking frees leaves exactly the
    # bytes its ledger ends with
    assert 2 == len(data["device_traces"])
    for device, (trace, (_, _, ledger)) in enumerate(
        zip(data["device_traces"], ledgers, strict=True)
    ):
        sizes = {"alloc": 0, "free_completed": 0}
        for entry in trace:
            if entry["action"] in sizes:
                sizes[entry["action"]] += entry["size"]
        assert ledger.live_bytes == sizes["alloc"] - sizes["free_completed"]
        active = sum(
            block["size"]
            for segment in data["segments"]
            if segment["device"] == device
            for block in segment["blocks"]
            if block["state"] == "active_allocated"
        )
        assert ledger.live_bytes == active
    # the allocator summary checks its own accounting (it raises on a mismatch)
    summary = memory_viz.segsum(data)
    total = sum(ledger.live_bytes for _, _, ledger in ledgers)
    assert f"total_allocated: {memory_viz.Bytes(total)}" in summary
    # the text trace names every allocation
    text = memory_viz.trace(data)
    assert "Device 0" in text and "Device 1" in text
    allocations = sum(e["action"] == "alloc" for trace in data["device_traces"] for e in trace)
    assert allocations == len(re.findall(r"^\w+ = ", text, flags=re.MULTILINE))
    # the viewer pages carry the snapshot unchanged
    assert data == embedded(memory_viz.trace_plot(data))
    assert data == embedded(memory_viz.segment_plot(data))
    # filtering freed pairs finds a free_requested for every free_completed, and keeps exactly the
    # allocations alive at the end
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        kept = memory_viz.filter_alloc_free_pairs(pickle.loads(pickle.dumps(data)))
    assert "" == printed.getvalue()
    for trace, (_, _, ledger) in zip(kept["device_traces"], ledgers, strict=True):
        assert ledger.live_bytes == sum(e["size"] for e in trace if e["action"] == "alloc")


def test_frames_name_the_graph_node_and_the_user_line(ledgers):
    data = snapshot(ledgers)
    lines = memory_viz.segments(data, format_flamegraph=lambda text: text)
    # the forward's relu output lives on into the backward's account as a saved value: in the
    # forward's segments at its end, with its node and the line of layers() that made it
    line = layers.__code__.co_firstlineno + 1
    assert re.search(rf"test_memory_viz.py:{line}:layers;<forward graph>:\d+:relu 2048", lines)
    # the backward's gradients, made by derivative rules of that same line
    backward = [entry for entry in data["device_traces"][1] if entry["action"] == "alloc"]
    nodes = {
        entry["frames"][0]["fx_node_name"]
        for entry in backward
        if "fx_node_name" in entry["frames"][0]
    }
    assert "threshold_backward" in nodes
    flame = memory_viz.memory(data, format_flamegraph=lambda text: text)
    assert "<forward graph>:0:the caller's tensors" in flame


def test_memory_command_writes_the_snapshot(capsys, tmp_path):
    path = tmp_path / "out.pickle"
    assert 0 == main(["memory", f"{__file__}:layers", "--memory-viz", str(path)])
    capsys.readouterr()
    with open(path, "rb") as file:
        data = pickle.load(file)
    assert 2 == len(data["device_traces"])
    memory_viz.segsum(data)
