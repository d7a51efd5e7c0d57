"""The epilogue on the caller's tensors (`reference/epilogue.py`, shared by both backends), where
the differential generators rarely reach: each compiled call against eager PyTorch's."""

from __future__ import annotations

import pytest
import torch

import aotspec

BACKENDS = ["reference", "fast"]


def _write_past_the_window(a, w):
    a.as_strided((4,), (1,), 0).mul_(w)  # all of a's storage, through a view of a
    return a * 1


def _window_world():
    leaf = torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    b = leaf * 1
    return leaf, b, b[1:3], torch.tensor([2.0, 3.0, 4.0, 5.0], requires_grad=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_write_with_history_past_the_arguments_window_reaches_its_storage(backend):
    """r[autograd.input-writes]: the argument `a`, two elements of a non-leaf's storage, is
    written with grad mode on through a view that covers the whole storage: every byte the
    program wrote reaches the caller, the two outside `a` too."""
    results = []
    for fn in (_write_past_the_window, aotspec.compile(_write_past_the_window, backend=backend)):
        leaf, b, a, w = _window_world()
        out = fn(a, w)
        out.sum().backward()
        results.append((b.detach().clone(), out.detach(), leaf.grad, w.grad))
    eager, compiled = results
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
    assert eager[0].tolist() == [2.0, 6.0, 12.0, 20.0]


def _write_first(x, y):
    x.add_(1)
    return y * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_object_passed_twice_and_written_advances_its_version_once(backend):
    """r[functionalize.epilogue.version]: as after the one eager in-place op, whatever the
    number of arguments the object is."""
    for fn in (_write_first, aotspec.compile(_write_first, backend=backend)):
        t = torch.zeros(3)
        before = t._version
        fn(t, t)
        assert t._version == before + 1, fn


def _update_in_place(a, b, c, s):
    a.add_(s)
    b.mul_(2)
    c.copy_(s.sum())
    return s * 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_written_inputs_take_their_values_and_one_version_each(backend):
    """r[functionalize.epilogue.data], r[functionalize.epilogue.version]: inputs that lay out
    all of their storage (`a`, and `c`, 0-d: a buffer's update) and one that does not (`b`, every
    other element of a storage) take eager's values, the rest of `b`'s storage is left alone,
    and each version advances once, as after eager's one in-place op on it."""
    results = []
    for fn in (_update_in_place, aotspec.compile(_update_in_place, backend=backend)):
        storage = torch.arange(6.0)
        a, b, c, s = torch.ones(3), storage[::2], torch.zeros(()), torch.tensor([1.0, 2.0, 3.0])
        versions = [t._version for t in (a, b, c)]
        for _ in range(2):  # the second call runs the plan the first compiled
            fn(a, b, c, s)
        advanced = [t._version - v for t, v in zip((a, b, c), versions, strict=True)]
        results.append((a, storage, c, advanced))
    eager, compiled = results
    torch.testing.assert_close(compiled[:3], eager[:3], rtol=0, atol=0)
    assert [2, 2, 2] == eager[3] == compiled[3]
    assert [0.0, 1.0, 8.0, 3.0, 16.0, 5.0] == eager[1].tolist()
