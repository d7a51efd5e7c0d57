"""Every plan the pipeline builds, as text: to show that a change leaves the plans as they were.

Run on demand: `.venv/bin/python tools/plan_dump.py DIR [--programs N] [--no-conformance]`
writes one file per single-rank conformance case (run on the reference, `conf_NAME`) and per
fuzz program 0..N-1 of campaign 0 (`fuzz_NNN`, default N = 300), holding each plan built for
it: every record field, and each graph node by node (op, target, arguments, and every
`node.meta` entry, a tensor by its layout, dtype, device and autograd flags). Dump before and
after the change, then `diff -r BEFORE AFTER`.

What differs from process to process is left out or renumbered: object addresses, the graph
ids of `meta["from_node"]`, and autograd's global sequence numbers (`meta["seq_nr"]`, numbered
in order of appearance in each file, so that nodes sharing one still show it).
"""

from __future__ import annotations

import argparse
import re
import warnings
from pathlib import Path

import attrs
import torch
import torch.fx
from torch.fx._lazy_graph_module import _use_lazy_graph_module

from aotspec.reference import pipeline

_ADDRESSES = re.compile(r" at 0x[0-9a-f]+|0x[0-9a-f]{6,}|(?<=graph_id=)\d+")


def _value(v) -> str:
    """A node argument or meta entry as text, tensors by their facts."""
    if isinstance(v, torch.Tensor):
        return (
            f"T({type(v).__name__}, {tuple(v.shape)}, {v.stride()}, {v.storage_offset()}, "
            f"{v.dtype}, {v.device}, {_autograd_flags(v)}, view={v._is_view()}, "
            f"conj={v.is_conj()}, neg={v.is_neg()})"
        )
    if isinstance(v, torch.fx.Node):
        return f"%{v.name}"
    if isinstance(v, (list, tuple)):
        return f"{type(v).__name__}[{', '.join(map(_value, v))}]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_value(k)}: {_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (set, frozenset)):
        return "set{" + ", ".join(sorted(map(_value, v))) + "}"
    if callable(v) and hasattr(v, "__qualname__"):
        return f"{getattr(v, '__module__', '')}.{v.__qualname__}"
    return _ADDRESSES.sub("@", repr(v))


def _autograd_flags(t: torch.Tensor) -> str:
    try:
        return f"requires_grad={t.requires_grad}, leaf={t.is_leaf}"
    except RuntimeError:  # a no_grad view whose base was written with grad mode on
        return "autograd state unreadable"


def _graph(module: torch.fx.GraphModule, lines: list[str], indent: str) -> None:
    for node in module.graph.nodes:
        lines.append(
            f"{indent}{node.name} = {node.op} {_value(node.target)} "
            f"args={_value(node.args)} kwargs={_value(node.kwargs)}"
        )
        lines.extend(f"{indent}    meta[{key}] = {_value(node.meta[key])}" for key in node.meta)
    for name, buffer in sorted(module.named_buffers()):
        lines.append(f"{indent}buffer {name} = {_value(buffer)}")


def _nested(value) -> bool:
    return attrs.has(type(value)) or isinstance(value, (torch.fx.GraphModule, dict, list, tuple))


def _record(x, lines: list[str], indent: str, seen: dict[int, int]) -> None:
    """`x`, a record, graph module or container of them, into `lines`; each record or graph
    module shared by several fields is written once, then named by its number."""
    if isinstance(x, torch.fx.GraphModule) or attrs.has(type(x)):
        if id(x) in seen:
            lines.append(f"{indent}<{type(x).__name__} #{seen[id(x)]}>")
            return
        seen[id(x)] = len(seen)
        lines.append(f"{indent}{type(x).__name__} #{seen[id(x)]}:")
        if isinstance(x, torch.fx.GraphModule):
            _graph(x, lines, indent + "  ")
            return
        for field in attrs.fields(type(x)):
            lines.append(f"{indent}  .{field.name}:")
            _record(getattr(x, field.name), lines, indent + "    ", seen)
    elif isinstance(x, dict) and any(map(_nested, [*x, *x.values()])):
        lines.append(f"{indent}dict:")
        for key, item in x.items():
            lines.append(f"{indent}  [{_value(key)}]:")
            _record(item, lines, indent + "    ", seen)
    elif isinstance(x, (list, tuple)) and any(map(_nested, x)):
        lines.append(f"{indent}{type(x).__name__}:")
        for item in x:
            _record(item, lines, indent + "  ", seen)
    else:
        lines.append(f"{indent}{_value(x)}")


def _sequence_numbers_renumbered(text: str) -> str:
    numbers: dict[str, int] = {}

    def renumber(found: re.Match) -> str:
        return f"meta[seq_nr] = #{numbers.setdefault(found[1], len(numbers))}"

    return re.sub(r"meta\[seq_nr\] = (\d+)", renumber, text)


def _write(path: Path, outcome: str, plans: list) -> None:
    lines = [outcome]
    for k, plan in enumerate(plans):
        lines.append(f"==== plan {k}")
        _record(plan, lines, "", {})
    path.write_text(_sequence_numbers_renumbered("\n".join(lines)) + "\n")
    plans.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--programs", type=int, default=300)
    parser.add_argument("--no-conformance", action="store_true")
    options = parser.parse_args()
    options.directory.mkdir(parents=True, exist_ok=True)
    plans: list = []
    build = pipeline._build_program_plan

    def recorded(*args, **kwargs):
        plans.append(build(*args, **kwargs))
        return plans[-1]

    pipeline._build_program_plan = recorded  # every plan, synthetic bases' rounds included
    warnings.simplefilter("ignore")
    if not options.no_conformance:
        from aotspec.conformance.cases import ALL_CASES
        from aotspec.conformance.runner import run_here

        for case in ALL_CASES:
            if case.ranks == 1:
                result = run_here(case, "reference")
                _write(options.directory / f"conf_{case.name}", result.status, plans)
    from aotspec.fuzz import judge
    from aotspec.fuzz.oracle import FuzzCase, run_reference

    for index in range(options.programs):
        _, subject, _ = judge.draw_at(0, index, judge.kinds_for("fast"))
        with _use_lazy_graph_module(True):
            run, _ = run_reference(FuzzCase(subject))
        _write(options.directory / f"fuzz_{index:03d}", f"error: {run.error}", plans)


if __name__ == "__main__":
    main()
