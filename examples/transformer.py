"""A pre-norm transformer block (attention, then a GELU MLP, each on a residual), as FSDP2
shards it: `tests/test_fsdp2.py` trains it on two ranks, `benchmarks/distributed_memory.py`
measures it. The attention and the MLP are the modules FSDP2 wraps each on its own."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    """LayerNorm, then multi-head self-attention written out (softmax of scaled scores)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).split(d, dim=-1)
        width = d // self.heads
        q, k, v = (z.view(b, t, self.heads, width).transpose(1, 2) for z in (q, k, v))
        scores = torch.softmax(q @ k.transpose(-1, -2) / width**0.5, dim=-1)
        return self.proj((scores @ v).transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    """LayerNorm, then Linear, GELU, Linear, four times as wide inside."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.down(F.gelu(self.up(self.norm(x))))


class Block(nn.Module):
    """`x + attn(x)`, then `x + mlp(x)`."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.attn = Attention(dim, heads)
        self.mlp = MLP(dim)

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.mlp(x)
