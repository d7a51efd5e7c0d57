"""Standalone reproductions of differential failures, written to `repros/` (gitignored).

A repro file rebuilds the caller's tensors, runs the program on eager PyTorch and on the
reference, and asserts that every observable agrees. It imports only torch and aotspec, so it
runs alone: `.venv/bin/python repros/repro_<hash>.py`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from strategies import Program, source

REPRO_DIR = Path(__file__).resolve().parent.parent / "repros"

_TEMPLATE = '''\
"""Differential repro: eager PyTorch and the aotspec reference disagree on `program` below.

Found by tests/test_differential_eager.py. Run alone: .venv/bin/python {path}
Eager PyTorch is the oracle for values, mutations and aliasing (DESIGN.md section 5).
When found:
{found}
"""

import torch

from aotspec.conformance.observe import differences, observe, world_of
from aotspec.reference import run

{source}

def main():
    named, args = make_inputs()
    expected = observe(world_of(named, program(*args)))
    named, args = make_inputs()
    actual = observe(world_of(named, run(program, *args).outputs))
    found = differences(expected, actual)
    assert not found, "eager and the reference disagree:\\n" + "\\n".join(found)
    print("eager and the reference agree")


if __name__ == "__main__":
    main()
'''


def repro_source(program: Program, found: list[str], path: str) -> str:
    found_lines = "\n".join(f"    {line}" for line in found)
    return _TEMPLATE.format(path=path, found=found_lines, source=source(program))


def write_repro(program: Program, found: list[str], directory: Path = REPRO_DIR) -> Path:
    """Write `repro_<hash>.py` for `program` (the hash of its source) and return its path."""
    digest = hashlib.sha256(source(program).encode()).hexdigest()[:12]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"repro_{digest}.py"
    try:
        shown = path.relative_to(Path.cwd())
    except ValueError:
        shown = path
    path.write_text(repro_source(program, found, str(shown)))
    return path
