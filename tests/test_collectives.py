"""Functional collectives (`specs/collectives.md`) against eager PyTorch on two gloo ranks.

Each program runs eagerly, through `aotspec.compile` on both backends, through the reference's
eager interpreter and through `torch.compile(backend="aotspec")`, on both ranks of a group this
module spawns (`aotspec.conformance.ranks`, with a time limit); outputs and gradients must be
eager's. The same group checks the errors: a collective told another group size, and ranks that
disagree on the program. What capture refuses needs no group and is checked in this process.
"""

from __future__ import annotations

import datetime
import traceback

import pytest
import torch

import aotspec
from aotspec import UnsupportedError
from aotspec.conformance.ranks import run_on_ranks
from aotspec.reference import run

c10d = torch.ops._c10d_functional


def _group() -> str:
    import torch.distributed as dist

    return dist.group.WORLD.group_name


# ---------------------------------------------------------------- programs


def gather(x):
    return c10d.wait_tensor(c10d.all_gather_into_tensor(x, 2, _group())) * 2


def scatter_sum(x):
    return c10d.wait_tensor(c10d.reduce_scatter_tensor(x, "sum", 2, _group())).sin()


def scatter_max(x):
    return c10d.wait_tensor(c10d.reduce_scatter_tensor(x, "max", 2, _group()))


def reduce_sum(x):
    return c10d.wait_tensor(c10d.all_reduce(x.exp(), "sum", _group()))


def reduce_product(x):
    return c10d.wait_tensor(c10d.all_reduce(x, "product", _group()))


def chain(x, w):
    """All three, one feeding the next, with a weight of this rank."""
    full = c10d.wait_tensor(c10d.all_gather_into_tensor(x, 2, _group()))
    summed = c10d.wait_tensor(c10d.all_reduce(full * w, "sum", _group()))
    return c10d.wait_tensor(c10d.reduce_scatter_tensor(summed.t(), "sum", 2, _group()))


def functional_api(x):
    """The user-facing functional collectives, which call the ops and wait (`_c10d_functional`
    underneath), with the group object."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc

    group = dist.group.WORLD
    full = fc.all_gather_single(x, 0, group)
    summed = fc.all_reduce(full.cos(), "sum", group)
    return fc.reduce_scatter_tensor(summed, "sum", 0, group) + 0


def _tensor(shape, layout, dtype, grad, generator):
    if layout == "transposed":
        t = torch.randn(shape[::-1], generator=generator).t()
    else:
        t = torch.randn(shape, generator=generator)
    t = t.to(dtype) if dtype.is_floating_point else (t * 3).round().to(dtype)
    return t.requires_grad_(grad)


#: name -> (program, [(shape, layout, dtype, requires grad) per argument])
PROGRAMS = {
    "gather": (gather, [((3, 4), "contiguous", torch.float32, True)]),
    "gather-transposed": (gather, [((3, 4), "transposed", torch.float32, True)]),
    "gather-float64": (gather, [((2, 3), "contiguous", torch.float64, True)]),
    "gather-bfloat16": (gather, [((2, 3), "contiguous", torch.bfloat16, False)]),
    "scatter-sum": (scatter_sum, [((4, 3), "contiguous", torch.float32, True)]),
    "scatter-max": (scatter_max, [((4, 3), "transposed", torch.float32, False)]),
    "reduce-sum": (reduce_sum, [((3, 2), "transposed", torch.float32, True)]),
    "reduce-product-int64": (reduce_product, [((5,), "contiguous", torch.int64, False)]),
    "functional-api": (functional_api, [((2, 3), "contiguous", torch.float32, True)]),
    "chain": (
        chain,
        [((2, 4), "contiguous", torch.float32, True), ((4, 4), "contiguous", torch.float32, True)],
    ),
}
BACKENDS = ["reference", "fast", "reference-eager", "dynamo-reference", "dynamo-fast"]


def _runner(program, backend: str):
    if backend == "eager":
        return program
    if backend == "reference-eager":
        return lambda *args: run(program, *args).outputs
    if backend.startswith("dynamo-"):
        torch._dynamo.reset()
        options = {"backend": backend.removeprefix("dynamo-")}
        return torch.compile(program, backend="aotspec", options=options, fullgraph=True)
    return aotspec.compile(program, backend=backend)


def _outcome(program, specs, backend: str, seed: int):
    """The program's output and its arguments' gradients on this rank, or the error."""
    generator = torch.Generator().manual_seed(seed)
    args = [_tensor(*spec, generator) for spec in specs]
    try:
        out = _runner(program, backend)(*args)
        if out.requires_grad:
            out.backward(torch.randn(out.shape, generator=generator).to(out.dtype))
        return out.detach(), [a.grad for a in args]
    except Exception:  # noqa: BLE001  (the test reports it)
        return traceback.format_exc()


def _compare_all() -> dict:
    """On one rank: every program on eager and every backend (each rank its own values)."""
    import torch.distributed as dist

    seed = 10 * dist.get_rank()
    return {
        (name, backend): _outcome(program, specs, backend, seed)
        for name, (program, specs) in PROGRAMS.items()
        for backend in ["eager", *BACKENDS]
    }


# ---------------------------------------------------------------- errors on two ranks


def _add_then_gather_told_three(x):
    x.add_(1)
    return c10d.wait_tensor(c10d.all_gather_into_tensor(x, 3, _group()))


#: A group that gives up after two seconds (made on both ranks by `_errors`).
SHORT: list = []


def _gather_on_rank_0_only(x):
    import torch.distributed as dist

    if dist.get_rank() == 0:
        return c10d.wait_tensor(c10d.all_gather_into_tensor(x, 2, SHORT[0].group_name))
    return x + 1


def _error(call) -> tuple[str, str] | None:
    try:
        call()
    except Exception as error:  # noqa: BLE001  (the test judges it)
        return type(error).__name__, str(error)
    return None


def _errors() -> dict:
    import torch.distributed as dist

    found = {}
    for backend in ["reference", "fast"]:
        x = torch.ones(2)
        found["group size", backend] = _error(
            lambda: aotspec.compile(_add_then_gather_told_three, backend=backend)(x)
        )
        found["x after", backend] = x.tolist()
    SHORT[:] = [dist.new_group(timeout=datetime.timedelta(seconds=2))]
    for backend in ["reference", "fast"]:
        torch._dynamo.reset()
        compiled = torch.compile(
            _gather_on_rank_0_only, backend="aotspec", options={"backend": backend}
        )
        found["disagree", backend] = _error(lambda: compiled(torch.ones(2)))
    return found


def _everything() -> dict:
    return {"compared": _compare_all(), "errors": _errors()}


@pytest.fixture(scope="module")
def ranks():
    """What each rank found: one spawned group for every two-rank test of this module."""
    return run_on_ranks(_everything, timeout=120)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_collective_matches_eager_on_two_ranks(ranks, name, backend):
    """r[collectives.values], r[collectives.derivatives]: outputs and gradients are eager's on
    each rank."""
    for rank, found in enumerate(ranks):
        expected, got = found["compared"][name, "eager"], found["compared"][name, backend]
        assert not isinstance(expected, str), f"eager failed on rank {rank}:\n{expected}"
        assert not isinstance(got, str), f"{backend} failed on rank {rank}:\n{got}"
        torch.testing.assert_close(got, expected, msg=lambda m: f"rank {rank}: {m}")


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_collective_told_another_group_size_is_refused_before_anything_runs(ranks, backend):
    """r[collectives.group]: named, before the add_ reaches the caller's tensor."""
    for found in ranks:
        kind, message = found["errors"]["group size", backend]
        assert "UnsupportedError" == kind
        assert "collectives.group" in message and "all_gather_into_tensor" in message
        assert "has 3 ranks; it has 2" in message
        assert [1.0, 1.0] == found["errors"]["x after", backend]


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_ranks_that_disagree_get_a_timeout_naming_the_collective(ranks, backend):
    """r[collectives.timeout]: rank 0 gathers and rank 1 does not: rank 0 raises after the
    group's two seconds, naming the op and its group, through torch.compile."""
    error = ranks[0]["errors"]["disagree", backend]
    assert error is not None, "rank 0 returned though rank 1 ran no collective"
    kind, message = error
    assert "SpecViolation" == kind
    assert "collectives.timeout" in message
    assert "all_gather_into_tensor" in message and "within the group's timeout" in message
    assert ranks[1]["errors"]["disagree", backend] is None


# ---------------------------------------------------------------- refused at capture


def test_other_collectives_are_refused_at_capture():
    """r[collectives.ops]: the namespace's other ops are not run opaquely."""

    def all_to_all(x):
        return c10d.wait_tensor(c10d.all_to_all_single(x, [1, 1], [1, 1], "0"))

    with pytest.raises(UnsupportedError, match=r"all_to_all_single") as raised:
        aotspec.compile(all_to_all, backend="reference")(torch.ones(2))
    assert "ops.table" == raised.value.rule


def test_a_collective_on_no_group_is_refused_before_anything_runs():
    """r[collectives.group]: this process belongs to no group."""

    def add_then_gather(x):
        x.add_(1)
        return c10d.wait_tensor(c10d.all_gather_into_tensor(x, 2, "0"))

    x = torch.zeros(2)
    for backend in ["reference", "fast"]:
        with pytest.raises(UnsupportedError, match=r"group '0', which does not exist") as raised:
            aotspec.compile(add_then_gather, backend=backend)(x)
        assert "collectives.group" == raised.value.rule
    with pytest.raises(UnsupportedError, match=r"collectives\.group"):
        run(add_then_gather, x)
    assert [0.0, 0.0] == x.tolist()


def test_wait_refuses_a_layout_its_meta_kernel_does_not_keep():
    """r[collectives.wait]: waiting returns the tensor as it is, the meta kernel a dense one."""
    x = torch.randn(4, 6)[:, 1:4]
    with pytest.raises(UnsupportedError, match=r"wait_tensor .* strides \(6, 1\) and offset 1"):
        run(lambda t: c10d.wait_tensor(t) * 2, x)

