"""Standalone reproductions of differential failures, written to `repros/` (gitignored).

A repro file rebuilds the caller's tensors, runs the program on eager PyTorch and on the
reference, and asserts that every observable agrees. It imports only torch and aotspec, so it
runs alone: `.venv/bin/python repros/repro_<hash>.py`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from strategies import AVOIDED, Program, source

REPRO_DIR = Path(__file__).resolve().parent.parent / "repros"

_TEMPLATE = '''\
"""Differential repro: eager PyTorch and the aotspec reference disagree on `program` below.

Found by tests/test_differential_eager.py. Run alone: .venv/bin/python {path}
Eager PyTorch is the oracle for values, mutations and aliasing (DESIGN.md section 5).
When found:
{found}
"""

import attrs
import torch

from aotspec.conformance.observe import differences, observe, world_of
from aotspec.reference import run

#: Compare strides that address no element (size-1 dims, empty tensors)? The test did not: eager
#: and PyTorch's meta kernels disagree on them (tests/strategies.py, KNOWN_DIVERGENCES).
COMPARE_UNADDRESSED_STRIDES = {compare_strides}


{source}

def comparable(observation):
    if COMPARE_UNADDRESSED_STRIDES:
        return observation

    def canonical(facts):
        empty = 0 in facts.shape
        strides = tuple(0 if empty or n == 1 else s for n, s in zip(facts.shape, facts.strides))
        return attrs.evolve(facts, strides=strides)

    tensors = {{name: canonical(facts) for name, facts in observation.tensors.items()}}
    return attrs.evolve(observation, tensors=tensors)


def main():
    named, args = make_inputs()
    expected = comparable(observe(world_of(named, program(*args))))
    named, args = make_inputs()
    actual = comparable(observe(world_of(named, run(program, *args).outputs)))
    found = differences(expected, actual)
    assert not found, "eager and the reference disagree:\\n" + "\\n".join(found)
    print("eager and the reference agree")


if __name__ == "__main__":
    main()
'''


def repro_source(program: Program, found: list[str], path: str) -> str:
    found_lines = "\n".join(f"    {line}" for line in found)
    compare_strides = "strides-addressing-nothing" not in AVOIDED
    return _TEMPLATE.format(
        path=path, found=found_lines, source=source(program), compare_strides=compare_strides
    )


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
