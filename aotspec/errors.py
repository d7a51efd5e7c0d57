"""The closed error taxonomy of aotspec.

Every error a user can see names the spec rule it enforces and says what to do about it.

- `UnsupportedError`: the program is outside the specification (an op not in the op table, a
  resize pattern the spec rejects). Raised before any caller tensor is touched.
- `SpecViolation`: the program broke a rule at run time (for example it read bytes beyond a
  storage's size, which eager PyTorch on CPU answers with a segfault). Caller tensors are left as
  they were.
- `InternalError`: a state that cannot happen for a valid program; a bug in aotspec.
- `HooksWarning`: saved-tensor hooks are active but apply to nothing
  (`r[hooks.filter.donated-empty]`).
"""

from __future__ import annotations

#: r[autograd.retain-graph]: eager's words for a backward through saved values that an earlier
#: backward freed (a `RuntimeError`, as eager raises it).
SECOND_BACKWARD = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you "
    "call .backward() or autograd.grad(). Specify retain_graph=True if you need to backward "
    "through the graph a second time or if you need to access saved tensors after calling "
    "backward."
)


def _format(problem: str, rule: str, fix: str) -> str:
    # `aotspec rule ID` prints the rule an error names, from the chapters the package ships.
    return f"{problem} [rule {rule}]. {fix}"


class UnsupportedError(RuntimeError):
    """The program is outside the specification; nothing was run and no input was touched.

    `refusals` lists one UnsupportedError per op or pattern refused, when one error stands for
    several (`r[ops.unsupported-all]`); otherwise it holds the error itself."""

    def __init__(self, problem: str, *, rule: str, fix: str, refusals: tuple = ()):
        super().__init__(_format(problem, rule, fix))
        self.problem = problem
        self.rule = rule
        self.fix = fix
        self.refusals: tuple[UnsupportedError, ...] = refusals or (self,)


class SpecViolation(RuntimeError):
    """The program broke a rule of the specification while it ran."""

    def __init__(self, problem: str, *, rule: str, fix: str):
        super().__init__(_format(problem, rule, fix))
        self.rule = rule


class InternalError(AssertionError):
    """A state no valid program reaches: please report it with the program that caused it."""


class HooksWarning(UserWarning):
    """Saved-tensor hooks were active around a compiled call but the filter applied them to
    nothing."""
