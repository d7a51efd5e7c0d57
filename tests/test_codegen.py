"""The fast backend's generated code (`fast/codegen.py`): boxed, `del` after last use, readable."""

from __future__ import annotations

import math
import re

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.multiprocessing.reductions import StorageWeakRef

from aotspec.fast.codegen import generate


def _traced(fn, *examples):
    return make_fx(fn)(*examples)


def test_the_argument_list_is_cleared_and_values_are_deleted_after_their_last_use():
    module = _traced(lambda x, w: (x * w).sin() + w, torch.randn(3), torch.randn(3))
    code = generate(module)
    arguments = [torch.randn(3), torch.randn(3)]
    expected = module(*arguments)
    result = code(arguments)
    assert arguments == []
    torch.testing.assert_close(result[0], expected)
    assigned = re.findall(r"^    (\w+) = ", code.code, re.MULTILINE)
    deleted = [
        name
        for line in re.findall(r"^    del (.+)$", code.code, re.MULTILINE)
        for name in line.split(", ")
    ]
    returned = re.search(r"return \[(.*)\]", code.code).group(1).split(", ")
    placeholders = [n.name for n in module.graph.nodes if n.op == "placeholder"]
    # every value but the returned ones is deleted exactly once
    assert sorted(deleted) == sorted(set(assigned + placeholders) - set(returned))


def test_an_input_dies_inside_the_call_after_its_last_use():
    seen = {}
    x = torch.randn(1000)
    weak = StorageWeakRef(x.untyped_storage())

    def program(x, y):
        return (x * 2).sum() + y.sum()

    module = _traced(program, x, torch.randn(2))
    code = generate(module)
    arguments = [x, torch.randn(2)]
    del x
    # The second sum runs after x's last use (the mul): x is gone by then, though the call is not
    # over.
    original = torch.ops.aten.sum.default

    class Probe(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is original and args[0].numel() == 2:
                seen["x freed before the last sum"] = weak.expired()
            return func(*args, **(kwargs or {}))

    with Probe():
        code(arguments)
    assert seen == {"x freed before the last sum": True}


def test_constants_render_and_run():
    def program(x):
        return torch.full((2,), math.inf) + x.new_zeros(
            2, device="cpu", dtype=torch.float64
        ), torch.tensor([1.5, 2.5]) * x

    module = _traced(program, torch.randn(2))
    code = generate(module)
    x = torch.randn(2)
    for got, want in zip(code([x.clone()]), module(x.clone()), strict=True):
        torch.testing.assert_close(got, want)
    assert "inf" in code.code


def test_multi_output_ops_are_read_by_subscript():
    module = _traced(lambda x: torch.ops.aten.var_mean.correction(x, [0]), torch.randn(4, 3))
    code = generate(module)
    assert re.search(r"= var_mean\w*\[0\]", code.code), code.code
    x = torch.randn(4, 3)
    for got, want in zip(code([x]), module(x), strict=True):
        torch.testing.assert_close(got, want)


def _dispatched(function, arguments: list) -> list[tuple]:
    """The ops `function(arguments)` dispatches, each with its arguments (tensors by dtype,
    sizes and strides)."""

    def seen(value):
        if isinstance(value, torch.Tensor):
            return ("tensor", value.dtype, tuple(value.shape), value.stride())
        if isinstance(value, (list, tuple)):
            return tuple(map(seen, value))
        if isinstance(value, dict):
            return tuple((name, seen(item)) for name, item in value.items())
        return (type(value), repr(value))

    dispatched = []

    class Recording(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            dispatched.append((func, seen(args), seen(kwargs or {})))
            return func(*args, **(kwargs or {}))

    with Recording():
        function(arguments)
    return dispatched


def _program(x, w):
    y = torch.empty_like(x, dtype=torch.float64).fill_(2) * x.t().mm(w).relu().sum(0, True)
    scalars = torch.ops.aten.mul.Scalar(x, 2).sum() + torch.ops.aten.mse_loss.default(x, w)
    return torch.full((9,), 0.5) + (y / 3).view(-1).mul(2.0) + scalars


def test_bound_entries_dispatch_what_the_overloads_own_entries_dispatch():
    """Where a call site calls a torch binding (`Tensor.mm`) in place of the overload's own
    entry, the binding reaches the same overloads with the same arguments: a binding that fills
    in an argument otherwise (`torch._C._nn.mse_loss` without a reduction would pass `none`, the
    overload's default is `mean`) or picks another overload (`Tensor.mul` with a number is
    `mul.Tensor`, not `mul.Scalar`) is not used."""
    x, w = torch.randn(3, 3), torch.randn(3, 3)
    code = generate(_traced(_program, x, w))
    bound = code.function.__globals__["aten"]
    assert bound.mm.default is not torch.ops.aten.mm.default._op, "no binding used"
    assert bound.mul.Scalar is torch.ops.aten.mul.Scalar._op
    assert bound.mse_loss.default is torch.ops.aten.mse_loss.default._op
    assert _dispatched(code.function, [x, w]) == _dispatched(code.exact, [x, w])
    torch.testing.assert_close(code([x, w])[0], _program(x, w))


def test_a_torch_function_mode_sees_the_overloads_as_before():
    """A binding is a torch function (`torch.device("meta")` would move `torch.empty`): a call
    under a `__torch_function__` mode runs the overloads' own entries, which it sees as aten
    overloads, as it saw them before any binding was chosen."""
    x, w = torch.randn(3, 3), torch.randn(3, 3)
    module = _traced(_program, x, w)
    code = generate(module)
    seen = []

    class Watching(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Watching():
        code([x, w])
    overloads = [n.target for n in module.graph.nodes if n.op == "call_function"]
    assert overloads == [func for func in seen if isinstance(func, torch._ops.OpOverload)]


def _views_undone_program(x, w, b):
    y = w.clone()
    return (
        x.t().t().mm(w),  # t of t, read by mm: x itself
        b.transpose(0, 2).transpose(-1, 0).exp(),  # the same dims, spelled otherwise: b itself
        b.transpose(0, 1).transpose(1, 2).exp(),  # other dims: a permutation, made
        x.expand(3, 4) + x[:1].expand(3, 4),  # to its own sizes: x itself; to others: made
        x.t().t(),  # returned: the view, made
        y.t().t().mul_(2),  # written and returned by mul_: the view, made
    )


def test_views_laid_out_as_their_source_are_passed_as_the_source():
    """fast/peephole.py: an op's argument that is a view laid out as a value it views (t of t,
    a transpose of the same transpose, expand to its own sizes) is passed as that value, and
    the views no longer used are not made; a returned view, and one an op writes and returns,
    are made. Every output is what the graph's own run gives: values, strides, view or not,
    and the storage it lies on (an input's, or a fresh one)."""
    examples = (torch.randn(3, 4), torch.randn(4, 4), torch.randn(2, 3, 4))
    module = _traced(_views_undone_program, *examples)
    code = generate(module)
    called = re.findall(r"= aten\.(\w+)\.", code.code)
    assert 4 == called.count("t"), code.code  # x.t().t() and y.t().t(), returned
    assert 2 == called.count("transpose"), code.code
    assert 1 == called.count("expand"), code.code
    inputs = [torch.randn(3, 4), torch.randn(4, 4), torch.randn(2, 3, 4)]
    expected = module(*inputs)
    storages = {t.untyped_storage()._cdata: k for k, t in enumerate(inputs)}
    results = code(list(inputs))
    for got, want in zip(results, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert (want.stride(), want._is_view()) == (got.stride(), got._is_view())
        on = storages.get(want.untyped_storage()._cdata)
        assert on == storages.get(got.untyped_storage()._cdata)
