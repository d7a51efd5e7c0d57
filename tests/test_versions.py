"""What differs between torch releases (`aotspec/versions.py`): one test per difference, each
failing if the detection is wrong on the torch these tests run on."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.fx.proxy
from torch.fx.experimental.proxy_tensor import make_fx

import aotspec
from aotspec import versions
from aotspec.fast import triton_kernels
from aotspec.fast.fusion import fuse_pointwise


@pytest.mark.parametrize(
    ("version", "release"),
    [("2.13.0+cpu", (2, 13)), ("2.11.0+cu130", (2, 11)), ("2.16.0.dev20260101", (2, 16))],
)
def test_torch_release_reads_major_and_minor(version, release):
    assert release == versions.torch_release(version)


@pytest.mark.parametrize("version", ["2.11.0", "2.13.0+cpu", "2.15.1+cu128"])
def test_supported_releases_import(version):
    versions.check_torch(version)


@pytest.mark.parametrize("version", ["2.10.0", "2.16.0a0", "3.0.0"])
def test_a_release_outside_the_range_is_refused_naming_the_range(version):
    with pytest.raises(ImportError, match=r"torch >=2\.11,<2\.16 \(2\.11 to 2\.15\).*" + version):
        versions.check_torch(version)


def test_this_torch_is_supported():
    """The torch the tests run on is in the range, so `import aotspec` passed its check."""
    versions.check_torch(torch.__version__)


def test_add_note_appends_to_the_notes_python_prints():
    error = ValueError("wrong")
    versions.add_note(error, "first")
    versions.add_note(error, "second")
    assert ["first", "second"] == error.__notes__


def user_step(x):
    return x.sin() * 2


def _sin_trace(register: bool) -> str:
    """The stack trace make_fx records for `user_step`'s sin, called from a lambda (no frame
    named `forward`), with user_step given to `stack_traces_of` or not."""
    traced = make_fx(lambda x: user_step(x), record_stack_traces=True)
    with versions.stack_traces_of(user_step) if register else contextlib.nullcontext():
        graph_module = traced(torch.ones(3))
    nodes = graph_module.graph.find_nodes(op="call_function", target=torch.ops.aten.sin.default)
    (node,) = nodes
    return node.meta.get("stack_trace") or ""


@pytest.mark.parametrize("anchors", [True, False], ids=["registered-anchor", "widened-filter"])
def test_stack_traces_keep_the_frames_of_the_function_given(anchors, monkeypatch):
    """torch 2.13 on registers the function as an anchor; before, the filter is widened: either
    way the node of `x.sin()` names user_step's line. The fallback is checked on every torch,
    with no anchor registered (torch keeps them for the process)."""
    if not anchors:
        monkeypatch.delattr(torch.fx.proxy, "_register_stack_trace_anchor", raising=False)
        monkeypatch.setattr(torch.fx.proxy, "_STACK_TRACE_ANCHORS", set(), raising=False)
        assert "user_step" not in _sin_trace(register=False)
    elif not hasattr(torch.fx.proxy, "_register_stack_trace_anchor"):
        pytest.skip("this torch has no stack trace anchors (before 2.13)")
    trace = _sin_trace(register=True)
    assert "in user_step" in trace and "x.sin() * 2" in trace
    assert torch.fx.proxy.TracerBase._filter_traceback_frames.__name__ != "keeping_fn"


def _draw(x, generator):
    return x + torch.rand(3, generator=generator)


def test_traces_generators_says_what_make_fx_does_with_a_generator():
    """The probe agrees with the tracer: a generator the function closes over (as aotspec's
    capture sees the caller's) is traced where it says so, and make_fx raises
    NotImplementedError naming the Generator where it does not."""
    generator = torch.Generator()
    trace = make_fx(lambda x: _draw(x, generator), tracing_mode="fake")
    if versions.traces_generators():
        trace(torch.zeros(3))
    else:
        with pytest.raises(NotImplementedError, match="Generator"):
            trace(torch.zeros(3))


def test_a_generator_is_refused_by_name_where_torch_cannot_trace_it(monkeypatch):
    """Where the tracer cannot record a generator, compiling refuses it naming the rule, and the
    caller's tensor is untouched (`r[ops.random.generator-capture]`)."""
    if versions.traces_generators():
        pytest.skip("this torch's tracer records generators (2.13 on)")
    x = torch.zeros(3)
    with pytest.raises(aotspec.UnsupportedError, match=r"rule ops\.random\.generator-capture"):
        aotspec.compile(_draw, backend="fast")(x, torch.Generator().manual_seed(0))
    assert torch.equal(x, torch.zeros(3))


def test_interpreter_fma_probe_agrees_with_a_kernel_run_by_the_interpreter(monkeypatch):
    """The probe says what a real `tl.fma` kernel gives under TRITON_INTERPRET=1: eager's
    once-rounded `x + alpha * y` exactly, or one unit in the last place away where it rounds
    twice."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x = torch.full((4,), -(1 + 2**-11))
    y = torch.full((4,), 1 + 2**-12)
    expected = torch.add(x, y, alpha=1 + 2**-12)  # eager: one rounding, 2**-24
    assert torch.equal(expected, torch.full((4,), 2.0**-24))
    def chain(x, y):  # two ops: one op alone is no kernel
        return torch.add(x, y, alpha=1 + 2**-12).relu()

    fused = fuse_pointwise(make_fx(chain)(x, y), use_triton=True)
    launched = sum(triton_kernels.LAUNCHES.values())
    got = fused(x, y)
    assert sum(triton_kernels.LAUNCHES.values()) == launched + 1
    assert torch.equal(got, expected) == versions.interpreter_fma_rounds_once()


aten = torch.ops.aten


def test_make_fx_keeping_detach_records_detach():
    """torch 2.14 and later decompose detach to alias when make_fx is given no table."""
    traced = versions.make_fx_keeping_detach(lambda x: x.detach() * x, tracing_mode="fake")(
        torch.ones(3, requires_grad=True)
    )
    targets = [node.target for node in traced.graph.nodes if node.op == "call_function"]
    assert [aten.detach.default, aten.mul.Tensor] == targets


def test_traces_leave_module_methods_as_they_are():
    """torch.fx's tracer replaces nn.Module's __call__ and __getattr__ at every trace, and
    make_fx's tracer answers them with the call's and attribute's own results: aotspec's traces
    leave them in place, and a module call still records its ops."""
    call, getattr_ = torch.nn.Module.__call__, torch.nn.Module.__getattr__
    seen = []
    linear = torch.nn.Linear(3, 2)

    def program(x):
        seen.append((torch.nn.Module.__call__, torch.nn.Module.__getattr__))
        return [linear(x).relu()]

    options = {"tracing_mode": "fake", "_allow_non_fake_inputs": True}
    traced = versions.make_fx_keeping_detach(program, **options)(torch.ones(4, 3))
    targets = [node.target for node in traced.graph.nodes if node.op == "call_function"]
    assert seen == [(call, getattr_)]
    assert aten.addmm.default in targets and aten.relu.default in targets
    # make_fx itself patches them, as the releases supported do
    make_fx(program, **options)(torch.ones(4, 3))
    assert seen[-1] != (call, getattr_)


class _Doubled(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return 2 * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


def test_custom_function_apply_owner_sees_every_apply():
    """torch 2.14 made `Function.apply` autograd's C apply, which `_SingleLevelFunction` no
    longer sees."""
    owner = versions.custom_function_apply_owner()
    original = owner.__dict__.get("apply")
    seen = []
    owner.apply = classmethod(lambda cls, *args: seen.append(cls))
    try:
        _Doubled.apply(torch.ones(2, requires_grad=True))
    finally:
        if original is None:
            del owner.apply
        else:
            owner.apply = original
    assert [_Doubled] == seen


def test_checkpoint_generator_replaced_sees_each_checkpoint():
    """torch 2.14 made checkpoint call `_checkpoint_without_reentrant_generator_impl`, with
    another signature, in place of `_checkpoint_without_reentrant_generator`."""
    seen = []

    def region(context_fn):
        seen.append(context_fn)
        yield

    x = torch.ones(2, requires_grad=True)
    with versions.checkpoint_generator_replaced(region):
        out = torch.utils.checkpoint.checkpoint(torch.sin, x, use_reentrant=False)
    assert [torch.utils.checkpoint.noop_context_fn] == seen
    assert torch.equal(torch.sin(x), out)


def _fake_of_rows_and_columns(rows: int, columns: int) -> torch.Tensor:
    """A fake (rows, columns, 4) tensor whose rows and columns are symbols."""
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )

    mode = FakeTensorMode(shape_env=ShapeEnv())
    dims = [DimDynamic.DUCK, DimDynamic.DUCK, DimDynamic.STATIC]
    context = StatelessSymbolicContext(dynamic_sizes=dims)
    return mode.from_tensor(
        torch.zeros(rows, columns, 4), source=ConstantSource("x"), symbolic_context=context
    )


def test_a_product_of_three_sizes_the_trace_did_not_make_is_rebuilt():
    """The storage's bytes of a (rows, columns, 4) float32 tensor, `16*rows*columns`, are a
    product of three terms the trace never computed: make_fx rebuilds it from the sizes it
    traced. torch 2.13's rebuild calls `operator.mul` with the three; aotspec's traces build
    it two at a time, and the graph computes the number at every size."""

    def zeros_like_storage(x):
        return x.new_zeros(x.untyped_storage().nbytes())

    graph = versions.make_fx_keeping_detach(zeros_like_storage)(_fake_of_rows_and_columns(3, 5))
    assert graph(torch.zeros(2, 7, 4)).shape == (2 * 7 * 4 * 4,)


def test_dynamos_c_entry_points_are_found_on_this_torch():
    """2.13 has Dynamo's frame hook and its C++ tensor check under the names aotspec uses; a
    release without them gets `torch._disable_dynamo` and a check in Python instead."""
    assert versions.DYNAMO_FRAME_API is not None
    assert versions.TENSOR_GUARDS is not None


def test_the_python_metadata_check_answers_as_dynamos():
    from aotspec import guard

    base = torch.arange(6.0).reshape(2, 3)
    others = [
        base.clone(),
        base.t().contiguous().t(),  # other strides
        base.double(),
        base.clone().requires_grad_(),
        base.reshape(3, 2),
        torch.complex(base, base).conj().real,  # same facts, through a view
    ]
    in_cpp = guard.metadata_check([base])
    in_python = guard._metadata_check_in_python([base])
    assert [in_cpp(t) for t in others] == [in_python(t) for t in others]
    assert [True, False, False, False, False] == [in_python(t) for t in others[:5]]


@pytest.mark.parametrize("frame_api", [True, False], ids=["frame-hook", "disable_dynamo"])
def test_untraced_by_dynamo_keeps_dynamo_out(frame_api, monkeypatch):
    """Dynamo traces nothing of a function so marked, with the frame hook in C or, without it,
    through `torch._disable_dynamo`: the graphs it compiles around it hold no multiplication."""
    if not frame_api:
        monkeypatch.setattr(versions, "DYNAMO_FRAME_API", None)
    untraced = versions.untraced_by_dynamo(lambda x: x * 2)
    graphs = []

    def recording(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    torch._dynamo.reset()
    compiled = torch.compile(lambda x: untraced(x.sin()) + 1, backend=recording)
    x = torch.tensor([1.0, 2.0])
    torch.testing.assert_close(compiled(x), x.sin() * 2 + 1)
    targets = [str(node.target) for g in graphs for node in g.graph.nodes]
    assert graphs and any("sin" in t for t in targets)
    assert not any("mul" in t for t in targets), targets
