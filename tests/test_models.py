"""Small real models, one training step each, on both backends against eager PyTorch.

Each model is built from `torch.nn` with seeded weights, and one step (forward, loss, backward)
runs three ways besides eager: `aotspec.compile` of the step with the module's parameters and
buffers lifted to inputs (as AOTAutograd's `aot_module` does), on the reference and on the fast
backend, and `torch.compile(model, backend="aotspec")` (Dynamo) on the fast backend. The loss,
every parameter's gradient and every buffer afterwards (batch norm's running statistics) must be
eager's. Dropout draws from the default generator, seeded the same before each step
(`r[ops.random]`).

The models use ATen-valued ops throughout (`specs/ops.md`): convolution, batch norm in training
mode, max pooling, embedding, scaled dot product attention, nll_loss, gelu, and the backward ops
of their derivative formulas. On the fast backend, each step keeps no more memory than eager's.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import aotspec
from aotspec.tracker import MemoryTracker


class SmallCNN(nn.Module):
    """Conv2d, BatchNorm2d (training mode), ReLU, MaxPool2d, Linear."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8)
        self.head = nn.Linear(8 * 4 * 4, 10)

    def forward(self, images, labels):
        hidden = F.max_pool2d(F.relu(self.norm(self.conv(images))), 2)
        return F.cross_entropy(self.head(hidden.flatten(1)), labels)


class GPTBlock(nn.Module):
    """Token and position embeddings, one pre-norm causal attention block with a GELU MLP, an
    output head tied to the token embedding, cross-entropy against the next tokens."""

    def __init__(self, vocab=17, dim=16, heads=2, context=8):
        super().__init__()
        self.heads = heads
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(context, dim)
        self.norm1, self.norm2, self.norm_out = (
            nn.LayerNorm(dim),
            nn.LayerNorm(dim),
            nn.LayerNorm(dim),
        )
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, ids, targets):
        batch, length = ids.shape
        x = self.tokens(ids) + self.positions(torch.arange(length))
        q, k, v = self.qkv(self.norm1(x)).split(x.shape[-1], dim=-1)

        def heads(t):
            return t.view(batch, length, self.heads, -1).transpose(1, 2)

        attended = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, -1))
        x = x + self.mlp(self.norm2(x))
        logits = self.norm_out(x) @ self.tokens.weight.t()
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


class Encoder(nn.Module):
    """`nn.TransformerEncoderLayer` (dropout 0.1, training mode), mean-squared error."""

    def __init__(self, norm_first: bool):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, norm_first=norm_first)

    def forward(self, x, target):
        return F.mse_loss(self.layer(x), target)


class MLP(nn.Module):
    """Linear, GELU, dropout, Linear, LayerNorm, mean-squared error."""

    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(32, 64), nn.GELU(), nn.Dropout(0.2), nn.Linear(64, 32), nn.LayerNorm(32)
        )

    def forward(self, x, target):
        return F.mse_loss(self.layers(x), target)


def _mlp():
    generator = torch.Generator().manual_seed(4)
    return MLP(), (torch.randn(16, 32, generator=generator), torch.randn(16, 32))


def _cnn():
    generator = torch.Generator().manual_seed(1)
    images = torch.randn(4, 3, 8, 8, generator=generator)
    return SmallCNN(), (images, torch.tensor([1, 0, 9, 3]))


def _gpt():
    generator = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 17, (2, 9), generator=generator)
    return GPTBlock(), (ids[:, :-1], ids[:, 1:])


def _encoder(norm_first: bool):
    generator = torch.Generator().manual_seed(3)
    x, target = torch.randn(2, 5, 16, generator=generator), torch.randn(2, 5, 16)
    return Encoder(norm_first), (x, target)


MODELS = {
    "mlp": _mlp,
    "cnn": _cnn,
    "gpt-block": _gpt,
    "encoder": lambda: _encoder(norm_first=False),
    "encoder-norm-first": lambda: _encoder(norm_first=True),
}


def _built(name: str):
    torch.manual_seed(0)
    return MODELS[name]()


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
    elif runner == "dynamo":
        torch._dynamo.reset()
        call = torch.compile(module, backend="aotspec", options={"backend": "fast"})
    else:
        call = _lifted(module, runner)
    torch.manual_seed(5)  # dropout's draws
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = call(*inputs)
    loss.backward()
    grads = {name: p.grad for name, p in module.named_parameters()}
    buffers = {name: b.clone() for name, b in module.named_buffers()}
    return loss.detach(), grads, buffers


@pytest.mark.parametrize("runner", ["reference", "fast", "dynamo"])
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
    tracker = MemoryTracker()
    tracker.track(*inputs, *module.parameters(), *module.buffers())
    torch.manual_seed(5)
    with tracker:
        loss = call(*inputs)
        after_forward = tracker.live_bytes
        tracker.reset_peak()
        loss.backward()
    return after_forward, tracker.peak_bytes


@pytest.mark.parametrize("name", list(MODELS))
def test_fast_memory_is_at_most_eagers(name):
    """The fast backend keeps no more bytes alive after the forward than eager, and its backward
    peaks no higher: it runs the kernels eager runs, saves what eager saves, and lays gradients
    out as eager does (no copy when they reach `.grad`)."""
    eager_after_forward, eager_peak = _memory(name, "eager")
    after_forward, peak = _memory(name, "fast")
    assert after_forward <= eager_after_forward
    assert peak <= eager_peak


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
