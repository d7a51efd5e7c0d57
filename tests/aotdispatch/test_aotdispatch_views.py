"""Ports of PyTorch's AOTAutograd tests: outputs that alias inputs, intermediates or each other,
views from multi-output ops (`unbind`), `.detach()`ed outputs, and writes into such outputs
after the call (the autograd metadata of an alias must let eager's writes through, or refuse them
the way eager does)."""

from __future__ import annotations

import torch

from .verify import Case, interm, ones, per_backend, randn, same_as_eager, verify


@per_backend
def test_input_output_view_simple(backend):
    def f(a):
        return a.view(-1)

    for rg in (False, True):
        verify(f, lambda rg=rg: [interm(ones(2, 2, rg=rg))], backend, mutate_outputs=True)


@per_backend
def test_input_output_view_mutate_multiple(backend):
    def f(a, b, c):
        a.mul_(2)
        c.mul_(3)
        return b.view(2, 2), c.view(2, 2)

    for rg in (False, True):
        verify(
            f,
            lambda rg=rg: [interm(ones(2, 2, rg=rg)) for _ in range(3)],
            backend,
            mutate_outputs=True,
        )


@per_backend
def test_input_output_view_metadata_mutate_multiple(backend):
    def f(a, b, c):
        b.mul_(3)
        c.t_()
        return a.view(2, 2), b.view(2, 2), c.view(2, 2)

    for rg in (False, True):
        verify(
            f,
            lambda rg=rg: [interm(ones(2, 2, rg=rg)) for _ in range(3)],
            backend,
            mutate_outputs=True,
        )


@per_backend
def test_input_mutation_and_output_view(backend):
    def f(a):
        a.add_(1)
        return a.view(-1)

    for rg in (False, True):
        verify(f, lambda rg=rg: [interm(ones(2, 2, rg=rg))], backend, mutate_outputs=True)


@per_backend
def test_input_mutation_output_view_multiple(backend):
    def f(a, b, c, d):
        b.transpose_(1, 0)
        c.add_(1)
        return d + 1, b.diagonal(), a + c

    def make(rg):
        def arange():
            return torch.arange(4, dtype=torch.float32, requires_grad=rg).view(2, 2)

        return [
            interm(arange()),
            interm(arange()),
            interm(ones(2, 2, rg=rg)),
            interm(ones(2, 2, rg=rg)),
        ]

    for rg in (False, True):
        verify(f, lambda rg=rg: make(rg), backend, mutate_outputs=True)


@per_backend
def test_output_aliases_intermediate_single(backend):
    def f(a):
        out = torch.mul(a, 3)
        return out.view(-1)

    for rg in (False, True):
        verify(f, lambda rg=rg: [interm(ones(3, 3, rg=rg))], backend, mutate_outputs=True)


def _unbound(a):
    return list(a.unbind(0))


@per_backend
def test_output_aliases_input_multi_output_view_should_raise_autograd_error(backend):
    # Outputs of unbind may not be written, and writing their base turns their grad_fn into an
    # error, as in eager; also when the write goes through a detached alias.
    def write_output(call, rec):
        outs = call(ones(3, 3, rg=True).clone())
        rec.attempt("write output 0", lambda: outs[0].mul_(2) is None)

    def write_input(call, rec):
        x = ones(3, 3, rg=True).clone()
        outs = call(x)
        x.mul_(2)
        rec.attempt("grad_fn of output 0", lambda: type(outs[0].grad_fn).__name__)

    def write_detached(call, rec):
        first = call(ones(3, 3, rg=True).clone())
        second = call(ones(3, 3, rg=True).clone())
        call(ones(3, 3, rg=True).clone())
        first[0].detach().mul_(2)
        rec.attempt("grad_fn of the first output", lambda: type(first[0].grad_fn).__name__)
        rec.attempt("grad_fn of the second output", lambda: type(second[0].grad_fn).__name__)

    for scenario in (write_output, write_input, write_detached):
        same_as_eager(_unbound, scenario, backend)


@per_backend
def test_output_aliases_input_multi_output_view(backend):
    # Outputs that are all unbind views of a leaf input.
    verify(_unbound, lambda: [ones(3, 3, rg=True)], backend)

    # Three unbind views and an ordinary view of the same input.
    def f3(a):
        return *a.unbind(0), a.view(a.shape)

    def run(call, rec):
        leaf = ones(3, 3, rg=True)
        x = leaf.clone()
        outs = call(x)
        rec("outputs", outs)
        for i, o in enumerate(outs[:3]):
            rec.attempt(f"write output {i}", lambda o=o: o.mul_(2) is None)
        outs[-1].mul_(2)
        x.view(-1).mul_(3)
        rec("outputs after the writes", outs)
        (leaf + outs[-1]).sum().backward()
        rec("grad", leaf.grad)

    same_as_eager(f3, run, backend)


@per_backend
def test_output_aliases_intermediate_multi_output_view(backend):
    def f1(a):
        return list(torch.mul(a, 3).unbind(0))

    def f2(a):
        out = torch.mul(a, 3)
        return *out.unbind(0), out

    def f3(a):
        out = torch.mul(a, 3)
        return *out.unbind(0), out.view(out.shape)

    def f4(a):
        out = torch.mul(a, 3)
        return *out.unbind(0), out, out.view(out.shape)

    verify(f1, lambda: [ones(3, 3, rg=True)], backend)

    def write_last_then_backward(call, rec):
        x = ones(3, 3, rg=True)
        outs = call(x)
        outs[-1].mul_(2)
        rec("written output", outs[-1])
        outs[-1].sum().backward()
        rec("grad", x.grad)

    same_as_eager(f2, write_last_then_backward, backend)
    same_as_eager(f3, write_last_then_backward, backend)

    def write_last_then_backward_two(call, rec):
        x = ones(3, 3, rg=True)
        outs = call(x)
        outs[-1].mul_(2)
        rec("written outputs", outs[-2:])
        (outs[-1] + outs[-2]).sum().backward()
        rec("grad", x.grad)

    same_as_eager(f4, write_last_then_backward_two, backend)


@per_backend
def test_output_aliases_intermediate_mutation_linear(backend):
    def f(x):
        return (x + 1).view(-1)

    def run(call, rec):
        out = call(ones(3, 3, rg=True))
        out.mul_(2)
        rec("output after the write", out)

    same_as_eager(f, run, backend)


@per_backend
def test_output_aliases_intermediate_no_grad(backend):
    # The aliased intermediate does not require grad.
    def f(a, b):
        out = torch.mul(a, 3)
        return out.view(-1), b.add(1)

    for rg in (False, True):
        verify(
            f,
            lambda rg=rg: [interm(ones(3, 3)), interm(ones(3, 3, rg=rg))],
            backend,
            mutate_outputs=True,
        )


@per_backend
def test_output_aliases_intermediate_no_grad_view(backend):
    # A view taken under no_grad of an intermediate that requires grad: it reports
    # requires_grad but takes no part in the backward.
    def f(a):
        out = torch.mul(a, 3)
        with torch.no_grad():
            out_view = out.view(-1)
        return out.sum(), out_view

    verify(f, lambda: [ones(3, 3, rg=True)], backend, loss=lambda view: view.outs[0])


@per_backend
def test_output_aliases_intermediate_returned_multiple_times(backend):
    def f(a):
        out = torch.mul(a, 3)
        out_view = out.view(-1)
        return out, out_view, out

    for rg in (False, True):
        verify(f, lambda rg=rg: [interm(ones(3, 3, rg=rg))], backend, mutate_outputs=True)


@per_backend
def test_output_aliases_intermediate_multiple(backend):
    def f(a):
        out = torch.mul(a, 3)
        return out.view(-1), out.view(-1)

    for rg in (False, True):
        verify(f, lambda rg=rg: [interm(ones(3, 3, rg=rg))], backend, mutate_outputs=True)


@per_backend
def test_output_aliases_intermediate_and_returned(backend):
    def f(a):
        out = torch.mul(a, 3)
        return out.view(-1), out

    for rg in (False, True):
        verify(f, lambda rg=rg: [interm(ones(3, 3, rg=rg))], backend, mutate_outputs=True)


@per_backend
def test_output_aliases_intermediate_and_returned_flipped(backend):
    def f(a):
        out = torch.mul(a, 3)
        return out, out.view(-1)

    for rg in (False, True):
        verify(f, lambda rg=rg: [interm(ones(3, 3, rg=rg))], backend, mutate_outputs=True)


@per_backend
def test_output_aliases_intermediate_and_returned_different_grad(backend):
    def f(a):
        out = torch.mul(a, 3)
        return out.view(-1), out, out[0].detach()

    for rg in (False, True):
        verify(f, lambda rg=rg: [interm(ones(3, 3, rg=rg))], backend, mutate_outputs=True)


@per_backend
def test_output_aliases_intermediate_inplace_view_with_detach(backend):
    # After detach_ the transposed intermediate is an ordinary, non-differentiable output.
    def f(a):
        out = torch.mul(a, 3)
        out.t_()
        out.detach_()
        return out, a + 1

    for rg in (False, True):
        verify(f, lambda rg=rg: [interm(ones(2, 4, rg=rg))], backend, mutate_outputs=True)


@per_backend
def test_output_aliases_intermediate_multiple_mixed(backend):
    def f(a):
        out1 = torch.mul(a, 3)
        out2 = torch.mul(a, 4)
        return out1.view(-1), out2.transpose(1, 0), out1.transpose(1, 0)

    for rg in (False, True):
        verify(f, lambda rg=rg: [interm(ones(3, 3, rg=rg))], backend, mutate_outputs=True)


@per_backend
def test_output_all_alias_types(backend):
    # Outputs aliasing an intermediate, and an input that got a metadata write.
    def f(a):
        a.transpose_(1, 0)
        tmp = a.mul(2)
        return tmp.squeeze(), tmp.transpose(1, 0), a.unsqueeze(0)

    for rg in (False, True):
        verify(f, lambda rg=rg: [ones(1, 2, 4, rg=rg).clone()], backend, mutate_outputs=True)


@per_backend
def test_view_and_inplace_view(backend):
    def f(a, b):
        a.t_()
        return b.view(b.shape), a.view(a.shape)

    for rg in (False, True):
        verify(
            f,
            lambda rg=rg: [interm(ones(3, 3, rg=rg)), interm(ones(3, 3, rg=rg))],
            backend,
            mutate_outputs=True,
        )


@per_backend
def test_view_detach(backend):
    # A detached alias taken before the write sees the write.
    def f(a):
        tmp = a.detach()
        a.mul_(2)
        return a, tmp

    for rg in (True, False):
        verify(f, lambda rg=rg: [interm(ones(3, 3, rg=rg))], backend, mutate_outputs=True)


@per_backend
def test_output_aliases_multiple_inputs_get_correct_one(backend):
    # Two aliased inputs of different shapes: each output is a view of its own input.
    def f(a, b):
        return a.view(a.shape), b.view(b.shape)

    def make(rg):
        x = ones(2, 2, rg=rg).mul(2)
        return Case([x.view(-1), x[0]], watch=[x])

    for rg in (False, True):
        verify(f, lambda rg=rg: make(rg), backend, mutate_outputs=True)


@per_backend
def test_some_outputs_dont_require_grad_view(backend):
    def f(a, b):
        return a.detach(), b

    verify(f, lambda: [randn(3, 3, rg=True), randn(3, 3, rg=True)], backend)


@per_backend
def test_some_outputs_dont_require_grad_non_view(backend):
    def f(a, b):
        return a.add(1).detach(), b

    verify(f, lambda: [randn(3, 3, rg=True), randn(3, 3, rg=True)], backend)


@per_backend
def test_outputs_are_aliased(backend):
    # Writing one of two aliased outputs shows in the other.
    def f(a):
        b = a.mul(2)
        c = b.view(-1)
        return b, c

    for rg in (True, False):

        def run(call, rec, rg=rg):
            outs = call(ones(3, rg=rg))
            rec("outputs", outs)
            outs[0].mul_(3)
            rec("outputs after the write", outs)

        same_as_eager(f, run, backend)


@per_backend
def test_alias_of_intermediate_detach(backend):
    # A detached view and the view itself: one storage, only the second differentiable.
    def fn(x):
        x = x + 1
        a = x.transpose(0, 1)
        return a.detach(), a

    def views(view):
        return [o._is_view() for o in view.outs]

    verify(fn, lambda: [ones(3, 3, rg=True)], backend, observe=views)
