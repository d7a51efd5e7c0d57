"""Ports of PyTorch's AOTAutograd tests: plain programs, pytree inputs and outputs, modules
(`TestAOTModuleSimplified` and the module tests of `TestAOTAutograd`), sparse and complex
tensors, random ops. Each test is named after the PyTorch test it re-expresses; the expected
behaviour is eager PyTorch's, computed at test time (see verify.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .verify import interm, ones, per_backend, randn, same_as_eager, verify


@per_backend
def test_non_tensor_and_none_inputs(backend):
    def f(a, b, c):
        return a * c

    for rg in (True, False):
        verify(f, lambda rg=rg: [2, None, ones(3, 3, rg=rg)], backend)


@per_backend
def test_single_output(backend):
    def f(a, b):
        return a + b

    for rg in (True, False):
        verify(f, lambda rg=rg: [randn(3, 3, rg=rg), randn(3, 3)], backend)


@per_backend
def test_multi_output(backend):
    def f(a, b):
        return a + b, a - b

    for rg in (True, False):
        verify(f, lambda rg=rg: [randn(3, 3, rg=rg), randn(3, 3)], backend)


@per_backend
def test_multi_output_list(backend):
    def f(a, b):
        return [a + b, a - b]

    for rg in (True, False):
        verify(f, lambda rg=rg: [randn(3, 3, rg=rg), randn(3, 3)], backend)


@per_backend
def test_squeeze_mutation(backend):
    # A write into a squeezed copy of the input; only the copy changes.
    def f(a):
        b = a.clone().squeeze(-1)
        b.add_(1.0)
        return a + b

    for rg in (True, False):
        verify(f, lambda rg=rg: [randn(3, 1, rg=rg)], backend)


@per_backend
def test_to_dense_strided_tensor(backend):
    def f(a):
        return (
            a.to_dense(),
            a.to_dense(masked_grad=True),
            a.to_dense(dtype=torch.float32),
            a.to_dense(dtype=torch.float64),
        )

    verify(f, lambda: [randn(3, 4)], backend)


@per_backend
def test_complex_linear(backend):
    class F(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(10, 10, dtype=torch.complex64)

        def forward(self, x):
            return self.linear(x).sum().abs()

    verify(None, lambda: [randn(1, 10, 10, dtype=torch.complex64)], backend, module=F)


@per_backend
def test_embedding_bag_view_dynamic(backend):
    # The weight's gradient is sparse; the inputs are index tensors.
    class F(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.EmbeddingBag(100, 8, sparse=True)

        def forward(self, x, y):
            return self.emb(x, y).view(-1)

    verify(None, lambda: [torch.arange(3), torch.arange(3)], backend, module=F)


@per_backend
def test_sparse_csr_creation(backend):
    def f(v):
        rows = torch.tensor([0, 2, 4])
        cols = torch.tensor([0, 1, 0, 1])
        return torch.sparse_csr_tensor(rows, cols, v, size=(2, 2)).to_dense() * 2

    verify(f, lambda: [randn(4)], backend)


@per_backend
def test_sparse_csr_creation_requires_grad_errors(backend):
    # PyTorch's AOTAutograd raises here (a bogus empty grad); eager gives the right gradient.
    def f(v):
        rows = torch.tensor([0, 2, 4])
        cols = torch.tensor([0, 1, 0, 1])
        return torch.sparse_csr_tensor(rows, cols, v, size=(2, 2)).to_dense().sum()

    verify(f, lambda: [randn(4, rg=True)], backend)


class _Linear3(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, a):
        return self.linear(a)


@per_backend
def test_composite_impl_compile(backend):
    for rg in (True, False):
        verify(
            None,
            lambda rg=rg: [interm(ones(3, 3, rg=rg))],
            backend,
            module=_Linear3,
            mutate_outputs=True,
        )
    verify(
        None,
        lambda: [interm(ones(3, 3))],
        backend,
        module=_Linear3,
        mutate_outputs=True,
        context=torch.inference_mode,
    )


@per_backend
def test_module(backend):
    def make():
        return nn.Sequential(nn.Linear(32, 32), nn.ReLU())

    verify(None, lambda: [randn(32, 32)], backend, module=make)


@per_backend
def test_batchnorm(backend):
    # Training-mode batch norm: running statistics are buffers written by the call.
    verify(None, lambda: [ones(1, 4, 2, 2)], backend, module=lambda: nn.BatchNorm2d(4))


@per_backend
def test_batchnorm_inference(backend):
    def make():
        return nn.BatchNorm2d(4, 4).eval()

    verify(None, lambda: [ones(4, 4, 4, 4)], backend, module=make, context=torch.no_grad)


@per_backend
def test_list_codegen(backend):
    def f(a, b, c):
        return a.sin() * b.cos() * c.sin()

    verify(f, lambda: [randn(5, rg=True) for _ in range(3)], backend)


@per_backend
def test_inference_mode(backend):
    def run(call, rec):
        x = randn(4, 4)
        with torch.inference_mode():
            rec("output", call(x))

    same_as_eager(None, run, backend, module=lambda: nn.Linear(4, 4))


class _BufferedScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.buf = nn.Buffer(torch.zeros(1))
        self.w1 = nn.Parameter(torch.zeros(1))
        self.w2 = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        self.buf.add_(1)
        return (self.w1 * x * self.w2).sum() + self.buf.sum()


class _BufferedMatmul(nn.Module):
    def __init__(self):
        super().__init__()
        self.buf = nn.Buffer(torch.ones(4, 4))
        self.w = nn.Parameter(torch.tensor([[4.0, 5.0], [1.0, 2.0], [6.0, 7.0], [8.0, 9.0]]))

    def forward(self, x):
        self.buf.add_(1)
        return (self.w @ x).sum() + self.buf.sum()


@per_backend
def test_buffer_copied_in_graph(backend):
    verify(None, lambda: [ones(1, rg=True).clone()], backend, module=_BufferedScale)


@per_backend
def test_buffer_copied_in_graph_with_different_shapes(backend):
    verify(None, lambda: [ones(2, 4, rg=True).clone()], backend, module=_BufferedMatmul)


@per_backend
def test_buffer_batch_norm(backend):
    verify(
        None, lambda: [ones(20, 100, rg=True).clone()], backend, module=lambda: nn.BatchNorm1d(100)
    )


class _LinearPlus(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(20, 30)

    def forward(self, x, y):
        return (self.linear(x) + y,)


@per_backend
def test_aot_module_simplified(backend):
    verify(
        None,
        lambda: [randn(128, 20, rg=True), randn(128, 30, rg=True)],
        backend,
        module=_LinearPlus,
    )


@per_backend
def test_lift_fresh_copy_in_graph(backend):
    def f(x):
        constant = torch.tensor([1])
        return (x.mul(torch.ops.aten.lift_fresh_copy.default(constant)),)

    verify(f, lambda: [ones(4, rg=True)], backend)


@per_backend
def test_inference_python_dispatcher(backend):
    # Bilinear upsampling of an input that does not require grad (shrunk from 2x512x40x59).
    def make():
        return nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)

    verify(None, lambda: [randn(2, 8, 5, 7)], backend, module=make)


@per_backend
def test_rrelu(backend):
    # Random slopes for negative inputs: compared on everything but the values, plus the bounds.
    def f(x):
        return torch.rrelu(x, training=True)

    def f_(x):
        torch.rrelu_(x, training=True)
        return x

    def bounds(view):
        x, out = view.args[0], view.outs
        return bool(((out == x) | ((out <= x / 8) & (out >= x / 3))).all())

    verify(f, lambda: [randn(4, 4)], backend, values=False, observe=bounds)
    verify(f_, lambda: [randn(4, 4)], backend, values=False)


@per_backend
def test_layer_norm(backend):
    def f(x):
        return F.layer_norm(x, normalized_shape=(8,))

    verify(f, lambda: [randn(2, 4, 8)], backend, rtol=0, atol=0)


@per_backend
def test_rrelu_with_noise_mutation(backend):
    def functional(x):
        noise = torch.ones_like(x)
        return torch.ops.aten.rrelu_with_noise_functional(x, noise, 0.2, 0.8, True)

    def mutating(x):
        noise = torch.ones_like(x)
        result = torch.ops.aten.rrelu_with_noise(x, noise, 0.2, 0.8, True)
        return result, noise

    def in_place(x):
        noise = torch.ones_like(x, requires_grad=False)
        torch.ops.aten.rrelu_with_noise_(x, noise, 0.2, 0.8, True)
        return x, noise

    def negative():
        return [-torch.abs(randn(4, 4, dtype=torch.bfloat16, rg=True))]

    def noise_below_one(view):
        return bool((view.outs[1] < 1).all())

    for f in (functional, mutating):
        verify(f, negative, backend, values=False, observe=noise_below_one)
    verify(in_place, negative, backend, values=False, observe=noise_below_one, backward=False)


@per_backend
def test_backward_with_expanded_computed_output(backend):
    # Outputs with a zero stride; the backward gets a dense gradient of their shape.
    def sum_expand(x):
        return x.sum(dim=0, keepdim=True).expand_as(x)

    def computed_view_expand(x):
        return x[:1].sin().expand_as(x)

    for f in (sum_expand, computed_view_expand):

        def run(call, rec):
            x = randn(4, 8, rg=True)
            grad = randn(4, 8)
            y = call(x)
            rec("output", y)
            rec("output strides", y.stride())
            y.backward(grad)
            rec("grad", x.grad)

        same_as_eager(f, run, backend)


@per_backend
def test_output_dict(backend):
    def same_twice(x):
        return {"a": x, "b": x}

    verify(same_twice, lambda: [randn(3, 3, rg=True)], backend)

    def sum_in_dict(x, y):
        return {"a": x, "b": y + x}

    verify(sum_in_dict, lambda: [randn(3, rg=True), randn(3)], backend)

    def doubled(x):
        return {k: v * 2 for k, v in x.items()}

    verify(doubled, lambda: [{"a": randn(3, rg=True), "b": randn(3, rg=True)}], backend)


@per_backend
def test_lift_after_factory(backend):
    # From TestAOTAutogradWithDynamo: a random factory; both sides start from the same seed.
    def f(low, high, size):
        y = torch.randint(low=low, high=high, size=size)
        return torch.ops.aten.lift.default(y)

    verify(f, lambda: [0, 100, [2, 3]], backend)


@per_backend
def test_grad_context(backend):
    # No graph for the backward when grad mode is off; one when it is on.
    def f(x):
        return x * 2

    def run(call, rec):
        x = randn((), rg=True)
        with torch.set_grad_enabled(False):
            rec("no grad", call(x))
        with torch.set_grad_enabled(True):
            out = call(x)
            rec("grad", out)
            out.sum().backward()
        rec("x.grad", x.grad)

    same_as_eager(f, run, backend)
