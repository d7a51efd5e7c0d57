"""SimpleFSDP on aotspec: a model whose layers gather their weights inside compiled code.

Fully sharded data parallelism keeps one shard of every weight on each rank of a process group
(here a block of rows) and gathers a layer's whole weight only while the layer runs. In
SimpleFSDP the gather is part of the compiled program: the forward all-gathers the shards with a
functional collective, and autograd turns that all-gather into the reduce-scatter that gives each
rank its shard's gradient (`specs/collectives.md`). This module does it with `aotspec.compile`:

    model = SimpleFSDP([torch.randn(16, 8), torch.randn(4, 16)])   # the same weights on every rank
    loss = model(x_of_this_rank).square().sum() / global_batch
    loss.backward()             # each shard's .grad is its rows of the full weight's gradient
    torch.optim.SGD(model.parameters(), lr=0.1).step()

Every rank must build the model from the same weights and call it the same way: the ranks run
the same collectives in the same order (`r[collectives.timeout]`).

One layer, one compiled call (`layer_forward`):

1. `gathered` = the all-gather of the shards: a fresh tensor, the full weight.
2. The weight's zero-byte storage is resized up and `copy_` fills it from `gathered`, with grad
   mode on: the weight's contents carry the shards' history.
3. The layer computes with the weight, `tanh(x @ weight.T)` (the last layer without the tanh).
4. The weight's storage is resized to 0 again before the call returns.

The compiled backward reads the weight itself when it runs, not a copy the forward kept
(`r[autograd.saved-inputs.final-contents]`), so the forward leaves nothing of the full weight
alive, only what autograd saves for the matmul (the layer's input). The price is FSDP's: the
weight is gathered again before the layer's backward, by a hook on the layer's output
(`_regather`, outside the compiled code, as FSDP's pre-backward hook does), and freed right after
the shard's gradient is accumulated. In between, the layer's gradient flows through `copy_` into
`gathered`, and through the all-gather's derivative, a reduce-scatter with sum
(`r[collectives.derivatives]`), into the shard: each rank's shard gets the sum over the ranks of
its rows of the weight's gradient.

So at any time at most one layer's weight is gathered, in the forward and in the backward
(`tests/test_simple_fsdp.py` checks it on the reference's ledger and on real tensors;
`benchmarks/distributed_memory.py` measures it against eager FSDP2 and `aot_eager`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

import aotspec

c10d = torch.ops._c10d_functional
resize_storage_bytes_ = torch.ops.inductor.resize_storage_bytes_


def layer_forward(x, weight, shard, group_size: int, group_name: str, last: bool):
    """One layer of SimpleFSDP, compiled: gather the weight into its storage, use it, free it."""
    gathered = c10d.wait_tensor(c10d.all_gather_into_tensor(shard, group_size, group_name))
    resize_storage_bytes_(weight, gathered.numel() * gathered.element_size())
    weight.copy_(gathered)
    y = x @ weight.t()
    resize_storage_bytes_(weight, 0)
    return y if last else torch.tanh(y)


class ShardedLinear(nn.Module):
    """A linear layer without bias whose weight lives as one shard of rows per rank.

    `shard` (a Parameter) is this rank's rows of the weight; `weight` is the whole weight's
    tensor, whose storage holds no bytes except while the layer gathers it."""

    def __init__(self, weight: torch.Tensor, group: dist.ProcessGroup):
        super().__init__()
        self.group = group
        ranks, rank = group.size(), group.rank()
        if weight.shape[0] % ranks:
            raise ValueError(
                f"a weight of {weight.shape[0]} rows does not split among {ranks} ranks"
            )
        self.shard = nn.Parameter(weight.detach().chunk(ranks)[rank].clone())
        unsharded = torch.empty_like(weight)
        unsharded.untyped_storage().resize_(0)
        self.register_buffer("weight", unsharded, persistent=False)
        self.shard.register_post_accumulate_grad_hook(self._reshard)

    def forward(self, x: torch.Tensor, layer: Callable, last: bool):
        """`layer` is `layer_forward`, compiled (or as it is, to run the model eagerly)."""
        y = layer(x, self.weight, self.shard, self.group.size(), self.group.group_name, last)
        # Run eagerly, the copy_ gives the weight the layer's history, and the next step's copy_
        # would extend it: the backward would go through every earlier step's gather again. A
        # compiled call leaves the weight without history (its storage starts and ends empty,
        # r[resize.compiled.epilogue]); either way the weight starts the next step afresh.
        self.weight.detach_()
        if y.requires_grad:
            y.register_hook(self._regather)  # runs before the layer's backward
        return y

    def _regather(self, grad: torch.Tensor) -> None:
        """FSDP's pre-backward all-gather, into the weight's storage, its version left alone
        (`r[autograd.saved-inputs.version]`)."""
        weight = self.weight
        weight.untyped_storage().resize_(weight.numel() * weight.element_size())
        with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(weight):
            dist.all_gather_single(weight, self.shard.detach(), group=self.group)

    def _reshard(self, shard: torch.Tensor) -> None:
        """After the shard's gradient is accumulated, the layer's backward is over."""
        self.weight.untyped_storage().resize_(0)


class SimpleFSDP(nn.Module):
    """A chain of `ShardedLinear` layers with tanh between them, sharded over `group` (the
    default group when None); each layer runs as a call of one `aotspec.compile`d
    `layer_forward` on `backend` ("reference" or "fast"; default as for `aotspec.compile`)."""

    def __init__(
        self,
        weights: list[torch.Tensor],
        group: dist.ProcessGroup | None = None,
        *,
        backend: str | None = None,
    ):
        super().__init__()
        group = dist.group.WORLD if group is None else group
        self.layers = nn.ModuleList(ShardedLinear(w, group) for w in weights)
        self.compiled = aotspec.compile(layer_forward, backend=backend)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for k, layer in enumerate(self.layers):
            x = layer(x, self.compiled, last=k == len(self.layers) - 1)
        return x


def unsharded_forward(weights: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """The same model in one process, eagerly, on whole weights: what SimpleFSDP must equal."""
    for k, weight in enumerate(weights):
        x = x @ weight.t()
        if k < len(weights) - 1:
            x = torch.tanh(x)
    return x
