"""Conformance cases for functional collectives (`specs/collectives.md`).

A case of `ranks=2` runs on both ranks of a gloo group that the runner spawns
(`conformance/ranks.py`); its setup gives rank r inputs that depend on r, and its expectations
hold on every rank (`RankValues`, `OnRank` where ranks differ). The cases of `ranks=1` need no
group: what they pin is decided at capture, before anything communicates.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

from aotspec.errors import SpecViolation, UnsupportedError

from ..case import (
    Case,
    FreedBy,
    Layout,
    OnRank,
    Raises,
    RankValues,
    Separate,
    Shares,
    StorageBytes,
    Values,
)

c10d = torch.ops._c10d_functional
_resize = torch.ops.inductor.resize_storage_bytes_


def _world_group() -> str:
    return dist.group.WORLD.group_name


def _rank() -> int:
    return dist.get_rank()


# ---------------------------------------------------------------- worlds


def _pair():
    """Rank r holds x = [r+1, r+1]."""
    return {"x": torch.full((2,), _rank() + 1.0)}


def _rows():
    """Rank r holds x = (r+1) * [1, 2, 3, 4]."""
    return {"x": (_rank() + 1.0) * torch.tensor([1.0, 2.0, 3.0, 4.0])}


def _pair_requiring_grad():
    """Rank r holds x = [r+1, r+1], which requires grad, and the constant c = [1, 2, 3, 4]."""
    return {
        "x": torch.full((2,), _rank() + 1.0, requires_grad=True),
        "c": torch.tensor([1.0, 2.0, 3.0, 4.0]),
    }


def _rows_requiring_grad():
    """Rank r holds x = (r+1) * [1, 2, 3, 4], which requires grad, and w = [r+1, r+1]."""
    return {
        "x": ((_rank() + 1.0) * torch.tensor([1.0, 2.0, 3.0, 4.0])).requires_grad_(),
        "w": torch.full((2,), _rank() + 1.0),
    }


def _pair_and_weights():
    """Rank r holds x = [r+1, r+1], which requires grad, and w = [r+1, r+1]."""
    return {
        "x": torch.full((2,), _rank() + 1.0, requires_grad=True),
        "w": torch.full((2,), _rank() + 1.0),
    }


def _on_no_group():
    """A process that belongs to no group (or whatever rank): x = [1, 1]."""
    return {"x": torch.ones(2)}


def _sharded_parameter():
    """SimpleFSDP's state on rank r: a 2x2 parameter whose storage holds no bytes, its shard
    (row r of [[1, 2], [3, 4]]), which requires grad, and an input x = [r+1, r+1]."""
    w = torch.empty(2, 2)
    w.untyped_storage().resize_(0)
    full = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    return {
        "x": torch.full((1, 2), _rank() + 1.0),
        "w": w,
        "shard": full[_rank() : _rank() + 1].clone().requires_grad_(),
    }


#: Groups that give up after two seconds, made anew by each run of a case that needs one.
_SHORT_TIMEOUT: list[dist.ProcessGroup] = []


def _pair_and_a_group_that_gives_up():
    _SHORT_TIMEOUT[:] = [dist.new_group(timeout=datetime.timedelta(seconds=2))]
    return _pair()


# ---------------------------------------------------------------- programs


def _all_gather(x):
    return c10d.wait_tensor(c10d.all_gather_into_tensor(x, 2, _world_group()))


def _reduce_scatter(x):
    return c10d.wait_tensor(c10d.reduce_scatter_tensor(x, "sum", 2, _world_group()))


def _all_reduce_max(x):
    return c10d.wait_tensor(c10d.all_reduce(x, "max", _world_group()))


def _gather_twice_doubled(x):
    """A collective's input dies at its last use, the collective (`FreedBy` of `mul`)."""
    return _all_gather(x * 2)


def _collective_and_its_wait(x):
    gathered = c10d.all_gather_into_tensor(x, 2, _world_group())
    return gathered, c10d.wait_tensor(gathered)


def _unused_on_rank_0(x):
    """Rank 0 all-reduces and uses nothing of it; rank 1 uses the sum, which needs rank 0's
    all-reduce to have run."""
    if _rank() == 0:
        c10d.all_reduce(x, "sum", _world_group())
        return x * 2
    return c10d.wait_tensor(c10d.all_reduce(x, "sum", _world_group()))


def _gather_scaled(x, c):
    return _all_gather(x) * c


def _scatter_scaled(x, w):
    return _reduce_scatter(x) * w


def _reduce_scaled(x, w):
    return c10d.wait_tensor(c10d.all_reduce(x, "sum", _world_group())) * w


def _gather_into_parameter(x, w, shard):
    """SimpleFSDP's layer: all-gather the parameter's shards into its storage, use it, free it."""
    gathered = _all_gather(shard)
    _resize(w, gathered.numel() * gathered.element_size())
    w.copy_(gathered)  # with grad: the gradient of w's contents reaches the shards
    y = x @ w
    _resize(w, 0)
    return y


def _regather(world):
    """The pre-backward all-gather: w's storage comes back with the full parameter, its version
    left alone."""
    w = world["w"]
    w.untyped_storage().resize_(4 * w.element_size())
    with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(w):
        w.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))


def _add_then_gather_on_no_group(x):
    x.add_(1)
    return c10d.wait_tensor(c10d.all_gather_into_tensor(x, 2, "no-such-group"))


def _gather_told_three_ranks(x):
    return c10d.wait_tensor(c10d.all_gather_into_tensor(x, 3, _world_group()))


def _scatter_three_rows(x):
    return c10d.wait_tensor(c10d.reduce_scatter_tensor(x[:3], "sum", 2, _world_group()))


def _coalesced(x):
    return c10d.all_reduce_coalesced([x], "sum", "no-such-group")


def _gather_on_rank_0_only(x):
    """Rank 1 runs no collective: rank 0's waits out the group's timeout."""
    if _rank() == 0:
        group = _SHORT_TIMEOUT[0].group_name
        return c10d.wait_tensor(c10d.all_gather_into_tensor(x, 2, group))
    return x * 2


#: eager raises its own errors, at other times (docs/torch-2.13.md section 7)
_EAGER_RUNS_IT = {"torch-eager": "eager runs the collective and fails inside gloo"}
_EAGER_ABORTS = {"torch-eager": "eager's gloo kernel aborts the process (Check failed)"}

CASES = [
    Case(
        name="collectives.all-gather",
        rules=["collectives.ops", "collectives.values", "collectives.fresh-output"],
        setup=_pair,
        args=["x"],
        program=_all_gather,
        ranks=2,
        # both ranks' x, rank 0's first: [1, 1] and [2, 2]
        expect=[
            Values("out0", [1.0, 1.0, 2.0, 2.0]),
            Layout("out0", dtype=torch.float32, shape=(4,), strides=(1,)),
            Separate("out0", "x"),
            RankValues("x", [[1.0, 1.0], [2.0, 2.0]]),
        ],
    ),
    Case(
        name="collectives.reduce-scatter",
        rules=["collectives.values", "collectives.fresh-output"],
        setup=_rows,
        args=["x"],
        program=_reduce_scatter,
        ranks=2,
        # the sum is 3 * [1, 2, 3, 4]; rank r takes its half
        expect=[RankValues("out0", [[3.0, 6.0], [9.0, 12.0]]), Separate("out0", "x")],
    ),
    Case(
        name="collectives.all-reduce-max",
        rules=["collectives.values"],
        setup=_rows,
        args=["x"],
        program=_all_reduce_max,
        ranks=2,
        # rank 1's x, 2 * [1, 2, 3, 4], is the larger everywhere
        expect=[Values("out0", [2.0, 4.0, 6.0, 8.0])],
    ),
    Case(
        name="collectives.input-dies-at-the-collective",
        rules=["collectives.fresh-output"],
        setup=_pair,
        args=["x"],
        program=_gather_twice_doubled,
        ranks=2,
        expect=[
            Values("out0", [2.0, 2.0, 4.0, 4.0]),
            FreedBy("forward", made_by="mul", freed_by="all_gather_into_tensor"),
        ],
    ),
    Case(
        name="collectives.wait-returns-its-input",
        rules=["collectives.wait"],
        setup=_pair,
        args=["x"],
        program=_collective_and_its_wait,
        ranks=2,
        expect=[
            Shares("out0", "out1"),
            Values("out1", [1.0, 1.0, 2.0, 2.0]),
            Layout("out1", shape=(4,), strides=(1,), offset=0),
        ],
    ),
    Case(
        name="collectives.unused-collective-runs",
        rules=["collectives.program-order"],
        setup=_pair,
        args=["x"],
        program=_unused_on_rank_0,
        ranks=2,
        # rank 0 returns 2x; rank 1 gets the sum of both ranks' x, [1, 1] + [2, 2]
        expect=[RankValues("out0", [[2.0, 2.0], [3.0, 3.0]])],
    ),
    Case(
        name="collectives.all-gather-gradient",
        rules=["collectives.derivatives"],
        setup=_pair_requiring_grad,
        args=["x", "c"],
        program=_gather_scaled,
        backward=True,
        ranks=2,
        # out = gathered * c; each rank's gradient of gathered is c, reduce-scattered: rank r
        # gets 2 * c[2r : 2r + 2]
        expect=[RankValues("x.grad", [[2.0, 4.0], [6.0, 8.0]])],
    ),
    Case(
        name="collectives.reduce-scatter-gradient",
        rules=["collectives.derivatives"],
        setup=_rows_requiring_grad,
        args=["x", "w"],
        program=_scatter_scaled,
        backward=True,
        ranks=2,
        # each rank's gradient of its half is w = [r+1, r+1], all-gathered
        expect=[Values("x.grad", [1.0, 1.0, 2.0, 2.0])],
    ),
    Case(
        name="collectives.all-reduce-gradient",
        rules=["collectives.derivatives"],
        setup=_pair_and_weights,
        args=["x", "w"],
        program=_reduce_scaled,
        backward=True,
        ranks=2,
        # each rank's gradient of the sum is its w, all-reduced: [1, 1] + [2, 2]
        expect=[Values("x.grad", [3.0, 3.0])],
    ),
    Case(
        name="collectives.max-has-no-gradient",
        rules=["collectives.derivatives"],
        setup=_pair_requiring_grad,
        args=["x"],
        program=_all_reduce_max,
        ranks=2,
        skip={"torch-eager": "eager raises the same error from the backward"},
        expect=[Raises(RuntimeError, match="all_reduce backward only supports 'sum' reduction")],
    ),
    Case(
        name="collectives.gather-into-a-parameter",
        rules=["collectives.derivatives", "collectives.fresh-output"],
        setup=_sharded_parameter,
        args=["x", "w", "shard"],
        program=_gather_into_parameter,
        backward=True,
        before_backward=_regather,
        ranks=2,
        skip={
            "reference-eager": "the eager interpreter refuses a write with history into a "
            "caller's tensor (r[autograd.mutated-grad-input])"
        },
        # w = [[1, 2], [3, 4]]; out = x @ w = (r+1) * [4, 6]; w's gradient on rank r is
        # x^T @ 1 = (r+1) * ones, summed over ranks (3 * ones) and scattered by rows
        expect=[
            RankValues("out0", [[[4.0, 6.0]], [[8.0, 12.0]]]),
            Values("shard.grad", [[3.0, 3.0]]),
            StorageBytes("w", 16),  # regathered before the backward
        ],
    ),
    Case(
        name="collectives.no-such-group",
        rules=["collectives.group"],
        setup=_on_no_group,
        args=["x"],
        program=_add_then_gather_on_no_group,
        skip=_EAGER_RUNS_IT,
        # refused before the add_ touches x (Raises checks it)
        expect=[Raises(UnsupportedError, rule="collectives.group", match="no-such-group")],
    ),
    Case(
        name="collectives.other-group-size",
        rules=["collectives.group"],
        setup=_pair,
        args=["x"],
        program=_gather_told_three_ranks,
        ranks=2,
        skip=_EAGER_ABORTS,
        expect=[Raises(UnsupportedError, rule="collectives.group", match="it has 2")],
    ),
    Case(
        name="collectives.scatter-rows-must-split",
        rules=["collectives.group"],
        setup=_rows,
        args=["x"],
        program=_scatter_three_rows,
        ranks=2,
        skip=_EAGER_ABORTS,
        expect=[Raises(UnsupportedError, rule="collectives.group", match="3 rows over 2")],
    ),
    Case(
        name="collectives.other-ops-refused",
        rules=["collectives.ops"],
        setup=_on_no_group,
        args=["x"],
        program=_coalesced,
        skip=_EAGER_RUNS_IT,
        expect=[Raises(UnsupportedError, rule="ops.table", match="all_reduce_coalesced")],
    ),
    Case(
        name="collectives.ranks-disagree",
        rules=["collectives.timeout"],
        setup=_pair_and_a_group_that_gives_up,
        args=["x"],
        program=_gather_on_rank_0_only,
        ranks=2,
        skip={"torch-eager": "eager raises gloo's timeout, which names no collective"},
        expect=[
            OnRank(0, Raises(SpecViolation, rule="collectives.timeout", match="all_gather")),
            OnRank(1, Values("out0", [4.0, 4.0])),
        ],
    ),
]
