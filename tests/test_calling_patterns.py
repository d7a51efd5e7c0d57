"""Training-loop calling patterns (issue 12): functions that close over modules, compiled modules,
optimizer steps through Dynamo, and backward() inside a compiled function (`r[capture.lift]`,
`r[capture.backward-inside]`). Every expectation is eager PyTorch run on an identical copy."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

import aotspec
from aotspec.errors import UnsupportedError

BACKENDS = ("reference", "fast")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def batch() -> torch.Tensor:
    return torch.linspace(-1.0, 1.0, 12).reshape(3, 4)


def assert_same_parameters(expected: torch.nn.Module, actual: torch.nn.Module, grads=True):
    for (name, e), a in zip(expected.named_parameters(), actual.parameters(), strict=True):
        torch.testing.assert_close(a, e, msg=f"parameter {name}")
        if grads:
            torch.testing.assert_close(a.grad, e.grad, msg=f"gradient of {name}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_function_closing_over_a_module_backpropagates_to_its_parameters(backend):
    eager, compiled_model = model(), model()
    eager(batch()).pow(2).sum().backward()
    loss = aotspec.compile(lambda x: compiled_model(x).pow(2).sum(), backend=backend)(batch())
    loss.backward()
    assert_same_parameters(eager, compiled_model)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_module_uses_a_swapped_parameter(backend):
    eager, compiled_model = model(), model()
    step = aotspec.compile(compiled_model, backend=backend)
    step(batch())
    for m in (eager, compiled_model):
        m[0].weight = torch.nn.Parameter(torch.full((8, 4), 0.25))
    torch.testing.assert_close(step(batch()), eager(batch()))
    step(batch()).sum().backward()
    eager(batch()).sum().backward()
    assert_same_parameters(eager, compiled_model)


class Counter(torch.nn.Module):
    """A module that updates a buffer in place on every call, as BatchNorm's statistics do."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
        self.register_buffer("total", torch.zeros(2))

    def forward(self, x):
        with torch.no_grad():
            self.total.add_(x.sum(0))
        return x * self.weight


@pytest.mark.parametrize("backend", BACKENDS)
def test_buffer_written_in_place_reaches_the_module(backend):
    eager, compiled_model = Counter(), Counter()
    step = aotspec.compile(compiled_model, backend=backend)
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    for _ in range(2):
        step(x).sum().backward()
        eager(x).sum().backward()
    torch.testing.assert_close(compiled_model.total, eager.total)
    assert_same_parameters(eager, compiled_model)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tied_weight_is_one_input(backend):
    """One parameter reached through two modules gets the sum of both uses' gradients."""

    def tied():
        torch.manual_seed(0)
        first, second = torch.nn.Linear(3, 3, bias=False), torch.nn.Linear(3, 3, bias=False)
        second.weight = first.weight
        return torch.nn.Sequential(first, torch.nn.Tanh(), second)

    eager, compiled_model = tied(), tied()
    x = torch.ones(2, 3)
    eager(x).sum().backward()
    aotspec.compile(compiled_model, backend=backend)(x).sum().backward()
    assert_same_parameters(eager, compiled_model)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sgd_step_through_dynamo_matches_eager(backend):
    eager, compiled_model = model(), model()
    optimizers = [
        torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (eager, compiled_model)
    ]
    step = torch.compile(optimizers[1].step, backend="aotspec", options={"backend": backend})
    for _ in range(3):
        for m in (eager, compiled_model):
            m.zero_grad()
            m(batch()).pow(2).sum().backward()
        optimizers[0].step()
        step()
    assert_same_parameters(eager, compiled_model, grads=False)
    for p_eager, p_compiled in zip(eager.parameters(), compiled_model.parameters(), strict=True):
        torch.testing.assert_close(
            optimizers[1].state[p_compiled]["momentum_buffer"],
            optimizers[0].state[p_eager]["momentum_buffer"],
        )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("optimizer", [torch.optim.AdamW, torch.optim.Adam, torch.optim.RMSprop])
def test_adaptive_optimizer_step_through_dynamo_matches_eager(backend, optimizer):
    """Dynamo hands the parameters and optimizer state over as graph attributes, and rewrites
    addcmul_ into prims.fma: both reach aotspec (`r[capture.lift]`)."""
    eager, compiled_model = model(), model()
    optimizers = [optimizer(m.parameters(), lr=0.01) for m in (eager, compiled_model)]
    step = torch.compile(optimizers[1].step, backend="aotspec", options={"backend": backend})
    for _ in range(3):
        for m in (eager, compiled_model):
            m.zero_grad()
            m(batch()).pow(2).sum().backward()
        optimizers[0].step()
        step()
    assert_same_parameters(eager, compiled_model, grads=False)
    for p_eager, p_compiled in zip(eager.parameters(), compiled_model.parameters(), strict=True):
        expected, actual = optimizers[0].state[p_eager], optimizers[1].state[p_compiled]
        for name in expected:
            torch.testing.assert_close(actual[name], expected[name], msg=f"state {name}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_and_step_inside_one_dynamo_compiled_function(backend):
    eager, compiled_model = model(), model()

    def train_step(m, optimizer, x):
        optimizer.zero_grad()
        loss = m(x).pow(2).sum()
        loss.backward()
        optimizer.step()
        return loss

    optimizers = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (eager, compiled_model)]
    compiled_step = torch.compile(train_step, backend="aotspec", options={"backend": backend})
    for _ in range(2):
        expected = train_step(eager, optimizers[0], batch())
        torch.testing.assert_close(compiled_step(compiled_model, optimizers[1], batch()), expected)
    assert_same_parameters(eager, compiled_model)


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_inside_aotspec_compile_is_refused_before_touching_anything(backend):
    w = torch.tensor([1.0, 2.0], requires_grad=True)

    def step(w):
        loss = (w * 3).sum()
        loss.backward()
        return loss

    with pytest.raises(UnsupportedError, match=r"rule capture\.backward-inside"):
        aotspec.compile(step, backend=backend)(w)
    assert w.grad is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_in_a_closed_over_list_names_the_rule_and_the_fix(backend):
    weights = [torch.ones(2)]
    with pytest.raises(UnsupportedError) as raised:
        aotspec.compile(lambda x: x * weights[0], backend=backend)(torch.ones(2))
    message = str(raised.value)
    assert "rule capture.lift.unreachable" in message
    assert "pass the tensor as an argument" in message
    assert "test_calling_patterns.py" in message and "x * weights[0]" in message


class Blocks(torch.nn.Module):
    """Three residual MLP blocks, each optionally under activation checkpointing."""

    def __init__(self, checkpointed: bool):
        super().__init__()
        torch.manual_seed(0)
        self.checkpointed = checkpointed
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16))
            for _ in range(3)
        )

    def forward(self, x):
        for block in self.blocks:
            if self.checkpointed:
                x = x + torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = x + block(x)
        return x.pow(2).sum()


def _bytes_after_forward(step, x) -> int:
    from aotspec.tracker import MemoryTracker

    step(x).backward()  # compiles outside the tracker
    tracker = MemoryTracker()
    with tracker:
        loss = step(x)
        tracker.sweep()
        alive = tracker.live_bytes
        loss.backward()
    return alive


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("through", ["aotspec.compile", "torch.compile"])
def test_checkpointed_blocks_match_eager_and_keep_less(backend, through):
    """r[checkpoint.saved]: same gradients as eager; the forward leaves fewer bytes for the
    backward than the same blocks without checkpointing."""
    x = torch.linspace(-1.0, 1.0, 64).reshape(4, 16)
    eager = Blocks(checkpointed=True)
    eager(x).backward()

    def compiled(module):
        if through == "aotspec.compile":
            return aotspec.compile(module, backend=backend)
        return torch.compile(module, backend="aotspec", options={"backend": backend})

    checkpointed = Blocks(checkpointed=True)
    compiled(checkpointed)(x).backward()
    assert_same_parameters(eager, checkpointed)
    if backend == "fast":
        kept = _bytes_after_forward(compiled(Blocks(checkpointed=True)), x)
        unchecked = _bytes_after_forward(compiled(Blocks(checkpointed=False)), x)
        assert kept < unchecked


#: Whether the stolen activation's storage was gone when `_probe` ran (fast: real tensors).
_FREED_AT_PROBE: list[bool] = []
_STOLEN: list = []


@torch.library.custom_op("aotspec_tests::probe_stolen", mutates_args=())
def _probe(x: torch.Tensor) -> torch.Tensor:
    _FREED_AT_PROBE.append(_STOLEN[0].expired())
    return x.clone()


@_probe.register_fake
def _(x):
    return torch.empty_like(x)


@pytest.mark.parametrize("grad_enabled", [True, False])
def test_a_stolen_activation_that_requires_grad_dies_at_its_last_use(grad_enabled):
    """r[boxed.steal.freed-at-last-use]: as one that needs no gradient, whether the call is made
    with grad mode on or under torch.no_grad() with torch.enable_grad() inside: apply holds a
    stand-in, not the activation, and its gradient still reaches the leaf behind it."""
    from torch.multiprocessing.reductions import StorageWeakRef

    def step(acts, w):
        with torch.enable_grad():
            read = acts[0].exp().sum()  # exp saves its result, not the activation
            return read * w, _probe(read.detach())

    compiled = aotspec.compile(step, backend="fast", steal=("acts",))
    leaf, w = torch.randn(64, requires_grad=True), torch.randn((), requires_grad=True)
    acts = [leaf * 2]
    _STOLEN[:] = [StorageWeakRef(acts[0].untyped_storage())]
    _FREED_AT_PROBE.clear()
    with torch.set_grad_enabled(grad_enabled):
        out, _ = compiled(acts, w)
    out.backward()
    assert [True] == _FREED_AT_PROBE and [] == acts
    torch.testing.assert_close(leaf.grad, 2 * leaf.detach().mul(2).exp() * w.detach())


SCALE = torch.tensor(2.0)


def _scaled(x):
    return x * SCALE


def test_every_call_sees_what_its_slots_hold_now():
    """r[capture.lift]: a call after any slot the lifting reads changed (a closure variable, a
    global, a module's parameter, buffer, tensor attribute or submodule, a helper's code) uses
    what is there now, as eager does."""
    global SCALE
    layer = torch.nn.Linear(3, 3)
    offset = torch.zeros(3)

    def step(x):
        y = _scaled(layer(x)) + offset
        for extra in ("shift",):
            if hasattr(layer, extra):
                y = y + getattr(layer, extra)
        return y

    compiled = aotspec.compile(step, backend="fast")
    x = torch.randn(2, 3)

    def same():
        torch.testing.assert_close(compiled(x), step(x))

    same()
    changes = [
        lambda: layer.register_buffer("unused", torch.ones(3)),
        lambda: setattr(layer, "weight", torch.nn.Parameter(torch.eye(3))),
        lambda: setattr(layer, "shift", torch.full((3,), 5.0)),
        lambda: layer._parameters.__setitem__("bias", torch.nn.Parameter(torch.ones(3))),
    ]
    for change in changes:
        change()
        same()
    offset = torch.full((3,), -1.0)  # the closure cell now holds another tensor
    same()
    SCALE = torch.tensor(3.0)
    try:
        same()
    finally:
        SCALE = torch.tensor(2.0)
    same()


def test_a_call_after_two_tensor_attributes_swap_names_uses_them_by_their_new_names():
    """r[capture.lift]: the same two tensors under each other's names (the same objects in the
    same order among the module's attributes) are read by name, as eager reads them: a call
    that kept the tensors of its first call would compute 2 * 1 + 10."""
    module = torch.nn.Module()
    module.a, module.b = torch.tensor([1.0]), torch.tensor([10.0])

    def step(x):
        return x * module.a + module.b

    compiled = aotspec.compile(step, backend="fast")
    x = torch.tensor([2.0])
    torch.testing.assert_close(compiled(x), step(x))
    a, b = module.a, module.b
    del module.a, module.b
    module.b, module.a = a, b
    torch.testing.assert_close(compiled(x), step(x))
    assert step(x).item() == 21.0  # 2 * 10 + 1: the names moved


def test_a_module_swapped_out_between_calls_dies_when_the_caller_drops_it():
    """r[capture.lift]: the lookup a call makes keeps nothing of its own alive: a submodule the
    caller replaces between calls is freed then, as in eager, not at the next call."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    compiled = aotspec.compile(lambda x: model(x).sum(), backend="fast")
    x = torch.randn(2, 4)
    compiled(x)
    compiled(x)
    old_layer, old_weight = weakref.ref(model[0]), weakref.ref(model[0].weight)
    model[0] = torch.nn.Linear(4, 4)
    gc.collect()
    assert old_layer() is None and old_weight() is None
    torch.testing.assert_close(compiled(x), model(x).sum())


def test_a_buffer_registered_on_a_module_that_had_none_is_read_at_the_next_call():
    """r[capture.lift]: registering a buffer sets none of the module's attributes, only a key of
    its `_buffers`, empty until then: the next call lifts the buffer and reads it, as eager
    does (a check of the versions of the dicts that held something would miss it)."""
    layer = torch.nn.Linear(3, 3)

    def step(x):
        y = layer(x)
        if "extra" in layer._buffers:
            y = y + layer.extra
        return y

    compiled = aotspec.compile(step, backend="fast")
    x = torch.randn(2, 3)
    for _ in range(2):  # the trace puts stand-ins in the slots: the second call's walk is kept
        torch.testing.assert_close(compiled(x), step(x))
    layer.register_buffer("extra", torch.full((3,), 5.0))
    torch.testing.assert_close(compiled(x), step(x))
