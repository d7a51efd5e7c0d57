"""The backward graph of a backward that reached only some of a compiled call's outputs.

`r[autograd.unreached-outputs.terms]`: the backward graph (`plan_records.Plan.backward`) is traced
with a tangent for every differentiable output; when a backward reaches only some of them, the
runtime runs this graph instead, made once per set of reached outputs
(`Plan.backward_reaching`). It is a transform of a plan's graph that the runtime asks for when a
call's backward runs, not a compile pass: it reads the graph and nothing the passes keep.
"""

from __future__ import annotations

import torch
import torch.fx

from .collectives import is_impure
from .graph import GraphProgram, graph_module, placeholders

aten = torch.ops.aten


def without_unreached_terms(
    backward: GraphProgram, num_saved: int, reached: tuple[bool, ...]
) -> GraphProgram:
    """r[autograd.unreached-outputs.terms]: `backward` for a backward in which only the tangents
    `reached` (by position) received a gradient. The backward is linear in its tangents, so a
    value computed from unreached tangents alone is a zero term: it is dropped where it is added
    to a term of reached ones, and any other op that also reads a reached term gets zeros for
    it. Computing it from the zeros that stand for the unreached tangents instead would give
    NaN where the forward's values it is multiplied by are inf or NaN."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(backward.graph, {}))
    tangents = placeholders(graph)[num_saved:]
    from_tangents = set(tangents)
    unreached = {t for t, was_reached in zip(tangents, reached, strict=True) if not was_reached}
    dropped = set()
    for node in list(graph.nodes):
        read = [used for used in node.all_input_nodes if used in from_tangents]
        if node.op != "call_function" or not read:
            continue
        from_tangents.add(node)
        zero_terms = [used for used in read if used in unreached]
        if len(zero_terms) == len(read):
            unreached.add(node)
        elif zero_terms and (kept := _other_term(node, unreached)) is not None:
            node.replace_all_uses_with(kept)  # r[autograd.unreached-outputs.terms]
            dropped.add(node)
        else:
            for term in zero_terms:
                with graph.inserting_before(node):
                    zeros = graph.call_function(aten.zeros_like.default, (term,))
                zeros.meta = dict(term.meta)
                node.replace_input_with(term, zeros)
    for node in list(reversed(graph.nodes)):
        zero = node in unreached or node in dropped
        # r[ops.aten-derivatives.value-checks.phases]: eager checks only gradients it was given
        if zero and not node.users and (not is_impure(node) or _checks_values(node)):
            graph.erase_node(node)
    return GraphProgram.of(graph_module(backward.graph_module, graph))


def _checks_values(node: torch.fx.Node) -> bool:
    return node.target is aten._assert_async.msg


def _other_term(node: torch.fx.Node, unreached: set) -> torch.fx.Node | None:
    """The term of `node` that reached tangents compute, where `node` adds it to one from
    unreached tangents alone and the sum is that term exactly (same sizes, strides, dtype)."""
    if node.target is not aten.add.Tensor or node.kwargs or len(node.args) != 2:
        return None
    kept = [arg for arg in node.args if arg not in unreached]
    if len(kept) != 1 or not isinstance(kept[0], torch.fx.Node):
        return None
    term, total = kept[0].meta.get("val"), node.meta.get("val")
    if not isinstance(term, torch.Tensor) or not isinstance(total, torch.Tensor):
        return None
    same = (term.shape, term.stride(), term.storage_offset(), term.dtype) == (
        total.shape,
        total.stride(),
        total.storage_offset(),
        total.dtype,
    )
    return kept[0] if same else None
