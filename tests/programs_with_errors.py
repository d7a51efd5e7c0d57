"""Programs the tests of `aotspec explain` and `aotspec memory` name on the command line, each
wrong in one way."""

import torch


def shapes(x, w):
    return x @ w  # (3, 4) @ (3, 4): eager PyTorch raises


def shapes_args():
    return torch.randn(3, 4), torch.randn(3, 4)


def unsupported(x):
    return x.to(torch.complex64).abs()  # complex dtypes are outside the spec


def unsupported_args():
    return (torch.randn(3),)


def no_builder(x):
    return x


def raising():
    raise ValueError("no arguments today")
