"""ATen-valued ops: aten ops outside the table, whose values the spec leaves to ATen.

The table (`ops.py`) defines the values of the spec's core ops in numpy. Every other aten op gets
its values from ATen's own CPU kernel, while everything the spec is about stays the reference's,
derived from the op's schema (`specs/ops.md`):

- `r[ops.aten-values]`: an op whose schema neither writes nor aliases an argument runs ATen's CPU
  kernel on copies of the reference's values; its outputs are fresh storages with the sizes and
  strides the meta kernel gives (`r[ops.fresh-output]`), holding the kernel's values.
- `r[ops.aten-views]`: an op whose outputs are annotated `Tensor(a)` (and nothing `!`) is a view
  of its first argument; each output's layout is what the op's meta kernel gives for that
  argument's layout.
- `r[ops.aten-mutations]`: an op that writes arguments (`Tensor(a!)`) is its functional variant,
  followed by a `copy_` of each new value into the argument it writes; capture records it so.
- Derivatives are eager's formulas, traced (`aten_autograd.py`, `r[ops.aten-derivatives]`).

Conventions: `overload` is an OpOverload, `schema` its FunctionSchema, `bound` its arguments in
schema order (`optable.bind`), `meta` the value PyTorch's meta kernel gave at capture.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import unittest.mock
from collections.abc import Callable

import torch
import torch.utils._pytree as pytree
from torch._subclasses import fake_impls
from torch._subclasses.fake_tensor import in_kernel_invocation_manager
from torch.fx.experimental.proxy_tensor import get_proxy_mode

from aotspec.errors import InternalError, UnsupportedError

from .boundary import bytes_of, new_torch_storage, tensor_on
from .optable import (
    ATEN_VALUED,
    OP_TABLE,
    OpEntry,
    OpKind,
    Refusal,
    bind,
    call_with,
    derivative,
    qualified_name,
)
from .storage import Layout, SparseCoo, Storage, Tensor

aten = torch.ops.aten

#: The meta key capture gives a `copy_` that advances no version
#: (`r[ops.aten-mutations.versions]`).
QUIET_WRITE = "advances_no_version"

# ---------------------------------------------------------------- which ops


def _writes(argument) -> bool:
    return argument.alias_info is not None and argument.alias_info.is_write


def _kernel_name(schema) -> str:
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


#: r[ops.aten-views]: ops whose outputs share their input's storage in eager although their
#: schemas do not say so; autograd does not track them as views.
HIDDEN_VIEWS = frozenset({aten.unsafe_split.Tensor, aten.unsafe_split_with_sizes.default})


@functools.cache
def aten_entry(overload: torch._ops.OpOverload) -> OpEntry | Refusal:
    """The entry of an aten op outside the table, by what its schema says it does."""
    schema = overload._schema
    if torch.Tag.inplace_view in overload.tags:
        return Refusal("changes a tensor's sizes or strides in place", "ops.aten-mutations")
    if any(_writes(a) for a in schema.arguments):
        functional = functional_variant(overload)
        if functional is not None:  # capture writes it as `functional` and a copy_: not here
            return Refusal(
                "writes its arguments in a graph a compile pass made, which must hold no writes "
                f"(a captured program holds {qualified_name(functional)} and a copy_ instead)",
                "ops.aten-mutations",
            )
        return Refusal(
            "writes its arguments and has no functional variant to be written as",
            "ops.aten-mutations",
        )
    if not torch._C._dispatch_has_computed_kernel_for_dispatch_key(_kernel_name(schema), "CPU"):
        return Refusal("has no CPU kernel", "ops.aten-values")
    view = OpEntry(overload, OpKind.VIEW, functools.partial(meta_view, overload), "views input 0")
    if overload in HIDDEN_VIEWS:
        return view
    aliased = [r.alias_info for r in schema.returns if r.alias_info is not None]
    if not aliased:
        return OpEntry(overload, OpKind.ATEN, run_aten, "fresh output (ATen's values)")
    first = schema.arguments[0].alias_info
    if first is None or any(info.before_set != first.before_set for info in aliased):
        return Refusal("returns views of an argument other than its first", "ops.aten-views")
    return view


# ---------------------------------------------------------------- values


def run_aten(overload: torch._ops.OpOverload, meta, *bound, call: Callable = call_with):
    """r[ops.aten-values]: ATen's CPU kernel on copies of the arguments' storages; each output is
    copied into a fresh storage with the sizes and strides of `meta`, the meta kernel's output
    (`r[ops.fresh-output]`), in the kernel's dtype. `call(overload, arguments)` runs the kernel
    (a collective waits for the group too: `collectives.py`)."""
    copies: dict[int, torch.UntypedStorage] = {}

    def to_torch(value):
        if isinstance(value, SparseCoo):  # r[ops.aten-values.sparse-gradient]: from its parts
            indices, values = (to_torch(part) for part in value.parts)
            return torch.sparse_coo_tensor(
                indices, values, value.sizes, is_coalesced=value.coalesced
            )
        if not isinstance(value, Tensor):
            return value
        value.check_readable()
        s = value.storage
        if id(s) not in copies:
            copies[id(s)] = new_torch_storage(s)
        return tensor_on(copies[id(s)], value.layout)

    result = call(overload, pytree.tree_map(to_torch, list(bound)))
    if overload in WORKSPACES:  # r[ops.aten-values.workspace]
        meta = _with_kernel_sizes(meta, result, WORKSPACES[overload])
    return _fresh(result, meta)


#: Outputs whose sizes only the kernel knows (the meta kernel gives an empty one), by op: opaque
#: scratch bytes that only the op's backward reads.
WORKSPACES = {aten.mkldnn_rnn_layer.default: 3}


def _with_kernel_sizes(meta: tuple, result: tuple, k: int) -> tuple:
    """`meta` with output `k` laid out as the kernel gave it, or undefined as it gave it."""
    kernel = result[k]
    return (*meta[:k], None if kernel is None else kernel.to("meta"), *meta[k + 1 :])


def _fresh(result, meta):
    if isinstance(result, (tuple, list)):
        return type(result)(_fresh(r, m) for r, m in zip(result, meta, strict=True))
    if meta is None:  # an output the op leaves undefined (r[ops.fresh-output])
        return None
    if not isinstance(result, torch.Tensor):  # a number, as the kernel gives it
        return result
    if result.layout == torch.sparse_coo and result.shape == meta.shape:
        # r[ops.aten-values.sparse-gradient]: the kernel's parts, each on a fresh storage
        parts = (result._indices(), result._values())
        indices, values = (_fresh(part, part) for part in parts)
        return SparseCoo(indices, values, result.shape, result.is_coalesced())
    if result.layout != torch.strided or result.shape != meta.shape:
        # r[ops.aten-values]: the storage model holds strided tensors of the sizes capture saw
        raise UnsupportedError(
            f"an ATen-valued op gave a {result.layout} output of sizes {list(result.shape)} "
            f"where its meta kernel gave a strided one of sizes {list(meta.shape)}",
            rule="ops.aten-values",
            fix="compute this part outside the compiled function",
        )
    # The kernel's dtype: under autocast, batch norm's saved statistics stay float32 where its
    # meta kernel says bfloat16.
    # r[ops.fresh-output.meta-layout]: the meta kernel's strides, whatever the kernel's were
    layout = Layout(result.dtype, meta.shape, meta.stride(), meta.storage_offset())
    s = Storage.zeros(layout.extent_bytes())
    st = new_torch_storage(s)
    tensor_on(st, layout).copy_(result)
    s.buffer = bytes_of(st)
    return Tensor(s, layout)


def meta_view(overload: torch._ops.OpOverload, layout: Layout, *rest):
    """r[ops.aten-views]: the output layouts the meta kernel gives for an input laid out as
    `layout` (the other arguments are what they are)."""
    storage = torch.empty(layout.extent_elements(), dtype=layout.dtype, device="meta")
    base = storage.as_strided(layout.sizes, layout.strides, layout.offset)
    # r[memory.layout.conj-neg]: the meta kernel says whether the view keeps, drops or refuses
    # the input's bits (`_conj` flips one, `view_as_real` refuses a conjugate)
    if layout.conj:
        base = base._conj()
    if layout.neg:
        base = base._neg_view()
    result = call_with(overload, [base, *rest])
    if isinstance(result, (tuple, list)):
        return tuple(Layout.of(out) for out in result)
    return Layout.of(result)


# ---------------------------------------------------------------- mutations


def _plain_type(argument) -> str:
    """The argument's type without its alias annotation: `Tensor(a!)` and `Tensor` are alike."""
    return str(argument.type)


def _signature(arguments) -> list[tuple[str, str]]:
    return [(a.name, _plain_type(a)) for a in arguments]


def functional_variant(overload: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The op that computes what `overload` writes, without writing: the overload of `foo` (for
    `foo_` and `foo.out`) or of `foo_functional` whose arguments are `overload`'s, less its out=
    arguments, and whose returns are `overload`'s fresh returns followed by one new value per
    written argument (PyTorch's functionalization pairs them so)."""
    schema = overload._schema
    written = [a for a in schema.arguments if _writes(a)]
    kept = [a for a in schema.arguments if not (_writes(a) and a.kwarg_only)]
    fresh_returns = [r for r in schema.returns if r.alias_info is None]
    base = schema.name.removeprefix("aten::").removesuffix("_")
    for candidate in (base, f"{base}_functional"):
        packet = getattr(aten, candidate, None)
        if packet is None:
            continue
        for overload_name in packet.overloads():
            functional = getattr(packet, overload_name)
            other = functional._schema
            if other.is_mutable or _signature(other.arguments) != _signature(kept):
                continue
            if len(other.returns) == len(fresh_returns) + len(written):
                return functional
    return None


def _write_back(overload, functional, *args, **kwargs):
    """r[ops.aten-mutations]: `overload` as its functional variant, then a copy_ of each new value
    into the argument it is for; returns what `overload` returns (its written arguments where its
    schema says it returns them)."""
    schema = overload._schema
    bound = bind(schema, args, kwargs)
    positional, keyword, written = [], {}, []
    for argument, value in zip(schema.arguments, bound, strict=True):
        if _writes(argument):
            written.append((argument, value))
            if argument.kwarg_only:  # an out= argument: the functional variant has none
                continue
        if argument.kwarg_only:
            keyword[argument.name] = value
        else:
            positional.append(value)
    results = functional(*positional, **keyword)
    results = list(results) if len(functional._schema.returns) > 1 else [results]
    fresh = iter(results[: len(results) - len(written)])
    news = results[len(results) - len(written) :]
    foreach = _is_foreach(schema)
    for (argument, target), new in zip(written, news, strict=True):
        quiet = not _advances_version(schema, argument)
        for t, value in zip(pytree.tree_leaves(target), pytree.tree_leaves(new), strict=True):
            _check_out_shape(overload, argument, t, value)
            t.copy_(value)
            if quiet:
                mark_quiet_write()  # r[ops.aten-mutations.versions]
            elif foreach:
                # r[functionalize.epilogue.version]: eager's kernel advances each tensor of the
                # list it writes; traced, this copy_ runs below autograd and advances none
                torch.autograd.graph.increment_version(t)
    by_alias = {frozenset(a.alias_info.before_set): value for a, value in written}
    returns = [
        next(fresh) if r.alias_info is None else by_alias[frozenset(r.alias_info.before_set)]
        for r in schema.returns
    ]
    if not returns:
        return None
    return returns[0] if len(returns) == 1 else tuple(returns)


def _advances_version(schema, argument) -> bool:
    """r[ops.aten-mutations.versions]: eager's op advances the version of an argument it returns,
    and of the tensors of the lists a `_foreach_` op writes; its other writes advance none."""
    returned = {frozenset(r.alias_info.before_set) for r in schema.returns if r.alias_info}
    return (
        frozenset(argument.alias_info.before_set) in returned
        or _is_foreach(schema)
    )


def _is_foreach(schema) -> bool:
    return schema.name.startswith("aten::_foreach_")


def mark_quiet_write() -> None:
    """Marks the `copy_` just traced as a write that advances no version
    (`r[ops.aten-mutations.versions]`): functionalization and the eager interpreter read it."""
    node = next(reversed(get_proxy_mode().tracer.graph.nodes))
    if node.target is not aten.copy_.default:
        raise InternalError(f"the last node traced is {node.format_node()}, not the copy_")
    node.meta[QUIET_WRITE] = True


def advances_version(node: torch.fx.Node) -> bool:
    """Whether the captured write `node` advances its tensor's version, as eager's does."""
    return not node.meta.get(QUIET_WRITE, False)


def _check_out_shape(overload, argument, target: torch.Tensor, value: torch.Tensor) -> None:
    """An out= tensor of another shape would be resized by eager; the spec does not say how."""
    if target.shape != value.shape:
        raise UnsupportedError(
            f"op {qualified_name(overload)} writes a result of sizes {list(value.shape)} into "
            f"argument {argument.name} of sizes {list(target.shape)}, which eager would resize",
            rule="ops.aten-mutations",
            fix="pass an out= tensor of the result's sizes",
        )


def _native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """r[ops.aten-mutations.batch-norm]: native_batch_norm writes the running statistics in
    training mode although its schema does not say so; it is the _native_batch_norm_legit op that
    says so (the same kernel)."""
    if running_mean is None:
        return aten._native_batch_norm_legit.no_stats(
            input, weight, bias, training, momentum, eps
        )
    if training:
        return aten._native_batch_norm_legit(
            input, weight, bias, running_mean, running_var, training, momentum, eps
        )
    return aten._native_batch_norm_legit_no_training(
        input, weight, bias, running_mean, running_var, momentum, eps
    )


def _native_batch_norm_legit(input, weight, bias, running_mean, running_var, *rest):
    """r[ops.aten-mutations.batch-norm]: in eval mode the kernel leaves the running statistics
    as they are, although its schema says it writes them: it is the op that writes nothing."""
    training, momentum, eps = rest
    if not training:
        return aten._native_batch_norm_legit_no_training(
            input, weight, bias, running_mean, running_var, momentum, eps
        )
    legit = aten._native_batch_norm_legit.default
    functional = aten._native_batch_norm_legit_functional.default
    return _write_back(legit, functional, input, weight, bias, running_mean, running_var, *rest)


@derivative(aten._native_batch_norm_legit_functional.default)
def batch_norm_backward(
    grads,
    outs,
    input,
    weight,
    bias,
    running_mean,
    running_var,
    training,
    momentum,
    eps,
    *,
    needed=None,
):
    """r[ops.aten-mutations.batch-norm]: eager's formula (native_batch_norm_backward), except that
    in training mode it does not read the running statistics, which the kernel ignores there: the
    op writes them, and eager's native_batch_norm, whose schema hides that write, saves them
    without a version check that the write would fail."""
    grad = grads[0]
    if grad is None:
        return [None] * 8
    _, save_mean, save_invstd, _, _ = outs
    stats = (None, None) if training else (running_mean, running_var)
    wants = iter(needed) if needed is not None else itertools.repeat(True)
    mask = [next(wants)] + [t is not None and next(wants) for t in (weight, bias)]
    input_grad, weight_grad, bias_grad = aten.native_batch_norm_backward(
        grad, input, weight, *stats, save_mean, save_invstd, training, eps, mask
    )
    return [input_grad, weight_grad, bias_grad, None, None, None, None, None]


def _bernoulli_(self, p=0.5, *, generator=None):
    """r[ops.random]: `x.bernoulli_(p)` draws in the order of x's memory, its functional variant
    `bernoulli.p` in the order of its own contiguous result: so the draw runs on x's dims
    permuted into memory order, and is permuted back. It reads only x's sizes (`detach`, where x
    has a history to cut: dropout's fresh `empty_like` has none)."""
    sizes = aten.detach(self) if self.requires_grad else self
    order = sorted(range(self.dim()), key=lambda d: (-self.stride(d), -self.shape[d]))
    if order == sorted(order):  # x's dims are in memory order already: no permutation
        self.copy_(aten.bernoulli.p(sizes, p, generator=generator))
        return self
    inverse = [order.index(d) for d in range(self.dim())]
    drawn = aten.bernoulli.p(aten.permute(sizes, order), p, generator=generator)
    self.copy_(aten.permute(drawn, inverse))
    return self


def _resize_(self, size, memory_format=None):
    """r[aliasing.resize.relayout]: `t.resize_(size)` relays `t` out contiguously (in
    `memory_format`) at its storage offset, on its own storage, which first grows to the new
    layout's extent where it is smaller (`r[aliasing.resize.grows-storage]`), as eager's kernel
    grows the storage and then restrides: a storage resize and `as_strided_`."""
    if memory_format is None and tuple(size) == tuple(self.shape):
        return self  # r[aliasing.resize.same-sizes]
    if memory_format in (torch.channels_last, torch.channels_last_3d):
        strides = torch._prims_common.make_channels_last_strides_for(size)
    else:
        strides = torch._prims_common.make_contiguous_strides_for(size)
    offset = self.storage_offset()
    layout = Layout(self.dtype, tuple(size), tuple(strides), offset)
    if layout.extent_bytes() > self.untyped_storage().nbytes():
        # r[aliasing.resize.grows-storage]
        torch.ops.inductor.resize_storage_bytes_(self, layout.extent_bytes())
    return aten.as_strided_(self, size, strides, offset)  # r[aliasing.resize.relayout]


def _resize_as_(self, the_template, memory_format=None):
    """r[aliasing.resize.relayout]: `resize_` to the template's sizes (its memory format only
    when asked for with `torch.preserve_format`)."""
    if memory_format is torch.preserve_format:
        memory_format = torch._prims_common.suggest_memory_format(the_template)
    return _resize_(self, the_template.shape, memory_format)


def _fused_moving_avg_obs_fq_helper(
    x,
    observer_on,
    fake_quant_on,
    running_min,
    running_max,
    scale,
    zero_point,
    averaging_const,
    quant_min,
    quant_max,
    ch_axis,
    per_row_fake_quant=False,
    symmetric_quant=False,
):
    """r[ops.aten-mutations.observer-state]: the observer's kernel first gives empty per-channel
    state one element per channel (running_min +inf, running_max -inf, scale and zero_point
    unspecified until written), which its schema and its functional variant's meta kernel do not
    say: so capture records those resizes, then the op as its functional variant and copy_."""
    if running_min.numel() == 0:
        if not per_row_fake_quant:  # eager's kernel reads past the empty state
            raise UnsupportedError(
                "op aten._fused_moving_avg_obs_fq_helper.default with per_row_fake_quant=False "
                "reads its empty running_min",
                rule="ops.aten-mutations.observer-state",
                fix="pass running_min and running_max of one element",
            )
        channels = (x.shape[ch_axis],)
        _resize_(running_min, channels).fill_(float("inf"))  # r[ops.aten-mutations.observer-state]
        _resize_(running_max, channels).fill_(float("-inf"))
        _resize_(scale, channels)
        _resize_(zero_point, channels)
    helper = aten._fused_moving_avg_obs_fq_helper.default
    functional = aten._fused_moving_avg_obs_fq_helper_functional.default
    state = (running_min, running_max, scale, zero_point)
    rest = (averaging_const, quant_min, quant_max, ch_axis, per_row_fake_quant, symmetric_quant)
    return _write_back(helper, functional, x, observer_on, fake_quant_on, *state, *rest)


def _overload_of(schema) -> torch._ops.OpOverload:
    packet = getattr(aten, schema.name.removeprefix("aten::"))
    return getattr(packet, schema.overload_name or "default")


@functools.cache
def mutation_decompositions() -> dict[torch._ops.OpOverload, Callable]:
    """For capture: each aten op that writes its arguments, outside the table, as its functional
    variant and copy_ (`r[ops.aten-mutations]`)."""
    table: dict[torch._ops.OpOverload, Callable] = {
        aten.native_batch_norm.default: _native_batch_norm,
        aten._native_batch_norm_legit.default: _native_batch_norm_legit,
        aten.bernoulli_.float: _bernoulli_,
        aten.resize_.default: _resize_,
        aten.resize_as_.default: _resize_as_,
        aten._fused_moving_avg_obs_fq_helper.default: _fused_moving_avg_obs_fq_helper,
    }
    for schema in torch._C._jit_get_all_schemas():
        if not (schema.name.startswith("aten::") and schema.is_mutable):
            continue
        overload = _overload_of(schema)
        if overload in table or overload in OP_TABLE or torch.Tag.inplace_view in overload.tags:
            continue
        if "resize" in schema.name or schema.name == "aten::set_":
            continue  # they change sizes and storages, which a copy_ does not
        functional = functional_variant(overload)
        if functional is not None:
            table[overload] = functools.partial(_write_back, overload, functional)
    return table


ATEN_VALUED.entry = aten_entry


# ---------------------------------------------------------------- shapes fake tensors refuse


def _ctc_loss_shapes(fake_mode, func, *args, **kwargs):
    """r[capture.data-dependent.shapes-from-arguments]: `_ctc_loss` with lengths given as
    numbers has its meta kernel's shapes (log_alpha's sizes come from the lengths)."""
    with in_kernel_invocation_manager(fake_mode):
        out = func(*args, **kwargs)
    device = args[0].fake_device
    convert = fake_mode.fake_tensor_converter.from_meta_and_device
    return tuple(convert(fake_mode, t, device) for t in out)


def _lstsq_shapes(fake_mode, func, a, b, rcond=None, *, driver=None):
    """r[capture.data-dependent.shapes-from-arguments]: `linalg_lstsq`'s outputs as its kernel
    lays them out, for the drivers whose sizes do not depend on the rank it finds; NotImplemented
    (fake tensors' refusal) for the others."""
    m, n = a.shape[-2:]
    driver = driver or ("gelsy" if a.device.type == "cpu" else "gels")
    if driver in ("gelsd", "gelss") and m > n:
        return NotImplemented  # residuals only where the matrix has full rank
    vector = b.dim() == 1 or (b.dim() == a.dim() - 1 and b.shape == a.shape[:-1])
    k = 1 if vector else b.shape[-1]
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-1] if vector else b.shape[:-2])
    rows = max(m, n)
    real = a.real.dtype if a.is_complex() else a.dtype
    with fake_mode:
        # the kernel solves in place in a (*batch, rows, k) buffer, column-major per matrix
        buffer = torch.empty((*batch, k, rows), dtype=a.dtype, device=a.device).mT
        solution = buffer[..., :n, 0] if vector else buffer[..., :n, :]
        residuals = (
            torch.empty((*batch, k), dtype=real, device=a.device)
            if driver == "gels" and m > n
            else torch.empty(0, dtype=real, device=a.device)
        )
        rank = torch.empty(0 if driver == "gels" else batch, dtype=torch.int64, device=a.device)
        singular = (
            torch.empty((*batch, min(m, n)), dtype=real, device=a.device)
            if driver in ("gelsd", "gelss")
            else torch.empty(0, dtype=real, device=a.device)
        )
    return solution, residuals, rank, singular


#: r[capture.data-dependent.shapes-from-arguments]: ops PyTorch's fake tensors refuse (tagged
#: dynamic_output_shape) whose shapes follow from their arguments, with the fake rule that gives
#: them.
_SHAPES_FROM_ARGUMENTS = {
    aten._ctc_loss.default: _ctc_loss_shapes,
    aten.linalg_lstsq.default: _lstsq_shapes,
}


@contextlib.contextmanager
def shapes_from_arguments():
    """While tracing on fake tensors: the fake rules of `_SHAPES_FROM_ARGUMENTS`, for the trace
    alone (PyTorch's own compilers in the same process keep theirs)."""
    with unittest.mock.patch.dict(fake_impls.op_implementations_dict, _SHAPES_FROM_ARGUMENTS):
        yield
