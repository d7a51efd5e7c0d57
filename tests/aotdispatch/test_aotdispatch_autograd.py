"""Ports of PyTorch's AOTAutograd tests: autograd. Custom `autograd.Function`s (returning their
input, writing into saved tensors or into the incoming gradient in the backward), custom ops
with `register_autograd`, `torch.autograd.grad` inside the program, requires_grad that changes
during the call (`requires_grad_()`, `x.add_(y)` with `y` requiring grad), grad mode switched
inside the program, and writes into inputs during the backward."""

from __future__ import annotations

import itertools

import torch

from .verify import interm, ones, per_backend, randn, same_as_eager, verify


@per_backend
def test_input_output_aliase_custom_autograd_function(backend):
    # The forward returns its input unchanged; the backward halves the gradient.
    class Identity(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, gx):
            return gx * 0.5

    def f(x):
        return Identity.apply(x)

    verify(f, lambda: [ones(2, 2, rg=True)], backend)


@per_backend
def test_backward_mutation_data(backend):
    # The backward doubles the tensor it saved, which is an input of the program.
    class DoubleSavedInBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.clone()

        @staticmethod
        def backward(ctx, grad_output):
            (x,) = ctx.saved_tensors
            x.mul_(2)
            return grad_output.clone()

    def f(a, b):
        return a * DoubleSavedInBackward.apply(b)

    for b_rg in (False, True):
        verify(
            f,
            lambda b_rg=b_rg: [interm(ones(3, 3, rg=True)), interm(ones(3, 3, rg=b_rg))],
            backend,
            mutate_outputs=True,
        )


class _ForeachWrites(torch.autograd.Function):
    """Writes with _foreach_mul_: into an input and an intermediate in the forward, and into the
    saved intermediate in the backward."""

    @staticmethod
    def forward(ctx, a, b):
        torch._foreach_mul_([b], [2])
        x = b + 1
        torch._foreach_mul_([x], [3])
        ctx.save_for_backward(x)
        return x * a

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        torch._foreach_mul_([x], [4])
        return grad_output * x, grad_output * x


class _ForeachWritesOneInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        torch._foreach_mul_([x], [2])
        x = x + 1
        torch._foreach_mul_([x], [3])
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        torch._foreach_mul_([x], [4])
        return grad_output * x


@per_backend
def test_fw_bw_mutation_no_functionalization1(backend):
    def f(a, b):
        return _ForeachWrites.apply(a, b).sin_().clone()

    verify(f, lambda: [ones(3, 3, rg=True), ones(3, 3)], backend)


@per_backend
def test_fw_bw_mutation_no_functionalization2(backend):
    def f(a, b):
        return _ForeachWritesOneInput.apply(b) * a

    verify(f, lambda: [ones(3, 3, rg=True), ones(3, 3)], backend)


@per_backend
def test_backward_mutation_on_grad_out(backend):
    # The backward writes into the gradient it receives.
    class DoubleIncomingGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad_output):
            grad_output.mul_(2)
            return grad_output.clone()

    def f(a, b):
        return DoubleIncomingGrad.apply(a * b)

    verify(
        f,
        lambda: [ones(3, 3, rg=True), ones(3, 3, rg=True)],
        backend,
        loss=lambda view: view.outs.mul(2).sum(),
    )


# A custom op whose backward zeroes its second input under no_grad (declared without mutations).
@torch.library.custom_op("aotdispatch_port::clone_zeroing_second", mutates_args=())
def _clone_zeroing_second(x: torch.Tensor, x1: torch.Tensor) -> torch.Tensor:
    return x.clone()


@_clone_zeroing_second.register_fake
def _(x, x1):
    return torch.empty_like(x)


def _zeroing_backward(ctx, grad):
    with torch.no_grad():
        ctx.x1.zero_()
    return grad * 2, None


def _zeroing_setup(ctx, inputs, output):
    ctx.x, ctx.x1 = inputs


_clone_zeroing_second.register_autograd(_zeroing_backward, setup_context=_zeroing_setup)


@per_backend
def test_backward_mutation_forward_inputs(backend):
    def fn(x, x1, x2):
        x2.mul_(5)
        return torch.ops.aotdispatch_port.clone_zeroing_second(x, x1) + x2

    verify(
        fn,
        lambda: [randn(3, rg=True).clone(), randn(3).clone(), randn(3).clone()],
        backend,
        retain_grad=True,
    )


@per_backend
def test_backward_mutation_forward_inputs_create_graph(backend):
    # PyTorch's AOTAutograd refuses a create_graph backward that writes an input requiring
    # grad; eager runs it.
    def fn(x, x1):
        return torch.ops.aotdispatch_port.clone_zeroing_second(x, x1)

    def run(call, rec):
        leaf_x, leaf_x1 = randn(3, rg=True), randn(3, rg=True)
        x, x1 = leaf_x.clone(), leaf_x1.clone()
        y = call(x, x1)
        rec("output", y)
        rec.attempt("grad", lambda: torch.autograd.grad(y.sum(), leaf_x, create_graph=True))
        rec("x1 after the backward", x1)

    same_as_eager(fn, run, backend)


@per_backend
def test_custom_autograd(backend):
    class PlusOneGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output + 1

    def f(x):
        return PlusOneGrad.apply(x)

    verify(f, lambda: [randn(3)], backend)


@per_backend
def test_inner_grad(backend):
    # torch.autograd.grad inside the program.
    def foo(x):
        y = torch.exp(x)
        return torch.autograd.grad(y, x)

    verify(foo, lambda: [randn((), rg=True)], backend)


@per_backend
def test_no_grad_input_output(backend):
    def f(a, b):
        return a.cos(), b.cos(), a * b

    for rg_a, rg_b in itertools.product((True, False), repeat=2):
        verify(f, lambda rg_a=rg_a, rg_b=rg_b: [randn(5, rg=rg_a), randn(5, rg=rg_b)], backend)


@per_backend
def test_some_output_requires_grad_input_doesnt(backend):
    def f(a, b):
        a_view = a.view(-1)
        a_view.requires_grad_(True)
        return a_view

    verify(f, lambda: [randn(3, 3), randn(3, 3, rg=True)], backend)


@per_backend
def test_new_inp_requires_grad_now(backend):
    # x does not require grad; after x.add_(y) it does, and is no longer a leaf.
    def f(x, y):
        return x.add_(y)

    verify(f, lambda: [ones(20, 100), ones(20, 100, rg=True)], backend)


@per_backend
def test_input_inplace_requires_grad_true(backend):
    # The program switches requires_grad on for an input.
    def f(a, b):
        a.requires_grad_(True)
        return a.mul(3), b.mul(4)

    verify(
        f, lambda: [interm(ones(3, 3)), interm(ones(3, 3, rg=True))], backend, mutate_outputs=True
    )


@per_backend
def test_aot_dispatch_output_requires_grad_in_no_grad(backend):
    # From TestAOTDispatch: called under no_grad, with enable_grad inside the program.
    def fn(x):
        out1 = x.sin()
        with torch.enable_grad():
            out2 = x.cos()
        return out1, out2

    for rg in (True, False):

        def run(call, rec, rg=rg):
            x = ones(10, rg=rg)
            with torch.no_grad():
                outs = call(x)
            rec("outputs", outs)
            if rg:
                (outs[0] + outs[1]).sum().backward()
                rec("grad", x.grad)

        same_as_eager(fn, run, backend)


@per_backend
def test_aot_dispatch_output_requires_grad_in_no_grad_views(backend):
    # From TestAOTDispatch: a view keeps requires_grad under no_grad, the sin does not.
    def fn(x):
        return x.view(-1), x.sin()

    def run(call, rec):
        x = ones(2, 3, rg=True).clone()
        with torch.no_grad():
            rec("outputs", call(x))

    same_as_eager(fn, run, backend)


class _AddInBackward(torch.autograd.Function):
    """Keeps a second input on ctx (not saved) and adds to it in the backward; the amount
    depends on the incoming gradient."""

    @staticmethod
    def forward(ctx, dummy, inplace_tensor):
        ctx.inplace_tensor = inplace_tensor
        return dummy.clone()

    @staticmethod
    def backward(ctx, grad_output):
        attached = grad_output * 0 + 1
        ctx.inplace_tensor.add_(1 * attached)
        return grad_output, None, None


class _DoubleSavedSecondInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, dummy, inplace_tensor):
        ctx.save_for_backward(inplace_tensor)
        return dummy.clone()

    @staticmethod
    def backward(ctx, grad_output):
        (inplace_tensor,) = ctx.saved_tensors
        inplace_tensor.mul_(2.0)
        return grad_output, None


class _AddInForwardAndBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, dummy, inplace_tensor):
        inplace_tensor.add_(1)
        ctx.inplace_tensor = inplace_tensor
        return dummy.clone()

    @staticmethod
    def backward(ctx, grad_output):
        ctx.inplace_tensor.add_(1)
        return grad_output, None, None


@per_backend
def test_mutations_in_bw_detached_from_tangent(backend):
    # From TestAOTAutogradWithDynamo.
    def fn(dummy, inplace_tensor):
        return _AddInBackward.apply(dummy, inplace_tensor)

    verify(fn, lambda: [torch.zeros(2, requires_grad=True), torch.zeros(2)], backend)


@per_backend
def test_mutations_in_bw_requires_grad_input(backend):
    # From TestAOTAutogradWithDynamo: the backward writes a leaf that requires grad.
    def fn(dummy, inplace_tensor):
        return _DoubleSavedSecondInBackward.apply(dummy, inplace_tensor)

    verify(fn, lambda: [torch.zeros(2, requires_grad=True), ones(2, rg=True)], backend)


@per_backend
def test_mutation_of_input_in_fw_and_bw(backend):
    # From TestAOTAutogradWithDynamo (its tensor-subclass half is out of scope).
    def fn(dummy, inplace_tensor):
        return _AddInForwardAndBackward.apply(dummy, inplace_tensor)

    verify(fn, lambda: [randn(2, rg=True), torch.zeros(2)], backend)
