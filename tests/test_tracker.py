"""The memory tracker on real tensors (`aotspec.tracker`): what it sees on eager PyTorch, the
fast backend and `torch.compile(aot_eager)`, checked against accounts worked out by hand from
Python's reference counting (a value dies when its last reference goes: a temporary right after
the op that reads it, a local at `del` or when the function returns)."""

from __future__ import annotations

import gc

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef

import aotspec
from aotspec.reference.ledger import Event, Probe
from aotspec.tracker import MemoryTracker

resize_storage_bytes_ = torch.ops.inductor.resize_storage_bytes_
FLOAT4 = 16  # bytes of a float32 tensor of 4 elements


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def chain(x):
    """mul's temporary dies as soon as exp has read it; exp's result once sum has."""
    return (x * 2).exp().sum()


def test_temporaries_die_right_after_their_last_reader():
    x = torch.ones(4)
    tracker = MemoryTracker()
    (x_id,) = tracker.track(x)
    with tracker:
        out = chain(x)
    mul, exp, total = 1, 2, 3  # ids in order of allocation, after x's 0
    assert [p.node for p in tracker.probes] == [
        "<start>",
        "aten.mul.Tensor",
        "aten.exp.default",
        "aten.sum.default",
    ]
    assert [p.alive for p in tracker.probes] == [
        {x_id},
        {x_id, mul},
        {x_id, exp},  # the mul temporary went with exp's return
        {x_id, total},
    ]
    assert [p.live_bytes for p in tracker.probes] == [16, 32, 32, 20]
    assert tracker.peak_bytes == 3 * FLOAT4  # x, mul's and exp's results, while exp runs
    assert tracker.storage_id(out) == total


def test_locals_die_at_del_and_the_free_counts_to_the_op_before():
    x = torch.ones(4)
    tracker = MemoryTracker()
    tracker.track(x)
    with tracker:
        a = x + 1
        b = a * a
        del a
        c = b.neg()
        del b
        tracker.mark("after del b")
    a_id, b_id, c_id = 1, 2, 3
    assert [(p.node, p.alive) for p in tracker.probes[1:]] == [
        ("aten.add.Tensor", {0, a_id}),
        ("aten.mul.Tensor", {0, b_id}),  # `del a` ran before neg: a's free is mul's step
        ("aten.neg.default", {0, c_id}),
        ("after del b", {0, c_id}),
    ]
    frees = [e for e in tracker.events if e.kind == "free"]
    assert frees == [
        Event(2, "aten.mul.Tensor", "free", a_id, 0, 2 * FLOAT4),
        Event(3, "aten.neg.default", "free", b_id, 0, 2 * FLOAT4),
    ]
    del c


def test_probes_and_events_are_the_reference_ledgers_types():
    tracker = MemoryTracker()
    with tracker:
        torch.zeros(2)
    assert all(type(p) is Probe for p in tracker.probes)
    assert all(type(e) is Event for e in tracker.events)


def test_resize_to_zero_frees_the_bytes_and_keeps_the_storage():
    w = torch.ones(4)
    tracker = MemoryTracker()
    (w_id,) = tracker.track(w)
    with tracker:
        resize_storage_bytes_(w, 0)
        resize_storage_bytes_(w, FLOAT4)
    resizes = [(e.node, e.nbytes, e.live_bytes) for e in tracker.events if e.kind == "resize"]
    node = "inductor.resize_storage_bytes_.default"
    assert resizes == [(node, 0, 0), (node, FLOAT4, FLOAT4)]
    assert [p.alive for p in tracker.probes] == [
        {w_id}
    ] * 3  # alive at zero bytes, as in the reference
    assert [p.live_bytes for p in tracker.probes] == [FLOAT4, 0, FLOAT4]


def test_registered_inputs_are_counted_and_their_frees_seen():
    x, y, unregistered = torch.ones(4), torch.ones(2, 4), torch.ones(4)
    tracker = MemoryTracker()
    x_id, y_id = tracker.track([x, y.view(8)])  # any pytree; a view registers its storage
    assert tracker.track(y) == [y_id]  # the same storage, the same id
    assert tracker.live_bytes == 3 * FLOAT4
    with tracker:
        out = x + unregistered  # unregistered: not counted, and not new
        del x
        out.add_(1)
    assert tracker.events[-1] == Event(1, "aten.add.Tensor", "free", x_id, 0, 3 * FLOAT4)
    assert tracker.probes[-1].alive == {y_id, 2}
    assert tracker.storage_id(unregistered) is None


def test_tracker_keeps_nothing_alive():
    tracker = MemoryTracker()
    x = torch.ones(4, requires_grad=True)
    tracker.track(x)
    with tracker:
        out = (x * 3).relu()
        out.sum().backward()
    refs = [StorageWeakRef(t.untyped_storage()) for t in (x, out, x.grad)]
    del x, out
    gc.collect()
    assert all(ref.expired() for ref in refs)
    tracker.mark("after the caller dropped everything")
    assert tracker.probes[-1].alive == frozenset()
    assert tracker.live_bytes == 0


def mlp_step(x, w1, w2):
    return (x @ w1).relu() @ w2


def test_backward_ops_are_seen_and_saved_activations_freed():
    x, w1, w2 = (
        torch.ones(2, 3),
        torch.ones(3, 4, requires_grad=True),
        torch.ones(4, 1, requires_grad=True),
    )
    tracker = MemoryTracker()
    tracker.track(x, w1, w2)
    with tracker:
        loss = mlp_step(x, w1, w2).sum()
        relu_id = next(e.storage for e in tracker.events if e.node == "aten.relu.default")
        start = tracker.mark("backward")
        assert relu_id in tracker.alive()  # saved by mm's backward
        loss.backward()
    backward = [p for p in tracker.probes if p.step > start]
    assert "aten.threshold_backward.default" in [p.node for p in backward]
    assert relu_id not in backward[-1].alive  # the engine let go of it
    assert tracker.storage_id(w1.grad) in backward[-1].alive


def test_reset_peak_measures_from_now_on():
    x = torch.ones(4)
    tracker = MemoryTracker()
    tracker.track(x)
    with tracker:
        big = torch.zeros(100)
        del big
        tracker.reset_peak()
        chain(x)
    assert tracker.peak_bytes == 3 * FLOAT4


def test_entering_twice_is_an_error():
    tracker = MemoryTracker()
    with tracker, pytest.raises(RuntimeError, match="already active"):
        tracker.__enter__()


# ---------------------------------------------------------------- the same account elsewhere


def tracked_peak(fn, x) -> int:
    tracker = MemoryTracker()
    tracker.track(x)
    with tracker:
        fn(x)
    return tracker.peak_bytes


def test_fast_backend_aot_eager_and_eager_peak_alike_and_as_the_reference():
    x = torch.ones(4)
    fast = aotspec.compile(chain, backend="fast")
    fast(torch.ones(4))  # compiled outside the tracker
    aot_eager = torch.compile(chain, backend="aot_eager")
    aot_eager(torch.ones(4))
    reference = aotspec.compile(chain, backend="reference")
    reference(x)
    assert reference.last_run.ledger.peak_bytes == 3 * FLOAT4
    assert (
        tracked_peak(chain, x) == tracked_peak(fast, x) == tracked_peak(aot_eager, x) == 3 * FLOAT4
    )


def test_aot_eager_compiles_under_the_tracker_and_its_ops_are_seen():
    def f(x):
        x.add_(1)
        return x.exp()

    x = torch.ones(4)
    tracker = MemoryTracker()
    tracker.track(x)
    with tracker:
        out = torch.compile(f, backend="aot_eager")(x)  # Dynamo compiles: no eager fallback
    ops = [p.node for p in tracker.probes]
    # Compiled, not run eagerly: eager would run add_, the compiled graph adds functionally and
    # its epilogue copies the result into x.
    assert "aten.add_.Tensor" not in ops
    assert "aten.exp.default" in ops and "aten.copy_.default" in ops
    assert tracker.storage_id(out) in tracker.probes[-1].alive
    assert x.tolist() == [2.0] * 4


def test_a_sparse_tensor_is_counted_by_the_storages_of_its_parts():
    """A sparse tensor has no storage of its own: the tracker counts the storages of its indices
    and values, so making one from tracked parts allocates nothing (it reads them), and a sparse
    result of an op counts its new parts' bytes."""
    indices, values = torch.tensor([[0, 2, 0]]), torch.ones(3, 2)
    tracker = MemoryTracker()
    tracker.track(indices, values)
    with tracker:
        s = torch.sparse_coo_tensor(indices, values, (4, 2), check_invariants=True)
        made = tracker.live_bytes
        doubled = s * 2  # new values; eager's kernel copies the indices too
    assert 3 * 8 + 3 * 2 * 4 == made  # the parts alone: int64 indices, float32 values
    assert doubled.layout == torch.sparse_coo
    assert 2 * (3 * 8 + 3 * 2 * 4) == tracker.live_bytes
