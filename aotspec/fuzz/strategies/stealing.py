"""Programs that take a stolen list.

Generates `stealing_programs()`: a `Stealing` program is a `Program` (program.py)
run after reading a list of activations the caller hands over with
`aotspec.compile(..., steal=("acts",))`: the call empties the caller's list and frees each
activation after its last use inside the call (`r[boxed.steal]`). The activations are only read
(valid by construction: the spec rejects writing, resizing, rebinding or returning a stolen
tensor), by a chain of pointwise ops whose result is the first output, so they die early in the
call while the program's own work follows. With backward, one program in two steals activations
that require grad, as a training step's are: each is `act{k}_leaf * 1` of a leaf the caller
keeps, whose gradient flows through the stolen tensor, and which dies at its last use inside the
call like any stolen tensor (r[boxed.steal.freed-at-last-use]): their memory is compared, and
their leaves' gradients.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from attrs import frozen
from hypothesis import strategies as st

from .grad import grad_programs
from .mutations import programs
from .program import Program, as_function, literal, source
from .sampling import sampled_from
from .setups import GRAD_VALUES

ACTIVATION_SIZE = 4
#: How an activation is read, as a method name; the reads are added up.
READS = ["exp", "neg", "abs", "relu", "sigmoid"]


@frozen
class Stealing:
    program: Program
    #: Values of each activation (float32, shape (4,)); the caller's list holds only these.
    activations: tuple[tuple[float, ...], ...]
    #: The method reading each activation.
    reads: tuple[str, ...]
    #: Each activation is `act{k}_leaf * 1` of a leaf that requires grad, which the caller keeps.
    requires_grad: bool = False


@st.composite
def stealing_programs(draw, backward: bool = False) -> Stealing:
    """A mutation program (`backward`: a program with backward) after 1-3 stolen activations."""
    program = draw(grad_programs() if backward else programs(compiled=True))
    count = draw(st.integers(1, 3))
    values = st.lists(
        sampled_from(GRAD_VALUES), min_size=ACTIVATION_SIZE, max_size=ACTIVATION_SIZE
    )
    activations = tuple(tuple(draw(values)) for _ in range(count))
    reads = tuple(draw(sampled_from(READS)) for _ in range(count))
    requires_grad = backward and draw(st.booleans())
    return Stealing(program, activations, reads, requires_grad)


def make_activations(
    stealing: Stealing, named: dict | None = None, dtype: torch.dtype = torch.float32
) -> list[torch.Tensor]:
    """The caller's list: the only references to the activations; when they require grad, each
    is made from a leaf, which goes in `named` (`act0_leaf`, ...) when it is given (see the module
    docstring). `dtype`: float64 only for the numeric oracle."""
    if not stealing.requires_grad:
        return [torch.tensor(values, dtype=dtype) for values in stealing.activations]
    acts = []
    for k, values in enumerate(stealing.activations):
        leaf = torch.tensor(values, dtype=dtype, requires_grad=True)
        acts.append(leaf * 1)
        if named is not None:
            named[f"act{k}_leaf"] = leaf
    return acts


def as_stealing_function(stealing: Stealing) -> Callable:
    """`stealing(acts, *xs)`: the sum of the reads of `acts`, then the program's outputs."""
    program_fn = as_function(stealing.program)
    reads = stealing.reads

    def stealing_fn(acts, *xs):
        total = getattr(acts[0], reads[0])()
        for act, read in zip(acts[1:], reads[1:], strict=True):
            total = total + getattr(act, read)()
        return (total, *program_fn(*xs))

    return stealing_fn


def stealing_source(stealing: Stealing) -> str:
    """`make_inputs`, `program`, `make_activations` and `stealing` as Python."""
    grad = ", requires_grad=True" if stealing.requires_grad else ""
    times = " * 1" if stealing.requires_grad else ""
    values = ", ".join(
        f"torch.tensor({literal(list(v))}{grad}){times}" for v in stealing.activations
    )
    first, *rest = [f"acts[{k}].{read}()" for k, read in enumerate(stealing.reads)]
    lines = [
        source(stealing.program),
        "",
        "def make_activations():",
        f"    return [{values}]",
        "",
        "",
        "def stealing(acts, *xs):",
        f"    total = {' + '.join([first, *rest])}",
        "    return (total, *program(*xs))",
        "",
    ]
    return "\n".join(lines)
