"""What aotspec makes while compiling and running lives on its inputs' device, whatever torch's
default device is. On a GPU the default is the CPU and the inputs are CUDA tensors; here the
inputs are CPU tensors and the default device is `meta`, so that a tensor aotspec made on the
default device meets the inputs' and the call raises, as it did on CUDA (tangents, the storage
an input's write goes through, a custom Function's backward, saved-tensor hooks' examples, the
factories of an ATen op's derivative traced on the default device)."""

import contextlib

import pytest
import torch

import aotspec


def _step(x, w, target):
    return ((torch.tanh(x @ w) - target) ** 2).mean()  # pow's derivative meets the tangent


def _writes_its_input(x, w):
    x.mul_(2)  # the epilogue writes x's storage through a tensor it makes
    return (x @ w).sum()


class _Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def _custom(x, w):
    return _Double.apply(x @ w).sum()


def _saves(x, w):
    return torch.tanh(x @ w).sum()  # called under saved-tensor hooks: tanh's result is packed


def _aten_derivative(x, w):
    # logcumsumexp's derivative is eager's own, traced once and replayed: its factories name
    # the device the trace ran on
    return (x @ w).logcumsumexp(0).sum()


def _arguments(generator):
    x = torch.randn(4, 3, generator=generator)
    w = torch.randn(3, 2, generator=generator, requires_grad=True)
    return x, w


def _hooks(program):
    if program is not _saves:
        return contextlib.nullcontext()
    return torch.autograd.graph.saved_tensors_hooks(lambda t: t * 1, lambda t: t)


@pytest.mark.parametrize("program", [_step, _writes_its_input, _custom, _saves, _aten_derivative])
def test_made_on_the_inputs_device_not_the_default(program):
    generator = torch.Generator().manual_seed(0)
    x, w = _arguments(generator)
    extra = [torch.randn(4, 2, generator=generator)] if program is _step else []
    eager_x, eager_w = x.clone(), w.detach().clone().requires_grad_()
    program(eager_x, eager_w, *extra).backward()
    compiled = aotspec.compile(program, backend="fast")
    with torch.device("meta"), _hooks(program):
        loss = compiled(x, w, *extra)
        loss.backward()
    assert loss.device == w.grad.device == torch.device("cpu")
    torch.testing.assert_close(w.grad, eager_w.grad)
    torch.testing.assert_close(x, eager_x)
