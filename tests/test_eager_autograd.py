"""Autograd and saved-tensor hooks of the reference eager interpreter
(`specs/saved-tensor-hooks.md`, "Eager calls"), against eager PyTorch: gradients, the pack and
unpack calls, and the ledger.

Every expectation comes from running the same program on eager PyTorch, never from the reference.
"""

from __future__ import annotations

import gc

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef

from aotspec.errors import UnsupportedError
from aotspec.reference import run


def _mlp(x, w1, w2):
    return torch.relu(x @ w1.t()) @ w2.t()


def _product_sum(x, w):
    return (x * w).sum()


def _inplace_through_views(x, w):
    h = x * 2
    h[0].mul_(w[0])
    h.view(-1)[1:3].add_(w[1:3].sum())
    return (h * 3).exp()


def _inplace_on_base_with_a_view(x, w):
    h = x.sin()
    v = h[1:]
    h.mul_(w)
    return v.cos() + h.sum()


def _multi_output(x, w):
    a, b = torch.split(x * w, 2)
    var, mean = torch.var_mean(b)
    return torch.cat([a.tanh(), b]) * var + mean


def _matmul_chain(a, b, c):
    return (a @ b @ c).relu().sum()


def _sin_of_product(x, w):
    return (x * w).sin().sum()


PROGRAMS = {
    "mlp": (_mlp, [(5, 4), (8, 4), (3, 8)]),
    "product-sum": (_product_sum, [(3,), (3,)]),
    "inplace-through-views": (_inplace_through_views, [(4,), (4,)]),
    "inplace-on-base-with-a-view": (_inplace_on_base_with_a_view, [(4,), (4,)]),
    "multi-output": (_multi_output, [(4,), (4,)]),
    "matmul-chain": (_matmul_chain, [(2, 3), (3, 4), (4, 5)]),
}


def _leaves(shapes, seed=0, requires_grad=None):
    generator = torch.Generator().manual_seed(seed)
    wanted = requires_grad or [True] * len(shapes)
    return [
        torch.randn(shape, generator=generator).requires_grad_(w)
        for shape, w in zip(shapes, wanted, strict=True)
    ]


def _copies(tensors):
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]


def _backward(out):
    out.backward(torch.ones_like(out))


def _grads_on_eager_and_reference(fn, tensors, hooks=None):
    """(eager grads, reference grads) of `fn` on copies of `tensors`, under `hooks` if given."""
    eager_args, reference_args = _copies(tensors), _copies(tensors)
    context = (
        (lambda: torch.autograd.graph.saved_tensors_hooks(*hooks)) if hooks else torch.enable_grad
    )
    with context():
        eager_out = fn(*eager_args)
    _backward(eager_out)
    with context():
        reference_out = run(fn, *reference_args).outputs
    _backward(reference_out)
    torch.testing.assert_close(reference_out, eager_out)
    return [t.grad for t in eager_args], [t.grad for t in reference_args]


@pytest.mark.parametrize("name", PROGRAMS)
def test_gradients_equal_eager(name):
    fn, shapes = PROGRAMS[name]
    expected, actual = _grads_on_eager_and_reference(fn, _leaves(shapes))
    for e, a in zip(expected, actual, strict=True):
        torch.testing.assert_close(a, e)


def test_an_input_without_grad_gets_none():
    expected, actual = _grads_on_eager_and_reference(
        _mlp, _leaves([(5, 4), (8, 4), (3, 8)], requires_grad=[False, True, True])
    )
    assert expected[0] is None and actual[0] is None
    for e, a in zip(expected[1:], actual[1:], strict=True):
        torch.testing.assert_close(a, e)


def test_a_non_leaf_input_passes_its_gradient_on():
    def world():
        x = torch.arange(3.0, requires_grad=True)
        return x, x * 2, torch.ones(3, requires_grad=True)

    x_eager, y_eager, z_eager = world()
    _backward((y_eager * z_eager).tanh())
    x_ref, y_ref, z_ref = world()
    _backward(run(lambda y, z: (y * z).tanh(), y_ref, z_ref).outputs)
    torch.testing.assert_close(x_ref.grad, x_eager.grad)
    torch.testing.assert_close(z_ref.grad, z_eager.grad)


def test_gradients_accumulate_into_leaves():
    x = torch.ones(3, requires_grad=True)
    _backward(run(lambda t: t * t, x).outputs)
    _backward(run(lambda t: t * 3, x).outputs)
    torch.testing.assert_close(x.grad, torch.full((3,), 5.0))


def test_no_history_under_no_grad():
    with torch.no_grad():
        out = run(_product_sum, *_leaves([(3,), (3,)])).outputs
    assert not out.requires_grad


# ---------------------------------------------------------------- saved-tensor hooks


def _recording_hooks(lossy=False):
    calls = []

    def pack(t):
        calls.append(("pack", tuple(t.shape), t.dtype))
        return t.to(torch.bfloat16) if lossy else t.clone()

    def unpack(t):
        calls.append(("unpack", tuple(t.shape), t.dtype))
        return t.to(torch.float32) if lossy else t

    return calls, (pack, unpack)


def _hook_calls(fn, tensors, on_reference: bool, lossy=False):
    calls, hooks = _recording_hooks(lossy)
    with torch.autograd.graph.saved_tensors_hooks(*hooks):
        out = run(fn, *tensors).outputs if on_reference else fn(*tensors)
    _backward(out)
    return calls


@pytest.mark.parametrize(
    "name", ["product-sum", "matmul-chain", "mlp", "multi-output", "inplace-through-views"]
)
def test_pack_and_unpack_calls_equal_eager(name):
    """r[hooks.eager.pack-on-save], r[hooks.eager.unpack-on-use]: the same calls, in the same
    order, on tensors of the same shapes and dtypes."""
    fn, shapes = PROGRAMS[name]
    tensors = _leaves(shapes)
    expected = _hook_calls(fn, _copies(tensors), on_reference=False)
    actual = _hook_calls(fn, _copies(tensors), on_reference=True)
    assert actual == expected
    packs = [call for call in actual if call[0] == "pack"]
    assert len(packs) == len(actual) - len(packs)


def test_sin_of_product_packs_like_eager():
    tensors = _leaves([(3,), (3,)])
    expected = _hook_calls(_sin_of_product, _copies(tensors), on_reference=False)
    assert [c[0] for c in expected] == ["pack"] * 3 + ["unpack"] * 3  # w, x, then x * w
    assert _hook_calls(_sin_of_product, _copies(tensors), on_reference=True) == expected


def test_only_what_the_needed_gradients_read_is_saved():
    """r[hooks.eager.saved-set]: with only x requiring grad, x * w saves w alone."""
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, dtype=torch.float64)
    expected = _hook_calls(
        lambda a, b: a * b, [x.detach().clone().requires_grad_(), w], on_reference=False
    )
    actual = _hook_calls(
        lambda a, b: a * b, [x.detach().clone().requires_grad_(), w], on_reference=True
    )
    assert actual == expected == [("pack", (3,), torch.float64), ("unpack", (3,), torch.float64)]


@pytest.mark.parametrize(
    "name", ["product-sum", "matmul-chain", "mlp", "inplace-through-views", "multi-output"]
)
def test_lossy_hooks_give_eager_gradients(name):
    fn, shapes = PROGRAMS[name]
    _, hooks = _recording_hooks(lossy=True)
    expected, actual = _grads_on_eager_and_reference(fn, _leaves(shapes, seed=1), hooks)
    for e, a in zip(expected, actual, strict=True):
        torch.testing.assert_close(a, e)


def test_innermost_pair_applies():
    """r[hooks.eager.innermost]: only the inner pair runs; hooks are read when the op runs."""
    outer_calls, outer = _recording_hooks()
    inner_calls, inner = _recording_hooks(lossy=True)
    x, w = _leaves([(3,), (3,)])
    with torch.autograd.graph.saved_tensors_hooks(*outer):
        with torch.autograd.graph.saved_tensors_hooks(*inner):
            out = run(_product_sum, x, w).outputs
    _backward(out)  # no hooks active any more: the inner unpack still runs
    assert outer_calls == []
    assert [c[0] for c in inner_calls] == ["pack", "pack", "unpack", "unpack"]
    torch.testing.assert_close(x.grad, w.detach().to(torch.bfloat16).float())


def test_hooks_entered_inside_the_function_are_rejected():
    def enters_hooks(x, w):
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            return (x * w).sum()

    with pytest.raises(UnsupportedError) as raised:
        run(enters_hooks, *_leaves([(3,), (3,)]))
    assert raised.value.rule == "hooks.eager.innermost"


# ---------------------------------------------------------------- the ledger


def _exp_sum(x):
    return x.exp().sum()


def _exp_storage(ledger) -> int:
    """The storage of exp's float32 result (a bfloat16 packed copy may be allocated at that step
    too)."""
    (storage,) = [
        e.storage
        for e in ledger.events
        if e.kind == "alloc" and e.node == "exp" and e.nbytes == 4 * 4
    ]
    return storage


def test_pack_result_replaces_the_saved_tensor_in_the_ledger():
    """exp saves its result. Without hooks the tape holds it past its last use; with a pack that
    returns a new tensor, the result dies at its last use (the sum) and the packed copy lives
    on."""
    x = torch.randn(4, requires_grad=True)
    plain = run(_exp_sum, x).ledger
    assert _exp_storage(plain) in plain.probes[-1].alive
    _, hooks = _recording_hooks(lossy=True)
    with torch.autograd.graph.saved_tensors_hooks(*hooks):
        packed = run(_exp_sum, x).ledger
    exp = _exp_storage(packed)
    assert [e.node for e in packed.events if e.storage == exp and e.kind == "free"] == ["sum_1"]
    bf16 = [e for e in packed.events if e.kind == "alloc" and e.node == "exp" and e.storage != exp]
    assert [e.nbytes for e in bf16] == [4 * 2]
    assert bf16[0].storage in packed.probes[-1].alive


def test_an_identity_pack_keeps_the_saved_tensor_alive():
    x = torch.randn(4, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        ledger = run(_exp_sum, x).ledger
    assert _exp_storage(ledger) in ledger.probes[-1].alive


def test_the_backward_frees_saved_values_as_it_goes():
    run_ = run(_mlp, *_leaves([(5, 4), (8, 4), (3, 8)]))
    _backward(run_.outputs)
    ledger = run_.backward_ledger
    freed = {e.storage for e in ledger.events if e.kind == "free" and e.step < ledger.step}
    assert run_.saved_storages and run_.saved_storages <= freed


def test_packed_values_are_released_after_their_ops_backward():
    _, hooks = _recording_hooks(lossy=True)
    with torch.autograd.graph.saved_tensors_hooks(*hooks):
        run_ = run(_exp_sum, torch.randn(4, requires_grad=True))
    _backward(run_.outputs)
    ledger = run_.backward_ledger
    (packed,) = run_.saved_storages
    (free,) = [e for e in ledger.events if e.storage == packed and e.kind == "free"]
    assert free.node == "exp.release"


# ---------------------------------------------------------------- errors, like eager


def test_a_saved_tensor_modified_in_place_raises_in_backward_like_eager():
    def modifies_saved(x):
        y = x.exp()
        z = y.sum()
        y.add_(1)
        return z

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _backward(modifies_saved(torch.randn(3, requires_grad=True)))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _backward(run(modifies_saved, torch.randn(3, requires_grad=True)).outputs)


def test_mutating_a_non_leaf_input_with_grad_is_rejected_before_touching_it():
    x = torch.arange(3.0, requires_grad=True)
    y = x * 2
    before = y.detach().clone()
    with pytest.raises(UnsupportedError) as raised:
        run(lambda t: t.mul_(2) * 3, y)
    assert raised.value.rule == "autograd.mutated-grad-input"
    assert torch.equal(y.detach(), before)


SINGLE_OPS = {
    "relu": lambda a, b: a.relu(),
    "tanh": lambda a, b: a.tanh(),
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a**3,
    "clamp": lambda a, b: a.clamp(-0.5, 0.5),
    "cat": lambda a, b: torch.cat([a, b]),
    "amax": lambda a, b: a.amax(1),
    "var": lambda a, b: a.var(1),
    "std": lambda a, b: a.std(1),
    "var_mean": lambda a, b: torch.stack(torch.var_mean(a, 1)),
    "where": lambda a, b: torch.where(a > 0, a, b),
    "index": lambda a, b: a[torch.tensor([0, 2])],
    "maximum": lambda a, b: torch.maximum(a, b),
    "to-float64": lambda a, b: a.double(),
}


@pytest.mark.parametrize("name", SINGLE_OPS)
def test_single_ops_save_what_eager_saves(name):
    """r[hooks.eager.saved-set]: derived from each rule, the saved set and its order are
    eager's."""
    tensors = _leaves([(3, 4), (3, 4)], seed=2)
    expected = _hook_calls(SINGLE_OPS[name], _copies(tensors), on_reference=False)
    assert _hook_calls(SINGLE_OPS[name], _copies(tensors), on_reference=True) == expected


def test_dropping_the_run_and_its_outputs_frees_them_at_once():
    """The tape's autograd node holds neither the outputs nor the run that holds them: without a
    backward, they go when the caller drops them, not at the garbage collector's next pass."""
    x = torch.randn(64, requires_grad=True)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        eager_run = run(lambda x: (x * 3).tanh(), x)
        output = StorageWeakRef(eager_run.outputs.untyped_storage())
        del eager_run
        assert output.expired()
    finally:
        if gc_was_enabled:
            gc.enable()
