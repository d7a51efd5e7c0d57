"""Ports of the saved-tensor-hooks tests that PyTorch PR #150032 added to
test_aotdispatch.py (`TestAOTModuleSimplified`): hooks active around a compiled call, traced into
its forward and backward. PyTorch runs them on CUDA with GraphModule hooks and dynamic shapes; the
ports run on CPU with the hooks as plain functions (aotspec traces them itself), static shapes,
and the hook pairs that mean something on one device. Like PyTorch, values are compared to eager
with a 1e-2 tolerance, for each `hooks_filter` ("donated", "no_static", "all")."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

from .verify import compile_fn, ones, per_backend, randn, same_as_eager, verify

FILTERS = ("donated", "no_static", "all")


def hooks(pack, unpack):
    return lambda: torch.autograd.graph.saved_tensors_hooks(pack, unpack)


class _SaveTwo(torch.autograd.Function):
    # Saves a float input and an integer one; returns the first.
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x

    @staticmethod
    def backward(ctx, gx):
        saved_x, saved_y = ctx.saved_tensors
        return gx + saved_x + saved_y, None


class _SaveAndSize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.d1 = x.size(1)
        return x

    @staticmethod
    def backward(ctx, gx):
        (saved_x,) = ctx.saved_tensors
        return gx + saved_x * ctx.d1


class _SaveOne(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, gx):
        (saved_x,) = ctx.saved_tensors
        return gx + saved_x


def _relu_chain(x, y):
    x = x.relu()
    x = x + 1
    x = x.relu()
    x = 2 * x
    return _SaveAndSize.apply(x)


def _transposes(x, y):
    x = x + 1
    x = x.t()
    x = x.relu()
    x = x.t()
    return _SaveTwo.apply(x, y)


# Hook pairs. Each pack returns what its unpack turns back into the saved tensor.


def pack_bf16(x):
    return x.dtype, x.to(dtype=torch.bfloat16)


def unpack_bf16(packed):
    dtype, x = packed
    return x.to(dtype)


def pack_mul2(x):
    return x.dtype, x * 2


def unpack_mul2(packed):
    dtype, x = packed
    return (x / 2).to(dtype)


def pack_device(x):
    return x.device, x.cpu()


def unpack_device(packed):
    device, x = packed
    return x.to(device)


def pack_dtype_device_size(x):
    return x.dtype, x.device, x.size(1), x.cpu()


def unpack_dtype_device_size(packed):
    dtype, device, _, x = packed
    return x.to(device=device).to(dtype)


def pack_mul2_plain(x):
    return x * 2


def unpack_mul2_plain(x):
    return x / 2


def pack_fp8(x):
    if not x.dtype.is_floating_point:
        return x
    return x.dtype, x.to(torch.float8_e5m2)


def unpack_fp8(packed):
    if isinstance(packed, torch.Tensor):
        return packed
    dtype, x = packed
    return x.to(dtype)


def pack_fp8_with_scale(x):
    if not x.dtype.is_floating_point:
        return x
    amax = torch.max(torch.abs(x)).to(torch.float64)
    scale = (torch.finfo(torch.float8_e5m2).max / torch.clamp(amax, min=1e-12)).to(torch.float32)
    return x.dtype, scale, (x.to(torch.float32) * scale).to(torch.float8_e5m2)


def unpack_fp8_with_scale(packed):
    if isinstance(packed, torch.Tensor):
        return packed
    dtype, scale, x = packed
    return (x.to(torch.float32) / scale).to(dtype)


HOOK_PAIRS = [
    (pack_bf16, unpack_bf16),
    (pack_mul2, unpack_mul2),
    (pack_device, unpack_device),
    (pack_dtype_device_size, unpack_dtype_device_size),
    (pack_mul2_plain, unpack_mul2_plain),
    (pack_fp8, unpack_fp8),
    (pack_fp8_with_scale, unpack_fp8_with_scale),
]


@per_backend
def test_saved_tensors_hooks_base(backend):
    def make():
        return [ones(2, 2, rg=True), torch.zeros(2, 2, dtype=torch.int64)]

    for hooks_filter in FILTERS:
        for fn in (_transposes, _relu_chain):
            for pack, unpack in HOOK_PAIRS:
                verify(
                    fn,
                    make,
                    backend,
                    context=hooks(pack, unpack),
                    rtol=1e-2,
                    atol=1e-2,
                    hooks_filter=hooks_filter,
                )


# A custom op that records the shape and dtype of what the pack hook sees, when it runs.
_LOGGED: list[tuple[list[int], torch.dtype]] = []


@torch.library.custom_op("aotdispatch_port::log_saved", mutates_args=())
def _log_saved(x: torch.Tensor) -> torch.Tensor:
    _LOGGED.append((list(x.shape), x.dtype))
    return x.clone()


@_log_saved.register_fake
def _(x):
    return torch.empty_like(x)


def _pack_logged(x):
    torch.ops.aotdispatch_port.log_saved(x)
    return pack_fp8_with_scale(x)


class _TwoLinears(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(2, 2)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(2, 2)

    def forward(self, x):
        x = _SaveOne.apply(x)
        x = x.to(dtype=torch.float32)
        return self.fc2(self.relu(self.fc1(x)))


@per_backend
def test_saved_tensors_hooks_params(backend):
    # Which saved tensors each filter hands to the hooks: parameters only under "all", the
    # float64 input under "no_static" and "all", intermediates always.
    def make():
        _LOGGED.clear()  # each run logs afresh, so what is left is the compiled run's
        return [ones(2, 2, 2, dtype=torch.float64, rg=True)]

    for hooks_filter in FILTERS:
        verify(
            None,
            make,
            backend,
            module=_TwoLinears,
            rtol=1e-2,
            atol=1e-2,
            context=hooks(_pack_logged, unpack_fp8_with_scale),
            hooks_filter=hooks_filter,
        )
        shapes = [shape for shape, _ in _LOGGED]
        dtypes = [dtype for _, dtype in _LOGGED]
        assert [2, 2, 2] in shapes, (hooks_filter, _LOGGED)
        assert ([2, 2] in shapes) == (hooks_filter == "all"), (hooks_filter, _LOGGED)
        assert (torch.float64 in dtypes) == (hooks_filter != "donated"), (hooks_filter, _LOGGED)


@per_backend
def test_saved_tensors_hooks_donated_buffers(backend):
    # The input is returned and saved; relu saves its output. With and without fp8 hooks.
    def fn(x):
        x0 = x
        x = _SaveOne.apply(x)
        return x0, torch.nn.functional.relu(x)

    def second_output(view):
        return view.outs[1].sum()

    def make():
        return [torch.rand(3, 3, requires_grad=True)]

    verify(fn, make, backend, loss=second_output)
    verify(
        fn,
        make,
        backend,
        loss=second_output,
        context=hooks(pack_fp8, unpack_fp8),
        hooks_filter="no_static",
    )


@per_backend
def test_saved_tensors_hooks_gm_data_dependent_probe(backend):
    # The pack hook reads a value (`.item()`), and packs into a tensor, a list or a dict.
    def fn(x, w):
        return torch.matmul(x, w).sin()

    def probe(t):
        torch.all(torch.isfinite(t)).item()
        return t

    pairs = [
        (lambda t: probe(probe(t)), lambda packed: packed),
        (lambda t: [probe(t)], lambda packed: packed[0]),
        (lambda t: {"t": probe(t)}, lambda packed: packed["t"]),
    ]
    for pack, unpack in pairs:
        verify(
            fn,
            lambda: [randn(8, 16, rg=True), randn(16, 16, rg=True)],
            backend,
            context=hooks(pack, unpack),
            hooks_filter="no_static",
        )


class _SaveAndSizeOnly(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.d1 = x.size(1)
        return x

    @staticmethod
    def backward(ctx, gx):
        (saved_x,) = ctx.saved_tensors
        return gx + saved_x * ctx.d1


@per_backend
def test_saved_tensors_hooks_recompile(backend):
    # One compiled function called with no hooks, then under two different pairs: each call
    # behaves as eager under the same hooks. (PyTorch counts the compilations; not ported.)
    def fn(x):
        x = x.relu()
        x = x + 1
        x = 2 * x
        return _SaveAndSizeOnly.apply(x)

    pairs = [
        (lambda x: x.to(dtype=torch.bfloat16), lambda x: x.to(dtype=torch.float)),
        (lambda x: x * 2, lambda x: x / 2),
    ]

    def run(call, rec):
        for i, pair in enumerate([None, *pairs]):
            x = ones(2, 3, rg=True)
            with hooks(*pair)() if pair else contextlib.nullcontext():
                y = call(x)
                y.sum().backward()
            rec(f"call {i}", (y, x.grad))

    same_as_eager(fn, run, backend, rtol=1e-2, atol=1e-2, hooks_filter="all")


@per_backend
def test_saved_tensors_hooks_mutations_raise(backend):
    # Hooks that write into what they pack and unpack. Eager runs them; PyTorch's AOTAutograd
    # refuses them while compiling, and so does the spec: a hook inlined into a compiled graph
    # computes new tensors (r[hooks.compiled.untraceable]), and nothing reaches the caller.
    def mutate(x):
        return x.mul_(2)

    def fn(x):
        x = 2 * x
        return _SaveOne.apply(x)

    x = ones(2, 3, rg=True)
    compiled = compile_fn(fn, backend, hooks_filter="no_static")
    with hooks(mutate, mutate)(), pytest.raises(Exception, match="hooks.compiled.untraceable"):
        compiled(x)
    assert x.grad is None and torch.equal(ones(2, 3), x)
