"""Capture: aten graphs that keep mutations, traced without touching the caller's tensors."""

import pytest
import torch
from torch._subclasses.fake_tensor import DynamicOutputShapeException, FakeTensorMode

import aotspec
from aotspec.reference import capture
from aotspec.reference.aten import shapes_from_arguments
from aotspec.reference.optable import qualified_name

aten = torch.ops.aten
resize = torch.ops.inductor.resize_storage_bytes_


def _targets(program):
    return [
        qualified_name(n.target)
        for n in program.graph.nodes
        if n.op == "call_function" and hasattr(n.target, "_schema")
    ]


def _state(t):
    return (
        t.untyped_storage()._cdata,
        t.untyped_storage().nbytes(),
        t.shape,
        t.stride(),
        t._version,
    )


def _mutates_everything(x, y, z, w):
    x.view(2, 2).add_(1)
    x.copy_(y)
    aten.set_.source_Tensor(z, y)
    resize(w, 16)
    w.copy_(y)
    resize(y, 0)
    return x + 1


def test_mutations_are_kept_in_the_graph():
    w = torch.zeros(4)
    resize(w, 0)
    program = capture(_mutates_everything, (torch.zeros(4), torch.ones(4), torch.zeros(4), w))
    targets = _targets(program)
    for op in [
        "aten.add_.Tensor",
        "aten.copy_.default",
        "aten.set_.source_Tensor",
        "inductor.resize_storage_bytes_.default",
    ]:
        assert op in targets, targets


def test_capture_leaves_the_callers_tensors_alone():
    """r[capture.no-side-effects]: no byte, size, binding or version counter changes."""
    x, y, z, w = torch.zeros(4), torch.ones(4), torch.zeros(4), torch.arange(4.0)
    resize(w, 0)
    before = [_state(t) for t in (x, y, z, w)]
    values = [t.clone() for t in (x, y, z)]
    capture(_mutates_everything, (x, y, z, w))
    assert before == [_state(t) for t in (x, y, z, w)]
    for original, t in zip(values, (x, y, z), strict=True):
        assert torch.equal(original, t)


def test_non_tensor_leaves_are_constants():
    program = capture(
        lambda xs, k, opts: xs[0] * k + opts["b"], ([torch.ones(2)], 3.0, {"b": 1.0})
    )
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == 1
    assert program.in_leaves[1:] == (3.0, 1.0)


def test_ops_with_a_kernel_are_captured_whole():
    """r[capture.aten-graph]: gelu and silu are kernels in eager, so one op each, not their
    decompositions."""
    program = capture(
        lambda x: torch.nn.functional.silu(torch.nn.functional.gelu(x)), (torch.randn(2, 3),)
    )
    targets = _targets(program)
    assert "aten.gelu.default" in targets and "aten.silu.default" in targets
    assert "aten.erf.default" not in targets and "aten.sigmoid.default" not in targets


@pytest.mark.parametrize(
    "program",
    [
        lambda x: x * 2 if x.sum() > 0 else -x,
        lambda x: x[: int(x[0].item())],
        lambda x: x.nonzero(),
        lambda x: x[x > 0] * 2,
        lambda x: torch.tensor_split(x, (x > 0).long()),
    ],
    ids=["branch", "slice-by-item", "nonzero", "mask-selection", "split-by-a-tensor"],
)
@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_value_dependent_programs_are_refused_before_anything_runs(program, backend):
    """r[capture.data-dependent]: named errors, not PyTorch's guard exceptions from deep in
    tracing or functionalization; the caller's tensor is untouched."""
    x = torch.tensor([2.0, 0.0, -1.0])
    with pytest.raises(aotspec.UnsupportedError) as raised:
        aotspec.compile(program, backend=backend)(x)
    assert "capture.data-dependent" == raised.value.rule
    assert "test_capture.py" in str(raised.value)  # the user's line
    torch.testing.assert_close(x, torch.tensor([2.0, 0.0, -1.0]))


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_values_read_at_capture_are_guarded(backend):
    """r[capture.data-dependent.input-values]: the program is specialized on the split indices
    and the narrow's start read from the caller's tensors; the same values reuse it, other ones
    compile again, and every call gives eager's pieces."""

    def program(x, indices, start):
        return (*torch.tensor_split(x * 2, indices), x.narrow(0, start, 2))

    compiled = aotspec.compile(program, backend=backend)
    x = torch.arange(6.0)
    calls = [([1, 4], 0), ([1, 4], 0), ([2, 3], 0), ([2, 3], 4), ([1, 4], 0)]
    compilations = []
    for indices, start in calls:
        arguments = (x, torch.tensor(indices), torch.tensor(start))
        expected, got = program(*arguments), compiled(*arguments)
        assert len(expected) == len(got)
        for e, g in zip(expected, got, strict=True):
            torch.testing.assert_close(g, e)
        compilations.append(compiled.compilations)
    assert [1, 1, 2, 3, 3] == compilations


@pytest.mark.parametrize(
    "program",
    [
        lambda x, v: torch.index_put(x, (x > 0,), v).sin(),
        lambda x, v: torch.index_put(x, (x > 0,), v.expand(2) * torch.tensor([1.0, 2.0])).sin(),
        lambda x, v: torch.index_fill(x, 0, (x > 0).long(), v).sin(),
        lambda x, v: torch.index_fill(x[0], 0, torch.tensor(0), v).sin(),
    ],
    ids=[
        "index-put-at-a-mask",
        "index-put-values-per-position",
        "index-fill-by-a-tensor",
        "index-fill-of-a-0-d-tensor",
    ],
)
@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_gradients_at_masks_and_filled_positions_are_eagers(program, backend):
    """r[ops.derivatives.index-put-mask], r[ops.derivatives.index-fill-value]: eager's formulas
    read the gradient at positions that depend on values, to sizes that do not; compiled, the
    gradients are eager's."""
    eager_x = torch.tensor([2.0, 0.0, -1.0, 4.0], requires_grad=True)
    eager_v = torch.tensor(3.0, requires_grad=True)
    program(eager_x, eager_v).sum().backward()
    x = eager_x.detach().clone().requires_grad_()
    v = eager_v.detach().clone().requires_grad_()
    aotspec.compile(program, backend=backend)(x, v).sum().backward()
    torch.testing.assert_close(x.grad, eager_x.grad)
    torch.testing.assert_close(v.grad, eager_v.grad)


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_gradient_at_a_mask_and_integer_indices_is_refused_before_anything_runs(backend):
    """r[capture.data-dependent]: the values' gradient is read at as many positions as the mask
    holds; refused at compile time, naming the op and the user's line."""
    x = torch.ones(4, 2, requires_grad=True)
    v = torch.tensor(3.0, requires_grad=True)
    rows, columns = torch.tensor([True, False, True, False]), torch.tensor([0, 1])
    compiled = aotspec.compile(
        lambda x, v: torch.index_put(x, (rows, columns), v).sin(), backend=backend
    )
    with pytest.raises(aotspec.UnsupportedError) as raised:
        compiled(x, v)
    assert "capture.data-dependent" == raised.value.rule
    assert "index_put" in str(raised.value) and "test_capture.py" in str(raised.value)
    assert x.grad is None and v.grad is None


def test_a_value_read_with_item_for_arithmetic_is_allowed():
    x = torch.tensor([2.0, 0.0, -1.0])
    compiled = aotspec.compile(lambda x: x * x.max().item(), backend="reference")
    torch.testing.assert_close(compiled(x), x * 2)
    torch.testing.assert_close(compiled(x * 3), x * 3 * 6)


def _seeds_nondeterministically(x):
    return x + torch.seed() * 0, torch.rand(2)


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_torch_seed_inside_reseeds_at_each_call_with_the_number_it_returns(backend):
    """r[capture.rng-state]: the generator ends seeded with the number torch.seed() returned,
    a new one each call; capture left the caller's generator alone."""
    compiled = aotspec.compile(_seeds_nondeterministically, backend=backend)
    torch.manual_seed(0)
    compiled(torch.zeros(1))
    first_seed = torch.initial_seed()
    _, drawn = compiled(torch.zeros(1))
    assert torch.initial_seed() not in (0, first_seed)
    torch.manual_seed(torch.initial_seed())
    assert torch.equal(drawn, torch.rand(2))


def _seeds_the_generator_object(x):
    torch.default_generator.manual_seed(3)
    return x + torch.rand(2)


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_generator_change_capture_cannot_record_is_refused_and_undone(backend):
    """r[capture.rng-state]: the generator's own methods are not recorded."""
    torch.manual_seed(1)
    state = torch.get_rng_state()
    with pytest.raises(aotspec.UnsupportedError, match="other than through torch.manual_seed"):
        aotspec.compile(_seeds_the_generator_object, backend=backend)(torch.zeros(2))
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelsd", "gelss"])
def test_lstsq_shapes_from_arguments_are_its_kernels(driver):
    """r[capture.data-dependent.shapes-from-arguments]: linalg_lstsq's fake outputs have the
    sizes, strides and dtypes of its CPU kernel's, on matrices and vectors, batched or not, wide,
    square and tall; gelsd and gelss on tall matrices stay refused (their residuals depend on the
    rank)."""
    torch.manual_seed(0)
    for batch in [(), (4,)]:
        for rows, columns, k in [(2, 3, 3), (3, 3, 3), (5, 3, 2), (5, 3, None), (3, 5, None)]:
            a = torch.randn(*batch, rows, columns, dtype=torch.float64)
            b = torch.randn(*batch, rows, *([k] if k else []), dtype=torch.float64)
            kernel = torch.linalg.lstsq(a, b, driver=driver)
            with shapes_from_arguments(), FakeTensorMode() as mode:
                arguments = (mode.from_tensor(a), mode.from_tensor(b))
                if driver in ("gelsd", "gelss") and rows > columns:
                    with pytest.raises(DynamicOutputShapeException):
                        aten.linalg_lstsq.default(*arguments, driver=driver)
                    continue
                fake = aten.linalg_lstsq.default(*arguments, driver=driver)
            for expected, got in zip(kernel, fake, strict=True):
                shown = (driver, batch, rows, columns, k)
                assert (expected.shape, expected.dtype) == (got.shape, got.dtype), shown
                if expected.numel() > 1:
                    assert expected.stride() == got.stride(), shown


def _decomposed_programs():
    yield "combinations", lambda x: torch.combinations(x[0], 2), (4, 3)
    yield "combinations-with-replacement", lambda x: torch.combinations(x[1], 3, True), (2, 3)
    yield "combinations-more-than-there-are", lambda x: torch.combinations(x[0], 4), (2, 3)
    for shape in [(5,), (3, 5), (1, 4)]:
        for correction in [0, 1, 2]:
            name = f"cov-{shape}-correction-{correction}"
            yield name, lambda x, c=correction: torch.cov(x, correction=c), shape
        yield f"corrcoef-{shape}", lambda x: x.corrcoef(), shape


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    ("program", "shape"),
    [pytest.param(p, s, id=name) for name, p, s in _decomposed_programs()],
)
@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_decompositions_capture_takes_give_eagers_values_and_gradients(
    program, shape, dtype, backend
):
    """r[capture.data-dependent.decompositions]: combinations, cov and corrcoef (PyTorch's
    decompositions of which read values) give eager's values, layouts and gradients."""
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype)
    eager_x, compiled_x = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected = program(eager_x)
    got = aotspec.compile(program, backend=backend)(compiled_x)
    torch.testing.assert_close(got, expected, equal_nan=True)
    assert expected.stride() == got.stride()
    cotangent = torch.randn_like(expected)
    expected.backward(cotangent)
    got.backward(cotangent)
    torch.testing.assert_close(compiled_x.grad, eager_x.grad, equal_nan=True)


def test_weighted_cov_stays_refused():
    """r[capture.data-dependent.decompositions]: cov's weights are values, which eager checks
    (none negative, a sum not zero) before it uses them: refused by name."""
    x, weights = torch.randn(2, 3), torch.tensor([1, 2, 1])
    with pytest.raises(aotspec.UnsupportedError) as raised:
        aotspec.compile(lambda x, w: torch.cov(x, fweights=w))(x, weights)
    assert "capture.data-dependent" == raised.value.rule


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_values_read_are_guarded_when_arguments_share_a_base(backend):
    """r[capture.data-dependent.input-values] with r[autograd.input-writes.synthetic-base]: the
    guard reads the caller's indices even when the program takes a base in place of aliasing
    arguments."""

    def program(x, head, indices):
        head.add_(1)
        return torch.tensor_split(x * 2, indices)

    compiled = aotspec.compile(program, backend=backend)
    for indices, compilations in [([1, 4], 1), ([2, 3], 2), ([1, 4], 2)]:
        x, eager_x = torch.arange(6.0), torch.arange(6.0)
        got = compiled(x, x[:2], torch.tensor(indices))
        expected = program(eager_x, eager_x[:2], torch.tensor(indices))
        assert [e.tolist() for e in expected] == [g.tolist() for g in got]
        assert eager_x.tolist() == x.tolist()
        assert compilations == compiled.compilations


def _either_check(x):
    if not torch.all(x > -10) or torch.any(x > 10):
        raise ValueError("out of range")
    if (x == 0).all():
        raise RuntimeError("all zero", 0)
    return x * 2


@pytest.mark.parametrize(
    ("values", "error", "message"),
    [
        ([1.0, -11.0], ValueError, "out of range"),  # the `not` way fails
        ([1.0, 11.0], ValueError, "out of range"),  # the `or` way fails
        ([0.0, 0.0], RuntimeError, "('all zero', 0)"),  # the second check fails
    ],
)
@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_value_checks_raise_eager_errors_in_order(values, error, message, backend):
    """r[capture.data-dependent.checks]: `if not a`, `if a or b` and several checks are each
    captured; the call raises eager's exception for the first that fails, and passes when none
    does."""
    compiled = aotspec.compile(_either_check, backend=backend)
    torch.testing.assert_close(torch.tensor([2.0, -4.0]), compiled(torch.tensor([1.0, -2.0])))
    with pytest.raises(error) as raised:
        _either_check(torch.tensor(values))
    assert message == str(raised.value)  # eager's, to compare with
    with pytest.raises(error) as raised:
        compiled(torch.tensor(values))
    assert message == str(raised.value)


def _check_then_branch(x):
    if x.sum() > 0:
        x = x + 1
    return x


def _check_with_and(x):
    if torch.any(x < 0) and torch.any(x > 1):
        raise ValueError("both")
    return x


def _check_with_computed_message(x):
    if torch.any(x < 0):
        raise ValueError(f"negative: {x.shape}")
    return x


@pytest.mark.parametrize(
    "program", [_check_then_branch, _check_with_and, _check_with_computed_message]
)
def test_other_bools_of_values_stay_refused(program):
    """r[capture.data-dependent.checks]: a bool whose branch does more than raise, one whose
    True way goes on to another condition, or an exception built from more than constants, stays
    refused by r[capture.data-dependent]."""
    with pytest.raises(aotspec.UnsupportedError) as raised:
        aotspec.compile(program)(torch.tensor([1.0, 2.0]))
    assert "capture.data-dependent" == raised.value.rule


def _check_then_draw(x):
    if torch.any(x < 0):
        raise ValueError("negative")
    return x + torch.rand(2)


def test_value_check_before_a_random_draw_is_refused():
    """r[capture.data-dependent.checks]: eager does not draw when its check fails; a compiled
    call would, having run the whole forward graph."""
    state = torch.get_rng_state()
    with pytest.raises(aotspec.UnsupportedError) as raised:
        aotspec.compile(_check_then_draw)(torch.tensor([1.0, 2.0]))
    assert "capture.data-dependent.checks" == raised.value.rule
    assert torch.equal(state, torch.get_rng_state())
