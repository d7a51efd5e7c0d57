"""FSDP's pattern on a zero-byte parameter, the README's example.

aotspec explain examples/fsdp.py:step
"""

import torch


def step(w, src, x):
    torch.ops.inductor.resize_storage_bytes_(w, 16)  # gather: the parameter gets its bytes
    w.copy_(src)
    out = x * w
    torch.ops.inductor.resize_storage_bytes_(w, 0)  # and frees them again
    return out


def step_args():
    w = torch.empty(4)
    w.untyped_storage().resize_(0)
    return w, torch.randn(4), torch.randn(4)
