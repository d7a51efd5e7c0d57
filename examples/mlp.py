"""A 4-layer MLP training step with a bfloat16 pack hook; without the hook, the program that
`benchmarks/mlp_memory.py --batch 512` measures.

aotspec explain examples/mlp.py:mlp --hooks pack_bf16,unpack_f32
aotspec memory examples/mlp.py:mlp --hooks pack_bf16,unpack_f32 --plot docs/mlp_memory.png
aotspec memory examples/mlp.py:mlp --sizes batch=64..512:64 --plot docs/mlp_memory_sizes.png
"""

import torch

BATCH, WIDTH, LAYERS = 512, 256, 4


def mlp(x, *weights):
    for w in weights[:-1]:
        x = torch.relu(x @ w.t())
    return x @ weights[-1].t()


def mlp_args(batch=BATCH):
    torch.manual_seed(0)
    x = torch.randn(batch, WIDTH)
    weights = [(torch.randn(WIDTH, WIDTH) * WIDTH**-0.5).requires_grad_() for _ in range(LAYERS)]
    return (x, *weights)


def pack_bf16(t):
    return t.to(torch.bfloat16)


def unpack_f32(t):
    return t.to(torch.float32)
