"""The model zoo (`examples/zoo.py`), one training step each, on both backends against eager.

Each model is built with seeded weights, and one step (forward, loss, backward) runs four ways
besides eager: `aotspec.compile` of the step with the module's parameters and buffers lifted to
inputs (as AOTAutograd's `aot_module` does), and `torch.compile(model, backend="aotspec")`
(Dynamo, with `allow_rnn` so that it captures the GRU and the LSTM), each on the reference and
on the fast backend. The loss, every parameter's gradient and every buffer afterwards (batch
norm's running statistics) must be eager's. Dropout draws from the default generator, seeded the
same before each step (`r[ops.random]`).

The models use ATen-valued ops throughout (`specs/ops.md`): convolution, batch norm in training
mode, max pooling, embedding, scaled dot product attention, nll_loss, gelu, and the backward ops
of their derivative formulas. On the fast backend, each step keeps no more memory than eager's.

torchvision's resnet18 and transformers' GPT2 and BERT come with the `models` extra (part of
`dev`); without it their tests skip.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import aotspec
from aotspec.examples.zoo import EXTRAS, MODELS, SIZED_DIMS, at_size
from aotspec.tracker import step_memory

#: Compiled ways to run a step: `aotspec.compile` on a backend, or Dynamo then a backend.
RUNNERS = ["reference", "fast", "dynamo-reference", "dynamo-fast"]

def _built(name: str):
    """Model `name` and its batch, with the weights of seed 0; a skip when it needs a library of
    the `models` extra that is not installed."""
    torch.manual_seed(0)
    try:
        return MODELS[name]()
    except ModuleNotFoundError as missing:
        if missing.name != EXTRAS.get(name):
            raise
        pytest.skip(
            f"{missing.name} is not installed; the models extra has it: pip install -e '.[models]'"
        )


def _lifted(module: nn.Module, backend: str):
    """One step of `module` with its parameters and buffers as inputs of the compiled program,
    so that gradients reach `.grad` and buffer updates reach the module."""
    params = dict(module.named_parameters())
    buffers = dict(module.named_buffers())

    def step(params, buffers, *inputs):
        return torch.func.functional_call(module, (params, buffers), inputs)

    compiled = aotspec.compile(step, backend=backend)
    return lambda *inputs: compiled(params, buffers, *inputs)


def _step(name: str, runner: str, autocast: bool = False):
    """The loss, every parameter's gradient and every buffer after one step of model `name`
    (with `autocast`, its forward under `torch.autocast("cpu", dtype=torch.bfloat16)`)."""
    module, inputs = _built(name)
    if runner == "eager":
        call = module
    elif runner.startswith("dynamo-"):
        torch._dynamo.reset()
        backend = runner.removeprefix("dynamo-")
        call = torch.compile(module, backend="aotspec", options={"backend": backend})
    else:
        call = _lifted(module, runner)
    torch.manual_seed(5)  # dropout's draws
    autocasting = torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast)
    with autocasting, torch._dynamo.config.patch(allow_rnn=True):
        loss = call(*inputs)
    loss.backward()
    grads = {name: p.grad for name, p in module.named_parameters()}
    buffers = {name: b.clone() for name, b in module.named_buffers()}
    return loss.detach(), grads, buffers


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("name", list(MODELS))
def test_training_step_matches_eager(name, runner):
    expected_loss, expected_grads, expected_buffers = _step(name, "eager")
    loss, grads, buffers = _step(name, runner)
    torch.testing.assert_close(loss, expected_loss)
    assert expected_grads.keys() == grads.keys()
    for key, expected in expected_grads.items():
        torch.testing.assert_close(grads[key], expected, msg=lambda m, key=key: f"{key}: {m}")
    assert expected_buffers.keys() == buffers.keys()
    for key, expected in expected_buffers.items():
        torch.testing.assert_close(buffers[key], expected, msg=lambda m, key=key: f"{key}: {m}")


@pytest.mark.parametrize("runner", ["reference", "fast"])
@pytest.mark.parametrize("name", ["mlp", "cnn", "gpt-block"])
def test_training_step_under_autocast_matches_eager(name, runner):
    """Under CPU autocast to bfloat16: the casts autocast inserts are captured, ATen-valued ops
    compute in eager's dtypes (batch norm's statistics stay float32). The fast backend runs
    eager's kernels; the reference's table ops compute in float32 and round once
    (`r[ops.opmath]`), so they are held to bfloat16's tolerance."""
    expected = _step(name, "eager", autocast=True)
    actual = _step(name, runner, autocast=True)
    torch.testing.assert_close(actual, expected, rtol=2e-2, atol=2e-3)


def _memory(name: str, runner: str) -> tuple[int, int]:
    """Bytes alive after the forward, and the backward's peak, of one step of model `name`."""
    module, inputs = _built(name)
    call = module
    if runner == "fast":
        call = _lifted(module, "fast")
        call(*inputs).backward()  # compile before the tracker watches
        module.zero_grad(set_to_none=True)
    torch.manual_seed(5)
    return step_memory(lambda: call(*inputs), *inputs, *module.parameters(), *module.buffers())


@pytest.mark.parametrize("name", list(MODELS))
def test_fast_memory_is_at_most_eagers(name):
    """The fast backend keeps no more bytes alive after the forward than eager, and its backward
    peaks no higher: it runs the kernels eager runs, saves what eager saves, and lays gradients
    out as eager does (no copy when they reach `.grad`)."""
    eager_after_forward, eager_peak = _memory(name, "eager")
    after_forward, peak = _memory(name, "fast")
    assert after_forward <= eager_after_forward
    assert peak <= eager_peak


def _attention_steps(runner: str, loss_of, steps: int = 3) -> dict[str, torch.Tensor]:
    """The weights of `nn.MultiheadAttention(batch_first=True)` after `steps` SGD steps on
    `loss_of(output, target)`, the step run by `runner` (or eager)."""
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(16, 4, batch_first=True)
    x, target = torch.randn(2, 5, 16), torch.randn(2, 5, 16)

    def step(x, target):
        out, _ = attention(x, x, x)  # a transposed view of the output projection's rows
        return loss_of(out, target)

    if runner.startswith("dynamo-"):
        torch._dynamo.reset()
        options = {"backend": runner.removeprefix("dynamo-")}
        call = torch.compile(step, backend="aotspec", options=options)
    else:
        call = step if runner == "eager" else aotspec.compile(step, backend=runner)
    optimizer = torch.optim.SGD(attention.parameters(), lr=0.1)
    for _ in range(steps):
        optimizer.zero_grad()
        call(x, target).backward()
        optimizer.step()
    return {name: p.detach().clone() for name, p in attention.named_parameters()}


def _cosine_loss(out, target):
    similarity = F.cosine_similarity(F.normalize(out, dim=-1), target, dim=-1)
    return (1 - similarity).mean()


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("loss_of", [F.mse_loss, F.smooth_l1_loss, _cosine_loss])
def test_attention_trains_as_eager(loss_of, runner):
    """r[ops.fresh-output.meta-layout]: the losses' backward kernels lay the gradient of the
    attention's transposed output out contiguously where their meta kernels keep its order, and
    the backward views it on; r[ops.aten-derivatives.functional]: normalize's and
    cosine_similarity's formulas write masked_fill_ into quotients they made."""
    expected = _attention_steps("eager", loss_of)
    weights = _attention_steps(runner, loss_of)
    for key, value in expected.items():
        torch.testing.assert_close(weights[key], value, msg=lambda m, key=key: f"{key}: {m}")


def test_the_cnn_step_updates_the_running_statistics():
    """The comparison above is not vacuous: training mode moves the running mean off zero."""
    _, _, buffers = _step("cnn", "eager")
    assert buffers["norm.running_mean"].abs().sum() > 0
    assert 1 == buffers["norm.num_batches_tracked"].item()


def test_dropout_draws_differ_without_the_seed():
    """The encoder's loss depends on dropout's draws, so equal losses above mean equal draws."""
    module, inputs = _built("encoder")
    torch.manual_seed(5)
    first = module(*inputs)
    torch.manual_seed(6)
    assert not math.isclose(first.item(), module(*inputs).item())


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_linear_weight_gradient_has_the_weights_layout(backend):
    """As eager's addmm backward does for the transposed weight F.linear multiplies by: the
    gradient arrives laid out like the weight, so accumulating it into `.grad` copies nothing."""
    x, w, b = torch.randn(8, 16), torch.randn(32, 16, requires_grad=True), torch.randn(32)
    expected = torch.autograd.grad(F.linear(x, w, b).sin().sum(), w)[0]
    out = aotspec.compile(F.linear, backend=backend)(x, w, b)
    (grad,) = torch.autograd.grad(out.sin().sum(), w)
    assert expected.stride() == grad.stride() == w.stride()
    torch.testing.assert_close(grad, expected)


#: nn.LSTM's configurations: its keyword arguments beyond the sizes.
LSTM_CONFIGURATIONS = {
    "plain": {},
    "batch-first": {"batch_first": True},
    "bidirectional": {"bidirectional": True},
    "two-layers": {"num_layers": 2},
    "two-layers-bidirectional-batch-first": {
        "num_layers": 2,
        "bidirectional": True,
        "batch_first": True,
    },
}


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("configuration", list(LSTM_CONFIGURATIONS))
def test_lstm_trains_as_eager(configuration, runner):
    """r[ops.aten-values.grad-mode], r[ops.aten-values.workspace]: on CPU each layer and
    direction is one mkldnn_rnn_layer, whose backward reads the workspace its forward returns
    with grad mode on; the loss (of the outputs and the final state) and every gradient are
    eager's."""

    def step(runner: str):
        torch.manual_seed(0)
        module = nn.LSTM(4, 6, **LSTM_CONFIGURATIONS[configuration])
        x = torch.randn(3, 5, 4)
        call = module
        if runner.startswith("dynamo-"):
            torch._dynamo.reset()
            options = {"backend": runner.removeprefix("dynamo-")}
            call = torch.compile(module, backend="aotspec", options=options)
        elif runner != "eager":
            call = _lifted(module, runner)
        with torch._dynamo.config.patch(allow_rnn=True):
            out, (h, c) = call(x)
        loss = out.sin().sum() + h.sum() + c.cos().sum()
        loss.backward()
        return loss.detach(), {name: p.grad for name, p in module.named_parameters()}

    torch.testing.assert_close(step(runner), step("eager"))


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_an_lstm_on_a_packed_sequence_is_refused_at_the_users_line(backend):
    """r[capture.data-dependent]: packing by lengths gives data whose sizes are the lengths'
    values; refused where the user packs, not with the TypeError nn.LSTM's torch.zeros would
    raise on the batch sizes."""
    lstm = nn.LSTM(4, 5)

    def step(x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths)
        _, (h, _) = lstm(packed)
        return h.sum()

    with pytest.raises(aotspec.UnsupportedError) as raised:
        aotspec.compile(step, backend=backend)(torch.randn(3, 2, 4), torch.tensor([3, 2]))
    assert "capture.data-dependent" == raised.value.rule
    assert "packed = nn.utils.rnn.pack_padded_sequence(x, lengths)" in str(raised.value)


class _Factories(torch.overrides.TorchFunctionMode):
    """Records the factories called without a device: on CUDA they make CPU tensors."""

    NAMES = {"arange", "zeros", "ones", "empty", "full", "tensor", "randn", "rand"}

    def __init__(self):
        super().__init__()
        self.deviceless = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", None) in self.NAMES and "device" not in kwargs:
            self.deviceless.append(func.__name__)
        return func(*args, **kwargs)


@pytest.mark.parametrize("name", ["gpt-block", "lstm"])
def test_zoo_models_follow_their_inputs_device(name):
    """On CUDA the gpt-block's positions (a bare torch.arange) and the LSTM's state (a tuple the
    benchmarks did not move) stayed on the CPU, and eager's step raised. Here no factory of a
    forward goes without a device, and `meta` stands for the GPU the benchmarks move to."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    module, inputs = _built(name)
    with _Factories() as factories:
        module(*inputs)
    assert factories.deviceless == []
    module, inputs = gpu_check._on(torch.device("meta"), module, inputs)
    assert module(*inputs).device.type == "meta"


#: Sizes a real loop trains at: the batch's own, a larger batch, a shorter sequence.
_SIZES = [{}, {"batch": 5}, {"length": 3}]


@pytest.mark.parametrize("name", ["mlp", "gpt-block", "encoder"])
def test_training_at_several_sizes_under_dynamic_matches_eager(name):
    """`torch.compile(model, backend="aotspec", dynamic=True)`: Dynamo hands the backend graphs
    with symbolic sizes. Trained at three sizes in turn, each step's loss, gradients and buffers
    are eager's at that size, and the fast backend's memory after the forward and at the
    backward's peak is at most eager's there."""
    module, inputs = _built(name)
    torch._dynamo.reset()
    eager, compiled = module, copy.deepcopy(module)
    call = torch.compile(compiled, backend="aotspec", dynamic=True, options={"backend": "fast"})
    sizes = [s for s in _SIZES if "length" not in s or SIZED_DIMS[name].length]
    for size in sizes:
        batch = at_size(name, inputs, **size)
        for m in (eager, compiled):
            m.zero_grad(set_to_none=True)
        torch.manual_seed(5)
        expected = eager(*batch)
        expected.backward()
        torch.manual_seed(5)
        loss = call(*batch)
        loss.backward()
        torch.testing.assert_close(loss, expected, msg=lambda m, s=size: f"at {s}: {m}")
        for (key, p), q in zip(compiled.named_parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, msg=lambda m, k=key: f"{k}: {m}")
        for m in (eager, compiled):  # gradients then start at None, as in the first step
            m.zero_grad(set_to_none=True)
        torch.manual_seed(5)
        eager_after_forward, eager_peak = step_memory(lambda: eager(*batch), *batch)
        torch.manual_seed(5)
        after_forward, peak = step_memory(lambda: call(*batch), *batch)
        assert after_forward <= eager_after_forward and peak <= eager_peak, (
            f"at {size}: {after_forward, peak} bytes, eager {eager_after_forward, eager_peak}"
        )


def test_at_size_resizes_the_batch_and_sequence_dimensions():
    _, inputs = MODELS["lstm"]()
    x, (h, c), target = at_size("lstm", inputs, batch=5, length=4)
    assert (x.shape, h.shape, c.shape, target.shape) == ((4, 5, 8), (4, 5, 16), (4, 5, 16), (5, 4))
    assert torch.equal(x[:, 3], inputs[0][:4, 0])  # rows repeat: batch 3 is batch 0 again
    with pytest.raises(ValueError, match="no sequence dimension"):
        at_size("mlp", MODELS["mlp"]()[1], length=4)
    with pytest.raises(ValueError, match="at most 8"):
        at_size("gpt-block", MODELS["gpt-block"]()[1], length=9)
