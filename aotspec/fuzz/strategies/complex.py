"""Complex programs: chains of complex ops on two complex tensors the caller passes.

`complex_programs()` draws a `ComplexProgram`: a complex dtype, the caller's two square tensors
(both require grad), and a chain of steps, each of which replaces `x` by an op of `x` and `y`
that eager defines for complex tensors: the table's arithmetic and matmul (values from ATen,
conjugated gradients: `r[ops.complex.aten-values]`, `r[ops.complex.conjugate-grad]`), conjugate
views, views between complex and real (`r[memory.layout.conj-neg]`,
`r[functionalize.complex-views]`), an in-place write through `.imag`, the fft family and `polar`.
The program returns `|x|` and `view_as_real(x)`, real values a loss can be summed from.
"""

from __future__ import annotations

import torch
from attrs import frozen
from hypothesis import strategies as st

from .sampling import sampled_from

#: step name -> (the op, its source), both on `x` and `y`.
STEPS: dict[str, str] = {
    "mul": "x * y",
    "div": "x / (y.abs() + 1)",
    "add_alpha": "torch.add(x, y, alpha=0.5 - 1j)",
    "mm": "x @ y",
    "exp": "(x / (x.abs() + 1)).exp()",
    "conj": "x.conj() * y",
    "conj_mm": "x.conj() @ y",
    "via_real": "torch.view_as_complex(torch.view_as_real(x) * 2)",
    "imag": "x + x.imag",
    "write_imag": "_write_imag(x)",
    "fft": "torch.fft.fft(x, norm='ortho')",
    "ifft2": "torch.fft.ifft2(x)",
    "hfft": "torch.fft.fft(torch.fft.hfft(x), n=x.shape[-1])",
    "polar": "torch.polar(x.abs(), y.angle())",
    "abs_angle": "x.abs() * y + x.angle()",
}


def _write_imag(x):
    """A write through a real view of a complex intermediate."""
    x = x * 1
    x.imag.mul_(-2)
    return x


@frozen
class ComplexProgram:
    dtype: str
    size: int
    x: tuple[complex, ...]
    y: tuple[complex, ...]
    steps: tuple[str, ...]

    def inputs(self) -> list[torch.Tensor]:
        dtype = getattr(torch, self.dtype)
        shape = (self.size, self.size)
        return [
            torch.tensor(values, dtype=dtype).reshape(shape).requires_grad_()
            for values in (self.x, self.y)
        ]

    def function(self):
        scope = {"torch": torch, "_write_imag": _write_imag}
        exec(self.source(), scope)  # noqa: S102 - the program is our own generated source
        return scope["program"]

    def source(self) -> str:
        lines = ["def program(x, y):"]
        lines += [f"    x = {STEPS[step]}" for step in self.steps]
        lines.append("    return x.abs(), torch.view_as_real(x.resolve_conj())")
        return "\n".join(lines)

    def __str__(self) -> str:
        return f"{self.source()}\n# inputs: {self.inputs()}"


_PARTS = st.floats(-2.0, 2.0, allow_nan=False, width=32)
_NUMBERS = st.builds(complex, _PARTS, _PARTS)


@st.composite
def complex_programs(draw, steps: tuple[str, ...] = tuple(STEPS)) -> ComplexProgram:
    """A complex program whose steps are drawn from `steps` (names of `STEPS`)."""
    size = draw(st.integers(2, 3))  # hfft needs 2 points
    numbers = st.lists(_NUMBERS, min_size=size * size, max_size=size * size).map(tuple)
    return ComplexProgram(
        dtype=draw(sampled_from(["complex64", "complex128"])),
        size=size,
        x=draw(numbers),
        y=draw(numbers),
        steps=tuple(draw(st.lists(sampled_from(sorted(steps)), min_size=1, max_size=4))),
    )
