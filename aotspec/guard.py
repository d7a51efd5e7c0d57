"""One guard key's tensor facts as a generated check, as Dynamo generates its guards.

A compiled function's key holds, per flat input, the facts `input_facts` reads and, where
inputs share a storage, what `bases_key` reads of their bases. Building those tuples, hashing
them and comparing them costs more than the call's own work on a small model; so the facts of
the key a call used become one function that compares the next call's tensors with them in
one pass, and answers whether `input_facts` and `bases_key` would build the same tuples:

    def facts_hold(tensors):
        if len(tensors) != 2:
            return False
        t0, t1 = tensors
        return (
            metadata_holds(t0, t1)
            and t0.storage_offset() == offset0 and t0.is_leaf is leaf0
            and (s0 := t0.untyped_storage()).nbytes() == nbytes0
            and ...
            and len({s0._cdata, s1._cdata}) == 2
        )

`metadata_holds` is Dynamo's own tensor check (`TensorGuards`, in C++), made from the tensors
of the call whose key this is: it compares each tensor's dispatch keys (so its layout, a lazy
conjugate or negation bit), dtype, device, requires_grad, sizes and strides with theirs, at
about a tenth of the cost of reading them in Python. It asks more than the key (the device,
the dispatch keys besides those bits): where it alone fails, the call goes the full way and
finds the same plan. The rest of the key's values are bound to the names the function reads
(`offset0`, `leaf0`, ...). Storage and object sharing are compared as partitions: the pairs
the key says share are compared, and the number of distinct storages (objects, bases)
counted, which together say the partition is the key's. An input with a layout the key cannot
hold (sparse, a lazy conjugate) fails the check, so the call goes the full way and
`input_facts` refuses it as before.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from aotspec.reference.synthetic_bases import base_of
from aotspec.versions import TENSOR_GUARDS

_, _, _, _OFFSET, _STORAGE, _NBYTES, _, _LEAF, _OBJECT = range(9)  # what `metadata_check` leaves


def facts_guard(
    facts: tuple[tuple, ...], bases: tuple, metadata_holds: Callable[..., bool]
) -> Callable[[list], bool]:
    """A function of a call's flat tensors: whether `input_facts` gives `facts` for them and
    `bases_key` gives `bases`; `metadata_holds` is `metadata_check` of the call's tensors that
    gave them."""
    names: dict[str, object] = {"base_of": base_of, "metadata_holds": metadata_holds}
    n = len(facts)
    # each object once, as `metadata_check` took them; the others are compared by identity
    objects = ", ".join(f"t{i}" for i, fact in enumerate(facts) if fact[_OBJECT] == i)
    tests = [f"metadata_holds({objects})"]
    for i, fact in enumerate(facts):
        # the facts are bound by name, so a check compares each with the key's value as it is
        names.update(
            {f"offset{i}": fact[_OFFSET], f"nbytes{i}": fact[_NBYTES], f"leaf{i}": fact[_LEAF]}
        )
        tests.append(
            f"t{i}.storage_offset() == offset{i} and t{i}.is_leaf is leaf{i} "
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
        *(f"        {'and ' if k else ''}{test}" for k, test in enumerate(tests)),
        "    )",
    ]
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<aotspec guard>", "exec"), names)  # noqa: S102 (our own source)
    return names["facts_hold"]


def metadata_check(tensors: list[torch.Tensor]) -> Callable[..., bool]:
    """Dynamo's check of tensors' dispatch keys, dtypes, devices, requires_grad, sizes and
    strides against those of `tensors` (strided, with neither lazy bit, as `input_facts` let
    them through), each object once, in order; it holds none of them. Made in microseconds,
    when a call finds a key: the generated rest waits until a call asks."""
    tensors = list({id(t): t for t in tensors}.values())  # it refuses one object twice
    if TENSOR_GUARDS is None:  # a torch without it: the same facts, read in Python
        return _metadata_check_in_python(tensors)
    sizes = [list(t.shape) for t in tensors]  # each compared as it is (None: any)
    strides = [list(t.stride()) for t in tensors]
    return TENSOR_GUARDS(*tensors, dynamic_dims_sizes=sizes, dynamic_dims_strides=strides).check


def _metadata_check_in_python(tensors: list[torch.Tensor]) -> Callable[..., bool]:
    """`metadata_check` where Dynamo's C++ check is missing: the facts it compares, read."""
    expected = [_metadata(t) for t in tensors]

    def holds(*others: torch.Tensor) -> bool:
        return len(others) == len(expected) and list(map(_metadata, others)) == expected

    return holds


def _metadata(t: torch.Tensor) -> tuple:
    return (
        t.layout,
        t.is_conj(),
        t.is_neg(),
        t.dtype,
        t.device,
        t.requires_grad,
        t.shape,
        t.stride(),
    )


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
