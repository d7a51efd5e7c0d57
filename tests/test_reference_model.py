"""The storage model and the ledger, unit by unit."""

import numpy as np
import pytest
import torch

from aotspec.errors import SpecViolation
from aotspec.reference.ledger import Ledger
from aotspec.reference.storage import Layout, Storage, Tensor


def test_extent_of_a_strided_layout():
    # last element at 5 + 1*4 + 1*1 = 10, so 11 elements of 4 bytes
    assert Layout(torch.float32, (2, 2), (4, 1), 5).extent_bytes() == 44
    assert Layout(torch.float32, (0, 3), (3, 1), 7).extent_bytes() == 0


def test_resize_keeps_the_prefix():
    s = Storage(np.arange(8, dtype=np.uint8))
    s.resize(3)
    assert s.buffer.tolist() == [0, 1, 2]
    s.resize(5)
    assert s.nbytes == 5 and s.buffer[:3].tolist() == [0, 1, 2]


def test_reading_beyond_the_storage_names_the_tensor_and_rule():
    t = Tensor(Storage.zeros(8), Layout.contiguous(torch.float32, (4,)), name="w")
    with pytest.raises(
        SpecViolation,
        match=r"read of tensor w .*needs 16 bytes but its storage holds 8 "
        r"\[rule memory.access-in-bounds\]",
    ):
        t.read()


def test_write_goes_through_every_alias():
    s = Storage.zeros(16)
    whole = Tensor(s, Layout.contiguous(torch.float32, (4,)))
    tail = Tensor(s, Layout(torch.float32, (2,), (1,), 2))
    tail.write(np.array([5.0, 6.0]))
    assert whole.read().tolist() == [0.0, 0.0, 5.0, 6.0]


def test_ledger_frees_a_storage_when_its_last_reader_goes():
    ledger = Ledger()
    s = Storage.zeros(16)
    a = Tensor(s, Layout.contiguous(torch.float32, (4,)))
    b = Tensor(s, Layout.contiguous(torch.float32, (2,)))
    ledger.hold(a)
    ledger.hold(b)
    assert ledger.live_bytes == 16
    ledger.release(a)
    assert ledger.is_alive(s)
    ledger.release(b)
    assert not ledger.is_alive(s)
    assert [(e.kind, e.nbytes) for e in ledger.events] == [("alloc", 16), ("free", 0)]


def test_ledger_rebind_moves_the_reader():
    ledger = Ledger()
    old, new = Storage.zeros(16), Storage.zeros(32)
    t = Tensor(old, Layout.contiguous(torch.float32, (4,)))
    keeper = Tensor(new, Layout.contiguous(torch.float32, (8,)))
    ledger.hold(t)
    ledger.hold(keeper)
    ledger.rebind(t, new)
    assert not ledger.is_alive(old) and ledger.live_bytes == 32
    assert ledger.peak_bytes == 48
