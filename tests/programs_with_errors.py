"""Programs the tests of `aotspec check`, `explain` and `memory` name on the command line, each
wrong in one way, and one module with nothing wrong (`batch_norm`)."""

import torch


def shapes(x, w):
    return x @ w  # (3, 4) @ (3, 4): eager PyTorch raises


def shapes_args():
    return torch.randn(3, 4), torch.randn(3, 4)


def unsupported(x):
    return x.to(torch.float8_e4m3fnuz)  # not in the reference's dtype table


def unsupported_args():
    return (torch.randn(3),)


def no_builder(x):
    return x


def raising():
    raise ValueError("no arguments today")


def two_refused(x):
    y = torch.ops.prims.sin(x)  # prims are not in the op table
    return torch.ops.aten.mm.dtype(y, y, torch.float32)  # no CPU kernel


def two_refused_args():
    return (torch.zeros(2, 2),)


batch_norm = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))


def batch_norm_args():
    return (torch.randn(2, 3, 6, 6),)


def refused_forward_and_backward(x, z):
    y = torch.ops.prims.sin(x.detach())  # prims are not in the op table
    u, _, _ = torch.linalg.svd(z)  # complex: eager's derivative checks the phases' values
    return y.sum() + u.abs().sum()


def refused_forward_and_backward_args():
    z = torch.randn(3, 3, dtype=torch.complex64, requires_grad=True)
    return torch.randn(3, 4, requires_grad=True), z
