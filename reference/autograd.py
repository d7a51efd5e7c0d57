"""Autograd for compiled programs: the joint graph and its partition (`specs/autograd.md`).

1. The joint graph (`r[autograd.joint]`): the functional graph is replayed on traced tensors, then
   walked backwards, applying each op's derivative rule (registered beside the op in
   `reference/ops.py`) to the gradients flowing into it; `make_fx` records both halves (the
   replayed ops with the values functionalize traced for them, not running them again).
2. The partition (`r[autograd.partition.saved]`): the replayed functional graph is the forward
   graph, the ops the derivative rules add are the backward graph; forward values the backward
   reads are saved, except views, which the backward recomputes from their saved base
   (`r[autograd.partition.recompute-views]`).
Both passes visit each node a bounded number of times.

Conventions: `primals` are the functional graph's inputs, `tangents` the gradients of its
differentiable outputs, `grads` maps a value (node) to the gradient accumulated for it.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import getitem
from typing import NoReturn

import torch
import torch.fx
import torch.fx.traceback as fx_traceback
import torch.utils._pytree as pytree
from attrs import define, field, frozen
from torch._guards import detect_fake_mode
from torch.fx.experimental.proxy_tensor import (
    get_proxy_mode,
    get_proxy_slot,
    set_original_aten_op,
    track_tensor_tree,
)

from aotspec.errors import InternalError, UnsupportedError
from aotspec.versions import make_fx_keeping_detach

from .aten_autograd import output_gradients
from .capture import (
    VALUE_DEPENDENT,
    CheckpointRegions,
    checkpoint_region,
    grad_enabled,
    has_value_dependent_sizes,
)
from .collectives import communicates
from .custom_functions import custom_function_call
from .functionalize import node_of
from .graph import (
    GraphProgram,
    graph_module,
    output_node,
    placeholders,
    source_line,
    traced_from,
)
from .optable import (
    NONDIFFERENTIABLE,
    OpKind,
    bind,
    call_rule,
    derivative_of,
    lookup,
    qualified_name,
    refuse,
    refused,
)
from .plan_records import Differentiated
from .program_records import (
    BackwardWrite,
    CallerStorage,
    FunctionalProgram,
    GraphStorage,
    OutputView,
    Rebind,
    WriteBack,
)
from .storage import Layout, carries_gradients
from .symbols import is_symbolic

aten = torch.ops.aten


def _differentiable_outputs(
    program: FunctionalProgram, flows: set, write_backs: tuple[WriteBack, ...]
) -> tuple[int, ...]:
    """Graph outputs that may carry gradients (floating point): storages of user outputs (a
    detach()ed output carries none: `r[autograd.detach]`), and the contents written back into
    inputs with history (`r[autograd.input-writes]`)."""
    output = output_node(program.graph)
    user_storages = {
        o.storage.output_index
        for o in program.outputs
        if isinstance(o, OutputView) and isinstance(o.storage, GraphStorage) and not o.detached
    }
    user_storages |= {step.output_index for step in write_backs}
    # r[capture.custom-function.outputs]: the values that carry a custom Function's gradient
    user_storages |= {
        o.gradient_from
        for o in program.outputs
        if isinstance(o, OutputView) and o.gradient_from is not None
    }
    return tuple(
        k
        for k, node in enumerate(output.args[0])
        if k in user_storages and _carries_gradient(node, flows)
    )


def _carries_gradient(node: torch.fx.Node, flows: set) -> bool:
    return node in flows and carries_gradients(node.meta["val"].dtype)


def _write_backs_with_history(program: FunctionalProgram, flows: set) -> tuple[WriteBack, ...]:
    """r[autograd.input-writes]: the write-backs of caller storages the program wrote with grad
    mode on whose final contents carry a gradient: the caller's tensor takes them by an
    autograd-recorded copy, so they are differentiable outputs."""
    outputs = output_node(program.graph).args[0]
    with_grad_inputs = {meta.storage for meta in program.inputs if meta.requires_grad}
    found = []
    for step in program.epilogue:
        if not (isinstance(step, WriteBack) and step.input_index in program.written_with_grad):
            continue
        carries = _carries_gradient(outputs[step.output_index], flows)
        if carries or step.input_index in with_grad_inputs:
            _check_one_object(program, step.input_index)
        if carries:
            found.append(step)
    return tuple(found)


def _check_relocations(program: FunctionalProgram, write_backs: tuple[WriteBack, ...]) -> None:
    """r[autograd.metadata.as-strided]: an `as_strided_` that moves a tensor of a caller storage
    onto other locations, where the storage's contents carry a gradient: those of an input that
    requires grad, or contents written back with history (values that carry none, such as an
    observer's running statistics, leave it free to move)."""
    with_grad = {meta.storage for meta in program.inputs if meta.requires_grad}
    with_grad |= {step.input_index for step in write_backs}
    relocated = sorted(program.relocated & with_grad)
    if relocated:
        # r[autograd.metadata.as-strided]: eager's gradient would depend on every layout between.
        raise UnsupportedError(
            f"as_strided_ makes a tensor on the storage of flat input {relocated[0]}, whose "
            "values carry a gradient, read other storage locations than it read before",
            rule="autograd.metadata.as-strided",
            fix="relay it out over the same elements (a new shape or order), or take a view "
            "with as_strided() instead of changing the tensor in place",
        )


class AliasedInputsWritten(Exception):
    """A write with history lands in a storage several arguments read: the flat inputs of those
    arguments (`r[autograd.input-writes.synthetic-base]`, which `reference/pipeline.py`
    applies)."""

    def __init__(self, inputs: list[int]):
        super().__init__(f"flat inputs {inputs} share a storage written with history")
        self.inputs = inputs


def _check_one_object(program: FunctionalProgram, storage: int) -> None:
    """r[autograd.input-writes.aliased]: the history goes to the one tensor object on the storage;
    with two (aliasing arguments), or with set_ moving a tensor onto or off it, raise."""
    inputs = program.inputs
    objects = sorted({meta.same_object for meta in inputs if meta.storage == storage})
    rebound = [
        step.input_index
        for step in program.epilogue
        if isinstance(step, Rebind)
        and (
            inputs[step.input_index].storage == storage
            or (
                isinstance(step.storage, CallerStorage)
                and inputs[step.storage.input_index].storage == storage
            )
        )
    ]
    if len(objects) > 1 and not rebound:
        # r[autograd.input-writes.synthetic-base]: the plan compiles them as views of a base.
        raise AliasedInputsWritten(objects)
    if rebound:
        sharing = f"flat inputs {objects} share" if len(objects) > 1 else "set_ rebinds"
        raise UnsupportedError(
            f"the program writes with grad mode on into the storage of flat input {storage}, "
            f"which {sharing}, and gradients flow through it: its history would belong to more "
            "than one tensor object",
            rule="autograd.input-writes.aliased",
            fix="pass one tensor of that storage and take the others as views of it inside the "
            "function, or write under torch.no_grad()",
        )


def _resized_inputs(program: FunctionalProgram) -> dict[torch.fx.Node, int]:
    """r[autograd.no-grad-input-writes.identity]: the contents a resize up gave the storage of an
    input that requires grad are that input for autograd: node -> the input's flat index. (Writes
    under torch.no_grad() pass gradients to the contents before them, down to the input itself.
    Where several inputs requiring grad share the storage, or one reads it in another dtype, each
    read goes to the input it reads through instead: `_read_through_inputs`.)"""
    owner: dict[int, int] = {}
    for i, meta in enumerate(program.inputs):
        touched = meta.storage in program.touched_storages
        alone = meta.storage not in program.read_through_storages
        if meta.requires_grad and meta.same_object == i and touched and alone:
            owner[meta.storage] = i
    return {
        node: owner[storage]
        for node, storage in program.stand_ins.resized_contents.items()
        if storage in owner
    }


def _read_through_inputs(program: FunctionalProgram) -> dict[torch.fx.Node, int]:
    """r[autograd.no-grad-input-writes.identity]: where several inputs that require grad share a
    storage (or one reads it in another dtype than the storage's), the contents read through one
    of them, or a view of it, are that input for autograd: node -> the input's flat index.
    Written with grad mode on, the storage's contents would carry a history that no one of them
    has (`r[autograd.input-writes.aliased]`)."""
    for storage in sorted(program.read_through_storages & program.written_with_grad):
        _check_one_object(program, storage)  # raises: written with history
    return program.stand_ins.read_through_input


def _rebound_inputs(program: FunctionalProgram) -> dict[torch.fx.Node, int]:
    """r[autograd.no-grad-set]: reads through an input that requires grad, after set_ rebound it
    under torch.no_grad(), are that input for autograd: node -> the input's flat index."""
    return {
        node: i
        for node, i in program.stand_ins.read_as_input.items()
        if program.inputs[i].requires_grad
    }


def _requires_grad_nodes(
    program: FunctionalProgram, as_inputs: dict[torch.fx.Node, int]
) -> set[torch.fx.Node]:
    """r[autograd.requires-grad]: a value needs a gradient when a differentiable op computed it
    from one that does; inputs need one when they require grad, and so do the values that stand
    for them (`as_inputs`: the contents a resize up gave an input's storage, reads through an
    input that set_ rebound under torch.no_grad()); a write under torch.no_grad() needs one when
    the contents it writes into do (`r[autograd.no-grad-writes]`)."""
    flows: set[torch.fx.Node] = set()
    requires_grad = iter(meta.requires_grad for meta in program.inputs)
    no_grad_writes = program.stand_ins.no_grad_writes
    for node in program.graph.nodes:
        if node.op == "placeholder":
            if next(requires_grad):
                flows.add(node)
        elif node in as_inputs:
            flows.add(node)
        elif node in no_grad_writes:
            _check_detached_write(program, node, flows)
            if node.args[0] in flows:
                flows.add(node)
        elif node.op == "call_function":
            if node.target is not getitem and node.target in NONDIFFERENTIABLE:
                continue
            if not grad_enabled(node):  # r[capture.grad-mode]: computed under torch.no_grad()
                continue
            # r[autograd.custom-function]: a custom Function's results need a gradient when one
            # of its inputs does (its outputs and saved values are read, not differentiated)
            used = node.args[1] if node.target is custom_function_call else node.all_input_nodes
            if not any(value in flows for value in used):
                continue
            if _of_custom_function(node) or _may_carry_gradient(node, flows):
                flows.add(node)
    _check_no_grad_relayouts(program, flows)
    return flows


def _of_custom_function(node: torch.fx.Node) -> bool:
    """A custom Function's call, or one of its results."""
    source = node.args[0] if node.target is getitem else node
    return isinstance(source, torch.fx.Node) and source.target is custom_function_call


def _may_carry_gradient(node: torch.fx.Node, flows: set) -> bool:
    """Whether eager autograd gives (this output of) an aten op a gradient
    (`r[autograd.requires-grad.op-outputs]`); custom ops leave it to the output's dtype."""
    source, index = node.args if node.target is getitem else (node, None)
    if source.op != "call_function":
        return True
    bound = bind(source.target._schema, source.args, source.kwargs)
    leaves = [
        leaf
        for leaf in pytree.tree_leaves(bound)
        if isinstance(leaf, torch.fx.Node) and isinstance(leaf.meta.get("val"), torch.Tensor)
    ]
    needed = tuple(leaf in flows for leaf in leaves)
    values = pytree.tree_map_only(torch.fx.Node, lambda leaf: leaf.meta["val"], bound)
    # r[autograd.requires-grad.op-outputs]
    outputs = len(pytree.tree_leaves(source.meta["val"]))
    carried = output_gradients(source.target, values, needed, outputs)
    if carried is None:
        return True
    return any(carried) if index is None else carried[index]


def _check_detached_write(program: FunctionalProgram, node: torch.fx.Node, flows: set) -> None:
    """r[autograd.detach]: a write through a detach()ed alias leaves the storage's history as it
    was; written values that carry a gradient would give the alias a history of its own."""
    if node in program.stand_ins.detached_writes and node.args[1] in flows:
        raise UnsupportedError(
            "the program writes values that require grad into a detach()ed alias "
            f"({node.name}), which would give the alias a history apart from what it aliases",
            rule="autograd.detach",
            fix="clone() the detached tensor before writing into it",
        )


def _check_no_grad_relayouts(program: FunctionalProgram, flows: set) -> None:
    """r[autograd.no-grad-metadata]: a tensor that carries a gradient and that an in-place
    metadata op relaid out under torch.no_grad() keeps the history of its old layout in eager;
    what the program reads from it or returns would take gradients it could not give back."""
    stale = program.stand_ins.stale_histories
    node = next((node for node in program.graph.nodes if node in stale and node in flows), None)
    if node is not None:
        raise UnsupportedError(
            f"the program reads or returns a tensor that requires grad (on {node.name}) after an "
            "in-place metadata op (t_, transpose_, ...) changed its layout under "
            "torch.no_grad(), which leaves it the history of its old layout",
            rule="autograd.no-grad-metadata",
            fix="change its layout with grad mode on, or take a view (x.t() rather than x.t_())",
        )


@define
class _Joint:
    """What tracing the joint graph found besides the graph: which inputs got a gradient, and
    the joint nodes holding each input's final contents."""

    grad_inputs: tuple[int, ...] = ()
    final_contents: dict[torch.fx.Node, int] = field(factory=dict)
    #: What custom Functions' backwards write into the caller's storages: (where, the value, the
    #: nodes of the gradients the Function received).
    writes: list[tuple[BackwardWrite, torch.Tensor, list[torch.fx.Node]]] = field(factory=list)


@frozen
class _StandsFor:
    """r[autograd.no-grad-input-writes.identity], r[autograd.no-grad-set]: a value standing for
    flat input `input_index`; its gradient goes to the input, read through `layout` (the input's
    layout on the storage contents), or as it is when `layout` is None (a read through it)."""

    input_index: int
    layout: Layout | None


class _RegionMarker:
    """Marks the joint graph's nodes with the checkpointed region of the functional node they
    come from: a forward op's own region, and for the nodes its derivative rule adds, the same
    region (`r[checkpoint.saved]`)."""

    def __init__(self):
        self.marks = CheckpointRegions()
        self.current: int | None = None

    def enter(self, node: torch.fx.Node) -> None:
        if checkpoint_region(node) != self.current:
            self.current = checkpoint_region(node)
            self.marks.note(self.current)


def differentiate(program: FunctionalProgram, tensors: list[torch.Tensor]) -> Differentiated:
    """The forward and backward graphs of `program` (`r[autograd.joint]`,
    `r[autograd.partition.saved]`), traced on `tensors`."""
    graph = program.graph
    resized, rebound = _resized_inputs(program), _rebound_inputs(program)
    read_through = _read_through_inputs(program)
    flows = _requires_grad_nodes(program, resized | rebound | read_through)
    outputs_node = output_node(graph)
    write_backs = _write_backs_with_history(program, flows)
    _check_relocations(program, write_backs)
    differentiable = _differentiable_outputs(program, flows, write_backs)
    n_inputs = len(program.inputs)
    wanted = tuple(i for i, meta in enumerate(program.inputs) if meta.requires_grad)
    stands_for = {node: _StandsFor(i, program.inputs[i].layout) for node, i in resized.items()}
    stands_for |= {node: _StandsFor(i, None) for node, i in (rebound | read_through).items()}
    joint_found = _Joint()
    regions = _RegionMarker()

    def joint(*values):
        primals, tangents = values[:n_inputs], values[n_inputs:]
        env, outputs = _run(program.graph_module, primals, regions, run_op=_recorded)
        input_nodes = placeholders(graph)
        seeds = {outputs_node.args[0][k]: t for k, t in zip(differentiable, tangents, strict=True)}
        grads = _backward_pass(program, env, flows, seeds, stands_for, joint_found, regions)
        joint_found.final_contents = _final_contents(program, env)
        joint_found.grad_inputs = tuple(i for i in wanted if input_nodes[i] in grads)
        written = [value for _, value, _ in joint_found.writes]
        return outputs, [grads[input_nodes[i]] for i in joint_found.grad_inputs] + written

    # The joint trace runs on functionalize's fake tensors, in its fake tensor mode: its inputs
    # are the values functionalize traced the inputs as (one per tensor object, as `tensors`
    # has them), and its forward values those functionalize traced (`_recorded`).
    traced_as = {}
    primals = [
        traced_as.setdefault(id(tensor), node.meta["val"])
        for tensor, node in zip(tensors, placeholders(graph), strict=True)
    ]
    fake_mode = detect_fake_mode(primals)
    with fake_mode:  # made in the program's mode: with symbolic sizes, their layouts are symbolic
        tangent_values = [
            torch.zeros_like(_meta_value(outputs_node.args[0][k])) for k in differentiable
        ]
    # the user's source lines, for `aotspec explain`
    with fx_traceback.preserve_node_meta(), fake_mode:
        joint_module = make_fx_keeping_detach(joint)(*primals, *tangent_values)
    regions.marks.annotate(joint_module.graph)
    _check_no_writes(joint_module.graph)
    joint_module.graph.eliminate_dead_code()  # rules may compute gradients nobody needs
    split = partition(joint_module, n_inputs, joint_found.final_contents)
    n_grads = len(joint_found.grad_inputs)
    tangents = placeholders(joint_module.graph)[n_inputs:]
    return Differentiated(
        split.forward,
        split.backward,
        differentiable,
        joint_found.grad_inputs,
        split.num_saved,
        tuple(t.stride() for t in tangent_values),
        split.read_after_call,
        split.grad_tangents[:n_grads],
        tuple(write for write, _, _ in joint_found.writes),
        tuple(
            frozenset().union(*_tangents_of(joint_module.graph, tangents, received))
            for _, _, received in joint_found.writes
        ),
    )


def _check_no_writes(joint: torch.fx.Graph) -> None:
    """The joint graph writes nothing (`r[autograd.joint]`): the partition keeps what the
    gradients are computed from, so a write into a rule's intermediate would be lost."""
    for node in joint.nodes:
        target = node.target
        if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
            # r[autograd.joint]
            raise InternalError(
                f"the joint graph writes in place ({node.name}: {qualified_name(target)}); a "
                "derivative rule must compute its gradient out of place"
            )


def _run(
    graph_module: torch.fx.GraphModule,
    values,
    regions: _RegionMarker | None = None,
    run_op: Callable = lambda node, args, kwargs: node.target(*args, **kwargs),
) -> tuple[dict, list]:
    """Run a functional graph's ops on traced `values` with `run_op`, so `make_fx` records them;
    returns every node's value and the graph's outputs."""
    env: dict[torch.fx.Node, object] = {}
    inputs = iter(values)
    for node in traced_from(graph_module.graph.nodes, "autograd.joint"):
        if node.op == "placeholder":
            env[node] = next(inputs)
        elif node.op == "get_attr":  # r[capture.constants], or a generator (r[ops.random])
            env[node] = getattr(graph_module, node.target)
        elif node.op == "call_function":
            args = torch.fx.node.map_arg(node.args, env.__getitem__)
            kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
            if regions is not None:
                regions.enter(node)  # r[checkpoint.region], carried over
            env[node] = run_op(node, args, kwargs)
    return env, [env[node] for node in output_node(graph_module.graph).args[0]]


def _recorded(node: torch.fx.Node, args, kwargs) -> object:
    """`run_op` of the functional graph in the joint trace, without running the op again: it is
    recorded as `make_fx` records it, with the value functionalize traced for it (in the same
    fake tensor mode), so the joint graph is the one running it would trace. An op `make_fx`
    treats apart (constants, draws, values that are not tensors) runs."""
    tracer = get_proxy_mode().tracer
    if _recordable(node, (args, kwargs), tracer):
        return _record(node, args, kwargs, tracer)
    return node.target(*args, **kwargs)


#: Arguments `make_fx` puts in a node as they are.
_PLAIN_ARGUMENTS = (
    bool,
    int,
    float,
    complex,
    str,
    type(None),
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
)
#: Ops `make_fx` records otherwise than as they are called.
_TRACED_APART = (aten.lift_fresh.default, aten.lift_fresh_copy.default, aten.is_nonzero.default)


def _recordable(node: torch.fx.Node, operands, tracer) -> bool:
    """Whether `make_fx` would record `node`'s op as it is, with its traced value: an aten op on
    traced tensors and plain arguments, which neither draws nor reads values (`make_fx` computes
    those from constants), and whose value is a tensor or tensors."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or target in _TRACED_APART:
        return False
    if {torch.Tag.data_dependent_output, torch.Tag.nondeterministic_seeded} & set(target.tags):
        return False
    for leaf in pytree.tree_leaves(operands):
        if isinstance(leaf, torch.Tensor):
            slot = get_proxy_slot(leaf, tracer, None)
            if slot is None or slot.constant is not None:
                return False
        elif not isinstance(leaf, _PLAIN_ARGUMENTS):
            return False
    value = node.meta.get("val")
    return value is not None and all(
        isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(value)
    )


def _record(node: torch.fx.Node, args, kwargs, tracer) -> object:
    """Record `node`'s op in the graph `tracer` builds as `make_fx`'s proxy mode records a call
    (its node name, `original_aten` and value metadata, a getitem node per output), and return
    its traced value."""
    target = node.target
    proxy_args, proxy_kwargs = pytree.tree_map_only(
        torch.Tensor, lambda t: get_proxy_slot(t, tracer).proxy, (args, kwargs)
    )
    value = node.meta["val"]
    with set_original_aten_op(target):
        name = tracer.graph._target_to_str(target.overloadpacket.__name__)
        proxy = tracer.create_proxy("call_function", target, proxy_args, proxy_kwargs, name=name)
        track_tensor_tree(value, proxy, constant=None, tracer=tracer)
    return value


def _final_contents(program: FunctionalProgram, env) -> dict[torch.fx.Node, int]:
    """Joint-graph node -> input index, for the last contents the program gave a caller storage
    still read through that input when the call returns (`r[autograd.saved-inputs]`)."""
    rebound = {step.input_index for step in program.epilogue if isinstance(step, Rebind)}
    return {
        node_of(env[node]): i
        for node, i in program.stand_ins.final_contents.items()
        if i not in rebound
    }


def _meta_value(node: torch.fx.Node) -> torch.Tensor:
    value = node.meta["val"]
    return torch.empty_strided(
        value.shape, value.stride(), dtype=value.dtype, device=value.device
    )


def _backward_pass(
    program: FunctionalProgram,
    env,
    flows,
    seeds,
    stands_for: dict[torch.fx.Node, _StandsFor],
    found: _Joint,
    regions: _RegionMarker,
) -> dict[torch.fx.Node, torch.Tensor]:
    """Reverse mode over the functional graph with the table's derivative rules; a write under
    torch.no_grad() passes its gradient on unchanged, the gradient of a value standing for an
    input goes to that input, and a custom Function's backward is its own rule."""
    grads: dict[torch.fx.Node, object] = dict(seeds)
    no_grad_writes = program.stand_ins.no_grad_writes
    input_nodes = placeholders(program.graph)
    for node in traced_from(reversed(program.graph.nodes), "autograd.derivative-rules"):
        if node.op != "call_function" or node not in grads or node not in flows:
            continue
        grad = grads.pop(node)
        if node in stands_for:
            stand_in = stands_for[node]
            _accumulate(grads, input_nodes[stand_in.input_index], _in_layout(grad, stand_in))
            continue
        if node in no_grad_writes:  # r[autograd.no-grad-writes]: the old contents' history
            _accumulate(grads, node.args[0], grad)
            continue
        if node.target is getitem:
            source, index = node.args
            parts = grads.setdefault(source, {})
            parts[index] = grad if index not in parts else parts[index] + grad
            continue
        if node.target is custom_function_call:
            for arg_node, arg_grad in _custom_function_vjp(program, node, grad, env, found):
                if arg_node in flows:
                    _accumulate(grads, arg_node, arg_grad)
            continue
        if isinstance(grad, dict):  # the gradients of a multi-output op, by output index
            grad = tuple(grad.get(i) for i in range(len(env[node])))
        rule = None if refused(node.target) else derivative_of(node.target)
        if rule is None:
            if not refused(node.target):
                _refuse_without_rule(node)
            continue  # r[ops.unsupported-all]: while checking, no gradient goes through it
        _apply_rule(rule, node, grad, env, flows, regions, grads)
    return grads


def _apply_rule(rule, node: torch.fx.Node, grad, env, flows, regions: _RegionMarker, grads):
    """The derivative rule of `node`'s op on its gradient: each input's gradient accumulates in
    `grads`."""
    args = torch.fx.node.map_arg(node.args, env.__getitem__)
    kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
    regions.enter(node)  # r[checkpoint.saved]: what the region's derivatives read
    bound_values = bind(node.target._schema, args, kwargs)
    bound_nodes = bind(node.target._schema, node.args, node.kwargs)
    needed = tuple(
        isinstance(leaf, torch.fx.Node) and leaf in flows
        for leaf, value in zip(
            pytree.tree_leaves(bound_nodes), pytree.tree_leaves(bound_values), strict=True
        )
        if isinstance(value, torch.Tensor)
    )
    recorded = get_proxy_mode().tracer.graph.nodes
    before = len(recorded)
    try:
        arg_grads_of = call_rule(rule, grad, env[node], bound_values, needed)
    except VALUE_DEPENDENT as error:
        _refuse_value_dependent_gradient(node, f"({type(error).__name__})")
    for op in list(recorded)[before:]:
        if has_value_dependent_sizes(op.meta.get("val")):
            _refuse_value_dependent_gradient(node, f"by {op.target}")
    for arg_nodes, arg_grads in zip(bound_nodes, arg_grads_of, strict=True):
        for arg_node, arg_grad in _pairs(arg_nodes, arg_grads):
            if isinstance(arg_node, torch.fx.Node) and arg_node in flows and arg_grad is not None:
                _accumulate(grads, arg_node, arg_grad)


def _in_layout(grad: torch.Tensor, stand_in: _StandsFor) -> torch.Tensor:
    """The gradient of a value standing for an input, laid out as that input reads it."""
    layout = stand_in.layout
    if layout is None:
        return grad
    return aten.as_strided(grad, list(layout.sizes), list(layout.strides), layout.offset)


def _refuse_without_rule(node: torch.fx.Node) -> None:
    """r[autograd.derivative-rules]: an op the gradient flows through needs a rule."""
    refuse(
        UnsupportedError(
            f"op {qualified_name(node.target)} ({source_line(node)}) has no derivative rule",
            rule="autograd.derivative-rules",
            fix="add a @derivative rule beside the op in reference/ops.py, or compute this part "
            "under torch.no_grad()",
        ),
        node.target,
    )


def _refuse_value_dependent_gradient(node: torch.fx.Node, how: str) -> NoReturn:
    """r[capture.data-dependent]: `node`'s derivative rule computes a value whose sizes depend
    on tensor values (`index_put`'s gradient for its values at a boolean mask and integer
    indices reads the gradient at as many positions as the mask holds), `how` says how."""
    raise UnsupportedError(
        f"the gradient of {qualified_name(node.target)} ({source_line(node)}) computes a value "
        f"whose sizes depend on tensor values, {how}",
        rule="capture.data-dependent",
        fix="pass the argument whose gradient needs it detached, or computed under "
        "torch.no_grad(), if it needs no gradient; or compute this op outside the compiled "
        "function",
    ) from None


def _custom_function_vjp(
    program: FunctionalProgram, node: torch.fx.Node, grad: dict, env, found: _Joint
) -> list[tuple[torch.fx.Node, torch.Tensor]]:
    """r[autograd.custom-function]: the gradients of a custom Function's inputs, as (input node,
    gradient) pairs: its functionalized backward run on the values it saved and on the gradients
    of its differentiable outputs (zeros for one no gradient reached, as eager materializes
    them). What it writes into a saved value that lies on a caller's storage is noted in `found`
    (`r[autograd.custom-function.backward-writes]`)."""
    call = program.custom_calls[node]
    function = call.function
    _, inputs, outputs, saved = node.args
    received = [grad[j] for j in sorted(grad)]
    incoming = []
    for j, differentiable in enumerate(function.differentiable):
        if not differentiable:
            continue
        if j not in grad:
            value = env[outputs[j]]
            grad[j] = torch.zeros(value.shape, dtype=value.dtype, device=value.device)
        incoming.append(grad[j])
    values = _laid_out_as_traced(call.backward, [env[s] for s in saved] + incoming)
    _, results = _run(call.backward.graph_module, values)
    returned = [results[k] for k in call.backward.output_values]
    n_grads = len(function.grads_for)
    for k, write in call.writes:
        if write is not None:
            found.writes.append((write, returned[n_grads + k], [node_of(g) for g in received]))
    return [(inputs[p], g) for p, g in zip(function.grads_for, returned[:n_grads], strict=True)]


def _laid_out_as_traced(backward: FunctionalProgram, values: list) -> list:
    """The values a custom Function's functionalized backward writes into, each laid out as it
    was traced, on a storage of its own (its graph reads the written contents through that
    layout); copied into one where they are laid out otherwise."""
    laid_out = []
    for i, (value, meta) in enumerate(zip(values, backward.inputs, strict=True)):
        layout = meta.layout
        exact = Layout.of(value) == layout
        exact = exact and value.untyped_storage().nbytes() == meta.storage_nbytes
        if i in backward.touched_storages and not exact:
            flat = value.new_zeros([layout.extent_elements()])
            flat = aten.as_strided_scatter(flat, value, layout.sizes, layout.strides, 0)
            value = aten.as_strided(flat, layout.sizes, layout.strides, 0)
        laid_out.append(value)
    return laid_out


def _accumulate(grads: dict, node: torch.fx.Node, grad) -> None:
    grads[node] = grad if node not in grads else grads[node] + grad


def _pairs(arg_nodes, arg_grads):
    """(node, gradient) pairs of one schema argument: a tensor, or a list of them (cat's)."""
    if isinstance(arg_nodes, (list, tuple)):
        return [] if arg_grads is None else zip(arg_nodes, arg_grads, strict=True)
    return [(arg_nodes, arg_grads)]


@frozen
class Partition:
    """The joint graph split in two (`r[autograd.partition.saved]`)."""

    forward: GraphProgram
    backward: GraphProgram
    num_saved: int
    #: Input index -> bytes of its storage the backward reads as the call left it.
    read_after_call: dict[int, int]
    #: Per gradient the backward returns, the tangents (by position) it is computed from.
    grad_tangents: tuple[frozenset[int], ...]


def partition(
    joint_module: torch.fx.GraphModule, n_inputs: int, final_contents: dict
) -> Partition:
    """Split the joint graph into forward and backward graphs and the values between them.

    `final_contents` maps joint nodes to input indices: the last contents the program gave that
    input's storage, which the backward reads from the input itself."""
    joint = joint_module.graph
    inputs = placeholders(joint)
    primals, tangents = inputs[:n_inputs], inputs[n_inputs:]
    outputs, grads = output_node(joint).args[0]
    forward_outputs = list(outputs)
    # r[autograd.partition.saved]: the forward holds the replayed functional graph; every op a
    # derivative rule added runs in the backward, as in eager autograd, so the saved values are
    # exactly what the rules read (and what saved-tensor hooks see: r[hooks.eager.saved-set]).
    draws = _forward_effects(joint, tangents)
    forward_nodes = _ancestors(forward_outputs + draws)
    forward_nodes.update(primals)
    # Every result of a forward op is a forward value, even those only a rule reads (layer_norm's
    # mean and rstd): the backward saves them rather than the op's tuple.
    forward_nodes.update(
        [user for node in forward_nodes for user in node.users if user.target is getitem]
    )
    for node in joint.nodes:  # in order: a size computed from sizes follows them
        if is_symbolic(node.meta.get("val")) and set(node.all_input_nodes) <= forward_nodes:
            # r[sizes.symbolic.saved]: a size of forward values is read in the forward, and the
            # number saved, not the value it is a size of
            forward_nodes.add(node)
    saved = []
    backward_results = set(grads)
    for node in joint.nodes:
        if node not in forward_nodes:
            continue
        if any(user not in forward_nodes and user.op != "output" for user in node.users):
            saved.append(node)
        elif node in backward_results:  # a forward value the backward returns as it is
            saved.append(node)
    saved = _save_bases_of_views(saved, final_contents)
    saved = _recompute_checkpointed(saved, forward_nodes)
    saved, reread = _read_contents_from_inputs(saved, primals, final_contents)
    checks = _backward_checks(joint, tangents)
    saved += _sizes_read_again(saved + tangents + list(reread), [*grads, *checks], forward_nodes)
    forward = _extract(joint_module, primals, forward_outputs + saved, keep=draws)
    backward = _extract(joint_module, saved + tangents, list(grads), reread, keep=checks)
    _recompute_at_first_unpack(backward)
    read_after_call = {
        primals.index(primal): node.meta["val"].nbytes for node, primal in reread.items()
    }
    return Partition(
        GraphProgram.of(forward),
        GraphProgram.of(backward),
        len(saved),
        read_after_call,
        _tangents_of(joint, tangents, grads),
    )


def _recompute_checkpointed(saved: list[torch.fx.Node], forward_nodes: set) -> list[torch.fx.Node]:
    """r[checkpoint.saved]: a value a checkpointed region makes, read in the backward only by
    that region's derivatives, is not saved: what the region read from outside it is saved
    instead, and the backward recomputes the value from it (the nodes are marked "recompute")."""
    kept: dict[torch.fx.Node, None] = {}
    for node in saved:
        region = checkpoint_region(node)
        readers = [user for user in node.users if user not in forward_nodes]
        if region is None or any(checkpoint_region(user) != region for user in readers):
            kept[node] = None
            continue
        stack = [node]
        while stack:
            value = stack.pop()
            if value.meta.get("recompute"):
                continue
            if value.op == "call_function" and checkpoint_region(value) == region:
                value.meta["recompute"] = True  # r[checkpoint.saved]
                stack.extend(value.all_input_nodes)
            else:
                kept[value] = None
    return list(kept)


def _recompute_at_first_unpack(backward: torch.fx.GraphModule) -> None:
    """r[checkpoint.recompute]: a region's recomputation runs right before the first backward op
    that reads one of its values, all of it at once, as eager's runs at the first unpack."""
    graph = backward.graph
    by_region: dict[int, list[torch.fx.Node]] = {}
    for node in graph.nodes:
        if node.meta.get("recompute"):
            by_region.setdefault(checkpoint_region(node), []).append(node)
    for nodes in by_region.values():
        members = set(nodes)
        first_reader = next(
            node
            for node in graph.nodes
            if node not in members and any(i in members for i in node.all_input_nodes)
        )
        for node in nodes:
            first_reader.prepend(node)  # r[checkpoint.recompute]
    backward.recompile()


def _tangents_of(
    joint: torch.fx.Graph, tangents: list[torch.fx.Node], grads
) -> tuple[frozenset[int], ...]:
    """r[autograd.unreached-outputs]: the positions of the tangents each of the nodes `grads`
    reads, found in one pass over the joint graph (a bit mask per node)."""
    masks = {node: 1 << j for j, node in enumerate(tangents)}
    for node in joint.nodes:
        if node.op == "call_function":
            mask = 0
            for used in node.all_input_nodes:
                mask |= masks.get(used, 0)
            masks[node] = mask
    return tuple(
        frozenset(j for j in range(len(tangents)) if masks.get(grad, 0) >> j & 1) for grad in grads
    )


def _sizes_read_again(inputs: list, outputs: list, forward_nodes: set) -> list[torch.fx.Node]:
    """r[sizes.symbolic.saved]: the sizes the backward reads to recompute a value from a saved
    one (a view of a saved base, a checkpointed op), which the forward computed for its own
    ops: saved as numbers too."""
    found: dict[torch.fx.Node, None] = {}
    seen = set(inputs)
    stack = [o for o in outputs if isinstance(o, torch.fx.Node)]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node in forward_nodes and is_symbolic(node.meta.get("val")):
            found[node] = None
            continue
        stack.extend(node.all_input_nodes)
    return list(found)


def _read_contents_from_inputs(
    saved: list[torch.fx.Node], primals: list[torch.fx.Node], final_contents: dict
):
    """r[autograd.saved-inputs.final-contents]: a saved value that is the last contents the program
    gave an input's storage is that input when the call returns: the forward saves the input, and
    the backward reads its whole storage when it runs. Returns the new saved list and, for each
    replaced value, the input it is read from.

    Where the backward also reads the input as the call began, the contents stay saved as they
    are: the input's saved entry value then fails eager's version check when the backward runs
    (`r[autograd.saved-inputs.version]`), as in eager."""
    entry_values = set(saved)
    reread = {
        node: primals[final_contents[node]]
        for node in saved
        # r[autograd.saved-inputs.both-values]: not when the entry value is saved too
        if node in final_contents and primals[final_contents[node]] not in entry_values
    }
    new_saved: dict[torch.fx.Node, None] = {}
    for node in saved:
        new_saved[reread.get(node, node)] = None
    return list(new_saved), reread


def _ancestors(roots: list) -> set[torch.fx.Node]:
    """The nodes `roots` are computed from, roots included."""
    found: set[torch.fx.Node] = set()
    stack = [node for node in roots if isinstance(node, torch.fx.Node)]
    while stack:
        node = stack.pop()
        if node in found:
            continue
        found.add(node)
        stack.extend(node.all_input_nodes)
    return found


def _save_bases_of_views(saved: list[torch.fx.Node], final_contents: dict) -> list[torch.fx.Node]:
    """r[autograd.partition.recompute-views]: a saved view is replaced by its base, recursively,
    down to the last contents of a caller storage at most: an alias of it standing for the
    storage as an in-place metadata op left it is a base (`r[autograd.metadata.inputs]`)."""
    bases: dict[torch.fx.Node, None] = {}  # ordered, with O(1) membership
    for node in saved:
        while (
            node.op == "call_function"
            and node.target is not getitem
            and node not in final_contents
            and _is_view(node)
        ):
            node = node.args[0]
        bases[node] = None
    return list(bases)


def _is_view(node: torch.fx.Node) -> bool:
    entry = lookup(node.target, where=node.name)
    return entry.kind is OpKind.VIEW


def _forward_effects(joint: torch.fx.Graph, tangents: list[torch.fx.Node]) -> list:
    """The forward's ops that run even when nothing uses their value (the nodes computed from no
    tangent): r[ops.random], a draw, drawing as in eager; r[collectives.program-order], a
    collective, which the other ranks wait for."""
    from_tangents = set(tangents)
    found = []
    for node in joint.nodes:
        if any(used in from_tangents for used in node.all_input_nodes):
            from_tangents.add(node)
        elif _draws(node) or communicates(node):
            found.append(node)
    return found


def _backward_checks(joint: torch.fx.Graph, tangents: list[torch.fx.Node]) -> list:
    """r[ops.aten-derivatives.value-checks.phases]: the checks of the values that a derivative
    makes in the backward (the nodes computed from a tangent that assert), which run although no
    gradient reads them."""
    from_tangents = set(tangents)
    found = []
    for node in joint.nodes:
        if any(used in from_tangents for used in node.all_input_nodes):
            from_tangents.add(node)
            if node.target is aten._assert_async.msg:
                found.append(node)
    return found


def _draws(node: torch.fx.Node) -> bool:
    """A random op (`r[ops.random]`)."""
    tags = getattr(node.target, "tags", ())
    return node.op == "call_function" and torch.Tag.nondeterministic_seeded in tags


def _extract(
    joint_module: torch.fx.GraphModule,
    inputs: list[torch.fx.Node],
    outputs: list[torch.fx.Node],
    reread=None,
    keep=(),
) -> torch.fx.GraphModule:
    """A graph computing `outputs` from `inputs`, and the nodes of `keep`, copying the nodes in
    between in their order; each node of `reread` is read as the whole storage of the input it
    maps to. Constants the copied nodes read (a random op's generator) come from
    `joint_module`."""
    graph = joint_module.graph
    reread = reread or {}
    needed: set[torch.fx.Node] = set()
    stack = [o for o in [*outputs, *keep] if isinstance(o, torch.fx.Node)]
    input_set = set(inputs) | set(reread)
    while stack:
        node = stack.pop()
        if node in needed or node in input_set:
            continue
        needed.add(node)
        stack.extend(node.all_input_nodes)
    new = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in inputs:
        env[node] = new.placeholder(node.name)
        env[node].meta = dict(node.meta)
    for node, primal in reread.items():
        # the node is laid out contiguously over its input's whole storage: read it from there
        value = node.meta["val"]
        env[node] = new.call_function(
            aten.as_strided.default, (env[primal], list(value.shape), list(value.stride()), 0)
        )
        env[node].meta = dict(node.meta)
    for node in graph.nodes:
        if node in needed:
            if node.op == "placeholder":
                raise InternalError(
                    f"the backward graph reads {node.name}, which is neither saved nor a "
                    "tangent (r[autograd.partition.saved] saves every forward value it reads)"
                )
            env[node] = new.node_copy(node, env.__getitem__)
    new.output([env[o] for o in outputs])
    # the joint graph's module is the root: it holds the constants get_attr nodes read
    return graph_module(joint_module, new)
