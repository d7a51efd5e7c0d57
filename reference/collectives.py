"""Functional collectives: how a program communicates with the other ranks of a process group
(`specs/collectives.md`).

`torch.distributed._functional_collectives` and Dynamo write a collective as two ops of the
`_c10d_functional` namespace: the collective itself (`all_gather_into_tensor`,
`reduce_scatter_tensor`, `all_reduce`), which returns a new tensor, and `wait_tensor`, which
waits for it and returns it. The values come from the real process group the op names
(`r[collectives.values]`); what the spec is about stays the reference's: a collective's output
is fresh and it only reads its input (`r[collectives.fresh-output]`), `wait_tensor` returns its
input (`r[collectives.wait]`), and the derivatives are eager's (`r[collectives.derivatives]`).

Both backends run a collective through `communicate`, on the real group: the reference on a
copy of its storage model's values, the fast backend on its own tensors. Either way the
collective has completed when the op returns, and a collective that does not complete within
the group's timeout raises an error naming it (`r[collectives.timeout]`).

Conventions: `group_name` is the name a group is registered under (or, with Dynamo's
`compile_on_one_rank`, the group itself), `group_size` the number of ranks the op is told the
group has, `bound` an op's arguments in schema order (`optable.bind`).
"""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives  # noqa: F401  (eager's derivatives)
import torch.fx

from aotspec.errors import SpecViolation, UnsupportedError

from .aten import run_aten
from .ops import pass_backward
from .optable import bind, call_with, collective, derivative, qualified_name, view
from .storage import Layout

c10d = torch.ops._c10d_functional

ALL_GATHER = c10d.all_gather_into_tensor.default
REDUCE_SCATTER = c10d.reduce_scatter_tensor.default
ALL_REDUCE = c10d.all_reduce.default
WAIT = c10d.wait_tensor.default
#: The collectives of the table; `wait_tensor` is not one (it communicates nothing).
COLLECTIVES = frozenset({ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE})


def communicates(node: torch.fx.Node) -> bool:
    """r[collectives.program-order]: a collective runs, in its place in the program, even when
    nothing uses its value: the other ranks wait for it."""
    return node.op == "call_function" and node.target in COLLECTIVES


def is_impure(node: torch.fx.Node) -> bool:
    """What dead code elimination keeps: fx's impure nodes, and the collectives."""
    return node.is_impure() or communicates(node)


# ---------------------------------------------------------------- the group


def group_of(group_name) -> dist.ProcessGroup | None:
    """The process group `group_name` names in this process, or None when none does."""
    if isinstance(group_name, dist.ProcessGroup):
        return group_name
    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        return dist.distributed_c10d._resolve_process_group(group_name)
    except RuntimeError:  # no group is registered under that name
        return None


def check_collective(node: torch.fx.Node, where: str) -> None:
    """Capture's checks of a node of a collective or of `wait_tensor` (`where` names the user's
    line), before any input is touched."""
    if node.target is WAIT:
        _check_wait(node, where)
    elif node.target in COLLECTIVES:
        bound = bind(node.target._schema, node.args, node.kwargs)
        values = [v.meta["val"] if isinstance(v, torch.fx.Node) else v for v in bound]
        _check_group(node.target, values, where)


def _check_wait(node: torch.fx.Node, where: str) -> None:
    """r[collectives.wait]: `wait_tensor` returns its input as it is, but PyTorch's meta kernel
    returns a dense tensor: the trace would go on with a layout eager does not have."""
    given, traced = node.args[0].meta["val"], node.meta["val"]
    if not Layout.of(given).addresses_like(Layout.of(traced)):
        raise UnsupportedError(
            f"wait_tensor ({where}) waits for a tensor laid out with strides {given.stride()} "
            f"and offset {given.storage_offset()}, which it would return as it is, while its "
            f"meta kernel gives strides {traced.stride()} and offset {traced.storage_offset()}",
            rule="collectives.wait",
            fix="wait for the collective's own output, and take views after waiting",
        )


def _check_group(overload: torch._ops.OpOverload, bound: list, where: str) -> None:
    """r[collectives.group]: the collective's group exists in this process, has as many ranks as
    the op is told, and a reduce-scatter's input splits evenly among them; `bound` holds the
    arguments' meta values."""
    group_name = bound[-1]
    group = group_of(group_name)
    name = f"collective {qualified_name(overload)} ({where})"
    if group is None:
        raise UnsupportedError(
            f"{name} names process group {group_name!r}, which does not exist in this process",
            rule="collectives.group",
            fix="call torch.distributed.init_process_group (or new_group) before the call, and "
            "pass the group itself or its group_name to the collective",
        )
    if overload is ALL_REDUCE:
        return
    group_size = bound[-2]
    if group_size != group.size():
        raise UnsupportedError(
            f"{name} is told group {group_name!r} has {group_size} ranks; it has {group.size()}",
            rule="collectives.group",
            fix="pass the group's own size (torch.distributed.get_world_size(group)), or call "
            "the functional collectives, which pass it",
        )
    rows = bound[0].shape[0] if bound[0].dim() else 1
    if overload is REDUCE_SCATTER and rows % group_size:
        raise UnsupportedError(
            f"{name} scatters an input of {rows} rows over {group_size} ranks",
            rule="collectives.group",
            fix="reduce-scatter an input whose first dimension is a multiple of the group's size",
        )


# ---------------------------------------------------------------- values


def communicate(overload: torch._ops.OpOverload, arguments: list) -> torch.Tensor:
    """r[collectives.values]: `overload` on the real process group, on the values of its input
    read in row-major order, waited for; a collective that does not complete raises naming
    itself (`r[collectives.timeout]`)."""
    tensor, *rest = arguments
    group_name = arguments[-1]
    try:
        return c10d.wait_tensor(call_with(overload, [tensor.contiguous(), *rest]))
    except RuntimeError as error:
        group = group_of(group_name)
        ranks = f"{group.size()} ranks" if group is not None else "gone"
        name = f"collective {qualified_name(overload)} over group {group_name!r} ({ranks})"
        timed_out = any(words in str(error).lower() for words in ("timed out", "timeout"))
        why = "within the group's timeout" if timed_out else "(a rank of the group is gone)"
        raise SpecViolation(
            f"{name} did not complete {why}: the ranks disagree on the program (another rank "
            f"ran another collective, or none); gloo says: {error}",
            rule="collectives.timeout",
            fix="run the same program on every rank of the group, so that each runs the same "
            "collectives on inputs of the same sizes in the same order",
        ) from error


def on_group(overload: torch._ops.OpOverload):
    """`overload` as the fast backend calls it: with its schema's arguments, by `communicate`."""
    return functools.partial(_communicate_called, overload)


def _communicate_called(overload, *args, **kwargs) -> torch.Tensor:
    return communicate(overload, bind(overload._schema, args, kwargs))


@collective(ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE)
def run_collective(overload: torch._ops.OpOverload, meta, *bound):
    """r[collectives.fresh-output]: the group's values, from copies of the reference's values,
    in a fresh storage laid out as the meta kernel says; the input is only read."""
    return run_aten(overload, meta, *bound, call=communicate)


@view(WAIT)
def wait_tensor(layout: Layout) -> Layout:
    # r[collectives.wait]: the collective completed when it ran; waiting returns the tensor
    return layout


# ---------------------------------------------------------------- derivatives
#
# r[collectives.derivatives]: eager's formulas (torch.distributed._functional_collectives
# registers them): each gradient is the transposed collective over the same group, waited for.


def _sum_only(overload, reduce_op: str) -> None:
    if reduce_op.lower() != "sum":
        # eager raises this when the backward runs; here the backward is traced at compile time
        raise RuntimeError(
            f"{overload._schema.name.split('::')[1]} backward only supports 'sum' reduction, "
            f"got '{reduce_op.lower()}'"
        )


@derivative(ALL_GATHER)
def all_gather_into_tensor_backward(grad, out, input, group_size, group_name):
    scattered = REDUCE_SCATTER(grad.contiguous(), "sum", group_size, group_name)
    return WAIT(scattered), None, None


@derivative(REDUCE_SCATTER)
def reduce_scatter_tensor_backward(grad, out, input, reduce_op, group_size, group_name):
    _sum_only(REDUCE_SCATTER, reduce_op)
    gathered = ALL_GATHER(grad.contiguous(), group_size, group_name)
    return WAIT(gathered), None, None, None


@derivative(ALL_REDUCE)
def all_reduce_backward(grad, out, input, reduce_op, group_name):
    _sum_only(ALL_REDUCE, reduce_op)
    reduced = ALL_REDUCE(grad.contiguous(), reduce_op.lower(), group_name)
    return WAIT(reduced), None, None


derivative(WAIT)(pass_backward)
