"""The model zoo: small real models, each a module whose forward returns a training loss, with a
batch to train it on.

`MODELS[name]()` builds one, with weights from the default generator (seed it first) and a
batch of its own seed: `module, inputs = MODELS[name](); module(*inputs).backward()` is one
training step. `tests/test_models.py` runs each step on aotspec's backends against eager, and
`benchmarks/zoo.py` times and measures them.

- "mlp": Linear, GELU, dropout, Linear, LayerNorm, mean-squared error;
- "cnn": Conv2d, BatchNorm2d in training mode, ReLU, MaxPool2d, Linear, cross-entropy;
- "gpt-block": embeddings, causal scaled dot product attention, a GELU MLP, an output head tied
  to the token embedding, cross-entropy;
- "encoder", "encoder-norm-first": `nn.TransformerEncoderLayer` (dropout 0.1), both ways;
- "gru": a two-layer `nn.GRU` and a Linear head (through Dynamo it needs
  `torch._dynamo.config.allow_rnn = True`, or Dynamo runs the GRU eagerly);
- "lstm": a two-layer bidirectional `nn.LSTM` over a sequence-first batch, started from a given
  state, and a Linear head on the last step (Dynamo needs `allow_rnn` here too);
- "resnet18": torchvision's `resnet18(weights=None)`, 10 classes, on 64x64 images;
- "gpt2", "bert": transformers' `GPT2LMHeadModel` and `BertForMaskedLM` from tiny configs
  (2 layers, width 32, 2 heads, sequences of 8), built without downloading anything.

`at_size(name, inputs, batch=..., length=...)` gives a model's batch at another batch size or
sequence length (`SIZED_DIMS` says which dimension of each input is which), for training at
several sizes as a real loop does (`benchmarks/zoo_sizes.py`).

The last three need the `models` extra (`pip install -e '.[models]'`); without it, building them
raises `ModuleNotFoundError` naming torchvision or transformers (`EXTRAS`).

torchvision beside CPU torch: the registry's torchvision 0.28.0, the release for torch 2.13, is a
CUDA build. Its C++ extension does not load beside CPU torch (it links libtorch_cuda), which
torchvision tolerates (its ops are then missing) except in two fake-kernel registrations it does
not guard, for `torchvision::nms` and `torchvision::qnms`, so `import torchvision` fails with
"operator torchvision::nms does not exist". `import_torchvision` defines those two schemas when,
and only when, the extension did not load, and imports it again: the models and transforms work,
and calling `torchvision.ops.nms` raises "no kernel" as any missing op does. transformers imports
torchvision when it is installed, so `import_transformers` goes through `import_torchvision`.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils._pytree as pytree
from attrs import frozen

#: The models that need a library of the `models` extra, by the library.
EXTRAS = {"resnet18": "torchvision", "gpt2": "transformers", "bert": "transformers"}

#: torchvision's operator schemas that its Python code needs when its C++ extension does not
#: load (kept alive here: a library's definitions go when it is collected).
_TORCHVISION_SCHEMAS = torch.library.Library("torchvision", "FRAGMENT")


def import_torchvision():
    """`import torchvision`, which works beside CPU torch (see the module's docstring)."""
    try:
        import torchvision
    except RuntimeError as error:
        extension = sys.modules.get("torchvision.extension")
        if "torchvision::nms" not in str(error) or extension is None or extension._has_ops():
            raise
        for name in ("nms", "qnms"):
            schema = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
            _TORCHVISION_SCHEMAS.define(name + schema)
        import torchvision
    return torchvision


def import_transformers():
    """`import transformers`, with torchvision made importable first when it is installed."""
    if importlib.util.find_spec("torchvision") is not None:
        import_torchvision()
    import transformers

    return transformers


class MLP(nn.Module):
    """Linear, GELU, dropout, Linear, LayerNorm, mean-squared error."""

    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(32, 64), nn.GELU(), nn.Dropout(0.2), nn.Linear(64, 32), nn.LayerNorm(32)
        )

    def forward(self, x, target):
        return F.mse_loss(self.layers(x), target)


class SmallCNN(nn.Module):
    """Conv2d, BatchNorm2d (training mode), ReLU, MaxPool2d, Linear, cross-entropy."""

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
        x = self.tokens(ids) + self.positions(torch.arange(length, device=ids.device))
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


class GRU(nn.Module):
    """A two-layer GRU over the sequence, a Linear head on each step, mean-squared error."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(8, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x, target):
        steps, _ = self.gru(x)
        return F.mse_loss(self.head(steps), target)


class LSTM(nn.Module):
    """A two-layer bidirectional LSTM over a sequence-first batch from a given state, a Linear
    head on the last step, mean-squared error."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, bidirectional=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x, state, target):
        steps, _ = self.lstm(x, state)
        return F.mse_loss(self.head(steps[-1]), target)


class Classifier(nn.Module):
    """An image classifier's logits, cross-entropy against the labels."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, images, labels):
        return F.cross_entropy(self.net(images), labels)


class LanguageModel(nn.Module):
    """A transformers model with a language-modelling head; its loss on the labels."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids, labels):
        return self.model(input_ids=ids, labels=labels).loss


def _mlp():
    generator = torch.Generator().manual_seed(4)
    return MLP(), (torch.randn(16, 32, generator=generator), torch.randn(16, 32))


def _cnn():
    generator = torch.Generator().manual_seed(1)
    images = torch.randn(4, 3, 8, 8, generator=generator)
    return SmallCNN(), (images, torch.tensor([1, 0, 9, 3]))


def _gpt_block():
    generator = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 17, (2, 9), generator=generator)
    return GPTBlock(), (ids[:, :-1], ids[:, 1:])


def _encoder(norm_first: bool):
    generator = torch.Generator().manual_seed(3)
    x, target = torch.randn(2, 5, 16, generator=generator), torch.randn(2, 5, 16)
    return Encoder(norm_first), (x, target)


def _gru():
    generator = torch.Generator().manual_seed(6)
    return GRU(), (torch.randn(2, 8, 8, generator=generator), torch.randn(2, 8, 4))


def _lstm():
    generator = torch.Generator().manual_seed(10)
    x = torch.randn(6, 3, 8, generator=generator)
    state = tuple(torch.randn(4, 3, 16, generator=generator) for _ in range(2))
    return LSTM(), (x, state, torch.randn(3, 4, generator=generator))


def _resnet18():
    """64x64 images: the last stage's batch norm then sees 2x2 positions per image. (On 32x32
    it sees one, batch norm over two values is ill-conditioned, and float32 gradients of eager
    itself are 2% off float64's, so no comparison between two float32 runs could be tight.)"""
    torchvision = import_torchvision()
    generator = torch.Generator().manual_seed(7)
    images = torch.randn(2, 3, 64, 64, generator=generator)
    return Classifier(torchvision.models.resnet18(weights=None, num_classes=10)), (
        images,
        torch.tensor([1, 7]),
    )


#: The tiny size of the transformers models: a vocabulary, a context, a width, layers, heads.
VOCAB, CONTEXT, WIDTH, LAYERS, HEADS = 64, 16, 32, 2, 2


def _tokens(seed: int) -> torch.Tensor:
    return torch.randint(2, VOCAB, (2, 8), generator=torch.Generator().manual_seed(seed))


def _gpt2():
    transformers = import_transformers()
    config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_positions=CONTEXT,
        n_embd=WIDTH,
        n_layer=LAYERS,
        n_head=HEADS,
        bos_token_id=1,
        eos_token_id=1,
    )
    model = transformers.GPT2LMHeadModel(config)
    model.loss_type = "ForCausalLM"  # what transformers falls back to, naming it spares a warning
    ids = _tokens(8)
    return LanguageModel(model), (ids, ids)


def _bert():
    """Masked language modelling: the loss counts every other token (the others' labels are
    -100, cross-entropy's ignored index)."""
    transformers = import_transformers()
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=WIDTH,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=4 * WIDTH,
        max_position_embeddings=CONTEXT,
    )
    ids = _tokens(9)
    labels = ids.clone()
    labels[:, 1::2] = -100
    return LanguageModel(transformers.BertForMaskedLM(config)), (ids, labels)


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {
    "mlp": _mlp,
    "cnn": _cnn,
    "gpt-block": _gpt_block,
    "encoder": lambda: _encoder(norm_first=False),
    "encoder-norm-first": lambda: _encoder(norm_first=True),
    "gru": _gru,
    "lstm": _lstm,
    "resnet18": _resnet18,
    "gpt2": _gpt2,
    "bert": _bert,
}


@frozen
class SizedDims:
    """Which dimension of each input leaf (in `pytree` order) is the batch and which the
    sequence; None where a leaf has none."""

    batch: tuple[int | None, ...]
    length: tuple[int | None, ...] = ()
    #: The longest sequence the model takes (its position table), if it has one.
    longest: int | None = None


#: The sized dimensions of each model's inputs.
SIZED_DIMS: dict[str, SizedDims] = {
    "mlp": SizedDims(batch=(0, 0)),
    "cnn": SizedDims(batch=(0, 0)),
    "gpt-block": SizedDims(batch=(0, 0), length=(1, 1), longest=8),
    "encoder": SizedDims(batch=(0, 0), length=(1, 1)),
    "encoder-norm-first": SizedDims(batch=(0, 0), length=(1, 1)),
    "gru": SizedDims(batch=(0, 0), length=(1, 1)),
    "lstm": SizedDims(batch=(1, 1, 1, 0), length=(0, None, None, None)),
    "resnet18": SizedDims(batch=(0, 0)),
    "gpt2": SizedDims(batch=(0, 0), length=(1, 1), longest=CONTEXT),
    "bert": SizedDims(batch=(0, 0), length=(1, 1), longest=CONTEXT),
}


def at_size(name: str, inputs: tuple, batch: int | None = None, length: int | None = None):
    """Model `name`'s `inputs` with `batch` rows and sequences of `length` (None keeps a size).
    A dimension grows by repeating its rows (labels and token ids stay valid) and shrinks by
    dropping the last ones."""
    dims = SIZED_DIMS[name]
    if length is not None and not dims.length:
        raise ValueError(f"zoo model {name!r} has no sequence dimension; pass only batch=")
    if length is not None and dims.longest is not None and length > dims.longest:
        raise ValueError(
            f"zoo model {name!r} takes sequences of at most {dims.longest}, not {length}"
        )
    leaves, spec = pytree.tree_flatten(inputs)
    resized = []
    for k, leaf in enumerate(leaves):
        if batch is not None and dims.batch[k] is not None:
            leaf = _resized(leaf, dims.batch[k], batch)
        if length is not None and dims.length[k] is not None:
            leaf = _resized(leaf, dims.length[k], length)
        resized.append(leaf)
    return pytree.tree_unflatten(resized, spec)


def _resized(t: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    if size < 1:
        raise ValueError(f"a size of the zoo's inputs must be at least 1, not {size}")
    copies = -(-size // t.shape[dim])
    return torch.cat([t] * copies, dim).narrow(dim, 0, size).contiguous()
