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
            and t0.dtype is dtype0 and t0.shape == (4, 8) and t0.stride() == (8, 1)
            and t0.storage_offset() == 0 and t0.requires_grad is True and t0.is_leaf is True
            and (s0 := t0.untyped_storage()).nbytes() == 128
            and ...
            and len({s0._cdata, s1._cdata}) == 2
        )

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
        names[f"dtype{i}"] = fact[_DTYPE]
        tests.append(
            f"t{i}.layout is strided and not t{i}.is_conj() and not t{i}.is_neg() "
            f"and t{i}.dtype is dtype{i} and t{i}.shape == {tuple(fact[_SHAPE])} "
            f"and t{i}.stride() == {tuple(fact[_STRIDE])} "
            f"and t{i}.storage_offset() == {fact[_OFFSET]} "
            f"and t{i}.requires_grad is {fact[_REQUIRES_GRAD]} and t{i}.is_leaf is {fact[_LEAF]} "
            f"and (s{i} := t{i}.untyped_storage()).nbytes() == {fact[_NBYTES]}"
        )
    storages = [fact[_STORAGE] for fact in facts]
    tests += _same_partition("s{}._cdata", storages)
    if len(set(storages)) < n:  # else no two inputs are one object: each has its own storage
        tests += _same_partition("id(t{})", [fact[_OBJECT] for fact in facts])
    for i, (first, (shape, stride, offset)) in enumerate(bases):
        tests.append(
            f"(b{i} := base_of(t{i})).shape == {shape} and b{i}.stride() == {stride} "
            f"and b{i}.storage_offset() == {offset}"
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
