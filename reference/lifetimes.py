"""The last-use table of a graph: where each value dies (`r[memory.eager.last-use]`).

A pass of the plan (docs/design.md section 4): the reference interpreter releases each value after
the node this table names, and the fast backend's generated code deletes it there.
"""

from __future__ import annotations

import torch.fx


def last_uses(graph: torch.fx.Graph) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    """For each node, the values whose last use it is (a value nobody uses dies where it is
    made)."""
    nodes = list(graph.nodes)
    dies_at: dict[torch.fx.Node, list[torch.fx.Node]] = {node: [] for node in nodes}
    seen: set[torch.fx.Node] = set()
    for node in reversed(nodes):
        for used in node.all_input_nodes:
            if used not in seen:
                seen.add(used)
                dies_at[node].append(used)
        if node not in seen and node.op != "output":
            seen.add(node)
            dies_at[node].append(node)
    return dies_at
