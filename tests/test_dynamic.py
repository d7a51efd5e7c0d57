"""Symbolic plans (specs/sizes.md): with dynamic sizes, one plan serves every size that keeps
what tracing decided, with eager's values and gradients and a plan's own memory at each size.
The conformance cases of `conformance/cases/sizes.py` pin the rules; these tests run real
training steps, through `aotspec.compile` and through `torch.compile`, on both backends."""

from __future__ import annotations

import pytest
import torch

import aotspec


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5), torch.nn.LogSoftmax(-1)
    )


def _step(model, x, targets):
    return torch.nn.functional.nll_loss(model(x), targets)


def _batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(n)
    return torch.randn(n, 8, generator=generator), torch.arange(n) % 5


def _eager_step(model, n: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    loss = _step(model, *_batch(n))
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def _compiled_step(model, compiled, n: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    loss = compiled(*_batch(n))
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_one_plan_serves_every_batch_with_eager_values(backend):
    model, eager = _mlp(), _mlp()
    compiled = aotspec.compile(lambda x, t: _step(model, x, t), backend=backend, dynamic=True)
    for n in (6, 11, 3, 6):
        loss, grads = _compiled_step(model, compiled, n)
        expected_loss, expected_grads = _eager_step(eager, n)
        torch.testing.assert_close(loss, expected_loss)
        torch.testing.assert_close(grads, expected_grads)
    assert compiled.compilations == 1
    assert len(compiled.plans) == 3  # the plan at each of the three sizes, for later calls


def test_the_fast_backend_generates_a_symbolic_plans_code_once_for_every_size():
    """r[sizes.symbolic.per-call]: the fast backend's code of a symbolic plan computes the
    layouts it restores from the sizes' symbols, so each size runs the one generated code (no
    code is generated per size), and each gets eager's values, strides and gradients. The
    transposed input makes `mse_loss_backward` lay out its result against the meta kernel's
    strides, which the code restores at each size."""
    weight = torch.randn(3, 4, requires_grad=True)

    def regress(x, target):
        return torch.nn.functional.mse_loss(x @ weight.t(), target.t(), reduction="none")

    compiled = aotspec.compile(regress, backend="fast", dynamic=True)
    for n in (5, 9, 2):
        x, target = torch.randn(n, 4), torch.randn(3, n)
        weight.grad = None
        loss = compiled(x, target)
        loss.sum().backward()
        compiled_grad = weight.grad.clone()
        weight.grad = None
        expected = regress(x, target)
        expected.sum().backward()
        torch.testing.assert_close(loss, expected)
        assert loss.stride() == expected.stride()
        torch.testing.assert_close(compiled_grad, weight.grad)
    assert compiled.compilations == 1
    fast_plans = list(compiled.plans.values())
    assert len(fast_plans) == 3
    for name in ("forward", "backward"):
        codes = {getattr(fast, name).function.__code__ for fast in fast_plans}
        assert len(codes) == 1, f"the {name} was generated {len(codes)} times"
        assert "def sized(" in getattr(fast_plans[0], name).code


def test_a_symbolic_plan_has_the_memory_of_a_plan_for_each_size():
    """r[sizes.symbolic.per-call]: the reference's ledger at each size is that of a plan traced
    for that size alone, forward and backward."""
    model = _mlp()
    symbolic = aotspec.compile(lambda x, t: _step(model, x, t), backend="reference", dynamic=True)
    per_size = aotspec.compile(lambda x, t: _step(model, x, t), backend="reference")
    for n in (6, 11, 3):
        peaks = []
        for compiled in (symbolic, per_size):
            _compiled_step(model, compiled, n)
            run = compiled.last_run
            peaks.append((run.ledger.peak_bytes, run.backward_ledger.peak_bytes))
        assert peaks[0] == peaks[1], f"at batch {n}"
    assert (symbolic.compilations, per_size.compilations) == (1, 3)


def test_a_relation_tracing_decided_makes_another_plan_where_it_fails():
    """r[sizes.symbolic.guard], r[sizes.symbolic.decisions]: a branch on a size is decided at
    the traced size and kept as a guard."""

    def branches(x):
        return x * 2 if x.shape[0] > 4 else x * 3

    compiled = aotspec.compile(branches, backend="reference", dynamic=True)
    for n, plans, factor in ((6, 1, 2), (9, 1, 2), (3, 2, 3), (4, 2, 3), (7, 2, 2)):
        x = torch.arange(float(n))
        torch.testing.assert_close(compiled(x), x * factor)
        assert compiled.compilations == plans, f"at size {n}"


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_cube_whose_sides_are_one_symbol_gets_one_plan(backend):
    """r[sizes.symbolic.decisions]: the sides of an n x n x n input are one symbol (duck
    sizing), so its storage's bytes are a cubic expression of it; functionalization compares
    them with the bytes at entry to decide the epilogue, a decision and not a graph node. The
    tracer recorded the comparison, failed on the untracked expression, and every size got a
    plan of its own."""

    def scaled(x, w):
        return (x.exp() * w).sum()

    compiled = aotspec.compile(scaled, backend=backend, dynamic=True)
    for n in (2, 3, 4):
        x = torch.linspace(-1.0, 1.0, n**3).reshape(n, n, n)
        w = torch.linspace(0.5, 1.5, n, requires_grad=True)
        loss = compiled(x, w)
        loss.backward()
        torch.testing.assert_close(loss, (x.exp() * w).sum())
        torch.testing.assert_close(w.grad, x.exp().sum(dim=(0, 1)))
    assert compiled.compilations == 1


def test_an_activation_and_a_slice_of_a_larger_storage_as_inputs():
    """Inputs a symbolic plan is traced on keep their facts: a non-leaf that requires grad, and
    a view of part of a storage (whose bytes are then no expression of its sizes, so each size
    is planned alone, `r[sizes.symbolic.scope]`), each with eager's values and gradients."""
    weight = torch.randn(4, 3, requires_grad=True)

    def project(activation, rows):
        return (activation @ weight).tanh().sum() + rows.sum()

    compiled = aotspec.compile(project, backend="reference", dynamic=True)
    for n in (5, 8):
        leaf = torch.randn(n, 4, requires_grad=True)
        activation = leaf * 2
        rows = torch.arange(30.0).reshape(10, 3)[:n]
        weight.grad = None
        compiled(activation, rows).backward()
        compiled_grads = (leaf.grad.clone(), weight.grad.clone())
        leaf.grad, weight.grad = None, None
        project(leaf * 2, rows).backward()
        torch.testing.assert_close(compiled_grads, (leaf.grad, weight.grad))
    assert compiled.compilations == 2


def test_dynamic_must_be_true_or_false():
    with pytest.raises(ValueError, match="dynamic=.*pass True"):
        aotspec.compile(torch.sin, dynamic="batch")


class _Sequences(torch.nn.Module):
    """An embedding, a transformer layer (dropout on) and a head, trained on token sequences."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embedding = torch.nn.Embedding(50, 16)
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.head = torch.nn.Linear(16, 50)

    def forward(self, tokens):
        logits = self.head(self.layer(self.embedding(tokens)))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())


def _plans_of(monkeypatch) -> list:
    """The functions `aotspec.compile` makes from now on (the Dynamo backend calls it)."""
    made = []
    original = aotspec.compile

    def counting(*args, **kwargs):
        made.append(original(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(aotspec, "compile", counting)
    return made


@pytest.mark.parametrize(("dynamic", "plans"), [(True, 1), (None, 2)])
def test_torch_compile_traces_one_plan_for_the_sizes_dynamo_made_symbols(
    monkeypatch, dynamic, plans
):
    """r[sizes.symbolic.dynamo]: under `dynamic=True` Dynamo's graph has symbolic lengths from
    the first call; under its automatic dynamic shapes, from the second length on."""
    torch._dynamo.reset()
    model, eager = _Sequences(), _Sequences()
    made = _plans_of(monkeypatch)
    compiled = torch.compile(model, backend="aotspec", dynamic=dynamic)
    for length in (6, 9, 13, 7):
        tokens = torch.arange(3 * length).reshape(3, length) % 50
        for module in (model, eager):
            module.zero_grad()
        torch.manual_seed(length)
        loss = compiled(tokens)
        loss.backward()
        torch.manual_seed(length)
        expected = eager(tokens)
        expected.backward()
        torch.testing.assert_close(loss, expected)
        for mine, theirs in zip(model.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(mine.grad, theirs.grad)
    assert sum(function.compilations for function in made) == plans
    torch._dynamo.reset()


def _rolls_by_a_row(x, shift):
    return x.roll(shift, 0) * x.select(0, shift)


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_an_int_dynamo_made_a_symbol_is_guarded_at_every_value(backend):
    """r[sizes.symbolic.dynamo], r[sizes.symbolic.guard]: once the shift changed, Dynamo passes
    it as a symbolic int and serves every shift with one graph. The plan traced at shift 0 holds
    0 as a number and must not serve shift 3 (it did, silently, with shift 0's values), and a
    shift below 0 is a symbol of no sign (tracing at -1 raised an AssertionError)."""
    torch._dynamo.reset()
    compiled = torch.compile(_rolls_by_a_row, backend="aotspec", options={"backend": backend})
    for shift in (2, 0, 3, -1, 1, -4):
        x = torch.linspace(-1.0, 1.0, 30).reshape(6, 5).requires_grad_()
        eager_x = x.detach().clone().requires_grad_()
        out = compiled(x, shift)
        out.pow(2).sum().backward()
        expected = _rolls_by_a_row(eager_x, shift)
        expected.pow(2).sum().backward()
        torch.testing.assert_close(out, expected, msg=f"shift {shift}")
        torch.testing.assert_close(x.grad, eager_x.grad, msg=f"shift {shift}")
    torch._dynamo.reset()


def test_a_symbolic_plan_keeps_its_latest_sizes_and_serves_dropped_ones_again():
    """A compiled function keeps `AT_SIZES_KEPT` symbolic plans at a call's sizes, the latest
    used: past that, the least recently used size is dropped, and a call at it again is served
    by the symbolic plan (no trace), with eager's values."""
    kept = aotspec.api.AT_SIZES_KEPT
    compiled = aotspec.compile(lambda x: (x * 2).cumsum(0), backend="fast", dynamic=True)
    for n in range(2, kept + 6):
        compiled(torch.ones(n))
    assert len(compiled.plans) == kept
    plans = compiled.plans.values()
    sizes = sorted(fast.plan.functional.inputs[0].layout.sizes[0] for fast in plans)
    assert sizes == list(range(6, kept + 6))  # 2 to 5, the least recently used, were dropped
    compiled(torch.ones(6))  # the oldest, used again: 7 is now the least recently used
    torch.testing.assert_close(compiled(torch.ones(3)), torch.arange(2.0, 8.0, 2.0))
    sizes = {fast.plan.functional.inputs[0].layout.sizes[0] for fast in compiled.plans.values()}
    assert 6 in sizes and 7 not in sizes and 3 in sizes
    assert compiled.compilations == 1
    assert len(compiled.plans) == kept


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_which_outputs_carry_a_gradient_is_asked_again_where_sizes_change_their_number(backend):
    """r[autograd.requires-grad.op-outputs]: eager's answer is remembered without sizes, but
    with the number of outputs, which sizes decide for `split`: two programs splitting 4 and 6
    elements into pairs get 2 and 3 outputs that carry gradients, each with eager's gradient."""

    def halves(x):
        return [part * (k + 1) for k, part in enumerate(x.split(2))]

    for n in (4, 6):
        x = torch.arange(float(n), requires_grad=True)
        compiled = aotspec.compile(halves, backend=backend)
        torch.stack([part.sum() for part in compiled(x)]).sum().backward()
        expected = torch.arange(float(n)).requires_grad_()
        torch.stack([part.sum() for part in halves(expected)]).sum().backward()
        torch.testing.assert_close(x.grad, expected.grad)
