"""Observables: what "behaves like eager" compares, read off real torch tensors.

A *world* is a dict of named torch tensors after a call: the caller's inputs (and aliases of them
it kept), and the outputs `out0`, `out1`, ... For each name we record dtype, shape, strides,
offset, storage size and values (when the storage holds them), and which names share a storage.
Storage sharing is recorded as a partition of names, so two worlds compare without caring about
storage addresses (docs/design.md section 5, observables 2 to 4).
"""

from __future__ import annotations

import torch
import torch.utils._pytree as pytree
from attrs import frozen


@frozen
class TensorFacts:
    dtype: torch.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    storage_nbytes: int
    #: The values, or None when the storage is too small to hold them (a zero storage).
    values: torch.Tensor | None


@frozen
class Observation:
    tensors: dict[str, TensorFacts]
    #: Groups of names whose tensors share one storage, each sorted, the list sorted.
    sharing: tuple[tuple[str, ...], ...]

    def shares_storage(self, a: str, b: str) -> bool:
        return any(a in group and b in group for group in self.sharing)


def _extent_bytes(t: torch.Tensor) -> int:
    if t.numel() == 0:
        return 0
    steps = zip(t.shape, t.stride(), strict=True)
    last = t.storage_offset() + sum((n - 1) * s for n, s in steps)
    return (last + 1) * t.element_size()


def facts(t: torch.Tensor) -> TensorFacts:
    nbytes = t.untyped_storage().nbytes()
    # Reading a tensor whose storage is too small segfaults on CPU: never touch its values.
    # Values are kept on the CPU, where expectations hold theirs, whatever the device.
    values = t.detach().to("cpu", copy=True) if _extent_bytes(t) <= nbytes else None
    return TensorFacts(
        t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset(), nbytes, values
    )


def _strided(value) -> bool:
    """A tensor with a storage read through a layout (not a sparse one)."""
    return isinstance(value, torch.Tensor) and value.layout == torch.strided


def observe(world: dict[str, object]) -> Observation:
    tensors = {name: facts(t) for name, t in world.items() if _strided(t)}
    groups: dict[int, list[str]] = {}
    for name, t in world.items():
        if _strided(t):
            groups.setdefault(t.untyped_storage()._cdata, []).append(name)
    sharing = tuple(sorted(tuple(sorted(g)) for g in groups.values() if len(g) > 1))
    return Observation(tensors, sharing)


def addressing_strides(shape, strides) -> tuple:
    """The strides that address elements (`r[memory.layout.unaddressed-strides]`): those of dims of
    size > 1 in a non-empty tensor; the others are shown as None."""
    if 0 in shape:
        return tuple(None for _ in shape)
    return tuple(s if n > 1 else None for n, s in zip(shape, strides, strict=True))


def addresses_an_element(shape) -> bool:
    """Whether a tensor of `shape` has elements: the offset of one that has none addresses
    nothing (`r[memory.layout.unaddressed-strides]`)."""
    return 0 not in shape


def same_values(expected: torch.Tensor, actual: torch.Tensor) -> bool:
    """Equal values on one device: what `assert_close` passes at once, told without its cost,
    which was most of comparing two worlds (NaNs, and values only close, are left to it)."""
    return expected.device == actual.device and torch.equal(expected, actual)


def _close(expected: torch.Tensor, actual: torch.Tensor) -> str | None:
    if same_values(expected, actual):
        return None
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True, check_stride=False)
    except AssertionError as error:
        return str(error).split("\n\n")[0].replace("\n", " ")
    return None


def differences(expected: Observation, actual: Observation) -> list[str]:
    """Human-readable differences between two observations; empty when they agree."""
    found = []
    if expected.tensors.keys() != actual.tensors.keys():
        found.append(
            f"names differ: expected {sorted(expected.tensors)}, got {sorted(actual.tensors)}"
        )
    for name in sorted(expected.tensors.keys() & actual.tensors.keys()):
        want, got = expected.tensors[name], actual.tensors[name]
        for field_name in ("dtype", "shape", "offset", "storage_nbytes"):
            if field_name == "offset" and not addresses_an_element(want.shape):
                continue  # r[memory.layout.unaddressed-strides]: nor does its offset
            if getattr(want, field_name) != getattr(got, field_name):
                found.append(
                    f"{name}.{field_name}: expected {getattr(want, field_name)}, "
                    f"got {getattr(got, field_name)}"
                )
        if addressing_strides(want.shape, want.strides) != addressing_strides(
            got.shape, got.strides
        ):
            found.append(f"{name}.strides: expected {want.strides}, got {got.strides}")
        if (want.values is None) != (got.values is None):
            found.append(
                f"{name}: readable in one world only (expected readable={want.values is not None})"
            )
        elif want.values is not None and want.shape == got.shape and want.dtype == got.dtype:
            mismatch = _close(want.values, got.values)
            if mismatch:
                found.append(f"{name} values: {mismatch}")
    if expected.sharing != actual.sharing:
        found.append(f"storage sharing: expected {expected.sharing}, got {actual.sharing}")
    return found


def world_of(named_inputs: dict[str, object], outputs) -> dict[str, object]:
    """Inputs by name plus the outputs, flattened, as `out0`, `out1`, ..."""
    world = dict(named_inputs)
    for i, value in enumerate(pytree.tree_leaves(outputs)):
        world[f"out{i}"] = value
    return world
