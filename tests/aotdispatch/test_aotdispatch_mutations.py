"""Ports of PyTorch's AOTAutograd tests: input mutations. Data writes, metadata writes
(`t_`, `transpose_`, `unsqueeze_`), `set_`, storage resizes, writes under `torch.no_grad()` or
into `.detach()`ed aliases, writes into inputs that alias each other (PyTorch's "synthetic
bases"), and duplicated arguments. Inputs that a program writes into are non-leaves made from
leaves (`interm`), as in PyTorch's `test_mutation=True`; gradients are compared on the leaves."""

from __future__ import annotations

import pytest
import torch

from .verify import Case, compile_fn, interm, ones, per_backend, randn, verify


@per_backend
def test_input_mutation_simple(backend):
    def f(a):
        a.mul_(2)
        return a * 3

    for rg in (True, False):
        verify(f, lambda rg=rg: [interm(ones(3, 3, rg=rg))], backend, mutate_outputs=True)


@per_backend
def test_input_mutation_set__input_mutation(backend):
    def f(a):
        b = torch.arange(9, dtype=a.dtype).reshape(3, 3)
        with torch.no_grad():
            a.set_(b)
        return a * b

    for rg in (True, False):
        verify(f, lambda rg=rg: [interm(ones(3, 3, rg=rg))], backend, mutate_outputs=True)


@per_backend
def test_set__steals_view_chain(backend):
    # After set_, a_ shares the storage of a view of b_, so the write through a_ lands in b_.
    def f(a, b):
        a_ = a.mul(2)
        b_ = b.mul(2)
        b_slice = b_[1].view(3, 3)
        a_.set_(b_slice)
        a_.view(-1).mul_(2)
        return a_ * b_slice

    verify(f, lambda: [ones(3, 3), torch.zeros(3, 9)], backend)


@per_backend
def test_set__and_data_mutation_good(backend):
    # The data write comes after the set_, so it reaches both inputs.
    def f(a, b):
        with torch.no_grad():
            a.set_(b)
            b.mul_(2)
        return a + b

    verify(
        f,
        lambda: [interm(ones(3, 3, rg=True)), interm(ones(3, 3, rg=True))],
        backend,
        mutate_outputs=True,
    )
    verify(
        f, lambda: [interm(ones(3, 3)), interm(torch.zeros(3, 3))], backend, mutate_outputs=True
    )


@per_backend
def test_set__and_data_mutation_bad(backend):
    # PyTorch's AOTAutograd bans this (a view of the old storage is written after set_); eager
    # runs it.
    def f(a):
        a_view = a.view(-1)
        tmp = torch.ones(3, 3, requires_grad=True)
        with torch.no_grad():
            a.set_(tmp)
            a_view.mul_(2)
        return a + tmp

    verify(f, lambda: [interm(ones(3, 3, rg=True))], backend, mutate_outputs=True)


@per_backend
def test_set__not_allowed(backend):
    # A write with grad mode on after a set_ under no_grad: eager gives a's new history to a
    # tensor that now reads b's storage. PyTorch's AOTAutograd refuses it while compiling, and
    # so does the spec (r[autograd.input-writes.aliased]), before touching an input.
    def f(a, b):
        with torch.no_grad():
            a.set_(b)
        a.mul_(2)
        return a + b

    a, b = interm(ones(3, 3, rg=True)), interm(ones(3, 3, rg=True))
    storage_of_a = a.untyped_storage()._cdata
    with pytest.raises(Exception, match="autograd.input-writes.aliased"):
        compile_fn(f, backend)(a, b)
    if backend != "dynamo":  # Dynamo may run the set_ eagerly, in a graph of its own, first
        assert storage_of_a == a.untyped_storage()._cdata
    assert torch.equal(torch.full((3, 3), 2.0), a) and torch.equal(torch.full((3, 3), 2.0), b)


@per_backend
def test_input_mutation_set__nop(backend):
    # Two set_ calls that undo each other: no input changes in the end.
    def f(a):
        b = torch.arange(9, dtype=a.dtype)
        a_old = torch.ops.aten.alias.default(a)
        with torch.no_grad():
            a.set_(b)
            a.set_(a_old)
        return a + b.reshape(3, 3)

    for rg in (True, False):
        verify(f, lambda rg=rg: [interm(ones(3, 3, rg=rg))], backend, mutate_outputs=True)


@per_backend
def test_input_mutation_simple_with_none_and_nontensor(backend):
    def f(a, b, c):
        return a * c

    for rg in (True, False):
        verify(f, lambda rg=rg: [ones(3, 3, rg=rg), None, 3], backend)


@per_backend
def test_mutates_input_noncontiguous(backend):
    # A write into a strided view; the rest of its base stays as it was.
    def f(a):
        a.add_(1)
        return ()

    def make():
        base = ones(4, rg=True) + 0
        return Case([base[0::2]], watch=[base])

    verify(f, make, backend)


@per_backend
def test_input_mutation_modifies_autograd_meta_of_aliases(backend):
    # The write changes the autograd history of an alias of the input made before the call.
    def f(a):
        a.mul_(2)
        out = a + 1
        return out.detach()

    def make():
        x = ones(3, 3, rg=True).clone()
        return Case([x], watch=[x.view(3, 3)])

    def alias_meta(view):
        alias = view.watch[0]
        return alias._version, type(alias.grad_fn).__name__

    def through_alias(view):
        return (view.args[0] * view.watch[0]).sum()

    verify(f, make, backend, observe=alias_meta, loss=through_alias, retain_grad=True)


@per_backend
def test_input_mutation_is_output(backend):
    def f(a):
        a.mul_(2)
        return a

    for rg in (True, False):
        verify(f, lambda rg=rg: [interm(ones(3, 3, rg=rg))], backend, mutate_outputs=True)


@per_backend
def test_input_mutation_is_output_after_mutated_inputs(backend):
    # The returned input is written after another input: each must keep its own value.
    def f(a, b):
        b.mul_(2)
        a.add_(1)
        return a

    def f_metadata(a, b):
        b.t_()
        a.add_(1)
        return a

    verify(f, lambda: [torch.zeros(3), interm(ones(3, rg=True))], backend)
    verify(f_metadata, lambda: [torch.zeros(3), ones(2, 3)], backend)


@per_backend
def test_input_mutation_multiple(backend):
    def f(a, b, c):
        a.mul_(2)
        c.mul_(2)
        return a + b + c

    for rg in (False, True):
        verify(
            f,
            lambda rg=rg: [interm(ones(3, 3, rg=rg)) for _ in range(3)],
            backend,
            mutate_outputs=True,
        )


@per_backend
def test_input_mutation_return(backend):
    # An out= op writes its result into an input and returns that input.
    def f(a, b):
        return torch.sin(a, out=b)

    verify(f, lambda: [interm(randn(3, 3)), interm(ones(3, 3))], backend, mutate_outputs=True)


@per_backend
def test_input_mutation_metadata(backend):
    def f(a, b):
        a.transpose_(1, 0)
        return a + b

    for rg in (True, False):
        verify(
            f,
            lambda rg=rg: [interm(ones(3, 3, rg=rg)), interm(ones(3, 3, rg=rg))],
            backend,
            mutate_outputs=True,
        )


@per_backend
def test_input_mutation_storage_resize_up(backend):
    # The input starts with a zero-byte storage; the program grows it and fills it.
    def f(a):
        torch.ops.inductor.resize_storage_bytes_(a, 32)
        with torch.no_grad():
            a.copy_(torch.ones(8))
        return a + 1

    def make():
        a = torch.zeros(8, requires_grad=True)
        a.untyped_storage().resize_(0)
        return [a]

    verify(f, make, backend)


@per_backend
def test_input_mutation_storage_resize_down(backend):
    # The storage is freed after its last use; no backward (it would read the freed input).
    def f(a):
        out = a.sin()
        torch.ops.inductor.resize_storage_bytes_(a, 0)
        return out

    verify(f, lambda: [torch.zeros(8, requires_grad=True)], backend, backward=False)


@per_backend
def test_input_mutation_resize_(backend):
    # An observer op that resizes empty per-channel state to the channel count.
    def f(x, running_min, running_max, scale, zero_point):
        return torch.ops.aten._fused_moving_avg_obs_fq_helper(
            x,
            torch.ones(1, dtype=torch.long),
            torch.ones(1, dtype=torch.long),
            running_min,
            running_max,
            scale,
            zero_point,
            0.01,
            -128,
            127,
            0,
            True,
            True,
        )[0]

    def make():
        return [
            randn(8, 4),
            torch.empty(0),
            torch.empty(0),
            torch.ones(1),
            torch.zeros(1, dtype=torch.int32),
        ]

    verify(f, make, backend)


@per_backend
def test_input_mutation_storage_resize_before_set_(backend):
    def f(a):
        with torch.no_grad():
            torch.ops.inductor.resize_storage_bytes_(a, 0)
            a.set_(torch.ones(2))

    verify(f, lambda: [torch.zeros(8, requires_grad=True)], backend)


@per_backend
def test_input_mutation_requires_grad_detach(backend):
    # The write goes through a detached alias: it changes the data, not the autograd history.
    def f(a):
        a.detach().mul_(2)
        return a + 3

    verify(f, lambda: [ones(4, rg=True)], backend)
    verify(f, lambda: [interm(ones(4, rg=True))], backend, mutate_outputs=True)


@per_backend
def test_input_mutation_hidden_from_autograd_aliasing(backend):
    def f(a):
        a_alias = a.view(-1)
        with torch.no_grad():
            a_alias.mul_(2)
        return a + 1

    verify(f, lambda: [interm(ones(4, rg=True))], backend, mutate_outputs=True)


@per_backend
def test_input_mutation_requires_grad_no_grad(backend):
    def f(a):
        with torch.no_grad():
            a.mul_(2)
        return a + 3

    verify(f, lambda: [interm(ones(4, rg=True))], backend, mutate_outputs=True)


@per_backend
def test_input_mutation_requires_grad_no_grad_inference_graph(backend):
    # Everything, the return included, runs under no_grad.
    def f(a):
        with torch.no_grad():
            a.mul_(2)
            return a + 3

    verify(f, lambda: [interm(ones(4, rg=True))], backend, mutate_outputs=True)


@per_backend
def test_input_mutation_requires_grad_no_grad_detach_mixed(backend):
    # Three writes: into a detached alias, with grad mode on, and under no_grad. Only the second
    # is differentiated.
    def f(a):
        a.detach().mul_(2)
        a.mul_(3)
        with torch.no_grad():
            a.mul_(4)
        return a + 5

    verify(f, lambda: [interm(ones(4, rg=True))], backend, mutate_outputs=True)


@per_backend
def test_input_mutation_metadata2(backend):
    def f(a):
        a.transpose_(1, 0)
        a.mul_(2)
        return a + 1

    for rg in (True, False):
        verify(f, lambda rg=rg: [interm(ones(3, 3, rg=rg))], backend, mutate_outputs=True)


@per_backend
def test_input_mutation_batchnorm(backend):
    # The running statistics are written, and the written inputs are also saved for backward.
    def f(x, weight, bias, running_mean, running_var):
        return torch._native_batch_norm_legit(
            x, weight, bias, running_mean, running_var, True, 0.5, 1e-5
        )

    def make(rg):
        return [
            interm(ones(2, 5, 5, 5, rg=rg)),
            interm(ones(5, rg=rg)),
            interm(ones(5, rg=rg)),
            interm(ones(5)),
            interm(ones(5)),
        ]

    for rg in (True, False):
        verify(f, lambda rg=rg: make(rg), backend, mutate_outputs=True)


@per_backend
def test_input_data_and_metadata_mutation(backend):
    def f(a):
        a.t_()
        a[0].mul_(2)
        return a.view(a.shape)

    for rg in (False, True):
        verify(f, lambda rg=rg: [interm(ones(3, 3, rg=rg))], backend, mutate_outputs=True)


@per_backend
def test_input_data_and_metadata_mutation_aliases_other_input(backend):
    # a and b are the same view: one gets a data write, the other a metadata write.
    def f(a, b):
        a.mul_(2)
        b.t_()
        return a.mul(b)

    def make(rg):
        x = interm(ones(2, 2, rg=rg))
        return Case([x[0], x[0]], watch=[x])

    for rg in (False, True):
        verify(f, lambda rg=rg: make(rg), backend, mutate_outputs=True)


@per_backend
def test_input_mutation_noncontiguous(backend):
    def f(a):
        a.mul_(2)
        return a + 1

    def make(rg):
        x = interm(ones(2, 2, rg=rg))
        return Case([x[:, 0]], watch=[x])

    for rg in (False, True):
        verify(f, lambda rg=rg: make(rg), backend, mutate_outputs=True)


def _views_of_one_base(numel, first, second, rg=False):
    base = interm(ones(numel, rg=rg) if isinstance(numel, int) else ones(*numel, rg=rg))
    return Case([first(base), second(base)], watch=[base])


def _strided(size, stride, offset):
    return lambda base: base.as_strided(size, stride, storage_offset=offset)


@per_backend
def test_input_mutation_false_aliasing(backend):
    # Two written inputs share a storage; some pairs overlap in memory, some do not.
    def f(a, b):
        a.mul_(3)
        b.mul_(2)
        return a.clone().view(-1) + b.clone().view(-1)

    def rows(rg):
        return _views_of_one_base((4, 4), lambda x: x[0:2], lambda x: x[2:4], rg=rg)

    for rg in (False, True):
        verify(f, lambda rg=rg: rows(rg), backend, mutate_outputs=True)

    def after_a(x):
        a = x.as_strided((2, 4, 3), (110, 24, 4), storage_offset=5)
        return x[196 : 196 + a.numel()]

    pairs = [
        # no overlap: b starts after a's last element
        (256, _strided((4, 4), (8, 1), 0), _strided((4, 4), (8, 1), 28)),
        # no overlap: the columns interleave
        ((4, 4), lambda x: x[:, 0:2], lambda x: x[:, 2:4]),
        # no overlap, strided
        (256, _strided((4, 4), (9, 1), 0), _strided((4, 4), (9, 1), 22)),
        (256, _strided((4, 4), (9, 1), 0), _strided((4, 4), (9, 1), 23)),
        (256, _strided((2, 4, 3), (110, 24, 4), 5), after_a),
        # overlap
        (256, _strided((4, 4), (9, 1), 0), _strided((4, 4), (9, 1), 25)),
        (256, _strided((4, 4), (9, 1), 0), _strided((4, 4), (9, 1), 24)),
    ]
    for numel, first, second in pairs:
        verify(
            f,
            lambda n=numel, a=first, b=second: _views_of_one_base(n, a, b),
            backend,
            mutate_outputs=True,
        )


@per_backend
def test_input_mutation_aliases_other_input(backend):
    def f(a, b):
        a.add_(1)
        return a + b

    def make(rg):
        x = interm(ones(4, 2, rg=rg))
        return Case([x[0], x[0]], watch=[x])

    for rg in (False, True):
        verify(f, lambda rg=rg: make(rg), backend, mutate_outputs=True)


@per_backend
def test_input_mutation_aliases_other_input2(backend):
    # One of the aliased inputs is the base of the other.
    def f(a, b):
        a.add_(1)
        return a + b

    def make(rg):
        x = interm(ones(2, 2, rg=rg))
        return Case([x[0], x])

    for rg in (False, True):
        verify(f, lambda rg=rg: make(rg), backend, mutate_outputs=True)


@per_backend
def test_input_mutation_aliases_and_output_alias(backend):
    # The output is a view of the input that was not written, which aliases the written one.
    def f(a, b):
        a.add_(1)
        return b.view(b.shape)

    def make(rg):
        x = interm(ones(2, 2, rg=rg))
        return Case([x.view(-1), x.view(-1)], watch=[x])

    for rg in (False, True):
        verify(f, lambda rg=rg: make(rg), backend, mutate_outputs=True)


@per_backend
def test_input_aliased_with_mutation_output_alias(backend):
    def f(a, b, c):
        c.mul_(2)
        return b.add(1), c.view(-1)

    def make(rg):
        x = interm(ones(2, 2, rg=rg))
        y = interm(ones(2, 2, rg=rg))
        return Case([x.view(-1), y, x.view(-1)], watch=[x])

    for rg in (False, True):
        verify(f, lambda rg=rg: make(rg), backend, mutate_outputs=True)


@per_backend
def test_input_aliased_with_mutation_nontensor_interleaved(backend):
    def f(a, scale, b):
        b.mul_(2)
        return a + scale

    def make(rg):
        x = interm(ones(2, 2, rg=rg))
        return Case([x.view(-1), 3, x.view(-1)], watch=[x])

    for rg in (False, True):
        verify(f, lambda rg=rg: make(rg), backend, mutate_outputs=True)


@per_backend
def test_input_aliased_with_mutation_multiple_nontensors(backend):
    def f(a, scale, b, offset, c):
        c.mul_(2)
        return a + scale + offset

    def make(rg):
        x = interm(ones(2, 2, rg=rg))
        y = interm(ones(4, rg=rg))
        return Case([x.view(-1), 3, y, 5, x.view(-1)], watch=[x])

    for rg in (False, True):
        verify(f, lambda rg=rg: make(rg), backend, mutate_outputs=True)


@per_backend
def test_input_metadata_mutation_aliases(backend):
    # Only metadata changes on one of two aliased inputs: the other is unaffected.
    def f(a, b):
        a.t_()
        return a + b

    def make(rg):
        x = interm(ones(2, 2, rg=rg))
        return Case([x.view(-1), x.view(-1)], watch=[x])

    for rg in (False, True):
        verify(f, lambda rg=rg: make(rg), backend, mutate_outputs=True)


@per_backend
def test_input_mutation_aliases_and_none_require_gradients(backend):
    # Aliased inputs with no autograd base (they do not require grad), and one that does.
    def f(a, b, c):
        a.mul_(2)
        return b + 1, c + 1

    def make(rg):
        x = interm(ones(2, 2))
        c = ones(2, 2, rg=rg)
        return Case([x.view(-1), x.view(-1), c], watch=[x])

    for rg in (False, True):
        verify(f, lambda rg=rg: make(rg), backend, mutate_outputs=True)


@per_backend
def test_input_mutation_aliases_bases_out_of_order(backend):
    # a and c alias, b and d alias; b gets a data write, d a metadata write.
    def f(a, b, c, d):
        b.add_(1)
        d.unsqueeze_(0)
        return a + c + d, b.view(-1)

    def make(rg):
        x1 = interm(ones(2, 2, rg=rg))
        x2 = interm(ones(2, 2, rg=rg))
        return Case([x1.view(-1), x2.view(-1), x1.view(-1), x2.view(-1)], watch=[x1, x2])

    for rg in (False, True):
        verify(f, lambda rg=rg: make(rg), backend, mutate_outputs=True)


@per_backend
def test_input_mutation_unsqueeze_view_of_base_input(backend):
    # One input is the base of the other (an unsqueeze); the base is returned.
    def f(a, b):
        b.add_(1)
        return a

    def make(rg):
        x = interm(ones(4, rg=rg))
        return Case([x, x.unsqueeze(0)])

    for rg in (False, True):
        verify(f, lambda rg=rg: make(rg), backend, mutate_outputs=True)


@per_backend
def test_input_mutation_alias_everything(backend):
    # Aliased inputs with a data write, a metadata write, outputs aliasing an input, an
    # intermediate and each other.
    def f(a, b, c):
        c.mul_(2)
        b.t_()
        tmp = a + c
        out1 = tmp.view(-1)
        out2 = b.t()
        out3 = out1.unsqueeze(0)
        return out1, out2, out3

    def make(rg):
        x1 = interm(ones(2, 2, rg=rg))
        x2 = interm(ones(2, 2, rg=rg))
        return Case([x1.view(-1), x2, x1.view(-1)], watch=[x1])

    for rg in (False, True):
        verify(f, lambda rg=rg: make(rg), backend, mutate_outputs=True)


@per_backend
def test_dupe_arg(backend):
    def f(x, y):
        return x + y

    def make():
        x = randn(3, 3, rg=True)
        return [x, x]

    verify(f, make, backend)


@per_backend
def test_dupe_arg_torture(backend):
    # The same tensor passed twice gets two metadata writes.
    def f(x, y):
        x.t_()
        y.unsqueeze_(0)
        return x + y

    def make():
        x = randn(3, 3, rg=True).clone()
        return [x, x]

    verify(f, make, backend)


@per_backend
def test_dupe_arg_returned_as_output(backend):
    def f(a, b, a_):
        a[0].add_(1)
        return a_

    def make():
        a = ones(2)
        return [a, ones(2), a]

    verify(f, make, backend)


def _five_outputs(x, y):
    y.mul_(2)
    a, b, c = x + 1, x + 2, x + 3
    d = x + 4 + y
    return a, b, c, d, d.view(-1)


def _distinct_but_shared(view):
    d, d_view = view.outs[3], view.outs[4]
    return d is d_view, d.data_ptr() == d_view.data_ptr()


@per_backend
def test_dupe_arg_with_no_grad_alias_of_output(backend):
    def make():
        x = ones(4)
        return [x, x]

    verify(_five_outputs, make, backend, observe=_distinct_but_shared)


@per_backend
def test_synthetic_base_with_no_grad_alias_of_output(backend):
    def make():
        base = ones(8)
        return Case([base[0:6], base[2:8]], watch=[base])

    verify(_five_outputs, make, backend, observe=_distinct_but_shared)


@per_backend
def test_invalid_dupe_left_bias(backend):
    # Only the first of two duplicated arguments gets a metadata write.
    def f(x, y):
        x.t_()
        return (x + y,)

    def make():
        x = randn(3, 3, rg=True).clone()
        return [x, x]

    verify(f, make, backend)


@per_backend
def test_duplicated_arguments_on_tensor_overlap(backend):
    def f(t0, t1, s0, s1):
        return t0.add_(s0), t1.add_(s1)

    def make():
        t = torch.rand(10)
        return Case([t, t[1:-1], 2, 2])

    verify(f, make, backend)


@per_backend
def test_default_partitioner_saves_symints_not_tensors_for_bw(backend):
    # The backward of the in-place masked_fill_ needs only the input's sizes.
    def f(a):
        b = a[0]
        c = torch.ones_like(b, dtype=torch.bool)
        return b.masked_fill_(c, 0)

    verify(f, lambda: [ones(2, 2, rg=True).clone()], backend)


@per_backend
def test_inputs_overlapping_unsqueeze_with_mutation(backend):
    # From TestAOTAutogradWithDynamo: two written inputs that are the same unsqueezed view.
    def f(x, y):
        x.add_(1)
        y.add_(1)
        return x

    def make():
        base = ones(10)
        return Case([base.unsqueeze(0), base.unsqueeze(0)], watch=[base])

    verify(f, make, backend)


@per_backend
def test_inputs_overlapping_with_mutation_guard_base(backend):
    # From TestAOTAutogradWithDynamo: two written inputs that are the same slice.
    def f(x, y):
        x.add_(1)
        y.add_(1)
        return x

    def make():
        base = ones(10)
        return Case([base[1:], base[1:]], watch=[base])

    verify(f, make, backend)


# Inputs that share a storage without being autograd views of one another (set_ onto another
# tensor's storage). PyTorch's AOTAutograd refuses to write them; eager does not.


@per_backend
def test_merge_view_inputs_error_non_differentiable_views(backend):
    def fn(a, b):
        a.mul_(2)
        return a + b

    def make():
        big = randn(10, rg=True)
        view = big[0:5]
        alias = torch.empty(5)
        alias.set_(big.untyped_storage(), 0, (5,), (1,))
        return Case([alias, view], watch=[big])

    verify(fn, make, backend)


@per_backend
def test_merge_view_inputs_error_different_bases(backend):
    def fn(a, b):
        a.mul_(2)
        return a + b

    def make():
        x = randn(10)
        y = randn(10)
        y.set_(x.untyped_storage(), 0, (10,), (1,))
        return Case([x[0:5], y[0:5]], watch=[x, y])

    verify(fn, make, backend)


@per_backend
def test_merge_view_inputs_error_mixed_base_states(backend):
    def fn(a, b):
        a.mul_(2)
        return a + b

    def make():
        x = randn(10)
        alias = torch.empty(5)
        alias.set_(x.untyped_storage(), 0, (5,), (1,))
        return Case([x[0:5], alias], watch=[x])

    verify(fn, make, backend)
