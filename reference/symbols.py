"""Sizes as symbols: what a symbolic plan's records and graphs hold in place of numbers.

A plan traced with symbolic sizes (`specs/sizes.md`) holds `torch.SymInt`s wherever a traced
number depends on the sizes of the inputs: layouts, storage bytes, the arguments of view ops.
Each stands for a `sympy` expression over the symbols of the inputs' sizes; a call binds those
symbols to its numbers (`SizeBinding`) and every expression reads as a number again.
"""

from __future__ import annotations

from collections.abc import Iterable

import sympy
import torch
import torch.utils._pytree as pytree

#: The symbolic number types tracing makes.
SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)

#: Symbol -> number: the sizes of one call.
SizeBinding = dict[sympy.Symbol, int]


def is_symbolic(value) -> bool:
    return isinstance(value, SYMBOLIC)


def holds_symbols(tree) -> bool:
    """Whether a number somewhere in `tree` (in a list, a tuple or a layout) is symbolic."""
    return any(_numbers_hold_symbols(leaf) for leaf in pytree.tree_leaves(tree))


def _numbers_hold_symbols(leaf) -> bool:
    if hasattr(leaf, "numbers"):  # a Layout
        return any(map(is_symbolic, leaf.numbers()))
    return is_symbolic(leaf)


def settled(n):
    """`n` as a number where tracing has settled its symbol's value (a relation of the guard
    made it a constant, `r[sizes.symbolic.decisions]`), else `n` itself."""
    if is_symbolic(n) and n.node.expr.is_number:
        return type(n.node.hint)(n.node.expr)
    return n


def settled_all(numbers) -> tuple:
    return tuple(map(settled, numbers))


def example_value(n):
    """The number a symbolic `n` had where it was traced (its hint); a number as it is."""
    if not is_symbolic(n):
        return n
    return n.node.hint


def evaluated(n, binding: SizeBinding):
    """`n` at the sizes of `binding`: a number."""
    if not is_symbolic(n):
        return n
    value = n.node.expr.xreplace(binding)
    if isinstance(n, torch.SymBool):
        return bool(value)
    if isinstance(n, torch.SymFloat):
        return float(value)
    return int(value)


def symbol_of(n) -> sympy.Symbol | None:
    """The symbol a symbolic size is, when it is one symbol (not an expression of several)."""
    if is_symbolic(n) and isinstance(n.node.expr, sympy.Symbol):
        return n.node.expr
    return None


def bind(symbolic: Iterable, numbers: Iterable, binding: SizeBinding) -> bool:
    """Bind each symbol of `symbolic` to its number of `numbers`; False where a symbol already
    bound has another number (two sizes traced as one symbol differ at this call)."""
    for n, number in zip(symbolic, numbers, strict=True):
        symbol = symbol_of(n)
        if symbol is not None and binding.setdefault(symbol, number) != number:
            return False
    return True


def meta_at_sizes(meta, binding: SizeBinding):
    """A traced value (a fake tensor, or a tuple of them) at the sizes of `binding`: a meta
    tensor of its dtype, laid out as it is at those sizes."""
    if isinstance(meta, (tuple, list)):
        return type(meta)(meta_at_sizes(part, binding) for part in meta)
    if not isinstance(meta, torch.Tensor) or meta.layout != torch.strided:
        return meta
    nbytes = meta.untyped_storage().nbytes()
    numbers = (*meta.shape, *meta.stride(), meta.storage_offset(), nbytes)
    if not any(map(is_symbolic, numbers)):
        return meta
    sizes = [evaluated(n, binding) for n in meta.shape]
    strides = [evaluated(n, binding) for n in meta.stride()]
    elements = evaluated(nbytes, binding) // meta.element_size()
    storage = torch.empty(elements, dtype=meta.dtype, device="meta")
    return storage.as_strided(sizes, strides, evaluated(meta.storage_offset(), binding))
