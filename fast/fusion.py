"""Pointwise fusion: chains of elementwise aten ops become one `FusedKernel` call each.

    fused = fuse_pointwise(graph_module, use_triton=triton_requested(graph_module))

`fuse_pointwise` returns a new GraphModule (the argument is left as it is) in which each maximal
group of connected pointwise ops of one shape, two ops or more, or a single cast, is one
`call_function` node whose target is a `FusedKernel`:

    sin = fused_mul_sin_0(x_1, w_1)

A group's values that nodes outside it read become the kernel's outputs: one output is the
node's value, several are a tuple read by getitem nodes. Every node keeps `meta["val"]`.

A `FusedKernel` runs its ops one of two ways, with the same results:
- the Triton kernel of `fast/triton_kernels.py`, when it was built with `use_triton=True` and its
  tensors are on CUDA, or on CPU with TRITON_INTERPRET=1 (Triton's interpreter: for tests);
- otherwise the original torch ops, in order (the CPU path): exactly eager PyTorch's numbers.

`triton_requested(graph_module)` is the `use_triton` the fast backend passes: True when the
environment sets AOTSPEC_TRITON=1 (Triton kernels even on CPU; they then run only where
TRITON_INTERPRET=1 is set too) or when the graph's inputs live on CUDA.

Fused: the ops of `triton_kernels.POINTWISE_RULES` (arithmetic, comparisons, casts, where, ...)
on float32, float16, bfloat16, integer and bool tensors, whose result is contiguous; their inputs
may broadcast. Left to torch: views, in-place ops, reductions, matmuls, random ops, float64, and
anything whose arguments the table does not cover (see `_compute_dtype`).
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Callable

import torch
import torch.fx
from attrs import define, field, frozen

from .triton_kernels import (
    KERNEL_DTYPES,
    POINTWISE_RULES,
    ComputeIn,
    Input,
    InputLayout,
    KernelProgram,
    Step,
    Value,
    contiguous_strides,
    interpreting,
    kernel_source,
    launch,
    opmath,
)

aten = torch.ops.aten


def triton_requested(graph_module: torch.fx.GraphModule) -> bool:
    """Should `fuse_pointwise` build Triton kernels: AOTSPEC_TRITON=1, or inputs on CUDA?"""
    if os.environ.get("AOTSPEC_TRITON") == "1":
        return True
    inputs = [node.meta.get("val") for node in graph_module.graph.find_nodes(op="placeholder")]
    return any(isinstance(value, torch.Tensor) and value.device.type == "cuda" for value in inputs)


# ---------------------------------------------------------------- the fused call


@frozen(slots=False)  # an instance dict, for its own __module__ (see __attrs_post_init__)
class FusedKernel:
    """A group of pointwise ops as one callable: `kernel(*tensors)` returns the group's outputs,
    one tensor or a tuple."""

    #: `fused_mul_sin_0`: the ops, and a number unique in its graph.
    name: str
    program: KernelProgram
    #: The inputs' layouts at capture; `source` is the kernel for these.
    input_layouts: tuple[InputLayout, ...] = field(repr=False)
    use_triton: bool = field(repr=False)
    #: The CPU path: the program's torch ops as straight-line fx code, which drops each value
    #: right after its last use.
    run_torch_ops: Callable = field(init=False, eq=False, repr=False)

    @run_torch_ops.default
    def _straight_line(self) -> Callable:
        return torch_ops_function(self.program, len(self.input_layouts))

    # fx spells a call_function target `<__module__>_<__name__>` in generated code; with these
    # two, `fused_mul_sin_0(x_1, w_1)`. The class keeps its own __module__.
    def __attrs_post_init__(self):
        object.__setattr__(self, "__module__", "fused")

    @property
    def __name__(self) -> str:
        return self.name.removeprefix("fused_")

    def __repr__(self) -> str:
        ops = ", ".join(str(step.op) for step in self.program.steps)
        return f"FusedKernel({self.name!r}, {ops})"

    @property
    def source(self) -> str:
        """The Triton kernel, for reading: the one this process would run."""
        return kernel_source(self.program, self.input_layouts, gpu=not interpreting())

    def __call__(self, *tensors: torch.Tensor):
        if not (self.use_triton and _triton_runs_on(tensors)):
            return self.run_torch_ops(*tensors)
        outputs = launch(self.program, tensors)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _triton_runs_on(tensors) -> bool:
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        return False
    (device,) = devices
    return device.type == "cuda" or interpreting()


def torch_ops_function(program: KernelProgram, n_inputs: int) -> Callable:
    """`program` as a Python function of its inputs that calls its torch ops in order."""
    graph = torch.fx.Graph()
    nodes: dict[Input | Value, torch.fx.Node] = {
        Input(i): graph.placeholder(f"in{i}") for i in range(n_inputs)
    }

    def node(argument):
        return nodes[argument] if isinstance(argument, Input | Value) else argument

    for k, step in enumerate(program.steps):
        args = tuple(node(argument) for argument in step.args)
        kwargs = {key: node(argument) for key, argument in step.kwargs}
        nodes[Value(k)] = graph.create_node("call_function", step.op, args, kwargs, name=f"v{k}")
    outputs = [nodes[Value(v)] for v in program.outputs]
    graph.output(outputs[0] if len(outputs) == 1 else tuple(outputs))
    return torch.fx.GraphModule(torch.nn.Module(), graph).forward


# ---------------------------------------------------------------- which ops fuse

#: The scalars a kernel inlines: a Triton literal must mean what PyTorch's scalar means.
INT32_RANGE = range(-(2**31), 2**31)

#: Kernels index with int32 offsets.
INDEX_LIMIT = 2**31

#: `_to_copy` and `clone` arguments that keep the op a plain copy or cast on one device.
PLAIN_COPY_OPTIONS = {
    "dtype": lambda value, source: True,
    "layout": lambda value, source: value in (None, torch.strided),
    "device": lambda value, source: value is None or torch.device(value) == source.device,
    "pin_memory": lambda value, source: not value,
    "non_blocking": lambda value, source: not value,
    "memory_format": lambda value, source: (
        value in (None, torch.preserve_format, torch.contiguous_format)
    ),
}


def _compute_dtype(node: torch.fx.Node) -> torch.dtype | None:
    """The dtype `node` computes in if a kernel can run it, else None."""
    rule = POINTWISE_RULES.get(node.target) if node.op == "call_function" else None
    value = node.meta.get("val")
    if (
        rule is None
        or not _kernel_tensor(value)
        or tuple(value.stride()) != contiguous_strides(value.shape)
    ):
        return None
    arguments = [*node.args, *node.kwargs.values()]
    if any(isinstance(argument, list | tuple) for argument in arguments):
        return None
    operands = [
        argument.meta.get("val") for argument in arguments if isinstance(argument, torch.fx.Node)
    ]
    if not all(_kernel_tensor(operand) and operand.device == value.device for operand in operands):
        return None
    if rule.compute_in is ComputeIn.SOURCE:
        return operands[0].dtype if _plain_copy(node, operands[0]) else None
    if not all(
        _inlinable(argument) for argument in arguments if not isinstance(argument, torch.fx.Node)
    ):
        return None
    compute = opmath(value.dtype if rule.compute_in is ComputeIn.RESULT else _promoted(node))
    if compute not in KERNEL_DTYPES or (rule.floats_only and not compute.is_floating_point):
        return None
    if compute == torch.bool and rule.compute_in is ComputeIn.RESULT:
        return None  # bool arithmetic (add is or, ...) has no Triton spelling here
    return compute


def _kernel_tensor(value) -> bool:
    if not isinstance(value, torch.Tensor) or value.dtype not in KERNEL_DTYPES:
        return False
    return value.device.type in ("cpu", "cuda") and _last_offset(value) < INDEX_LIMIT


def _last_offset(tensor: torch.Tensor) -> int:
    """The offset of the tensor's last element from its first (of the output, its numel)."""
    return max(
        tensor.numel(),
        sum(
            (size - 1) * stride
            for size, stride in zip(tensor.shape, tensor.stride(), strict=True)
        ),
    )


def _plain_copy(node: torch.fx.Node, source: torch.Tensor) -> bool:
    if len(node.args) != 1:
        return False
    return all(
        key in PLAIN_COPY_OPTIONS and PLAIN_COPY_OPTIONS[key](v, source)
        for key, v in node.kwargs.items()
    )


def _inlinable(argument) -> bool:
    if argument is None:
        return True
    if isinstance(argument, bool):
        return False
    if isinstance(argument, int):
        return argument in INT32_RANGE
    return isinstance(argument, float) and math.isfinite(argument)


def _promoted(node: torch.fx.Node) -> torch.dtype:
    """The dtype PyTorch promotes a comparison's operands to (tensors or scalars)."""
    operands = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in node.args]
    return torch.result_type(*operands) if len(operands) == 2 else operands[0].dtype


# ---------------------------------------------------------------- grouping


@define(eq=False)
class _Group:
    """Nodes fused together, a union-find set; members come in graph order at the end."""

    shape: tuple[int, ...]
    device: torch.device
    #: False once a node outside the group has read one of its values: a later node joining it
    #: would move that value past its reader.
    open: bool = True
    #: The group this one was merged into.
    parent: _Group | None = None

    def root(self) -> _Group:
        root = self
        while root.parent is not None:
            root = root.parent
        group = self
        while group is not root:  # path compression keeps the pass linear in practice
            group.parent, group = root, group.parent
        return root


def _fusible_groups(graph: torch.fx.Graph) -> tuple[list[list[torch.fx.Node]], dict]:
    """The groups worth a kernel, members in graph order; and each member's compute dtype."""
    group_of: dict[torch.fx.Node, _Group] = {}
    compute_dtypes: dict[torch.fx.Node, torch.dtype] = {}
    for node in graph.nodes:
        read = list(
            dict.fromkeys(group_of[a].root() for a in node.all_input_nodes if a in group_of)
        )
        compute = _compute_dtype(node)
        joined = []
        if compute is not None:
            value = node.meta["val"]
            shape, device = tuple(value.shape), value.device
            joined = [g for g in read if g.open and g.shape == shape and g.device == device]
            group = joined[0] if joined else _Group(shape, device)
            for other in joined[1:]:
                other.parent = group
            group_of[node] = group
            compute_dtypes[node] = compute
        for group in read:
            if group not in joined:
                group.open = False
    members: dict[_Group, list[torch.fx.Node]] = {}
    for node, group in group_of.items():
        members.setdefault(group.root(), []).append(node)
    groups = [
        nodes
        for nodes in members.values()
        if len(nodes) >= 2 or nodes[0].target == aten._to_copy.default
    ]
    return groups, compute_dtypes


# ---------------------------------------------------------------- rewriting


def fuse_pointwise(
    graph_module: torch.fx.GraphModule, use_triton: bool = False
) -> torch.fx.GraphModule:
    """A copy of `graph_module` with each group of pointwise ops fused into one `FusedKernel`."""
    graph = graph_module.graph
    groups, compute_dtypes = _fusible_groups(graph)
    fused_away = {node for nodes in groups for node in nodes}
    # A group's call takes the place of its last member: every node outside the group that
    # reads one of its values comes later (see `_Group.open`).
    group_ending_at = {nodes[-1]: nodes for nodes in groups}
    fused = torch.fx.Graph()
    fused.set_codegen(graph._codegen)  # a boxed graph stays boxed
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    kernels = 0
    for node in graph.nodes:
        if node in group_ending_at:
            _emit_kernel(fused, group_ending_at[node], compute_dtypes, env, kernels, use_triton)
            kernels += 1
        elif node not in fused_away:
            env[node] = fused.node_copy(node, lambda n: env[n])
    return torch.fx.GraphModule(graph_module, fused)


def _program_of(nodes, compute_dtypes) -> tuple[KernelProgram, list[torch.fx.Node]]:
    """The group's program, and its inputs: the nodes outside it that it reads, in order."""
    members = set(nodes)
    operand_of: dict[torch.fx.Node, Input | Value] = {}
    inputs: list[torch.fx.Node] = []
    steps = []

    def operand(argument):
        return operand_of[argument] if isinstance(argument, torch.fx.Node) else argument

    for node in nodes:
        for argument in node.all_input_nodes:
            if argument not in operand_of:
                operand_of[argument] = Input(len(inputs))
                inputs.append(argument)
        args = tuple(operand(argument) for argument in node.args)
        kwargs = tuple((key, operand(argument)) for key, argument in node.kwargs.items())
        steps.append(Step(node.target, args, kwargs, node.meta["val"].dtype, compute_dtypes[node]))
        operand_of[node] = Value(len(steps) - 1)
    outputs = tuple(
        k for k, node in enumerate(nodes) if any(user not in members for user in node.users)
    )
    return KernelProgram(tuple(steps), outputs, tuple(nodes[0].meta["val"].shape)), inputs


def _emit_kernel(
    fused: torch.fx.Graph, nodes, compute_dtypes, env, number: int, use_triton: bool
) -> None:
    """Append the group's FusedKernel call to `fused`, and map the group's outputs in `env`.

    One output is the call's value, named after the node it replaces; several are getitems.
    """
    program, inputs = _program_of(nodes, compute_dtypes)
    layouts = tuple(InputLayout.of(node.meta["val"], program.shape) for node in inputs)
    kernel = FusedKernel(f"fused_{program.name}_{number}", program, layouts, use_triton)
    outputs = [nodes[v] for v in program.outputs]
    name = outputs[0].name if len(outputs) == 1 else None
    call = fused.create_node(
        "call_function", kernel, tuple(env[node] for node in inputs), name=name
    )
    if len(outputs) == 1:
        call.meta["val"] = outputs[0].meta["val"]
        env[outputs[0]] = call
        return
    call.meta["val"] = tuple(node.meta["val"] for node in outputs)
    for k, node in enumerate(outputs):
        item = fused.create_node("call_function", operator.getitem, (call, k), name=node.name)
        item.meta["val"] = node.meta["val"]
        env[node] = item
