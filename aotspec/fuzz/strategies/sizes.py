"""One program at several sizes of one dimension, for calling one compiled function at each.

Generates `sized_programs()`: a pointwise program (`pointwise.py`), whose body names no size, and
two or three sizes of the last dimension of its widest values; and `sized_grad_programs()`: a
program of `grad.py` (views, reductions, cat, writes through views, several outputs), at the
sizes among those drawn where eager runs it (a body may name a size, as `view(2, 3)` does, or an
index, as `select(1, 2)` does, that holds at some sizes alone). `Sized.at(size)` is the program
whose caller tensors have that size there: every tensor whose last dimension is the family's
widest gets `size` in its place (those of 1 and the 0-dim ones broadcast as before), its values
the drawn ones repeated, so the magnitudes the generator bounded stay bounded.
"""

from __future__ import annotations

import math

import torch
from attrs import evolve, frozen
from hypothesis import assume
from hypothesis import strategies as st

from .grad import grad_programs
from .pointwise import pointwise_programs
from .program import Base, Program, as_function, build_inputs, source
from .sampling import sampled_from

#: The sizes a dimension may take; 1 among them, which broadcasts.
SIZES = range(1, 8)


@frozen
class Sized:
    """`program` as drawn, and the sizes of its dimension `width` at which it is called, in
    order."""

    program: Program
    #: The last dimension of the program's widest tensors, as drawn.
    width: int
    sizes: tuple[int, ...]

    def at(self, size: int) -> Program:
        """The program on caller tensors whose last dimension `width` is `size`."""
        bases = tuple(self._resized(base, size) for base in self.program.setup.bases)
        return evolve(self.program, setup=evolve(self.program.setup, bases=bases))

    def _resized(self, base: Base, size: int) -> Base:
        if not base.shape or base.shape[-1] != self.width:
            return base
        shape = (*base.shape[:-1], size)
        numel = math.prod(shape)
        values = tuple(base.values[i % len(base.values)] for i in range(numel))
        return evolve(base, shape=shape, values=values)


def _width(program: Program) -> int:
    return max((base.shape[-1] for base in program.setup.bases if base.shape), default=1)


@st.composite
def sized_programs(draw) -> Sized:
    """A pointwise program with a tensor whose last dimension is wider than 1, and two or three
    distinct sizes of that dimension (see the module docstring)."""
    program = draw(pointwise_programs().filter(lambda p: _width(p) > 1))
    sizes = draw(st.lists(sampled_from(SIZES), min_size=2, max_size=3, unique=True))
    return Sized(program, _width(program), tuple(sizes))


@st.composite
def sized_grad_programs(draw) -> Sized:
    """A program with backward whose widest last dimension is wider than 1, and the two or
    three of the drawn sizes of that dimension (see the module docstring) at which eager runs it:
    the first is the size the program was drawn at, so that the sizes a plan serves are ones it
    was not traced at."""
    program = draw(grad_programs().filter(lambda p: _width(p) > 1))
    width = _width(program)
    others = draw(st.lists(sampled_from(SIZES), min_size=2, max_size=4, unique=True))
    sizes = [width] + [size for size in others if size != width]
    sized = Sized(program, width, tuple(sizes))
    runs = tuple(size for size in sizes if _runs_on_eager(sized.at(size)))
    assume(len(runs) >= 2)
    return evolve(sized, sizes=runs[:3])


def _runs_on_eager(program: Program) -> bool:
    """Whether eager calls `program` without raising (its backward is not asked)."""
    try:
        _, args = build_inputs(program.setup)
        with torch.set_grad_enabled(program.grad_enabled):
            as_function(program)(*args)
    except Exception:  # noqa: BLE001 (a size the body does not fit)
        return False
    return True


def sized_source(sized: Sized) -> str:
    """The program at its first size as Python, and the sizes it is called at."""
    return (
        f"{source(sized.at(sized.sizes[0]))}\n"
        f"# one compiled function called at last dimension {sized.width} -> {list(sized.sizes)}"
    )


# ---------------------------------------------------------------- int arguments under Dynamo

#: The values an int argument takes: 0 and 1 (which Dynamo treats apart), and below 0.
INTS = range(-3, 3)

#: Steps of `f(x, buf, k)` on `y` (3 rows, a number of columns that varies), each valid for
#: every `k` of `INTS`: a line of source that rebinds `y` (a write to `buf`, the caller's tensor
#: without grad, leaves `y` alone).
INT_STEPS = {
    "roll": "y = y.roll(k, -1)",
    "head": "y = y[:, :k]",
    "tail": "y = y[:, k:]",
    "scale": "y = y * k",
    "shift": "y = y + k",
    "row": "y = y * y.select(0, k)",
    "sum": "y = y + y.sum(-1, keepdim=True) * k",
    "mean": "y = y.mean(0) * k + y",
    "amax": "y = y.amax(0, keepdim=True) * y",
    "cat": "y = torch.cat([y[:, :k], y, y[:, k:]], -1)",
    "flat": "y = y.reshape(-1).roll(k).view(3, -1)",
    "transposed": "y = y.t()[k:].t() * 2",
    "expand": "y = y.unsqueeze(0).expand(k + 3, -1, -1).sum(0)",
    "split": "y = torch.cat(y.split(k + 4, -1)[::-1], -1)",
    "write view": "y = y.clone()\n    y[:, k:].mul_(k)",
    "write input": "buf[:, :k].add_(y.sum(-1, keepdim=True))",
}


@frozen
class IntProgram:
    """`f(x, buf, k)`, its `steps` (keys of `INT_STEPS`) on `y = x * 1`, returning `y`, called
    in turn at each `(columns, k)` of `calls`: `x` a (3, columns) leaf that requires grad, `buf`
    a (3, columns) tensor without grad."""

    steps: tuple[str, ...]
    calls: tuple[tuple[int, int], ...]

    @property
    def source(self) -> str:
        body = "".join(f"    {INT_STEPS[step]}\n" for step in self.steps)
        return f"def f(x, buf, k):\n    y = x * 1\n{body}    return y\n"

    def function(self):
        namespace = {"torch": torch}
        exec(self.source, namespace)  # noqa: S102 (our own source)
        return namespace["f"]

    @staticmethod
    def inputs(columns: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The call's `x` and `buf` at `columns`, the same values every time."""
        x = torch.linspace(-2.0, 2.0, 3 * columns).reshape(3, columns).requires_grad_()
        buf = torch.arange(3.0 * columns).reshape(3, columns)
        return x, buf


@st.composite
def int_programs(draw) -> IntProgram:
    """One to four steps of `INT_STEPS`, and three to five calls: a number of columns of
    `SIZES` (one repeated at least, so that the int alone changes there) and an int of `INTS`."""
    steps = draw(st.lists(sampled_from(list(INT_STEPS)), min_size=1, max_size=4))
    columns = draw(st.lists(sampled_from(SIZES), min_size=3, max_size=5))
    columns[-1] = columns[0]
    ks = draw(st.lists(sampled_from(INTS), min_size=len(columns), max_size=len(columns)))
    return IntProgram(tuple(steps), tuple(zip(columns, ks, strict=True)))
