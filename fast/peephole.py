"""Views the generated code need not make: an op's argument passed as the value it views.

A backward graph transposes a weight to compute with it, and the derivative of that transpose
transposes it back: `t_5 = t(t(w))` feeds `mm(g, t_5)`. `t_5` has `w`'s sizes, strides, storage
offset and storage, so `mm(g, w)` reads the same elements, and writes and returns nothing of its
arguments: the two calls of `t` are left out. A view is passed as its source where it is, at
every call, laid out as the source:

- a view that undoes the view that made its input: `t` of `t`, `transpose` of a `transpose` of
  the same two dims;
- a view that lays its input out as it is: `expand` to the input's own sizes.

The graph's outputs are left as they are: a gradient that eager returns as a view (a weight's,
`t` of `t` of `mm`'s result) stays a view, as `torch.autograd.grad` and a tensor hook see it. An
argument is passed as its source only to an op that neither writes it nor returns an alias of it
(its schema says so), or to a view (whose result, laid out from its input's layout, has the same
base); a view left without a use by that is not made. The plan is unchanged: its graph, run by
the reference, makes every view; a dispatch mode around a fast call sees the ops that run.
"""

from __future__ import annotations

import torch
import torch.fx

from aotspec.reference.optable import OpKind, lookup

aten = torch.ops.aten


def views_undone(graph: torch.fx.Graph) -> torch.fx.Graph:
    """`graph`, or a copy of it where the ops' arguments that are views laid out as their
    source are passed as the source, and the views no longer used are not made."""
    sources = _sources(graph)
    if not any(_passing(user, view) for view in sources for user in view.users):
        return graph
    copy = torch.fx.Graph()
    copied: dict[torch.fx.Node, torch.fx.Node] = {}
    copy.output(copy.graph_copy(graph, copied))
    for view, source in sources.items():
        for user in list(copied[view].users):
            _pass_source(user, copied[view], copied[source])
    # a value nobody read is made, and dies there, as before
    unused = {copied[node] for node in graph.nodes if not node.users and node.op != "output"}
    for node in reversed(list(copy.nodes)):
        if not node.users and node not in unused and _is_view(node):
            copy.erase_node(node)
    return copy


def _sources(graph: torch.fx.Graph) -> dict[torch.fx.Node, torch.fx.Node]:
    """Per view laid out as a value it views (at every call), that value (itself no such view)."""
    sources: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in graph.nodes:
        source = _undone(node) if node.op == "call_function" else None
        if source is not None:
            sources[node] = sources.get(source, source)
    return sources


def _undone(node: torch.fx.Node) -> torch.fx.Node | None:
    """The value `node` is laid out as: the input of the view it undoes (`t` of `t`, `transpose`
    of the same `transpose`), or its input where it lays that out as it is (`expand` to the
    input's sizes); None for any other node."""
    target, args = node.target, node.args
    if target not in (aten.t.default, aten.transpose.int, aten.expand.default) or node.kwargs:
        return None
    made = args[0]
    if not isinstance(made, torch.fx.Node) or not isinstance(made.meta.get("val"), torch.Tensor):
        return None
    if target is aten.expand.default:
        sizes, shape = args[1], made.meta["val"].shape
        own = len(sizes) == len(shape) and all(
            type(n) is int and type(m) is int and n in (m, -1)
            for n, m in zip(sizes, shape, strict=True)
        )
        return made if own else None
    if made.target is not target or made.kwargs:
        return None
    if target is aten.transpose.int:
        rank = max(made.meta["val"].dim(), 1)  # a 0-dim tensor's dims are 0 and -1
        if {d % rank for d in args[1:]} != {d % rank for d in made.args[1:]}:
            return None
    return made.args[0]


def _passing(user: torch.fx.Node, view: torch.fx.Node) -> bool:
    """Whether `user` reads `view` in an argument that may be passed as the view's source."""
    return any(passes and _reads(value, view) for value, passes in _arguments(user))


def _pass_source(user: torch.fx.Node, view: torch.fx.Node, source: torch.fx.Node) -> None:
    def swapped(value):
        return torch.fx.node.map_arg(value, lambda n: source if n is view else n)

    arguments = [swapped(value) if passes else value for value, passes in _arguments(user)]
    user.args = tuple(arguments[: len(user.args)])
    user.kwargs = dict(zip(user.kwargs, arguments[len(user.args) :], strict=True))


def _arguments(user: torch.fx.Node) -> list[tuple[object, bool]]:
    """`user`'s arguments, positional then by name, each with whether a view in it may be passed
    as its source: to an op of the table's views, or in an argument its schema neither writes
    nor aliases."""
    values = [*user.args, *user.kwargs.values()]
    target = user.target
    if user.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return [(value, False) for value in values]
    if lookup(target, where=user.name).kind is OpKind.VIEW:
        return [(value, True) for value in values]
    schema = {argument.name: argument for argument in target._schema.arguments}
    names = [argument.name for argument in target._schema.arguments[: len(user.args)]]
    names += list(user.kwargs)
    return [
        (value, schema[name].alias_info is None) for value, name in zip(values, names, strict=True)
    ]


def _reads(value, view: torch.fx.Node) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_reads(item, view) for item in value)
    return value is view


def _is_view(node: torch.fx.Node) -> bool:
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    return lookup(target, where=node.name).kind is OpKind.VIEW
