"""Eager's derivatives for ATen-valued ops (`r[ops.aten-derivatives]`).

An aten op outside the table differentiates as eager autograd differentiates it: its backward is
traced once per signature, by running the op on fake tensors that require grad and asking
`torch.autograd.grad` for the gradients, under `make_fx`. The trace records the backward ops
that the op's formula in PyTorch's derivatives.yaml calls (`convolution_backward`,
`native_batch_norm_backward`, ...) and which of the op's arguments and outputs they read: so
what autograd saves for the op is what eager saves (`r[hooks.eager.saved-set]`), and its
gradients are laid out as eager lays them out. `EagerDerivative` replays that backward as a
derivative rule (`optable.derivative`), on whatever the rule is given; the backward ops are
ATen-valued ops themselves, or ops of the table.

Which outputs carry a gradient is eager's answer too (`differentiable_outputs`): integer outputs
never do, and an op may declare others not differentiable (batch norm's saved statistics).

Conventions: `leaves` is an op's arguments flattened by pytree, a `Slot` for each tensor and a
keyed constant otherwise (`traced_rules.py`); `needed[k]` says whether tensor leaf k wants a
gradient.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from operator import getitem

import torch
import torch.fx
import torch.utils._pytree as pytree
from attrs import frozen
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode
from torch.utils._python_dispatch import _disable_current_modes

from aotspec.errors import InternalError, UnsupportedError
from aotspec.versions import make_fx_keeping_detach

from .aten import shapes_from_arguments
from .graph import placeholders
from .optable import ATEN_VALUED, call_with, qualified_name
from .storage import Layout, Tensor, carries_gradients
from .symbols import holds_symbols
from .traced_rules import Slot, at_example_sizes, example, key_of, leaves_hold_symbols

aten = torch.ops.aten


def signature(bound) -> tuple[pytree.TreeSpec, tuple]:
    """The (spec, leaves) of an op's arguments: torch tensors and reference cells by layout."""
    leaves, spec = pytree.tree_flatten(list(bound))

    def key(leaf):
        if isinstance(leaf, torch.Tensor):
            return Slot(Layout.of(leaf))
        if isinstance(leaf, Tensor):
            return Slot(leaf.layout)
        return key_of(leaf)

    return spec, tuple(key(leaf) for leaf in leaves)


def _arguments(spec: pytree.TreeSpec, leaves: tuple, tensors) -> list:
    """The op's arguments with `tensors` at the Slots of `leaves`."""
    it = iter(tensors)
    values = [next(it) if isinstance(leaf, Slot) else leaf.value for leaf in leaves]
    return pytree.tree_unflatten(values, spec)


def _differentiable_dtype(leaf) -> bool:
    return isinstance(leaf, Slot) and carries_gradients(leaf.layout.dtype)


def differentiable_outputs(
    overload, spec: pytree.TreeSpec, leaves: tuple, needed: tuple[bool, ...], outputs: int
) -> tuple[bool, ...]:
    """Per output leaf of the op (`outputs` of them), whether eager autograd gives it a gradient
    when the `needed` floating-point tensor leaves require grad; asked of eager once per op,
    argument structure, tensor dtypes and ranks, constants and number of outputs (`_CARRIED`),
    at the first sizes asked. The number of outputs is in the key, as sizes decide it for some
    ops (`split`'s, `unbind`'s)."""
    key = (overload, spec, tuple(map(_without_sizes, leaves)), needed, outputs)
    if key not in _CARRIED:
        _CARRIED[key] = _asked_of_eager(overload, spec, at_example_sizes(leaves), needed)
    return _CARRIED[key]


#: Which outputs carry a gradient, by op, argument structure, tensor dtypes and ranks, constants,
#: the tensors that need one and the number of outputs: not by sizes, which eager autograd's
#: answer does not otherwise read
#: (`r[autograd.requires-grad.op-outputs]`), so a symbolic trace asks no question its program's
#: trace at one size asked (`r[sizes.symbolic.decisions]`).
_CARRIED: dict[tuple, tuple[bool, ...]] = {}


def _without_sizes(leaf):
    """A signature's leaf with a tensor's sizes, strides and offset left out."""
    if isinstance(leaf, Slot):
        layout = leaf.layout
        return (layout.dtype, len(layout.sizes), layout.conj, layout.neg)
    return at_example_sizes((leaf,))[0]


def _asked_of_eager(
    overload, spec: pytree.TreeSpec, leaves: tuple, needed: tuple[bool, ...]
) -> tuple[bool, ...]:
    """Eager autograd's answer, which it gives above the kernels, whatever the device: asked on
    meta tensors (a tenth of the time fake tensors take, cold), and on fake tensors, which run
    CPU kernels where an op has no meta kernel, where meta tensors fail."""
    with (
        _disable_current_modes(),
        shapes_from_arguments(),  # r[capture.data-dependent.shapes-from-arguments]
        torch.enable_grad(),
        _hooks_silenced(),
    ):
        try:
            return _outputs_requiring_grad(overload, spec, leaves, needed, device="meta")
        except Exception:  # noqa: BLE001 (no meta kernel, say: fakes fail or answer as they do)
            with _question_mode():
                return _outputs_requiring_grad(overload, spec, leaves, needed, device=None)


def _outputs_requiring_grad(
    overload, spec: pytree.TreeSpec, leaves: tuple, needed: tuple[bool, ...], device
) -> tuple[bool, ...]:
    """Which output leaves of the op require grad when it runs on examples on `device` (the
    default device: None) whose `needed` floating-point leaves require grad."""
    slots = [leaf for leaf in leaves if isinstance(leaf, Slot)]
    tensors = [
        example(slot.layout, device).detach().requires_grad_(wants and _differentiable_dtype(slot))
        for slot, wants in zip(slots, needed, strict=True)
    ]
    out = call_with(overload, _arguments(spec, leaves, tensors))
    return tuple(
        isinstance(leaf, torch.Tensor) and leaf.requires_grad for leaf in pytree.tree_leaves(out)
    )


@functools.cache
def _question_mode() -> FakeTensorMode:
    """The fake tensor mode `_asked_of_eager` asks its questions in: one for them all, as the
    answers read no state of it (its examples are made inside), and making a mode takes a stack
    trace."""
    return FakeTensorMode()


@contextlib.contextmanager
def _hooks_silenced():
    """The caller's saved-tensor hooks see what the program saves, not what autograd saves while
    `differentiable_outputs` asks it a question."""
    previous = torch._C._autograd._saved_tensors_hooks_get_disabled_error_message()
    torch._C._autograd._saved_tensors_hooks_disable("asking eager autograd", False)
    try:
        yield
    finally:
        if previous is None:
            torch._C._autograd._saved_tensors_hooks_enable()
        else:
            torch._C._autograd._saved_tensors_hooks_disable(previous, False)


def output_gradients(
    overload, bound, needed: tuple[bool, ...], outputs: int
) -> tuple[bool, ...] | None:
    """For an aten op whose `needed` tensor leaves need a gradient, which of its `outputs`
    output leaves eager autograd gives one (`r[autograd.requires-grad.op-outputs]`: the table's
    ops too, so native_layer_norm's mean and rstd get none); None for custom ops, whose
    floating-point outputs all carry one."""
    if not (isinstance(overload, torch._ops.OpOverload) and overload.namespace == "aten"):
        return None
    if not any(needed):
        return ()
    spec, leaves = signature(bound)
    # r[sizes.symbolic.decisions]: which outputs carry a gradient depends on the op, the dtypes
    # and which arguments need one, not on sizes: asked at the traced example sizes
    return differentiable_outputs(overload, spec, leaves, needed, outputs)


def _eigenvector_phase_check(formula: str) -> Callable:
    """r[ops.aten-derivatives.value-checks.phases]: eager's check, in `formula`, that the loss
    does not depend on the phases of complex eigenvectors: the imaginary part of the diagonal of
    Vᴴ·gV within 1e-2 of 0 (an `allclose`), which eager skips on tensor subclasses, fake tensors
    included, so that tracing the formula records no check."""

    def check(outs, grads) -> None:
        vectors, grad_vectors = outs[1], grads[1]
        if grad_vectors is None or not vectors.is_complex():
            return
        projected = torch.matmul(vectors.mH, grad_vectors).diagonal(0, -2, -1).imag
        # allclose(projected, 0, rtol=1e-2, atol=1e-2); NaN is close to nothing
        passes = (projected.abs() <= 1e-2).all()
        # r[ops.aten-derivatives.value-checks.phases]
        aten._assert_async.msg(passes, PHASE_CHECK_MESSAGE.format(formula=formula))

    return check


#: Eager's message when the eigenvector phase check fails, as `linalg_eig_backward` words it.
PHASE_CHECK_MESSAGE = (
    "{formula}: The eigenvectors in the complex case are specified up to multiplication by "
    "e^{{i phi}}. The specified loss function depends on this quantity, so it is ill-defined."
)

#: Ops whose eager derivative checks values but skips the check on tensor subclasses, with the
#: check made again on the values when the backward runs; svd's check raises when traced
#: (r[ops.aten-derivatives.value-checks]).
VALUE_CHECKS_SKIPPED_BY_TRACING: dict[torch._ops.OpOverload, Callable] = {
    aten.linalg_eig.default: _eigenvector_phase_check("linalg_eig_backward"),
    aten._linalg_eigh.default: _eigenvector_phase_check("linalg_eigh_backward"),
}


@frozen
class _Backward:
    """The op's backward for one signature, as eager autograd traced it."""

    graph: torch.fx.Graph
    #: The op's own node in `graph`; the nodes after it that read no grad are its backward too.
    forward: torch.fx.Node
    #: Placeholders: one per output gradient given, then one per tensor leaf of the arguments.
    grads: tuple[torch.fx.Node, ...]
    arguments: tuple[torch.fx.Node, ...]
    #: The tensor leaves (positions) whose gradient each graph output is.
    gives: tuple[int, ...]


def _backward_traced(
    overload, spec, leaves, grads: tuple, needed: tuple[bool, ...], fake_mode=None
) -> _Backward:
    """Trace eager autograd's backward of `overload` for arguments laid out as `leaves`, the
    output gradients laid out as `grads` (a Layout, or None where an output gets none), giving the
    gradients of the `needed` tensor leaves. Symbolic layouts are traced on the `fake_mode` of
    their symbols."""
    slots = [leaf for leaf in leaves if isinstance(leaf, Slot)]
    n_grads = sum(g is not None for g in grads)
    gives: list[int] = []

    def joint(*tensors):
        given = iter(tensors[:n_grads])
        grad_of = [None if g is None else next(given) for g in grads]
        with torch.enable_grad():
            inputs = [
                t.detach().requires_grad_(wanted)
                for t, wanted in zip(tensors[n_grads:], needed, strict=True)
            ]
            out = call_with(overload, _arguments(spec, leaves, inputs))
            outs = out if isinstance(out, (tuple, list)) else [out]
            pairs = [
                (o, g)
                for o, g in zip(outs, grad_of, strict=True)
                if g is not None and isinstance(o, torch.Tensor) and o.requires_grad
            ]
            wanted = [k for k, t in enumerate(inputs) if t.requires_grad]
            if not pairs or not wanted:
                return []
            results = torch.autograd.grad(
                [o for o, _ in pairs],
                [inputs[k] for k in wanted],
                [g for _, g in pairs],
                allow_unused=True,
            )
        gives.extend(k for k, r in zip(wanted, results, strict=True) if r is not None)
        check = VALUE_CHECKS_SKIPPED_BY_TRACING.get(overload)
        if check is not None:
            check(outs, grad_of)
        return [r for r in results if r is not None]

    # r[capture.data-dependent.shapes-from-arguments]: the op runs again in the trace
    with _disable_current_modes(), shapes_from_arguments():
        # made outside the caller's trace (which would record them) on a fake mode of their own,
        # or their symbols' (r[sizes.symbolic.eager-derivatives])
        with fake_mode or FakeTensorMode():
            grad_examples = [example(g) for g in grads if g is not None]
            examples = grad_examples + [example(s.layout) for s in slots]
        try:
            traced = make_fx_keeping_detach(joint, tracing_mode="fake")(*examples)
        except DataDependentOutputException as error:
            # r[ops.aten-derivatives.value-checks]
            raise UnsupportedError(
                f"eager's derivative of {qualified_name(overload)} decides on tensor values "
                f"({error.func}), which tracing it on tensors without values cannot",
                rule="ops.aten-derivatives.value-checks",
                fix="take the gradient of this op outside the compiled function, or detach its "
                "inputs",
            ) from error
        module = _functional(overload, traced, examples)
    graph = module.graph
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    forward = next((node for node in graph.nodes if node.target is overload), None)
    if forward is None and gives:
        raise InternalError(f"the traced backward of {overload} does not call it")
    return _Backward(
        graph,
        forward,
        tuple(placeholders[:n_grads]),
        tuple(placeholders[n_grads:]),
        tuple(gives),
    )


#: One trace per op signature, across programs; symbolic signatures are traced per program.
_backward = functools.lru_cache(maxsize=None)(_backward_traced)


def _writes(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    return [
        node
        for node in graph.nodes
        if isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable
    ]


def _functional(overload, module: torch.fx.GraphModule, examples) -> torch.fx.GraphModule:
    """r[ops.aten-derivatives.functional]: eager's formula as a functional graph. A formula may
    write tensors it made itself (the norm's backward zeroes its quotient where the norm is 0 with
    `masked_fill_`); PyTorch's functionalization, traced again, replaces each such write by the
    functional op (`masked_fill`). A write into what the formula was given (a gradient, an
    argument, an output) would outlive it: functionalization leaves it as a `copy_` into the
    placeholder, and it is refused.

    Functionalization would also decompose the op itself (`binary_cross_entropy_with_logits`),
    so it runs on the formula alone, with the op's outputs as placeholders; the op's node goes
    back in front of it."""
    graph = module.graph
    if not _writes(graph):
        return module
    forward = next(node for node in graph.nodes if node.target is overload)
    outputs = _outputs_read(forward)
    formula = torch.fx.Graph()
    env = {node: formula.placeholder(node.name) for node in placeholders(graph)}
    env.update({node: formula.placeholder(f"{node.name}_value") for node in outputs})
    for node in graph.nodes:
        if node not in env and node is not forward:
            env[node] = formula.node_copy(node, env.__getitem__)
    functionalize = torch.func.functionalize(
        torch.fx.GraphModule(module, formula), remove="mutations"
    )
    values = [example(Layout.of(node.meta["val"])) for node in outputs]
    functional = make_fx_keeping_detach(functionalize, tracing_mode="fake")(*examples, *values)
    left = _writes(functional.graph)
    if left:
        raise UnsupportedError(
            f"eager's derivative formula of {qualified_name(overload)} writes a tensor it was "
            f"given ({left[0].target}), which its backward graph cannot hold",
            rule="ops.aten-derivatives.functional",
            fix="compute this op outside the compiled function, or give it a derivative with a "
            "torch.autograd.Function whose backward writes nothing it is given",
        )
    return _after_forward(module, forward, outputs, functional)


def _outputs_read(forward: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes holding the op's outputs: its own node, or its getitems."""
    if not isinstance(forward.meta["val"], (tuple, list)):
        return [forward]
    return [user for user in forward.users if user.target is getitem]


def _after_forward(module, forward, outputs, functional) -> torch.fx.GraphModule:
    """The op's node, with what it reads, then the `functional` formula on its outputs."""
    graph = torch.fx.Graph()
    originals = placeholders(module.graph)
    env = {node: graph.placeholder(node.name) for node in originals}
    kept = {forward, *outputs}
    pending = [forward]
    while pending:  # what the op reads: its arguments' placeholders, detached
        node = pending.pop()
        kept.update(node.all_input_nodes)
        pending.extend(node.all_input_nodes)
    for node in module.graph.nodes:
        if node in kept and node not in env:
            env[node] = graph.node_copy(node, env.__getitem__)
    given = placeholders(functional.graph)
    env_formula = dict(zip(given, [env[node] for node in originals + outputs], strict=True))
    for node in functional.graph.nodes:
        if node not in env_formula:
            env_formula[node] = graph.node_copy(node, env_formula.__getitem__)
    return torch.fx.GraphModule(functional, graph)


class EagerDerivative:
    """r[ops.aten-derivatives]: the derivative rule of an ATen-valued op, `rule(grad, out, *args,
    needed=...)` as `optable.derivative` describes rules, computed by eager's formula."""

    #: `optable.call_rule` passes which tensor leaves of the arguments want a gradient, as eager
    #: passes `grad_input_mask` to backward ops such as convolution_backward.
    takes_needed = True

    def __init__(self, overload: torch._ops.OpOverload):
        self.overload = overload

    def __repr__(self) -> str:
        return f"EagerDerivative({self.overload})"

    def __call__(self, grad, out, *args, needed=None):
        args = pytree.tree_map_only(torch.Tensor, _resolved, list(args))
        spec, leaves = signature(args)
        written = _as_written(self.overload, args, out)
        tensors = [leaf for leaf in pytree.tree_leaves(written) if _is_tensor(leaf)]
        slots = [leaf for leaf in leaves if isinstance(leaf, Slot)]
        if needed is None:
            needed = tuple(True for _ in slots)
        needed = tuple(
            wanted and _differentiable_dtype(slot)
            for wanted, slot in zip(needed, slots, strict=True)
        )
        grads = grad if isinstance(out, (tuple, list)) else (grad,)
        grads = tuple(None if g is None else _resolved(g) for g in grads)
        layouts = tuple(None if g is None else Layout.of(g) for g in grads)
        if holds_symbols(layouts) or leaves_hold_symbols(leaves):
            # r[sizes.symbolic.eager-derivatives]: traced on the program's own symbols, so the
            # graph reads its sizes from its inputs and its guards are the program's
            mode = detect_fake_mode(tensors)
            backward = _backward_traced(self.overload, spec, leaves, layouts, needed, mode)
        else:
            backward = _backward(self.overload, spec, leaves, layouts, needed)
        results = _replay(backward, [g for g in grads if g is not None], out, tensors)
        per_leaf = [None] * len(tensors)
        for k, result in zip(backward.gives, results, strict=True):
            per_leaf[k] = result
        return _per_argument(args, per_leaf)


def _resolved(t: torch.Tensor) -> torch.Tensor:
    """r[memory.layout.conj-neg]: `t` without a lazy conjugate or negation: eager's formulas
    resolve them where they need to, and are traced on tensors without them."""
    return t.resolve_conj().resolve_neg()
@functools.cache
def _new_values(overload) -> tuple[tuple[int, int], ...]:
    """(argument position, output position) of each argument whose new value a functional
    variant `foo_functional` returns, as the output named after it (`noise` and `noise_out`)."""
    if not overload._schema.name.endswith("_functional"):
        return ()
    names = [argument.name for argument in overload._schema.arguments]
    return tuple(
        (names.index(r.name.removesuffix("_out")), k)
        for k, r in enumerate(overload._schema.returns)
        if r.name.endswith("_out") and r.name.removesuffix("_out") in names
    )


def _as_written(overload, args, out) -> list:
    """r[ops.aten-mutations.state]: the arguments a `foo_functional` op's formula reads, with the
    new value of each argument `foo` writes in its place: eager's `foo` writes its state (the
    noise of rrelu_with_noise) before its backward reads it."""
    args = list(args)
    for position, k in _new_values(overload):
        args[position] = out[k]
    return args


def _is_tensor(leaf) -> bool:
    return isinstance(leaf, torch.Tensor)


def _per_argument(args, per_leaf: list) -> list:
    """The gradients of the tensor leaves as one entry per argument: a tensor's gradient, a list
    for a list of tensors, None for anything else."""
    it = iter(per_leaf)
    result = []
    for arg in args:
        if _is_tensor(arg):
            result.append(next(it))
        elif isinstance(arg, (list, tuple)) and any(_is_tensor(a) for a in arg):
            result.append([next(it) if _is_tensor(a) else None for a in arg])
        else:
            result.append(None)
    return result


def _replay(backward: _Backward, grads: list, out, tensors: list) -> list:
    """Run the traced backward's ops on `grads`, the op's output `out` and its argument
    `tensors`, standing for the trace's placeholders and forward values."""
    env: dict[torch.fx.Node, object] = dict(zip(backward.grads, grads, strict=True))
    env.update(zip(backward.arguments, tensors, strict=True))
    # The trace's tensors were on torch's default device, which its factories name: the replay
    # makes them on the device of the op's tensors instead.
    device = next(t.device for t in [*grads, *tensors] if isinstance(t, torch.Tensor))
    forward_values = set(backward.arguments)
    for node in backward.graph.nodes:
        if node.op != "call_function" or node in env:
            continue
        if node is backward.forward:
            env[node] = out
            forward_values.add(node)
        elif node.target is getitem and node.args[0] in forward_values:
            env[node] = env[node.args[0]][node.args[1]]
            forward_values.add(node)
        elif node.target is aten.detach.default and node.args[0] in forward_values:
            # autograd's own detach of what it saves: the value itself
            env[node] = env[node.args[0]]
            forward_values.add(node)
        else:
            args = torch.fx.node.map_arg(node.args, env.__getitem__)
            kwargs = dict(torch.fx.node.map_arg(node.kwargs, env.__getitem__))
            if "device" in kwargs:
                kwargs["device"] = device
            env[node] = node.target(*args, **kwargs)
    output = next(iter(reversed(backward.graph.nodes)))
    return [env[node] for node in output.args[0]]


@functools.cache
def eager_derivative(overload: torch._ops.OpOverload) -> EagerDerivative:
    return EagerDerivative(overload)


ATEN_VALUED.derivative = eager_derivative
