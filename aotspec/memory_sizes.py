"""Memory as a function of a size: `aotspec memory FILE.py:FUNCTION --sizes DIM=A..B`.

The size is one of the argument builder's named sizes, a parameter it takes by keyword
(`def mlp_args(batch=512)`, `aotspec/program_file.py`). At each size the builder makes the
arguments, the reference runs one training step of the boxed plan (with `--hooks`, the hooks
packed at last use, as the spec places them), and its ledgers give the forward's and the
backward's peak, counted as `aotspec/memory_timeline.py` counts them.

A peak is printed as a formula of the size where it is one: the polynomial through the first
sizes (two for an affine formula `a*n + b`, three for a quadratic one), in exact fractions, holds
at every other size measured, to the byte; failing that, the one that holds over the largest
sizes, from the size where it starts. A formula is only printed once it was checked at one size
more than it needs to be fitted.
"""

from __future__ import annotations

import functools
from fractions import Fraction

from attrs import frozen

from aotspec.errors import InternalError, SpecViolation, UnsupportedError
from aotspec.memory_timeline import BOXED, HOOKS_LAST_USE, TrainingStep, byte_unit, timelines
from aotspec.program_file import ProgramFile, UsageError, describe

#: The formulas tried, in order, by degree.
SHAPES = ((1, "affine"), (2, "quadratic"))


@frozen
class Sizes:
    """The sizes `--sizes` names: `dimension=text`, `values` increasing."""

    dimension: str
    text: str
    values: tuple[int, ...]


def parse_sizes(option: str) -> Sizes:
    """`DIM=A..B` (every size from A to B), `DIM=A..B:STEP` or `DIM=N,M,...`."""
    dimension, equals, text = option.partition("=")
    syntax = UsageError(
        f"--sizes expects DIM=A..B, DIM=A..B:STEP or DIM=N,M,...; got {option!r}",
        "Name a size of the argument builder and whole sizes, e.g. --sizes batch=8..64:8",
    )
    if not equals or not dimension.isidentifier():
        raise syntax
    first, dots, rest = text.partition("..")
    last, colon, step = rest.partition(":")
    fields = [first, last] + ([step] if colon else []) if dots else text.split(",")
    if not all(field.strip().isdecimal() for field in fields):
        raise syntax
    numbers = [int(field) for field in fields]
    if not dots:
        values = sorted(set(numbers))
    elif numbers[0] > numbers[1]:
        raise UsageError(
            f"--sizes {option}: the range goes down ({numbers[0]} > {numbers[1]})",
            f"Write the smaller size first, e.g. {dimension}={numbers[1]}..{numbers[0]}",
        )
    elif colon and numbers[2] == 0:
        raise UsageError(
            f"--sizes {option}: the step is 0",
            f"Give a step of 1 or more, e.g. {dimension}={first}..{last}:1",
        )
    else:
        values = list(range(numbers[0], numbers[1] + 1, numbers[2] if colon else 1))
    return Sizes(dimension, text, tuple(values))


# ---------------------------------------------------------------- measuring


@frozen
class Peaks:
    size: int
    forward_peak_bytes: int
    #: None when no output requires grad: there is no backward.
    backward_peak_bytes: int | None


@frozen
class Failure:
    size: int
    reason: str


def measure(program: ProgramFile, sizes: Sizes) -> tuple[list[Peaks], list[Failure]]:
    """Both peaks of one training step at each size, and the sizes at which it failed, why."""
    program.check_size_name(sizes.dimension)
    variant = HOOKS_LAST_USE if program.hooks is not None else BOXED
    measured, failed = [], []
    for size in sizes.values:
        build = functools.partial(program.arguments, **{sizes.dimension: size})
        step = TrainingStep(program.fn, build, program.hooks, program.before_backward)
        try:
            (timeline,) = timelines(step, (variant,))
        except (UsageError, UnsupportedError, SpecViolation) as error:
            failed.append(Failure(size, " ".join(str(error).split())))
            continue
        except Exception as error:
            reason = describe(error, program.path)
            if isinstance(error, InternalError) or "(at " not in reason:
                raise  # not the program's: a bug of aotspec, with its traceback
            failed.append(Failure(size, f"{program.spec} raised {reason}"))
            continue
        backward = timeline.backward.peak_bytes if timeline.backward is not None else None
        measured.append(Peaks(size, timeline.forward.peak_bytes, backward))
    return measured, failed


# ---------------------------------------------------------------- formulas


@frozen
class Formula:
    """What the peaks at the measured sizes say: the polynomial (coefficients from the constant
    up) when one holds, from `first_size` on (None: at every size), and a sentence for people."""

    coefficients: tuple[Fraction, ...] | None
    text: str
    first_size: int | None = None


def formula(points: list[tuple[int, int]], dimension: str, over: str) -> Formula:
    """The lowest-degree polynomial of `SHAPES` through the first points that holds at all of
    them; failing that, the one that holds over the longest run of the largest sizes (a peak is
    often the larger of two affine amounts, the one that grows faster taking over)."""
    if len(points) < 3:
        return Formula(
            None,
            f"cannot be checked: {len(points)} size(s) measured; a formula needs 3 (2 to fit "
            f"a line, 1 more to check it)",
        )
    found = _holding(points)
    if found is not None:
        shape, coefficients, checked = found
        return Formula(
            coefficients,
            f"{polynomial_text(coefficients, dimension)} bytes ({shape} in {dimension}: "
            f"{_fitted_and_checked(points, checked)})",
        )
    tried = [shape for degree, shape in SHAPES if len(points) >= degree + 2]
    failure = f"{_none_of(tried)} in {dimension} over {over}"
    for degree, shape in SHAPES[len(tried) :]:
        failure += f"; a {shape} formula needs {degree + 2} sizes to be checked"
    for start in range(1, len(points) - 2):
        found = _holding(points[start:])
        if found is not None:
            shape, coefficients, checked = found
            first, last = points[start][0], points[-1][0]
            return Formula(
                coefficients,
                f"{polynomial_text(coefficients, dimension)} bytes for {dimension} from {first} "
                f"to {last} ({shape}: {_fitted_and_checked(points[start:], checked)}); "
                f"{failure}",
                first,
            )
    return Formula(None, failure)


def _holding(points: list[tuple[int, int]]) -> tuple[str, tuple[Fraction, ...], int] | None:
    """The first shape whose polynomial through the first points holds at the others, its
    coefficients and how many points it was checked at; None when none does."""
    for degree, shape in SHAPES:
        fitted, checked = points[: degree + 1], points[degree + 1 :]
        if not checked:
            return None
        coefficients = interpolate(fitted)
        if all(evaluate(coefficients, size) == peak for size, peak in checked):
            return shape, coefficients, len(checked)
    return None


def _fitted_and_checked(points: list[tuple[int, int]], checked: int) -> str:
    fitted = [size for size, _ in points[:-checked]]
    tested = [size for size, _ in points[-checked:]]
    return f"fitted at {', '.join(map(str, fitted))}, checked at {', '.join(map(str, tested))}"


def _none_of(tried: list[str]) -> str:
    """`not affine`, `neither affine nor quadratic`: the shapes that did not hold."""
    if len(tried) == 1:
        return f"not {tried[0]}"
    return f"neither {', '.join(tried[:-1])} nor {tried[-1]}"


def interpolate(points: list[tuple[int, int]]) -> tuple[Fraction, ...]:
    """The coefficients, constant first, of the polynomial of degree len(points) - 1 through
    `points` (Lagrange's form, multiplied out in exact fractions)."""
    coefficients = [Fraction(0)] * len(points)
    for i, (x_i, y_i) in enumerate(points):
        basis, denominator = [Fraction(1)], 1  # prod over j != i of (x - x_j) / (x_i - x_j)
        for j, (x_j, _) in enumerate(points):
            if j != i:
                basis = [a - x_j * b for a, b in zip([0, *basis], [*basis, 0], strict=True)]
                denominator *= x_i - x_j
        for k, c in enumerate(basis):
            coefficients[k] += y_i * c / denominator
    return tuple(coefficients)


def evaluate(coefficients: tuple[Fraction, ...], x: int) -> Fraction:
    return sum(c * x**k for k, c in enumerate(coefficients))


def polynomial_text(coefficients: tuple[Fraction, ...], name: str) -> str:
    """`4096*batch + 266240`, `4*seq**2 - (1/2)*seq`: Python that computes it, highest power
    first, zero terms left out."""
    terms = []
    for power in reversed(range(len(coefficients))):
        c = coefficients[power]
        if c == 0 and (power > 0 or terms):
            continue
        magnitude = abs(c)
        number = str(magnitude) if magnitude.denominator == 1 else f"({magnitude})"
        variable = {0: "", 1: name}.get(power, f"{name}**{power}")
        if magnitude == 1 and variable:
            term = variable
        else:
            term = "*".join(filter(None, [number, variable]))
        sign = "-" if c < 0 else "+"
        terms.append(f"{sign} {term}" if terms else f"-{term}" if c < 0 else term)
    return " ".join(terms)


# ---------------------------------------------------------------- showing them


def formulas(measured: list[Peaks], sizes: Sizes) -> dict[str, Formula]:
    """The forward's and, when there is a backward, the backward's formula."""
    forward = [(p.size, p.forward_peak_bytes) for p in measured]
    found = {"forward": formula(forward, sizes.dimension, sizes.text)}
    if measured and all(p.backward_peak_bytes is not None for p in measured):
        backward = [(p.size, p.backward_peak_bytes) for p in measured]
        found["backward"] = formula(backward, sizes.dimension, sizes.text)
    return found


def table(measured: list[Peaks], sizes: Sizes, title: str):
    """A rich table: the size, then both peaks."""
    from rich.table import Table

    grid = Table(title=title)
    grid.add_column(sizes.dimension, justify="right")
    for column in ("forward peak", "backward peak"):
        grid.add_column(f"{column} (bytes)", justify="right")
    for peaks in measured:
        backward = peaks.backward_peak_bytes
        grid.add_row(
            str(peaks.size),
            f"{peaks.forward_peak_bytes:,}",
            "-" if backward is None else f"{backward:,}",
        )
    return grid


_STYLES = {
    "forward": dict(color="tab:blue", marker="o"),
    "backward": dict(color="tab:orange", marker="s"),
}


def plot(
    measured: list[Peaks],
    failed: list[Failure],
    found: dict[str, Formula],
    sizes: Sizes,
    path: str,
    title: str,
) -> None:
    """Both peaks against the size, each labelled with its formula, and the sizes at which the
    program failed under the axis. PNG or SVG, from `path`'s suffix."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    peak = max(max(p.forward_peak_bytes, p.backward_peak_bytes or 0) for p in measured)
    unit, scale = byte_unit(peak)
    figure, ax = plt.subplots(figsize=(8, 6))
    x = [p.size for p in measured]
    for which, fit in found.items():
        y = [getattr(p, f"{which}_peak_bytes") / scale for p in measured]
        said = fit.text
        if fit.coefficients is not None:
            said = f"{polynomial_text(fit.coefficients, sizes.dimension)} bytes"
            if fit.first_size is not None:
                said += f" for {sizes.dimension} >= {fit.first_size}"
        ax.plot(x, y, label=f"{which} peak: {said}", **_STYLES[which])
    failures = ", ".join(str(failure.size) for failure in failed)
    ax.set_xlabel(sizes.dimension + (f"  (the step failed at {failures})" if failed else ""))
    if len(x) <= 16:
        ax.set_xticks(x)
    ax.set_ylabel(f"peak live memory ({unit})")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    ax.set_title(title, fontsize=12)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
