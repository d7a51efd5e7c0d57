"""The generated check of a guard key's tensor facts (`aotspec.guard.facts_guard`): it holds
for a call's tensors exactly when `input_facts` and `bases_key` build the key's tuples for them,
so the latest call's plan is reused only where the full key would find it.

Each caller below differs from the first in one fact the key holds; every check is tried on
every caller, and its answer compared with the tuples' equality.
"""

from __future__ import annotations

import pytest
import torch

import aotspec
from aotspec.errors import UnsupportedError
from aotspec.guard import facts_guard, metadata_check
from aotspec.reference.program_records import input_facts
from aotspec.reference.synthetic_bases import bases_key


def _on_25(t: torch.Tensor) -> torch.Tensor:
    """A 4 x 6 tensor at the start of a storage of 25 elements."""
    return t[:24].view(4, 6)


def _callers() -> dict[str, list[torch.Tensor]]:
    """Callers of three flat tensors; each after the first differs from one caller before it
    in one fact (the storage's bytes, its offset, the base's layout...)."""
    x = torch.randn(3, 2)
    weight = torch.randn(3, requires_grad=True)
    root, square = torch.randn(25), torch.randn(5, 5)
    transposed = torch.empty_strided((5, 5), (1, 5))
    short = torch.randn(25).resize_(24)  # 24 elements on a storage of 25
    on_root = torch.empty(0).set_(root.untyped_storage(), 0, (25,), (1,))
    return {
        "plain": [_on_25(torch.randn(25)), x, weight],
        "dtype": [_on_25(torch.zeros(25, dtype=torch.int32)), x, weight],
        "shape": [torch.randn(25).as_strided((4, 5), (6, 1)), x, weight],
        "strides": [torch.randn(25)[:24].view(6, 4).t(), x, weight],
        "offset": [torch.randn(25)[1:].view(4, 6), x, weight],
        "storage bytes": [_on_25(torch.randn(26)), x, weight],
        "requires grad": [_on_25(torch.randn(25)).requires_grad_(), x, weight],
        "non-leaf": [_on_25(torch.randn(25, requires_grad=True) * 2), x, weight],
        "lazy negation": [torch._neg_view(_on_25(torch.randn(25))), x, weight],
        "complex": [_on_25(torch.randn(25, dtype=torch.complex64)), x, weight],
        "lazy conjugate": [_on_25(torch.randn(25, dtype=torch.complex64)).conj(), x, weight],
        "expanded": [torch.randn(1).expand(4, 6), x, weight],  # strides (0, 0), as sparse's
        "sparse": [_on_25(torch.randn(25)).to_sparse(), x, weight],
        "fewer tensors": [_on_25(torch.randn(25)), x],
        "unshared": [_on_25(torch.randn(25)), torch.randn(25)[1:7].view(3, 2), weight],
        "shared storage": [_on_25(root), root[1:7].view(3, 2), weight],
        "shared, other view": [_on_25(root), root[2:8].view(3, 2), weight],
        "shared, other base": [_on_25(square.view(25)), square.view(25)[1:7].view(3, 2), weight],
        "shared, base strides": [
            _on_25(transposed.t().reshape(25)),  # a view of `transposed`, on its storage
            transposed.t().reshape(25)[1:7].view(3, 2),
            weight,
        ],
        "shared, base shape": [_on_25(short), short[1:7].view(3, 2), weight],
        "shared, one base": [_on_25(root), root, weight],
        "shared, two bases": [_on_25(root), on_root, weight],
        "one object twice": [_on_25(root), x, x],
        "two objects on one storage": [_on_25(root), x, x.view(3, 2)],
    }


def _key(tensors):
    try:
        facts = input_facts(tensors)
    except UnsupportedError:
        return None  # refused: no key holds it
    return facts, bases_key(tensors, facts)


CALLERS = _callers()


@pytest.mark.parametrize("keyed", [name for name in CALLERS if _key(CALLERS[name])])
def test_the_check_holds_exactly_where_the_key_is_the_same(keyed):
    key = _key(CALLERS[keyed])
    check = facts_guard(*key, metadata_check(CALLERS[keyed]))
    for name, tensors in CALLERS.items():
        assert (_key(tensors) == key) == check(tensors), f"key of {keyed!r}, called on {name!r}"


def test_a_call_after_an_in_place_change_of_metadata_compiles_again():
    """The latest plan is checked, not trusted: the same tensor objects, changed in place
    (transposed, resized, made to require grad), miss it and get plans of their own, each call
    computing eager's values."""
    compiled = aotspec.compile(lambda a, b: a * 2 + b, backend="fast")
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    for change in (lambda: None, a.t_, lambda: a.resize_(3, 3, 1), b.requires_grad_):
        change()
        assert torch.equal(a * 2 + b, compiled(a, b))
    assert compiled.compilations == 4
    assert torch.equal(a * 2 + b, compiled(a, b))
    assert compiled.compilations == 4
