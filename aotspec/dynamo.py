"""`torch.compile(model, backend="aotspec")`: aotspec as a Dynamo backend.

Registered through the `torch_dynamo_backends` entry point (pyproject.toml), so Dynamo finds it
by name. Dynamo hands a backend the fx graph it captured (torch-level calls; parameters lifted to
inputs) and example inputs; `aotspec_backend` passes the graph to `aotspec.compile`, which
captures it to aten itself, plans it and runs it on the chosen backend, with the contract of
docs/contract.md (input mutations reach the caller, gradients flow through `.backward()`).

Choosing the aotspec backend: `torch.compile(..., options={"backend": "reference"})`. Dynamo
passes `options` (and `mode`, when one is given) through to a registered backend as keyword
arguments (`torch._TorchCompileWrapper`); without the option, `$AOTSPEC_BACKEND` decides, else
`"fast"`, as for `aotspec.compile`. `options` may also name `steal` and `hooks_filter`.

The example inputs are not used: `aotspec.compile` specializes on the real tensors of each call,
and on the Python numbers Dynamo passes as 0-d tensors, which the backend hands it as numbers
(`r[capture.dynamo-numbers]`).

Dynamo passes parameters and buffers as inputs; tensors its graph module holds as attributes
are inputs too (`r[capture.lift]`). Where those are all the graph reads besides its inputs,
they are read by name at every call and passed as an argument (`_FlatGraph`), so no call walks
the graph module's Python attributes (Dynamo's bookkeeping) to find them; a graph that calls
a module or holds a subgraph (a higher-order op's body) is compiled as a closure over the
graph module, whose tensors the walk lifts.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch
import torch.fx.traceback

import aotspec

#: The keys `options` may hold, each an `aotspec.compile` keyword argument.
OPTIONS = ("backend", "steal", "hooks_filter")


def aotspec_backend(
    graph_module: torch.fx.GraphModule, example_inputs, *, options: dict | None = None, mode=None
) -> Callable:
    """The Dynamo backend: `graph_module` compiled by `aotspec.compile` with `options`."""
    if mode is not None:
        raise ValueError(
            f"torch.compile(mode={mode!r}) is an inductor setting; "
            "the aotspec backend has no modes. "
            f"Leave mode out, and choose the aotspec backend with options={{'backend': ...}}"
        )
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(
            f"unknown options {unknown} for torch.compile(backend='aotspec'); valid options: "
            f"{', '.join(map(repr, OPTIONS))} (the keyword arguments of aotspec.compile)"
        )
    if _holds_only_tensors(graph_module):
        graph = _FlatGraph(graph_module)
        compiled = aotspec.compile(graph.run, **options)
    else:  # subgraphs (a higher-order op's body) hold tensors of their own: lifted
        graph = None
        compiled = aotspec.compile(_keeping_source_lines(graph_module), **options)
    numbers = _numbers_passed_as_tensors(graph_module)
    compiled.dynamic = DynamoSizes.of(graph_module, numbers)
    return CompiledGraph(compiled, graph, numbers)


class DynamoSizes:
    """The sizes Dynamo made symbols in its graph (`r[sizes.symbolic.dynamo]`): the dims of the
    example inputs whose sizes are symbolic, and the numbers it passes as symbolic ints (a size
    the graph reads), which aotspec traces as symbols too. Tensors the graph holds (passed
    first, `_FlatGraph`, or lifted) keep their sizes."""

    def __init__(self, dims: list[frozenset[int]], numbers: list[int], arguments: int):
        #: Per tensor argument, its dims that are symbols.
        self.arguments_dims = dims
        #: Positions among the arguments of the numbers that are symbols.
        self.arguments_numbers = numbers
        self.arguments = arguments

    @classmethod
    def of(cls, graph_module: torch.fx.GraphModule, numbers: frozenset[int]) -> DynamoSizes | None:
        """Read off the values Dynamo traced its graph's inputs as, of which `numbers` are
        numbers it passes as 0-d tensors (constants of the capture, `r[capture.dynamo-numbers]`);
        None where no size is a symbol."""
        examples = [
            node.meta.get("example_value")
            for node in graph_module.graph.nodes
            if node.op == "placeholder"
        ]
        dims, symbolic_numbers = [], []
        for i, example in enumerate(examples):
            if isinstance(example, torch.Tensor) and i not in numbers:
                shape = example.shape
                symbolic = (d for d, n in enumerate(shape) if isinstance(n, torch.SymInt))
                dims.append(frozenset(symbolic))
            elif isinstance(example, torch.SymInt):
                symbolic_numbers.append(i)
        if not (any(dims) or symbolic_numbers):
            return None
        return cls(dims, symbolic_numbers, len(examples))

    def dims(self, tensors: list[torch.Tensor], lifted: int) -> list[frozenset[int]]:
        """Per flat tensor of a call, its dims that are symbols: the arguments come last."""
        held = len(tensors) - len(self.arguments_dims)
        return [frozenset()] * held + list(self.arguments_dims)

    def numbers(self, leaves: int) -> frozenset[int]:
        """Positions among a call's `leaves` flat leaves of the numbers that are symbols."""
        held = leaves - self.arguments
        return frozenset(held + i for i in self.arguments_numbers)


class CompiledGraph:
    """What the backend hands Dynamo: `compiled` (the `aotspec.compile`d graph) called with
    the graph's tensor attributes first when it takes them as an argument (`_FlatGraph`), and
    with numbers where Dynamo passes 0-d tensors (`r[capture.dynamo-numbers]`)."""

    def __init__(self, compiled: aotspec.CompiledFunction, graph, numbers: frozenset[int]):
        self.compiled = compiled
        self.graph = graph
        self.numbers = numbers
        #: Whether the call takes tensors only, from Dynamo (a size it made a symbol comes as
        #: an int), through `_FlatGraph`, stealing none: then its leaves are known.
        self.tensors_only = (
            graph is not None
            and not numbers
            and not compiled.steal
            and all(
                isinstance(node.meta.get("example_value"), torch.Tensor)
                for node in graph.graph_module.graph.nodes
                if node.op == "placeholder"
            )
        )

    def __call__(self, *args):
        if self.numbers:
            # r[capture.dynamo-numbers]: each such input is its number again, a constant of the
            # capture, so a call with another number compiles again (aotspec.compile's guard)
            args = [arg.item() if i in self.numbers else arg for i, arg in enumerate(args)]
        if self.tensors_only:  # `_FlatGraph.run` reaches no tensor from its code
            return self.compiled.call_held_first(self.graph.attributes(), args)
        if self.graph is None:
            return self.compiled(*args)
        return self.compiled(self.graph.attributes(), *args)


def _numbers_passed_as_tensors(graph_module: torch.fx.GraphModule) -> frozenset[int]:
    """The positions of the graph's inputs that stand for a Python number of the user's call,
    which Dynamo passes as a 0-d tensor once it has seen the number change (`r[capture.dynamo-
    numbers]`)."""
    placeholders = [node for node in graph_module.graph.nodes if node.op == "placeholder"]
    return frozenset(
        i
        for i, node in enumerate(placeholders)
        if getattr(node.meta.get("grapharg"), "pass_arg_as_tensor", False)
    )


class _Interpreter(torch.fx.Interpreter):
    """Runs Dynamo's graph on the user's numbers where it reads them from 0-d tensors, and on
    `attributes` (name -> tensor) where it reads the graph module's tensors."""

    def __init__(self, graph_module: torch.fx.GraphModule, attributes: dict | None = None):
        super().__init__(graph_module)
        self.attributes = attributes or {}

    def call_method(self, target, args, kwargs):
        if target == "item" and isinstance(args[0], int | float | bool):
            return args[0]  # r[capture.dynamo-numbers]: the number itself
        return super().call_method(target, args, kwargs)

    def get_attr(self, target, args, kwargs):
        if target in self.attributes:
            return self.attributes[target]
        return super().get_attr(target, args, kwargs)


def _holds_only_tensors(graph_module: torch.fx.GraphModule) -> bool:
    """Whether every attribute the graph reads is a tensor and it calls no module: then those
    tensors are all it reaches besides its inputs."""
    return all(
        node.op != "call_module"
        and (node.op != "get_attr" or isinstance(_attribute(graph_module, node), torch.Tensor))
        for node in graph_module.graph.nodes
    )


def _attribute(graph_module: torch.fx.GraphModule, node: torch.fx.Node):
    return operator.attrgetter(node.target)(graph_module)


class _FlatGraph:
    """Dynamo's graph as a function of its tensor attributes (a list, read from the graph module
    at every call) and its inputs, for a graph whose attributes are tensors only: what
    `aotspec.compile` would lift from the graph module (`r[capture.lift]`: looked up at every
    call), handed to it as an argument instead, so that no call walks the graph module, whose
    other attributes are Dynamo's and no op reads. The method `run` is what is compiled: the
    walk that `r[capture.lift]` makes at every call finds no tensor through it (this object is
    not a module), and reads only `run`'s own globals."""

    def __init__(self, graph_module: torch.fx.GraphModule):
        self.graph_module = graph_module
        nodes = graph_module.graph.nodes
        self.names = tuple(dict.fromkeys(node.target for node in nodes if node.op == "get_attr"))
        self.read = operator.attrgetter(*self.names) if self.names else None

    def attributes(self) -> list[torch.Tensor]:
        """The graph module's tensors the graph reads, as they are now."""
        if self.read is None:
            return []
        values = self.read(self.graph_module)
        return list(values) if len(self.names) > 1 else [values]

    def run(self, attributes: list, *args):
        """The graph on `attributes` (in the order of `names`) and `args`, node by node with
        each node's metadata in effect (`_keeping_source_lines`)."""
        with torch.fx.traceback.preserve_node_meta():
            named = dict(zip(self.names, attributes, strict=True))
            return _Interpreter(self.graph_module, named).run(*args)


def _keeping_source_lines(graph_module: torch.fx.GraphModule) -> Callable:
    """The graph's function, run node by node with each node's metadata in effect, so that the
    aten ops capture records from it carry the user's source line that Dynamo noted for the node
    (errors then name the user's line, not Dynamo's generated code: `r[ops.table]`)."""

    def forward(*args):
        with torch.fx.traceback.preserve_node_meta():
            return _Interpreter(graph_module).run(*args)

    forward.__qualname__ = getattr(graph_module.forward, "__qualname__", "forward")
    return forward
