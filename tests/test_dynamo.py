"""`torch.compile(model, backend="aotspec")`: registration, option plumbing, and eager behaviour
(outputs, parameter gradients, input mutations) on both aotspec backends."""

from __future__ import annotations

import importlib.metadata

import pytest
import torch

import aotspec
from aotspec.dynamo import aotspec_backend
from aotspec.reference.lift import NOTHING_LIFTED, lift


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Spy:
    """A backend callable that compiles with aotspec_backend and keeps what it returned."""

    def __init__(self):
        self.compiled = []

    def __call__(self, graph_module, example_inputs, **kwargs):
        compiled = aotspec_backend(graph_module, example_inputs, **kwargs)
        self.compiled.append(compiled)
        return compiled


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def outputs_and_grads(model: torch.nn.Module, x: torch.Tensor):
    for p in model.parameters():
        p.grad = None
    out = model(x)
    out.square().sum().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


def test_entry_point_registers_the_backend():
    entry_points = importlib.metadata.entry_points(group="torch_dynamo_backends")
    assert [ep.value for ep in entry_points if ep.name == "aotspec"] == [
        "aotspec.dynamo:aotspec_backend"
    ]
    assert "aotspec" in torch._dynamo.list_backends()


@pytest.mark.parametrize("backend", ["fast", "reference"])
def test_mlp_outputs_and_parameter_grads_equal_eager(backend):
    model, x = mlp(), torch.randn(5, 4)
    expected, expected_grads = outputs_and_grads(model, x)
    compiled = torch.compile(model, backend="aotspec", options={"backend": backend})
    got, grads = outputs_and_grads(compiled, x)
    torch.testing.assert_close(got, expected)
    for got_grad, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got_grad, want)


def test_input_mutation_reaches_the_caller():
    def bump_then_scale(x, y):
        x.add_(1)
        return x * y

    x, y = torch.zeros(3), torch.full((3,), 2.0)
    out = torch.compile(bump_then_scale, backend="aotspec")(x, y)
    assert x.tolist() == [1.0, 1.0, 1.0]
    assert out.tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("backend", ["fast", "reference"])
def test_gradient_carrying_input_writes_give_the_caller_the_history(backend):
    """r[autograd.input-writes] through Dynamo: a non-leaf input written with grad mode on and a
    buffer taking a value that requires grad both have the write's history afterwards."""

    def writes(a, buf, w):
        a.mul_(w)
        buf.add_(w)
        return a + buf

    def run(fn):
        leaf, w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True), torch.ones(3) * 2
        w.requires_grad_()
        a, buf = leaf * 1, torch.zeros(3)
        out = fn(a, buf, w)
        (out.sum() + (a * buf).sum()).backward()
        facts = [(t.detach().clone(), t.requires_grad, t.is_leaf) for t in (out, a, buf)]
        return facts, leaf.grad, w.grad

    compiled = torch.compile(writes, backend="aotspec", options={"backend": backend})
    (got, got_leaf, got_w), (want, want_leaf, want_w) = run(compiled), run(writes)
    for (g, g_rg, g_leaf), (e, e_rg, e_leaf) in zip(got, want, strict=True):
        torch.testing.assert_close(g, e)
        assert (e_rg, e_leaf) == (g_rg, g_leaf)
    torch.testing.assert_close(got_leaf, want_leaf)
    torch.testing.assert_close(got_w, want_w)


def test_options_choose_the_reference():
    spy = Spy()
    model, x = mlp(), torch.randn(2, 4)
    compiled = torch.compile(model, backend=spy, options={"backend": "reference"})
    got, _ = outputs_and_grads(compiled, x)
    torch.testing.assert_close(got, model(x).detach())
    (fn,) = spy.compiled
    assert fn.compiled.backend == "reference"
    assert fn.compiled.last_run.backward_ledger is not None  # the reference ran the backward


def test_environment_chooses_the_backend_without_options(monkeypatch):
    monkeypatch.setenv("AOTSPEC_BACKEND", "reference")
    spy = Spy()
    torch.compile(lambda x: x.sin(), backend=spy)(torch.ones(2))
    assert [fn.compiled.backend for fn in spy.compiled] == ["reference"]


def test_default_backend_is_fast(monkeypatch):
    monkeypatch.delenv("AOTSPEC_BACKEND", raising=False)
    spy = Spy()
    torch.compile(lambda x: x.sin(), backend=spy)(torch.ones(2))
    assert [fn.compiled.backend for fn in spy.compiled] == ["fast"]


def graph_of_sin() -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(lambda x: x.sin())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"options": {"backend": "inductor"}}, "valid backends: 'reference', 'fast'"),
        ({"options": {"fullgraph": True}}, "valid options: 'backend', 'steal', 'hooks_filter'"),
        ({"mode": "max-autotune"}, "the aotspec backend has no modes"),
    ],
)
def test_bad_options_name_the_valid_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        aotspec_backend(graph_of_sin(), [torch.ones(2)], **kwargs)


def test_bad_option_through_torch_compile_surfaces_the_value_error():
    compiled = torch.compile(lambda x: x.sin(), backend="aotspec", options={"backend": "gpu"})
    with pytest.raises(Exception) as caught:
        compiled(torch.ones(2))
    causes = []
    error = caught.value
    while error is not None:
        causes.append(error)
        error = error.__cause__ or getattr(error, "inner_exception", None)
    assert any(isinstance(e, ValueError) and "valid backends" in str(e) for e in causes), (
        caught.value
    )


def test_an_unsupported_op_names_the_users_line():
    """r[ops.table]: through Dynamo too, the error names the line of the user's function, not
    Dynamo's generated code."""
    import inspect

    from aotspec import UnsupportedError

    def uses_prims(x):
        y = x.sin()
        return torch.ops.prims.sin(y) + 1

    line = inspect.getsourcelines(uses_prims)[1] + 2
    with pytest.raises(UnsupportedError, match=r"prims\.sin") as raised:
        torch.compile(uses_prims, backend="aotspec")(torch.randn(3))
    assert f"test_dynamo.py:{line}" in str(raised.value)
    assert "eval_with_key" not in str(raised.value)


def _hardshrink_then_scale(x, lambd, scale):
    return torch.nn.functional.hardshrink(x, lambd) * scale


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_numbers_dynamo_stops_specializing_on_are_the_users_values(backend):
    """r[capture.dynamo-numbers]: once a float changes, Dynamo passes it as a 0-d tensor read
    with .item(); the backend compiles each number as a constant, gradients included."""
    compiled = torch.compile(
        _hardshrink_then_scale, backend="aotspec", options={"backend": backend}
    )
    for lambd, scale in [(0.5, 2), (0.25, 3), (1.5, 3), (0.25, 3)]:
        x = torch.tensor([0.75, -0.3, 0.2, -2.0], requires_grad=True)
        expected_x = x.detach().clone().requires_grad_()
        expected = _hardshrink_then_scale(expected_x, lambd, scale)
        expected.sum().backward()
        out = compiled(x, lambd, scale)
        out.sum().backward()
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
        torch.testing.assert_close(x.grad, expected_x.grad, rtol=0, atol=0)


class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor([2.0, 3.0]))

    def forward(self, x):
        return x * self.weight


@pytest.mark.parametrize("backend", ["fast", "reference"])
def test_a_graphs_tensor_attributes_are_read_at_every_call(backend):
    # r[capture.lift]: the graph's attributes are inputs, looked up at every call, and their
    # gradients reach their .grad; the graph is flat (no module, no subgraph): they are
    # handed over as an argument, with no walk of the graph module
    graph_module = torch.fx.symbolic_trace(Scale())
    compiled = aotspec_backend(graph_module, [], options={"backend": backend})
    assert compiled.graph is not None
    x = torch.ones(2)
    compiled(x).sum().backward()
    assert graph_module.weight.grad.tolist() == [1.0, 1.0]
    graph_module.weight = torch.nn.Parameter(torch.tensor([5.0, 7.0]))  # swapped
    out = compiled(x)
    assert out.tolist() == [5.0, 7.0]
    (out * torch.tensor([1.0, 2.0])).sum().backward()
    assert graph_module.weight.grad.tolist() == [1.0, 2.0]


def test_a_flat_graphs_runner_reaches_no_tensor_by_itself():
    """A flat graph is called without a walk for lifted tensors (`call_held_first`): its
    runner reaches none, and a walk of it gives the key such a call uses."""
    graph_module = torch.fx.symbolic_trace(Scale())
    compiled = aotspec_backend(graph_module, [], options={"backend": "fast"})
    walked = lift(compiled.graph.run)
    assert () == walked.tensors
    assert NOTHING_LIFTED.key == walked.key


def test_a_graph_that_calls_modules_lifts_their_tensors():
    model, x = mlp(), torch.randn(3, 4)
    compiled = aotspec_backend(torch.fx.symbolic_trace(model), [], options={"backend": "fast"})
    assert compiled.graph is None  # call_module nodes: the graph module is walked
    compiled(x).sum().backward()
    expected = model(x)
    expected_grads = torch.autograd.grad(expected.sum(), list(model.parameters()))
    torch.testing.assert_close(compiled(x), expected)
    for p, g in zip(model.parameters(), expected_grads, strict=True):
        torch.testing.assert_close(p.grad, g)


def test_dynamo_traces_no_frame_of_a_compiled_functions_backward():
    """r[capture.backward-inside]: a `.backward()` that a function under torch.compile runs
    (Dynamo splits the function there) runs the compiled function's backward untraced: Dynamo
    compiles the step's own two graphs only, and the gradients are eager's."""
    graphs = []

    def recording(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    compiled = torch._dynamo.disable(
        aotspec.compile(lambda x, w: (x @ w).relu().sum(), backend="fast")
    )

    def step(x, w):
        compiled(x.cos(), w).backward()
        return w.grad.exp()

    x, w = torch.randn(3, 3), torch.randn(3, 3, requires_grad=True)
    out = torch.compile(step, backend=recording)(x, w)
    assert 2 == len(graphs)  # x.cos() and w.grad.exp()
    eager_w = w.detach().clone().requires_grad_()
    (x.cos() @ eager_w).relu().sum().backward()
    torch.testing.assert_close(out, eager_w.grad.exp())
