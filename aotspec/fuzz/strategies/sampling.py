"""`sampled_from`, as hypothesis's, made once per list of elements.

The generators draw most of their choices from small lists (`draw(sampled_from([False] * 7 +
[True]))`, a name among the model's), about 65 fresh strategies a program. Hypothesis validates
each new strategy object on its first draw (tens of microseconds), which was a third of drawing
a program. The same elements give the same strategy object here, validated once; what it draws,
and the choices it records, are those of a new one.
"""

from __future__ import annotations

from hypothesis import strategies as st

#: Strategies by their elements (`_exactly`); emptied when it reaches `_CAPACITY`.
_MADE: dict[tuple, st.SearchStrategy] = {}
_CAPACITY = 4096


def sampled_from(elements) -> st.SearchStrategy:
    """`st.sampled_from(elements)`, the same object for the same elements."""
    elements = tuple(elements)
    key = tuple(_exactly(element) for element in elements)
    strategy = _MADE.get(key)
    if strategy is None:
        if len(_MADE) >= _CAPACITY:
            _MADE.clear()
        strategy = _MADE[key] = st.sampled_from(elements)
    return strategy


def _exactly(element) -> tuple:
    """What tells `element` from every other: a number by its type as well (1, 1.0 and True are
    equal), a float by its repr (0.0 and -0.0 are equal, nan is not nan), a tuple by its parts,
    anything else (a function, a record) by its identity (the strategy keeps the object, so its
    id is not reused while the key is held)."""
    if type(element) is tuple:
        return (tuple, tuple(_exactly(part) for part in element))
    if type(element) is float:
        return (float, repr(element))
    if type(element) in (bool, int, str, type(None)):
        return (type(element), element)
    return (type(element), id(element))
