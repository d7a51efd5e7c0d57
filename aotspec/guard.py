"""One guard key's tensor facts as a generated check, as Dynamo generates its guards.

A compiled function's key holds, per flat input, the facts `input_facts` reads and, where
inputs share a storage, what `bases_key` reads of their bases. Building those tuples, hashing
them and comparing them costs more than the call's own work on a small model; so the facts of
the key a call used become one function that compares the next call's tensors with them in
one pass, attribute by attribute, and answers whether `input_facts` and `bases_key` would
build the same tuples:

    def facts_hold(tensors):
        if len(tensors) != 2:
            return False
        t0, t1 = tensors
        return (
            t0.layout is strided and not t0.is_conj() and not t0.is_neg()
            and t0.dtype is dtype0 and t0.shape == shape0 and t0.stride() == stride0
            and t0.storage_offset() == offset0
            and t0.requires_grad is grad0 and t0.is_leaf is leaf0
            and (s0 := t0.untyped_storage()).nbytes() == nbytes0
            and ...
            and len({s0._cdata, s1._cdata}) == 2
        )

The key's values are bound to the names the function reads (`shape0`, `stride0`, ...).
Storage and object sharing are compared as partitions: the pairs the key says share are
compared, and the number of distinct storages (objects, bases) counted, which together say the
partition is the key's. An input with a layout the key cannot hold (sparse, a lazy conjugate)
fails the check, so the call goes the full way and `input_facts` refuses it as before.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from aotspec.reference.synthetic_bases import base_of

_DTYPE, _SHAPE, _STRIDE, _OFFSET, _STORAGE, _NBYTES, _REQUIRES_GRAD, _LEAF, _OBJECT = range(9)


def facts_guard(facts: tuple[tuple, ...], bases: tuple) -> Callable[[list], bool]:
    """A function of a call's flat tensors: whether `input_facts` gives `facts` for them and
    `bases_key` gives `bases`."""
    names: dict[str, object] = {"strided": torch.strided, "base_of": base_of}
    n = len(facts)
    tests = []
    for i, fact in enumerate(facts):
        # the facts are bound by name, so a check compares each with the key's value as it is
        names.update(
            {
                f"dtype{i}": fact[_DTYPE],
                f"shape{i}": fact[_SHAPE],
                f"stride{i}": fact[_STRIDE],
                f"offset{i}": fact[_OFFSET],
                f"nbytes{i}": fact[_NBYTES],
                f"grad{i}": fact[_REQUIRES_GRAD],
                f"leaf{i}": fact[_LEAF],
            }
        )
        tests.append(
            f"t{i}.layout is strided and not t{i}.is_conj() and not t{i}.is_neg() "
            f"and t{i}.dtype is dtype{i} and t{i}.shape == shape{i} "
            f"and t{i}.stride() == stride{i} and t{i}.storage_offset() == offset{i} "
            f"and t{i}.requires_grad is grad{i} and t{i}.is_leaf is leaf{i} "
            f"and (s{i} := t{i}.untyped_storage()).nbytes() == nbytes{i}"
        )
    storages = [fact[_STORAGE] for fact in facts]
    tests += _same_partition("s{}._cdata", storages)
    if len(set(storages)) < n:  # else no two inputs are one object: each has its own storage
        tests += _same_partition("id(t{})", [fact[_OBJECT] for fact in facts])
    for i, (_, (shape, stride, offset)) in enumerate(bases):
        names.update(
            {f"base_shape{i}": shape, f"base_stride{i}": stride, f"base_offset{i}": offset}
        )
        tests.append(
            f"(b{i} := base_of(t{i})).shape == base_shape{i} and b{i}.stride() == base_stride{i} "
            f"and b{i}.storage_offset() == base_offset{i}"
        )
    tests += _same_partition("id(b{})", [first for first, _ in bases])
    unpacked = "".join(f"t{i}, " for i in range(n))
    lines = [
        "def facts_hold(tensors):",
        f"    if len(tensors) != {n}:",
        "        return False",
        *([f"    {unpacked}= tensors"] if n else []),
        "    return (",
        *(f"        {'and ' if k else ''}{test}" for k, test in enumerate(tests or ["True"])),
        "    )",
    ]
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<aotspec guard>", "exec"), names)  # noqa: S102 (our own source)
    return names["facts_hold"]


def _same_partition(value: str, firsts: list[int]) -> list[str]:
    """Tests that the values `value.format(i)` fall into the classes `firsts` gives (each
    index's first index with an equal value): each value equal to its class's first, and as
    many distinct values as classes."""
    tests = [
        f"{value.format(i)} == {value.format(first)}"
        for i, first in enumerate(firsts)
        if first != i
    ]
    classes = len(firsts) - len(tests)
    if classes > 1:
        distinct = ", ".join(value.format(i) for i in range(len(firsts)))
        tests.append(f"len({{{distinct}}}) == {classes}")
    return tests
