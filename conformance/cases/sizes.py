"""Cases for specs/sizes.md: symbolic plans, each case called at several sizes with dynamic
sizes asked for (`Case.dynamic`); `PlansTraced` counts the plans the guard of
`r[sizes.symbolic.guard]` makes an aotspec backend trace by each call."""

from __future__ import annotations

import torch

from ..case import (
    COMPILED_ONLY,
    AtSize,
    Case,
    Layout,
    PeakBytes,
    PlansTraced,
    RequiresGrad,
    Shares,
    Values,
    Version,
)

CASES: list[Case] = []


def _tokens_and_weight(n: int) -> dict:
    """n rows of 4 features, a 4 x 3 weight that requires grad, and one class per row."""
    x = torch.linspace(-1.0, 1.0, 4 * n).reshape(n, 4)
    w = torch.linspace(-0.5, 0.5, 12).reshape(4, 3).requires_grad_()
    return {"x": x, "w": w, "targets": torch.arange(n) % 3}


def _classify(x, w, targets):
    # the logits are reshaped by a size computed from x's (r[sizes.symbolic.arithmetic]), and
    # cross entropy's mean divides by n in its backward (r[sizes.symbolic.saved]); its nll_loss
    # is differentiated by eager's formula (r[sizes.symbolic.eager-derivatives])
    logits = (x @ w).reshape(x.shape[0] * 1, -1)
    return torch.nn.functional.cross_entropy(logits, targets)


def _eager_at(n: int, program, args: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager PyTorch's output of `program` at n rows, and the weight's gradient of its sum (as
    `Case.backward` takes it)."""
    world = _tokens_and_weight(n)
    out = program(*[world[name] for name in args])
    out.sum().backward()
    return out.detach(), world["w"].grad


_ROWS = (5, 7, 9)

CASES.append(
    Case(
        name="sizes.one-plan-serves-every-number-of-rows",
        rules=[
            "sizes.symbolic.dims",
            "sizes.symbolic.dynamo",
            "sizes.symbolic.guard",
            "sizes.symbolic.per-call",
            "sizes.symbolic.arithmetic",
            "sizes.symbolic.saved",
            "sizes.symbolic.decisions",
            "sizes.symbolic.eager-derivatives",
        ],
        setup=_tokens_and_weight,
        args=["x", "w", "targets"],
        program=_classify,
        sizes=_ROWS,
        dynamic=True,
        backward=True,
        # eager's loss and gradient at each size; one plan, traced at the first size, serves
        # the others: x's and targets' rows are one symbol of range 2 and up, w's sizes and x's
        # columns others (no size equals another at 5 rows, r[sizes.symbolic.duck]), and
        # nothing the trace decided depends on the rows
        expect=[
            PlansTraced(1),
            *[
                AtSize(n, expectation)
                for n in _ROWS
                for expectation in (
                    Values("out0", _eager_at(n, _classify, ["x", "w", "targets"])[0]),
                    Values("w.grad", _eager_at(n, _classify, ["x", "w", "targets"])[1]),
                )
            ],
        ],
        skip=COMPILED_ONLY,
    )
)


def _scores_of_n_classes(n: int) -> dict:
    """4 rows of scores over n classes, which require grad, and a class per row."""
    scores = torch.linspace(-2.0, 2.0, 4 * n).reshape(4, n).requires_grad_()
    return {"scores": scores, "targets": torch.arange(4) % n}


def _smoothed_loss(scores, targets):
    # label smoothing spreads 0.1 over the classes: the backward reads 0.1 / n, a float
    # computed from a size, which the forward saves as a number (r[sizes.symbolic.saved])
    return torch.nn.functional.cross_entropy(scores, targets, label_smoothing=0.1)


def _smoothed_loss_and_gradient(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager PyTorch's loss at n classes, and the scores' gradient of two backward passes,
    the first retaining the graph."""
    world = _scores_of_n_classes(n)
    loss = _smoothed_loss(world["scores"], world["targets"])
    loss.backward(retain_graph=True)
    loss.backward()
    return loss.detach(), world["scores"].grad


_CLASSES = (3, 5, 7)

CASES.append(
    Case(
        name="sizes.a-float-computed-from-sizes-is-saved-as-a-number",
        rules=["sizes.symbolic.saved", "autograd.retain-graph"],
        setup=_scores_of_n_classes,
        args=["scores", "targets"],
        program=_smoothed_loss,
        sizes=_CLASSES,
        dynamic=True,
        backward=True,
        retain_graph=(True, False),
        # eager's loss and gradient at each number of classes, the gradient accumulated over
        # both passes; the retained node holds the saved float, which holds no storage
        expect=[
            *[
                AtSize(n, expectation)
                for n in _CLASSES
                for expectation in (
                    Values("out0", _smoothed_loss_and_gradient(n)[0]),
                    Values("scores.grad", _smoothed_loss_and_gradient(n)[1]),
                )
            ],
        ],
    )
)


def _shifted_rows(x, shift):
    # under torch.compile the shift, once it changed, is an int Dynamo passes as a symbol
    # (r[sizes.symbolic.dynamo]); select's dim counts from the end below 0
    return x.roll(shift, 0) * x.select(0, shift)


def _eager_shifted_rows(shift: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager PyTorch's output at `shift`, and x's gradient of its sum."""
    x = torch.linspace(-1.0, 1.0, 30).reshape(6, 5).requires_grad_()
    out = _shifted_rows(x, shift)
    out.sum().backward()
    return out.detach(), x.grad


_SHIFTS = (2, 0, 3, -1)

CASES.append(
    Case(
        name="sizes.an-int-argument-is-guarded-at-every-value",
        rules=["sizes.symbolic.dynamo", "sizes.symbolic.guard"],
        setup=lambda shift: {
            "x": torch.linspace(-1.0, 1.0, 30).reshape(6, 5).requires_grad_(),
            "shift": shift,
        },
        args=["x", "shift"],
        program=_shifted_rows,
        sizes=_SHIFTS,
        backward=True,
        # eager's values and gradient at each shift: a plan traced at shift 0 holds 0 as a
        # number and serves no other shift, and a shift below 0 is a symbol of no sign
        expect=[
            AtSize(shift, expectation)
            for shift in _SHIFTS
            for expectation in (
                Values("out0", _eager_shifted_rows(shift)[0]),
                Values("x.grad", _eager_shifted_rows(shift)[1]),
            )
        ],
    )
)


def _doubles_twice(x):
    return x.exp().mul(2).sum()


_LENGTHS = (4, 1, 6)

CASES.append(
    Case(
        name="sizes.size-one-is-traced-as-a-number",
        rules=["sizes.symbolic.duck", "sizes.symbolic.guard", "sizes.symbolic.per-call"],
        setup=lambda n: {"x": torch.linspace(0.0, 1.0, n)},
        args=["x"],
        program=_doubles_twice,
        sizes=_LENGTHS,
        dynamic=True,
        # the plan traced at length 4 has a symbol of range 2 and up: length 1 traces a plan
        # of its own, and length 6 is served by the first. At each length n the peak is the
        # caller's x, exp's result and mul's, 4n bytes each, while mul computes
        expect=[
            AtSize(4, PlansTraced(1)),
            AtSize(1, PlansTraced(2)),
            AtSize(6, PlansTraced(2)),
            *[
                AtSize(n, expectation)
                for n in _LENGTHS
                for expectation in (
                    Values("out0", torch.linspace(0.0, 1.0, n).exp().sum() * 2),
                    PeakBytes(12 * n),
                )
            ],
        ],
        skip=COMPILED_ONLY,
    )
)


def _two_lengths(n: int) -> dict:
    """A vector of n elements and one of 4: equal at n = 4."""
    return {"a": torch.ones(n), "b": torch.full((4,), 2.0)}


def _sums(a, b):
    return a.sum() + b.sum()


_A_LENGTHS = (4, 6, 7)

CASES.append(
    Case(
        name="sizes.equal-sizes-are-one-symbol",
        rules=["sizes.symbolic.duck", "sizes.symbolic.guard"],
        setup=_two_lengths,
        args=["a", "b"],
        program=_sums,
        sizes=_A_LENGTHS,
        dynamic=True,
        # at length 4 both vectors' sizes are one symbol, which length 6 binds to 6 and 4: a
        # second plan, with two symbols, which serves length 7
        expect=[
            AtSize(4, PlansTraced(1)),
            AtSize(6, PlansTraced(2)),
            AtSize(7, PlansTraced(2)),
            *[AtSize(n, Values("out0", n + 8.0)) for n in _A_LENGTHS],
        ],
        skip=COMPILED_ONLY,
    )
)


def _ramp_and_its_head(n: int) -> dict:
    x = torch.arange(2.0 * n)
    return {"x": x, "head": x[:n]}


def _scaled_sum(x, head):
    return (x.sum() + head.sum()) * 1.5


_HEAD_LENGTHS = (3, 5)

CASES.append(
    Case(
        name="sizes.inputs-on-one-storage-are-planned-per-size",
        rules=["sizes.symbolic.scope"],
        setup=_ramp_and_its_head,
        args=["x", "head"],
        program=_scaled_sum,
        sizes=_HEAD_LENGTHS,
        dynamic=True,
        # x and head share a storage: each size traces a plan of its own, with eager's values
        expect=[
            Shares("x", "head"),
            AtSize(3, PlansTraced(1)),
            AtSize(5, PlansTraced(2)),
            *[
                AtSize(n, Values("out0", (sum(range(2 * n)) + sum(range(n))) * 1.5))
                for n in _HEAD_LENGTHS
            ],
        ],
        skip=COMPILED_ONLY,
    )
)


def _doubles_in_place_then_adds_one(x):
    x.mul_(2)
    return x + 1


_WRITTEN_LENGTHS = (4, 9, 2)

CASES.append(
    Case(
        name="sizes.input-write-reaches-the-caller-with-one-plan",
        rules=["sizes.symbolic.per-call", "functionalize.epilogue.data"],
        setup=lambda n: {"x": torch.arange(float(n))},
        args=["x"],
        program=_doubles_in_place_then_adds_one,
        sizes=_WRITTEN_LENGTHS,
        dynamic=True,
        # eager at length n: x holds 2 * arange(n), advanced once, and the output one more; the
        # epilogue's write of the whole of x is at each call's length
        expect=[
            PlansTraced(1),
            Version("x", 1),
            *[
                AtSize(n, expectation)
                for n in _WRITTEN_LENGTHS
                for expectation in (
                    Values("x", 2 * torch.arange(float(n))),
                    Values("out0", 2 * torch.arange(float(n)) + 1),
                )
            ],
        ],
        skip=COMPILED_ONLY,
    )
)


def _scores_by_class(x, w):
    return (x @ w).t()


CASES.append(
    Case(
        name="sizes.a-tensor-output-and-its-gradient-with-one-plan",
        rules=["sizes.symbolic.guard", "sizes.symbolic.per-call"],
        setup=_tokens_and_weight,
        args=["x", "w"],
        program=_scores_by_class,
        sizes=_ROWS,
        dynamic=True,
        backward=True,
        # the output is a 3 x n view with n as a symbol, so the backward's incoming gradient is
        # one too: one plan serves every size, with eager's scores, their transposed strides
        # and the gradient of their sum at each
        expect=[
            PlansTraced(1),
            *[
                AtSize(n, expectation)
                for n in _ROWS
                for expectation in (
                    Values("out0", _eager_at(n, _scores_by_class, ["x", "w"])[0]),
                    Layout("out0", shape=(3, n), strides=(1, 3)),
                    Values("w.grad", _eager_at(n, _scores_by_class, ["x", "w"])[1]),
                )
            ],
        ],
        skip=COMPILED_ONLY,
    )
)


def _one_row(n: int) -> dict:
    return {"x": torch.linspace(-1.0, 1.0, n).reshape(1, n)}


def _added_then_squeezed(x):
    x.add_(2.0)
    x.squeeze_()
    return x * 1


def _eager_added_then_squeezed(n: int) -> torch.Tensor:
    """Eager PyTorch's x after the call at n columns (the output has its values too)."""
    x = _one_row(n)["x"]
    _added_then_squeezed(x)
    return x


_COLUMNS = (3, 1, 2)

CASES.append(
    Case(
        name="sizes.an-input-squeezed-in-place-is-traced-as-passed",
        rules=["sizes.symbolic.inputs-as-passed", "autograd.metadata.inputs"],
        setup=_one_row,
        args=["x"],
        program=_added_then_squeezed,
        sizes=_COLUMNS,
        dynamic=True,
        # eager's x and output at each size: at 1 column the squeeze_ leaves x 0-dim, and the
        # add before it is traced on x as passed, 1 x 1 (a trace on capture's squeezed x wrote
        # one element's value into a 0-dim layout, and the reference raised)
        expect=[
            AtSize(n, expectation)
            for n in _COLUMNS
            for expectation in (
                Values("x", _eager_added_then_squeezed(n)),
                Layout("x", shape=tuple(_eager_added_then_squeezed(n).shape)),
                Values("out0", _eager_added_then_squeezed(n)),
            )
        ],
    )
)


def _two_vectors(n: int) -> dict:
    return {"x": torch.linspace(-1.0, 1.0, n).requires_grad_(), "y": torch.ones(3)}


def _writes_then_doubles_with_grad(x, y):
    # called under torch.no_grad(): the write records without grad, the product with it; the
    # write's read back of y records size arithmetic that the trace drops
    y.add_(2.0)
    with torch.enable_grad():
        return x * 2.0


def _eager_doubled_gradient(n: int) -> torch.Tensor:
    """Eager PyTorch's gradient of x after the call under torch.no_grad() and a backward."""
    world = _two_vectors(n)
    with torch.no_grad():
        out = _writes_then_doubles_with_grad(world["x"], world["y"])
    out.sum().backward()
    return world["x"].grad


_LENGTHS = (4, 1, 2)

CASES.append(
    Case(
        name="sizes.an-op-under-enable-grad-keeps-its-mode-in-a-symbolic-trace",
        rules=["sizes.symbolic.marks", "capture.grad-mode"],
        setup=_two_vectors,
        args=["x", "y"],
        program=_writes_then_doubles_with_grad,
        sizes=_LENGTHS,
        dynamic=True,
        grad_enabled=False,
        backward=True,
        # eager's output requires grad and x gets 2 everywhere; y is written at every call
        expect=[
            AtSize(n, expectation)
            for n in _LENGTHS
            for expectation in (
                RequiresGrad("out0", True),
                Values("x.grad", _eager_doubled_gradient(n)),
                Values("y", torch.full((3,), 3.0)),
            )
        ],
    )
)
