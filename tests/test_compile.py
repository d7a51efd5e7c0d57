"""aotspec.compile: the public contract of docs/contract.md, on the reference backend."""

import gc

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef

import aotspec

resize = torch.ops.inductor.resize_storage_bytes_


def test_backend_is_chosen_and_reported(monkeypatch):
    assert aotspec.compile(torch.sin, backend="reference").backend == "reference"
    monkeypatch.delenv("AOTSPEC_BACKEND", raising=False)
    assert aotspec.compile(torch.sin).backend == "fast"
    monkeypatch.setenv("AOTSPEC_BACKEND", "reference")
    assert aotspec.compile(torch.sin).backend == "reference"


def test_an_unknown_backend_names_the_valid_ones():
    with pytest.raises(ValueError, match="valid backends: 'reference', 'fast'"):
        aotspec.compile(torch.sin, backend="inductor")


def test_an_unknown_hooks_filter_names_the_valid_ones():
    with pytest.raises(ValueError, match="'donated', 'no_static', 'all'"):
        aotspec.compile(torch.sin, backend="reference", hooks_filter="some")


def test_steal_must_name_a_parameter():
    with pytest.raises(ValueError, match=r"not parameters of .*\[rule boxed.steal.lists-only\]"):
        aotspec.compile(lambda xs: xs[0], backend="reference", steal=("ys",))


def test_a_stolen_argument_must_be_a_list_of_tensors():
    compiled = aotspec.compile(lambda xs: xs[0] + 1, backend="reference", steal=("xs",))
    with pytest.raises(
        TypeError, match=r"must be a list of tensors, got tuple \[rule boxed.steal.lists-only\]"
    ):
        compiled((torch.ones(2),))


def test_recompiles_when_input_metadata_changes():
    compiled = aotspec.compile(lambda x: x * 2, backend="reference")
    compiled(torch.ones(3))
    compiled(torch.zeros(3))
    assert compiled.compilations == 1
    compiled(torch.ones(4))  # shape
    compiled(torch.ones(3, dtype=torch.float64))  # dtype
    compiled(torch.ones(6)[::2])  # strides
    assert compiled.compilations == 4
    base = torch.ones(3)
    zero = torch.ones(3)
    resize(zero, 0)
    two = aotspec.compile(lambda a, b: b + 1, backend="reference")
    two(base, torch.ones(3))
    two(base, base)  # aliasing between arguments
    two(zero, torch.ones(3))  # zero storage
    assert two.compilations == 3


def test_values_and_aliasing_match_eager_on_an_mlp():
    torch.manual_seed(0)
    x, w1, w2 = torch.randn(8, 4), torch.randn(16, 4), torch.randn(2, 16)

    def mlp(x, w1, w2):
        return torch.relu(x @ w1.t()) @ w2.t()

    out = aotspec.compile(mlp, backend="reference")(x, w1, w2)
    torch.testing.assert_close(out, mlp(x, w1, w2))


def test_a_failed_compile_touches_nothing():
    x = torch.arange(4.0)

    def shrink_after_write(x):
        x.add_(1)
        resize(x, 8)

    with pytest.raises(aotspec.UnsupportedError, match=r"rule resize.compiled.zero-only"):
        aotspec.compile(shrink_after_write, backend="reference")(x)
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0] and x.untyped_storage().nbytes() == 16


# r[boxed.steal.freed-at-last-use], as PyTorch #122535's test: a probe op inside the call sees the
# stolen activation freed.

_probe_saw: list[bool] = []
_watched: list[StorageWeakRef] = []


@torch.library.custom_op("aotspec_tests::probe", mutates_args=())
def probe(x: torch.Tensor) -> torch.Tensor:
    _probe_saw.append(all(ref.expired() for ref in _watched))
    return x.clone()


@probe.register_fake
def _(x):
    return torch.empty_like(x)


def _uses_activation_then_probes(activations):
    out = activations[0] + 1
    return torch.ops.aotspec_tests.probe(out)


@pytest.mark.parametrize("backend", ["reference", "fast"])
@pytest.mark.parametrize("stolen", [True, False])
def test_a_stolen_list_is_freed_before_a_later_op(stolen, backend):
    compiled = aotspec.compile(
        _uses_activation_then_probes, backend=backend, steal=("activations",) if stolen else ()
    )
    activations = [torch.ones(1000)]
    _watched[:] = [StorageWeakRef(activations[0].untyped_storage())]
    _probe_saw.clear()
    out = compiled(activations)
    assert out.tolist() == [2.0] * 1000
    assert _probe_saw == [stolen]
    assert len(activations) == (0 if stolen else 1)


def test_boxed_backward_frees_saved_values_before_the_unboxed_one_would():
    """r[autograd.saved-freed-in-backward]: on an MLP the boxed backward's peak is below the
    peak of the same backward with its argument list alive until it returns."""
    from aotspec.reference.compiled import run_compiled

    torch.manual_seed(0)
    inputs = [torch.randn(16, 32)] + [torch.randn(32, 32, requires_grad=True) for _ in range(4)]

    def mlp(x, *weights):
        for w in weights:
            x = torch.relu(x @ w.t())
        return x

    compiled = aotspec.compile(mlp, backend="reference")
    compiled(*inputs)
    plan = next(iter(compiled.plans.values()))
    peaks = {}
    for boxed in (True, False):
        run = run_compiled(plan, list(inputs), boxed=boxed)
        run.outputs[0].sum().backward()
        peaks[boxed] = run.backward_ledger.peak_bytes
    assert peaks[True] < peaks[False]


def _rows_written_with_history(a, b):
    a.add_(b * 2)
    return a + b


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_the_base_of_aliasing_arguments_is_looked_up_at_every_call(backend):
    """r[autograd.input-writes.synthetic-base]: one specialization serves every pair of rows of a
    base; each call writes its own base, and its gradient reaches that base's history."""
    compiled = aotspec.compile(_rows_written_with_history, backend=backend)
    for first in (1.0, 5.0):
        p = torch.tensor([[first, 2.0], [3.0, 4.0]], requires_grad=True)
        x = p * 1
        q = p.detach().clone().requires_grad_()
        y = q * 1
        out = compiled(x[0], x[1])
        expected = _rows_written_with_history(y[0], y[1])
        assert torch.equal(expected, out)
        assert torch.equal(y, x)
        out.sum().backward()
        expected.sum().backward()
        assert torch.equal(q.grad, p.grad)
    assert 1 == compiled.compilations


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_arguments_with_and_without_a_common_base_compile_apart(backend):
    """Which arguments share a base is part of the guard: the same layouts on one storage, once
    views of one base and once not, compile twice, and the second raises."""
    compiled = aotspec.compile(_rows_written_with_history, backend=backend)
    x = torch.ones(2, 2, requires_grad=True) * 1
    compiled(x[0], x[1])
    y = torch.ones(2, 2, requires_grad=True) * 1
    other = torch.empty(0).set_(y.untyped_storage(), 2, (2,), (1,))  # row 1, with no ._base
    with pytest.raises(aotspec.UnsupportedError, match="autograd.input-writes.aliased"):
        compiled(y[0], other)
    assert torch.equal(torch.ones(2, 2), y)  # r[functionalize.errors-before-running]
    assert 1 == compiled.compilations


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_dropping_the_outputs_without_a_backward_frees_the_saved_values(backend):
    """r[autograd.saved-freed-in-backward]: tanh saves its output, which the caller also holds.
    Once the caller drops it, the saved values go at once, as eager's do: nothing holds the
    compiled node in a cycle that only the garbage collector would break."""
    compiled = aotspec.compile(lambda x: (x * 3).tanh(), backend=backend)
    x = torch.randn(64, requires_grad=True)
    compiled(x)  # compiles
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        out = compiled(x)
        saved = StorageWeakRef(out.untyped_storage())
        del out
        assert saved.expired()
    finally:
        if gc_was_enabled:
            gc.enable()


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_create_graph_gives_eagers_first_order_gradients_and_refuses_the_second(backend):
    """r[autograd.double-backward]: the first-order gradient is eager's, with a history exactly
    where eager's has one (x sin x reads x in its derivative; 2 x does not), and differentiating
    it raises rather than miss the terms that the saved values carry."""
    x = torch.linspace(-1.0, 1.0, 5, requires_grad=True)
    (expected,) = torch.autograd.grad((x.sin() * x).sum(), x, create_graph=True)
    compiled = aotspec.compile(lambda x: (x.sin() * x).sum(), backend=backend)
    (gx,) = torch.autograd.grad(compiled(x), x, create_graph=True)
    torch.testing.assert_close(gx, expected.detach())
    assert gx.requires_grad and expected.requires_grad
    with pytest.raises(aotspec.UnsupportedError, match="double backward") as raised:
        torch.autograd.grad(gx.sum(), x)
    assert "autograd.double-backward" == raised.value.rule
    doubled = aotspec.compile(lambda x: (x * 2).sum(), backend=backend)
    (constant,) = torch.autograd.grad(doubled(x), x, create_graph=True)
    assert not constant.requires_grad  # as eager's 2 * ones
    torch.testing.assert_close(constant, torch.full((5,), 2.0))


@pytest.mark.parametrize("backend", ["reference", "fast", "eager-interpreter"])
def test_transforms_and_forward_mode_tangents_are_refused(backend):
    """r[boundary.import]: arguments are plain tensors. Inside torch.func.grad or vmap the call
    crashed on a wrapper without storage; a forward-mode tangent was dropped by the reference
    (its jvp came back None). Each is refused, naming the rule, with nothing run."""
    if backend == "eager-interpreter":

        def call(x):
            return aotspec.reference.run(lambda x: x.sin() * 2, x).outputs

    else:
        call = aotspec.compile(lambda x: x.sin() * 2, backend=backend)
    x = torch.linspace(-1.0, 1.0, 3)
    transforms = {
        "grad": lambda: torch.func.grad(lambda x: call(x).sum())(x),
        "vmap": lambda: torch.vmap(call)(torch.stack([x, x])),
        "jvp": lambda: torch.func.jvp(call, (x,), (torch.ones(3),)),
    }
    for name, transformed in transforms.items():
        with pytest.raises(aotspec.UnsupportedError) as raised:
            transformed()
        assert "boundary.import" == raised.value.rule, name
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(x, torch.ones(3))
        with pytest.raises(aotspec.UnsupportedError, match="forward-mode tangent"):
            call(dual)


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_call_under_another_autocast_state_compiles_again(backend):
    """r[capture.autocast]: one compiled function called with autocast off, on, then off again
    gives eager's dtype and values each time; before, the first specialization served every
    call (bfloat16 results without autocast, or float32 ones under it)."""

    def product(x, w):
        return x @ w

    compiled = aotspec.compile(product, backend=backend)
    x, w = torch.randn(4, 8), torch.randn(8, 4)
    for autocast in (False, True, False):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            expected, got = product(x, w), compiled(x, w)
        assert expected.dtype == got.dtype
        torch.testing.assert_close(got, expected)
    assert 2 == compiled.compilations


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_call_under_another_default_dtype_compiles_again(backend):
    """r[capture.default-dtype]: `torch.ones(4)` takes the default dtype at each call, as in
    eager; before, the reference kept the first call's float32 (and the fast backend's code
    disagreed with its own plan)."""

    def plus_ones(x):
        return x + torch.ones(4)

    compiled = aotspec.compile(plus_ones, backend=backend)
    x = torch.randn(4)
    compiled(x)
    torch.set_default_dtype(torch.float64)
    try:
        expected, got = plus_ones(x), compiled(x)
    finally:
        torch.set_default_dtype(torch.float32)
    assert torch.float64 == expected.dtype == got.dtype
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_module_running_other_code_compiles_again(backend):
    """r[capture.module-mode]: a module whose class is reassigned, or whose forward is replaced
    on the instance, runs its new code, as in eager; the plan of the old code served both,
    silently."""

    class Scales(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.tensor(3.0))

        def forward(self, x):
            return x * self.weight

    class Shifts(Scales):
        def forward(self, x):
            return x + self.weight

    model = Scales()
    compiled = aotspec.compile(lambda x: model(x), backend=backend)
    x = torch.arange(3.0)
    torch.testing.assert_close(compiled(x), x * 3)
    model.__class__ = Shifts
    torch.testing.assert_close(compiled(x), x + 3)
    model.forward = lambda x: x - model.weight
    torch.testing.assert_close(compiled(x), x - 3)
    assert 3 == compiled.compilations


def _activation(x):
    return x.relu()


def _uses_the_global_activation(x):
    return _activation(x) * 2


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_global_helper_rebound_to_other_code_compiles_again(backend, monkeypatch):
    """r[capture.module-mode]: the code of the functions a compiled function follows is part of
    what it assumes, as a module's class is."""
    compiled = aotspec.compile(_uses_the_global_activation, backend=backend)
    x = torch.tensor([-1.0, 2.0])
    torch.testing.assert_close(compiled(x), torch.tensor([0.0, 4.0]))
    monkeypatch.setitem(globals(), "_activation", lambda x: x.abs())
    torch.testing.assert_close(compiled(x), torch.tensor([2.0, 4.0]))
    assert 2 == compiled.compilations


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_model_eval_after_a_training_call_compiles_again(backend):
    """r[capture.module-mode]: after `model.eval()` the compiled model runs as eager's does in
    evaluation mode (no dropout, batch norm by its running statistics, which stay as they are);
    before, the training-mode specialization served the call, silently."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Dropout(0.5)
    )
    compiled = aotspec.compile(model, backend=backend)
    x = torch.randn(8, 4)
    compiled(x)  # training mode: a draw, and the running statistics move
    model.eval()
    statistics = model[1].running_mean.clone()
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(compiled(x), expected)
    torch.testing.assert_close(model[1].running_mean, statistics)
    assert 2 == compiled.compilations
