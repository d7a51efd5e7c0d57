"""Saved-tensor hooks in compiled functions (`specs/saved-tensor-hooks.md`, "Compiled calls").

Expected gradients come from eager PyTorch with the hooks' rounding applied by hand to the tensors
the rules say are packed; the placement checks read the reference's ledgers and the fast backend's
generated code.
"""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

import aotspec
from aotspec import HooksWarning, UnsupportedError

BACKENDS = ["reference", "fast"]


def pack_bf16(x):
    return x.to(torch.bfloat16)


def unpack_f32(x):
    return x.to(torch.float32)


def matmul_sin(a, b):
    return (a @ b).sin().sum()


def rounded(t):
    return t.to(torch.bfloat16).to(torch.float32)


def leaves(*shapes, seed=0):
    torch.manual_seed(seed)
    return [torch.randn(*shape).requires_grad_() for shape in shapes]


def call_and_grads(fn, inputs, hooks=None):
    if hooks is None:
        fn(*inputs).backward()
    else:
        with torch.autograd.graph.saved_tensors_hooks(*hooks):
            out = fn(*inputs)
        out.backward()
    grads = [t.grad.clone() for t in inputs]
    for t in inputs:
        t.grad = None
    return grads


def expected_matmul_sin_grads(a, b):
    """sin saves mm = a @ b (an intermediate, so packed under every filter); mm's rule reads a,
    b."""
    with torch.no_grad():
        g = torch.cos(rounded(a @ b))
        return [g @ b.t(), a.t() @ g]


@pytest.mark.parametrize("backend", BACKENDS)
def test_hooks_run_only_while_tracing(backend):
    """r[hooks.compiled.traced]: Python side effects of the hooks happen at compile time only."""
    calls = []

    def pack(x):
        calls.append("pack")
        return x.to(torch.bfloat16)

    def unpack(x):
        calls.append("unpack")
        return x.to(torch.float32)

    a, b = leaves((4, 5), (5, 3))
    compiled = aotspec.compile(matmul_sin, backend=backend)
    grads = call_and_grads(compiled, [a, b], (pack, unpack))
    assert calls == ["pack", "unpack"]  # one saved intermediate, traced once
    calls.clear()
    again = call_and_grads(compiled, [a, b], (pack, unpack))
    assert calls == [] and compiled.compilations == 1
    for got, want in zip(again, grads, strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_module_hooks_inline_like_plain_callables(backend):
    a, b = leaves((4, 5), (5, 3))
    hooks = (torch.fx.symbolic_trace(pack_bf16), torch.fx.symbolic_trace(unpack_f32))
    got = call_and_grads(aotspec.compile(matmul_sin, backend=backend), [a, b], hooks)
    for g, want in zip(got, expected_matmul_sin_grads(a, b), strict=True):
        torch.testing.assert_close(g, want)
    # The hooks really apply: without them the gradients differ by more than the tolerance.
    exact = call_and_grads(matmul_sin, [a, b])
    assert not torch.allclose(got[0], exact[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_new_pair_compiles_again_and_the_old_plans_stay(backend):
    """r[hooks.compiled.respecialize]"""
    a, b = leaves((4, 5), (5, 3))
    compiled = aotspec.compile(matmul_sin, backend=backend)
    exact = call_and_grads(compiled, [a, b])
    assert compiled.compilations == 1
    lossy = call_and_grads(compiled, [a, b], (pack_bf16, unpack_f32))
    assert compiled.compilations == 2
    other_pair = (lambda x: x.to(torch.float16), unpack_f32)
    call_and_grads(compiled, [a, b], other_pair)
    assert compiled.compilations == 3
    assert torch.equal(call_and_grads(compiled, [a, b])[0], exact[0])
    assert torch.equal(call_and_grads(compiled, [a, b], (pack_bf16, unpack_f32))[0], lossy[0])
    assert compiled.compilations == 3


def _rounding_pair(dtype):
    """A pair made anew at each call, as `save_on_cpu()` entered per step makes its hooks."""
    return (lambda x: x.to(dtype), lambda x: x.to(torch.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_hooks_made_anew_with_the_same_code_and_values_reuse_the_plan(backend):
    """r[hooks.compiled.respecialize]: the guard compares what the hooks compute."""
    a, b = leaves((4, 5), (5, 3))
    compiled = aotspec.compile(matmul_sin, backend=backend)
    first = call_and_grads(compiled, [a, b], _rounding_pair(torch.bfloat16))
    again = call_and_grads(compiled, [a, b], _rounding_pair(torch.bfloat16))
    assert compiled.compilations == 1
    assert torch.equal(again[0], first[0])
    for _ in range(2):
        with torch.autograd.graph.save_on_cpu():
            out = compiled(a, b)
        out.backward()
        a.grad = b.grad = None
    assert compiled.compilations == 2
    half = call_and_grads(compiled, [a, b], _rounding_pair(torch.float16))
    assert compiled.compilations == 3  # another captured dtype: another plan
    fresh = aotspec.compile(matmul_sin, backend=backend)
    assert torch.equal(half[0], call_and_grads(fresh, [a, b], _rounding_pair(torch.float16))[0])
    assert not torch.equal(half[0], first[0])


def _unpack_wrong_shape(x):
    return x.to(torch.float32).t()


def _pack_in_place(x):
    return x.mul_(2)


def _pack_reads_data(x):
    return x.to(torch.bfloat16) if x.sum().item() > 0 else x


def _pack_outside_the_table(x):
    return torch.ops.prims.sin(x)  # prims ops are outside the table, and not ATen-valued


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "hooks, reason",
    [
        (
            (pack_bf16, _unpack_wrong_shape),
            "a tensor of shape (3, 4) for a saved tensor of shape (4, 3)",
        ),
        ((_pack_in_place, unpack_f32), "mutates tensors in place"),
        ((_pack_reads_data, unpack_f32), "_pack_reads_data"),
        ((_pack_outside_the_table, unpack_f32), "_pack_outside_the_table"),
    ],
)
def test_untraceable_hooks_are_rejected_before_anything_runs(backend, hooks, reason):
    """r[hooks.compiled.untraceable]: the error says which hook and why; inputs are untouched."""
    a, b = leaves((4, 5), (5, 3))
    before = [(t.detach().clone(), t._version) for t in (a, b)]
    compiled = aotspec.compile(matmul_sin, backend=backend)
    with (
        torch.autograd.graph.saved_tensors_hooks(*hooks),
        pytest.raises(UnsupportedError) as raised,
    ):
        compiled(a, b)
    message = str(raised.value)
    assert "rule hooks.compiled.untraceable" in message and reason in message
    for t, (values, version) in zip((a, b), before, strict=True):
        assert torch.equal(t.detach(), values) and t._version == version and t.grad is None


def _unpack_stays_bf16(x):
    return x


def _keep(x):
    return x * 1


def _unpack_ints_to_halved_f64(x):
    return x.double() / 2 if x.dtype == torch.int64 else x


class _CumsumsItsSavedInt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, n):
        ctx.save_for_backward(n)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        (n,) = ctx.saved_tensors
        return grad * n.cumsum(0, dtype=n.dtype), None


def _cumsum_of_saved_int(x, n):
    return _CumsumsItsSavedInt.apply(x, n).sum()


def _gather(x, index):
    return x.gather(0, index).sum()


def _tanh_sum(x):
    # tanh's derivative, 1 - out * out, is separate ops: out * out would round in bfloat16,
    # where eager's tanh_backward kernel computes in float32.
    return x.tanh().sum()


def _exp_times_int(x, n):
    return (x.exp() * n).sum()


def _int_inputs():
    return [torch.ones(3, requires_grad=True), torch.tensor([3, 5, -7])]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn, make_inputs, hooks, reason",
    [
        pytest.param(
            _gather,
            lambda: [torch.ones(4, requires_grad=True), torch.tensor([0, 2, 2])],
            (_keep, _unpack_ints_to_halved_f64),
            "an op rejects the dtypes it now reads (scatter(): Expected dtype int32/int64",
            id="float-index",
        ),
        pytest.param(
            _cumsum_of_saved_int,
            _int_inputs,
            (_keep, _unpack_ints_to_halved_f64),
            "cumsum reads arg1_1_unpacked and names the saved dtype",
            id="traced-dtype-argument",
        ),
        pytest.param(
            _exp_times_int,
            _int_inputs,
            (_keep, _unpack_ints_to_halved_f64),
            "would compute in torch.float64 where the backward was traced in torch.float32",
            id="gradient-between-derivatives",
        ),
        pytest.param(
            _tanh_sum,
            lambda: leaves((4,)),
            (pack_bf16, _unpack_stays_bf16),
            "would compute in torch.bfloat16 where the backward was traced in torch.float32",
            id="derivative-intermediate",
        ),
    ],
)
def test_a_backward_that_cannot_be_typed_again_is_refused(backend, fn, make_inputs, hooks, reason):
    """r[hooks.compiled.unpack-dtype.refused]: at compile time, with the reason, inputs
    untouched."""
    inputs = make_inputs()
    compiled = aotspec.compile(fn, backend=backend, hooks_filter="all")
    with (
        torch.autograd.graph.saved_tensors_hooks(*hooks),
        pytest.raises(UnsupportedError) as raised,
    ):
        compiled(*inputs)
    message = str(raised.value)
    assert "rule hooks.compiled.unpack-dtype.refused" in message and reason in message
    assert all(t.grad is None and t._version == 0 for t in inputs)


def test_a_refused_retyping_is_said_once_by_the_refusal(caplog):
    """r[hooks.compiled.unpack-dtype.refused]: the meta kernel's failure that shows the dtypes
    are rejected is not also logged by fake tensors, traceback and all."""
    compiled = aotspec.compile(_gather, backend="fast", hooks_filter="all")
    inputs = [torch.ones(4, requires_grad=True), torch.tensor([0, 2, 2])]
    with (
        caplog.at_level(logging.DEBUG, logger="torch._subclasses.fake_tensor"),
        torch.autograd.graph.saved_tensors_hooks(_keep, _unpack_ints_to_halved_f64),
        pytest.raises(UnsupportedError, match="hooks.compiled.unpack-dtype.refused"),
    ):
        compiled(*inputs)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_eager_raises_where_the_backward_rejects_the_unpacked_dtype():
    """r[hooks.compiled.unpack-dtype.refused]: the float index case above is refused because
    eager's backward fails there too (gather's gradient scatters at unpack's float index)."""
    x, index = torch.ones(4, requires_grad=True), torch.tensor([0, 2, 2])
    with torch.autograd.graph.saved_tensors_hooks(_keep, _unpack_ints_to_halved_f64):
        out = _gather(x, index)
    with pytest.raises(RuntimeError, match="Expected dtype int32/int64 for index"):
        out.backward()


def _product(x, w):
    return (x * w).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_unpack_that_keeps_bfloat16_computes_as_eager(backend):
    """r[hooks.compiled.unpack-dtype]: mul's derivatives read x and w as the bfloat16 unpack
    returns them; each product with the float32 gradient is float32, as in eager, whose gradients
    under the same hooks are the oracle."""
    x, w = leaves((6,), (6,))
    hooks = (pack_bf16, _unpack_stays_bf16)
    expected = call_and_grads(_product, [x, w], hooks)
    compiled = aotspec.compile(_product, backend=backend, hooks_filter="all")
    got = call_and_grads(compiled, [x, w], hooks)
    assert not torch.equal(expected[0], w.detach())  # the hooks round what the rules read
    for e, actual in zip(expected, got, strict=True):
        assert torch.equal(e, actual)


def _placement(placement: str):
    """The reference's forward and backward ledgers, and its backward graph, for a placement."""
    a, b = leaves((4, 5), (5, 3))
    compiled = aotspec.compile(matmul_sin, backend="reference", hook_placement=placement)
    call_and_grads(compiled, [a, b], (pack_bf16, unpack_f32))
    (plan,) = compiled.plans.values()
    return compiled.last_run.ledger, compiled.last_run.backward_ledger, plan.backward.graph


def _freed_at(ledger, made_by: str) -> str:
    (storage,) = [e.storage for e in ledger.events if e.kind == "alloc" and e.node == made_by]
    (step,) = [e.node for e in ledger.events if e.kind == "free" and e.storage == storage]
    return step


def test_pack_at_last_use_frees_the_original_earlier_than_at_forward_end():
    """r[hooks.place.pack-after-last-use] and r[hooks.place.unpack-before-first-use], against
    PyTorch 2.13's placement (pack at the forward's end, unpack before the backward's first op)."""
    forward, backward, _ = _placement("last-use")
    steps = [probe.node for probe in forward.probes]
    assert steps.index("mm_packed") == steps.index("sin") + 1
    assert _freed_at(forward, "mm") == "mm_packed"
    backward_steps = [probe.node for probe in backward.probes]
    assert backward_steps.index("mm_unpacked") == backward_steps.index("cos") - 1
    assert _freed_at(backward, "mm_packed") == "mm_unpacked"

    forward, _, backward_graph = _placement("forward-end")
    steps = [probe.node for probe in forward.probes]
    assert steps[-2:] == ["mm_packed", "output"]  # the forward's last op
    assert _freed_at(forward, "mm") == "mm_packed"  # alive through sum_1, which does not read it
    first_op = next(node for node in backward_graph.nodes if node.op != "placeholder")
    assert first_op.name == "mm_unpacked"


def test_generated_code_shows_the_pack_after_the_last_use():
    a, b = leaves((4, 5), (5, 3))
    compiled = aotspec.compile(matmul_sin, backend="fast")
    call_and_grads(compiled, [a, b], (pack_bf16, unpack_f32))
    (plan,) = compiled.plans.values()
    # r[ops.fresh-output.meta-layout]'s relayout guards are the op's own lines: left out
    lines = [
        line.strip()
        for line in plan.forward.code.splitlines()
        if not (line.strip().startswith("if ") or "meta_strided(" in line)
    ]
    sin = next(i for i, line in enumerate(lines) if line.startswith("sin = "))
    assert lines[sin + 1] == "mm_packed = aten._to_copy.default(mm, dtype=torch.bfloat16)"
    assert lines[sin + 2] == "del mm"  # the original's last reference goes right there


@pytest.mark.parametrize("backend", BACKENDS)
def test_donated_selecting_nothing_warns_once_per_compilation(backend):
    """r[hooks.filter.donated-empty]"""
    x, w = leaves((3,), (3,))
    compiled = aotspec.compile(lambda x, w: (x * w).sum(), backend=backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grads = call_and_grads(compiled, [x, w], (pack_bf16, unpack_f32))
        call_and_grads(compiled, [x, w], (pack_bf16, unpack_f32))
    hook_warnings = [w for w in caught if issubclass(w.category, HooksWarning)]
    assert len(hook_warnings) == 1 and "hooks_filter='no_static'" in str(hook_warnings[0].message)
    torch.testing.assert_close(grads, [w.detach(), x.detach()], rtol=0, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_static_leaves_parameters_and_static_inputs_alone(backend):
    """r[hooks.filter.no-static]: x is packed; a Parameter and a mark_static_address input are
    not."""
    torch.manual_seed(0)
    x = torch.randn(5).requires_grad_()
    w = torch.nn.Parameter(torch.randn(5))
    s = torch.randn(5).requires_grad_()
    torch._dynamo.mark_static_address(s)
    compiled = aotspec.compile(
        lambda x, w, s: (x * w * s).sum(), backend=backend, hooks_filter="no_static"
    )
    gx, gw, gs = call_and_grads(compiled, [x, w, s], (pack_bf16, unpack_f32))
    with torch.no_grad():
        # (x * w) * s: mul saves x and w (the first product), then x * w (intermediate) and s.
        torch.testing.assert_close(gx, w * s)
        torch.testing.assert_close(gw, rounded(x) * s)
        torch.testing.assert_close(gs, rounded(x * w))


def _exp_returned(x):
    y = x.exp()  # exp saves its result, y, which the caller gets
    return y, (y * 3).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_donated_leaves_a_value_the_caller_gets_alone(backend):
    """r[hooks.filter.donated]: exp saves its result, an output the caller holds, so no hook packs
    it (donated selects nothing here, and says so): the gradient is 4 exp(x), not rounded to
    bfloat16."""
    (x,) = leaves((5,))
    compiled = aotspec.compile(_exp_returned, backend=backend, hooks_filter="donated")
    with pytest.warns(HooksWarning):
        with torch.autograd.graph.saved_tensors_hooks(pack_bf16, unpack_f32):
            y, total = compiled(x)
    (y.sum() + total).backward()
    torch.testing.assert_close(x.grad, 4 * x.detach().exp(), rtol=1e-6, atol=0)


def _pack_flat(x):
    return (x.shape, x.reshape(-1))  # a view of a contiguous value, a copy of another


def _unpack_flat(packed):
    shape, flat = packed
    return flat.reshape(shape)


def _two_layouts(a, b):
    u, w = a * 2, b.t() * 2  # both (2, 3): u contiguous, w laid out like b.t()
    return (u * w).sum()  # mul saves both


@pytest.mark.parametrize("backend", BACKENDS)
def test_hooks_are_traced_for_each_saved_layout(backend):
    """r[hooks.compiled.traced]: pack traced on the contiguous value is a view, which the
    transposed one of the same shape cannot take: each layout gets a trace of its own."""
    a, b = leaves((2, 3), (3, 2))
    compiled = aotspec.compile(_two_layouts, backend=backend, hooks_filter="all")
    grads = call_and_grads(compiled, [a, b], (_pack_flat, _unpack_flat))
    with torch.no_grad():
        torch.testing.assert_close(grads, [4 * b.t(), 4 * a.t()])


def test_fast_and_reference_agree_under_lossy_hooks():
    inputs = leaves((8, 6), (6, 6), (6, 4), seed=1)

    def mlp(x, w1, w2):
        return torch.relu(x @ w1).sin().matmul(w2).pow(2).mean()

    for hooks_filter in ["donated", "no_static", "all"]:
        got = [
            call_and_grads(
                aotspec.compile(mlp, backend=b, hooks_filter=hooks_filter),
                inputs,
                (pack_bf16, unpack_f32),
            )
            for b in BACKENDS
        ]
        for reference, fast in zip(*got, strict=True):
            torch.testing.assert_close(fast, reference)
