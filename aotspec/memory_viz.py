"""The reference's ledgers as a memory snapshot, the format `torch.cuda.memory._dump_snapshot`
writes, so PyTorch's memory viewer (pytorch.org/memory_viz, `torch.cuda._memory_viz`) shows a CPU
program with its exact liveness.

One device per ledger: device 0 is the forward's, device 1 the backward's (each in its own
account, `aotspec.memory_timeline`). Each storage the ledger allocates is one block at an address
of its own; a free is `free_requested` then `free_completed` (nothing is freed later than asked
on a CPU), a resize the free of the old block and the allocation of the new one. Each event's
frames name, innermost first, the graph node of the step and the user's source line it comes
from. `segments` holds the blocks alive when each ledger ends, one segment per block.
"""

from __future__ import annotations

import itertools
import pickle

import torch.fx

from aotspec.explain import user_frame
from aotspec.reference.ledger import Ledger

#: Blocks start at multiples of this, as in the CUDA caching allocator.
_ALIGNMENT = 512


def snapshot(graphs: list[tuple[str, torch.fx.Graph, Ledger]]) -> dict:
    """The snapshot of (graph name, graph, its ledger) pairs, one device each."""
    traces, segments = [], []
    addresses = itertools.count(_ALIGNMENT, _ALIGNMENT)  # one address space for all devices
    for device, (name, graph, ledger) in enumerate(graphs):
        trace, alive = _trace(name, list(graph.nodes), ledger, addresses)
        traces.append(trace)
        segments += [_segment(device, block) for block in alive.values()]
    return {"segments": segments, "device_traces": traces}


def dump(graphs: list[tuple[str, torch.fx.Graph, Ledger]], path: str) -> None:
    with open(path, "wb") as file:
        pickle.dump(snapshot(graphs), file)


def _trace(name: str, nodes: list[torch.fx.Node], ledger: Ledger, addresses) -> tuple[list, dict]:
    """The ledger's events as trace entries, and the blocks alive at its end by storage;
    `addresses` counts the free addresses up, in steps of `_ALIGNMENT`."""
    trace: list[dict] = []
    alive: dict[int, dict] = {}
    for time, event in enumerate(ledger.events):
        frames = _frames(name, nodes, event.step)
        old = alive.pop(event.storage, None)
        if old is not None:
            for action in ("free_requested", "free_completed"):
                trace.append(_entry(action, old["address"], old["size"], frames, time))
        if event.kind != "free" and event.nbytes > 0:
            address = next(addresses)
            for _ in range(1, _blocks(event.nbytes)):
                next(addresses)
            block = {"address": address, "size": event.nbytes, "frames": frames}
            alive[event.storage] = block
            trace.append(_entry("alloc", block["address"], block["size"], frames, time))
    return trace, alive


def _blocks(nbytes: int) -> int:
    """How many `_ALIGNMENT`-byte units `nbytes` takes."""
    return -(-nbytes // _ALIGNMENT)


def _entry(action: str, address: int, size: int, frames: list, time: int) -> dict:
    return {
        "action": action,
        "addr": address,
        "size": size,
        "stream": 0,
        "frames": frames,
        "time_us": time,
    }


def _frames(name: str, nodes: list[torch.fx.Node], step: int) -> list[dict]:
    """Innermost first: the graph node of `step`, then the user's line it comes from."""
    if step == 0:
        return [{"filename": f"<{name} graph>", "line": 0, "name": "the caller's tensors"}]
    node = nodes[step - 1]
    frames = [
        {
            "filename": f"<{name} graph>",
            "line": step,
            "name": node.name,
            "fx_node_op": node.op,
            "fx_node_name": node.name,
            "fx_original_trace": node.meta.get("stack_trace") or "",
        }
    ]
    source = user_frame(node)
    if source is not None:
        file, line, function, _ = source
        frames.append({"filename": file, "line": line, "name": function})
    return frames


def _segment(device: int, block: dict) -> dict:
    size = _blocks(block["size"]) * _ALIGNMENT
    blocks = [
        {
            "address": block["address"],
            "size": block["size"],
            "requested_size": block["size"],
            "state": "active_allocated",
            "frames": block["frames"],
        }
    ]
    if size > block["size"]:
        blocks.append(
            {
                "address": block["address"] + block["size"],
                "size": size - block["size"],
                "requested_size": 0,
                "state": "inactive",
                "frames": [],
            }
        )
    return {
        "device": device,
        "address": block["address"],
        "total_size": size,
        "allocated_size": block["size"],
        "active_size": block["size"],
        "requested_size": block["size"],
        "stream": 0,
        "segment_type": "small" if size <= 2**20 else "large",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "blocks": blocks,
    }
