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
