"""A graph the reference runs: a `torch.fx` graph of aten ops with the op table entry of each node.

The shared currency of the reference: the interpreter runs a `GraphProgram`, autograd and the
hook pass produce them, and the fast backend generates code from their graph modules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from operator import getitem

import torch.fx
import torch.fx.traceback as fx_traceback
from attrs import frozen
from torch.fx._lazy_graph_module import _make_graph_module

from .optable import OpEntry, lookup


@frozen
class GraphProgram:
    """A graph module and the op table entry of each of its call_function nodes."""

    graph_module: torch.fx.GraphModule
    entries: dict[torch.fx.Node, OpEntry]

    @property
    def graph(self) -> torch.fx.Graph:
        return self.graph_module.graph

    @classmethod
    def of(cls, graph_module: torch.fx.GraphModule, where: str = "graph node") -> GraphProgram:
        """Looks every op up in the table (`r[ops.table]`): an op outside it raises here."""
        entries = {
            node: lookup(node.target, where=source_line(node, unnamed=f"{where} {node.name}"))
            for node in graph_module.graph.nodes
            if node.op == "call_function" and node.target is not getitem
        }
        return cls(graph_module, entries)


def graph_module(root: torch.nn.Module, graph: torch.fx.Graph) -> torch.fx.GraphModule:
    """`torch.fx.GraphModule(root, graph)`, lazy where the pipeline traces (`build_plan`): its
    Python code is generated when first read or run, as for the modules `make_fx` returns."""
    return _make_graph_module(root, graph)


def output_node(graph: torch.fx.Graph) -> torch.fx.Node:
    """The graph's output node (always its last)."""
    return next(iter(reversed(graph.nodes)))


def placeholders(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    return [node for node in graph.nodes if node.op == "placeholder"]


def traced_from(nodes: Iterable[torch.fx.Node], pass_name: str) -> Iterator[torch.fx.Node]:
    """The nodes of a graph a pass replays, each yielded inside `fx_traceback.set_current_meta`:
    while the loop's body handles it, under `fx_traceback.preserve_node_meta()`, every node traced
    carries its stack trace (the user's source line) and a `from_node` entry naming it and the
    pass, as AOTAutograd keeps them, so `aotspec explain` can say which line of the user's program
    and which pass put each node of a plan there. Nothing runs differently.

    The entry shares the node's own `from_node` history where `set_current_meta` would
    deep-copy it: on the Dynamo graphs of real models that copy is 5% of a compile, and no pass
    changes a history once it is recorded."""
    for node in nodes:
        history = node.meta.pop("from_node", None) if len(node.meta) > 1 else None
        try:
            with fx_traceback.set_current_meta(node, pass_name):
                if history is not None:
                    node.meta["from_node"] = history
                    current = fx_traceback.get_current_meta().get("from_node")
                    if current:
                        current[0].from_node = list(history)
                yield node
        finally:
            if history is not None:
                node.meta["from_node"] = history


_FRAME = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n\s*(?P<code>.*)'
)


def source_line(node: torch.fx.Node, unnamed: str | None = None) -> str:
    """`called from file.py:12 in f: y = x.cumsum(0)`: the user's line that put the node there
    (its stack trace, which capture and the passes keep); `unnamed`, or the node's name, if no
    trace was kept."""
    frames = list(_FRAME.finditer(node.stack_trace or ""))
    if not frames:
        return unnamed or f"graph node {node.name}"
    frame = frames[-1]
    return (
        f"called from {frame['file']}:{frame['line']} in {frame['func']}: {frame['code'].strip()}"
    )
