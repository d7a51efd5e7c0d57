"""Standalone reproductions of differential failures, written to `repros/` (gitignored).

A repro file rebuilds the caller's tensors, runs the program on both sides of its test, and
asserts that every observable agrees. `repro_<hash>.py` (eager PyTorch against the reference's
eager interpreter) and `repro_compiled_<hash>.py` (against `aotspec.compile`, with the backward)
import only torch and aotspec; `repro_hooks_<hash>.py` and `repro_fast_<hash>.py` import their
check from tests/harness.py, finding tests/ beside repros/, and so does `repro_sizes_<hash>.py`
(one compiled function at several sizes). Each runs alone, from any directory:
`.venv/bin/python repros/repro_<hash>.py`.
"""

from __future__ import annotations

import base64
import hashlib
import pickle
from pathlib import Path

from hypothesis.control import current_build_context

from harness import FuzzCase, Hooked
from strategies.program import Program, source
from strategies.sizes import Sized, sized_source
from strategies.stealing import Stealing

REPRO_DIR = Path(__file__).resolve().parent.parent / "repros"

_TEMPLATE = '''\
"""Differential repro: eager PyTorch and the aotspec reference disagree on `program` below.

Found by tests/test_differential_eager.py. Run alone: .venv/bin/python {path}
Eager PyTorch is the oracle for values, mutations and aliasing (docs/design.md section 5).
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


_COMPILED_TEMPLATE = '''\
"""Differential repro: eager PyTorch and aotspec.compile(backend="reference") disagree on
`program` below.

Found by tests/test_differential_compiled.py. Run alone: .venv/bin/python {path}
Eager PyTorch is the oracle for values, mutations, aliasing and gradients
(docs/design.md section 5), with the spec's storage for a reduced loss's result
(aotspec.fuzz.oracle.eager_as_specified).
When found:
{found}
"""

import torch

import aotspec
from aotspec.conformance.observe import differences, observe, world_of
from aotspec.fuzz.oracle import eager_as_specified

{source}

def run(fn):
    """Call under GRAD_ENABLED, observe, backpropagate the sum of the outputs that require grad
    (twice with RETAIN_GRAPH), observe again; the grads after each backward."""
    named, args = make_inputs()
    with torch.set_grad_enabled(GRAD_ENABLED):
        outputs = fn(*args)
    world = world_of(named, outputs)
    seen = observe(world)
    requires_grad = {{name: t.requires_grad for name, t in world.items()}}
    losses = [out.sum() for out in outputs if out.requires_grad]
    grads = {{}}
    for k, retain in enumerate([True, False] if RETAIN_GRAPH else [False]):
        if losses:
            sum(losses).backward(retain_graph=retain)
        for name, t in named.items():
            if t.is_leaf and t.requires_grad:
                grad = None if t.grad is None else t.grad.clone()
                grads[f"{{name}}.grad after backward {{k + 1}}"] = grad
    return seen, observe(world), requires_grad, grads


def main():
    seen, _, requires_grad, grads = run(eager_as_specified(program))
    compiled = aotspec.compile(program, backend="reference")
    got, after_backward, got_requires_grad, got_grads = run(compiled)
    found = differences(seen, got)
    for line in differences(got, after_backward):
        found.append(f"changed by the compiled backward: {{line}}")
    for name, want in requires_grad.items():
        if got_requires_grad[name] != want:
            found.append(f"{{name}}.requires_grad: expected {{want}}, got {{not want}}")
    for name, want in grads.items():
        got_grad = got_grads[name]
        if want is None or got_grad is None:
            if (want is None) != (got_grad is None):
                found.append(f"{{name}}: expected {{want}}, got {{got_grad}}")
            continue
        try:
            torch.testing.assert_close(got_grad, want, equal_nan=True, check_stride=False)
        except AssertionError as error:
            found.append(f"{{name}}: {{error}}")
    assert not found, "eager and aotspec.compile disagree:\\n" + "\\n".join(found)
    print("eager and aotspec.compile agree")


if __name__ == "__main__":
    main()
'''


_HOOKS_TEMPLATE = '''\
"""Differential repro: eager PyTorch and aotspec.compile(backend="reference") disagree on
`program` below, called inside saved_tensors_hooks({pack}, ...), hooks_filter={hooks_filter!r}.

Found by tests/test_differential_hooks.py. Run alone: .venv/bin/python {path}
The oracle is eager PyTorch {oracle}.
When found:
{found}
"""

import sys
from pathlib import Path

import torch

import aotspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness import call_and_backward, compare, eager_as_specified, {pack}, {unpack}  # noqa: E402

{source}

def run(fn, hooks):
    named, args = make_inputs()
    options = {{"grad_enabled": GRAD_ENABLED, "retain_graph": RETAIN_GRAPH}}
    if hooks is None:
        return call_and_backward(fn, named, args, **options)
    with torch.autograd.graph.saved_tensors_hooks(*hooks):
        return call_and_backward(fn, named, args, **options)


def main():
    expected = run(eager_as_specified(program), {eager_hooks})
    compiled = aotspec.compile(program, backend="reference", hooks_filter={hooks_filter!r})
    actual = run(compiled, ({pack}, {unpack}))
    found = compare(expected, actual)
    assert not found, "eager and aotspec.compile disagree:\\n" + "\\n".join(found)
    print("eager and aotspec.compile agree")


if __name__ == "__main__":
    main()
'''


_PICKLED_TEMPLATE = '''\
"""Differential repro: {title}.

Found by tests/{test}.py; run alone: .venv/bin/python {{path}}
It reruns that test's check on the program below (pickled; its Python source follows).
When found:
{{found}}
"""

import base64
import pickle
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness import {check}  # noqa: E402

{name} = pickle.loads(base64.b64decode({{blob!r}}))

# The program, as Python:
{{source}}

if __name__ == "__main__":
    found = {check}({name}{options})
    assert not found, "{disagree}:\\n" + "\\n".join(found)
    print("{agree}")
'''

_FAST_TEMPLATE = _PICKLED_TEMPLATE.format(
    title='aotspec.compile(backend="fast") and backend="reference" disagree',
    test="test_differential_fast",
    check="fast_divergence",
    name="PROGRAM",
    options="",
    disagree="fast and the reference disagree",
    agree="fast and the reference agree",
)

def _sizes_template(dynamic: bool) -> str:
    """The repro of `test_differential_sizes`, its functions compiled with `dynamic`."""
    return _PICKLED_TEMPLATE.format(
        title="one compiled function called at several sizes disagrees somewhere",
        test="test_differential_sizes",
        check="sizes_divergence",
        name="SIZED",
        options=", dynamic=True" if dynamic else "",
        disagree="the compiled function disagrees",
        agree="eager, the reference and fast agree at every size",
    )


def is_final_run() -> bool:
    """True on hypothesis's last replay of the minimal failing example (write the repro once)."""
    try:
        return current_build_context().is_final
    except Exception:  # noqa: BLE001 (outside hypothesis, e.g. called by hand)
        return True


def repro_source(program: Program, found: list[str], path: str) -> str:
    found_lines = "\n".join(f"    {line}" for line in found)
    return _TEMPLATE.format(path=path, found=found_lines, source=source(program))


def compiled_repro_source(program: Program, found: list[str], path: str) -> str:
    found_lines = "\n".join(f"    {line}" for line in found)
    return _COMPILED_TEMPLATE.format(path=path, found=found_lines, source=source(program))


def _write(program: Program, found: list[str], directory: Path, prefix: str, render) -> Path:
    digest = hashlib.sha256(source(program).encode()).hexdigest()[:12]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{prefix}_{digest}.py"
    try:
        shown = path.relative_to(Path.cwd())
    except ValueError:
        shown = path
    path.write_text(render(program, found, str(shown)))
    return path


def write_repro(program: Program, found: list[str], directory: Path = REPRO_DIR) -> Path:
    """Write `repro_<hash>.py` for `program` (the hash of its source) and return its path."""
    return _write(program, found, directory, "repro", repro_source)


def write_compiled_repro(program: Program, found: list[str], directory: Path = REPRO_DIR) -> Path:
    """Write `repro_compiled_<hash>.py` for `program` (eager against aotspec.compile)."""
    return _write(program, found, directory, "repro_compiled", compiled_repro_source)


def write_hooks_repro(
    program: Program, found: list[str], pack: str, hooks_filter: str, eager_hooks: bool
) -> Path:
    """Write `repro_hooks_<hash>.py` (eager, with or without the hooks, against aotspec.compile
    with them)."""
    unpack = "un" + pack

    def render(program, found, path):
        return _HOOKS_TEMPLATE.format(
            path=path,
            found="\n".join(f"    {line}" for line in found),
            source=source(program),
            pack=pack,
            unpack=unpack,
            hooks_filter=hooks_filter,
            oracle="under the same hooks" if eager_hooks else "without hooks",
            eager_hooks=f"({pack}, {unpack})" if eager_hooks else "None",
        )

    return _write(program, found, REPRO_DIR, "repro_hooks", render)


def write_fast_repro(
    case: Program | Stealing | Hooked, found: list[str], directory: Path = REPRO_DIR
) -> Path:
    """Write `repro_fast_<hash>.py` for `case` (pickled, beside its Python source) and return
    its path."""
    return _write_pickled(case, FuzzCase(case).source, found, directory, "fast", _FAST_TEMPLATE)


def write_sizes_repro(
    sized: Sized, found: list[str], directory: Path = REPRO_DIR, dynamic: bool = False
) -> Path:
    """Write `repro_sizes_<hash>.py` (`repro_dynamic_sizes_<hash>.py` for functions compiled
    with `dynamic`) for `sized` (pickled, beside its Python source) and return its path."""
    kind = "dynamic_sizes" if dynamic else "sizes"
    template = _sizes_template(dynamic)
    return _write_pickled(sized, sized_source(sized), found, directory, kind, template)


def _write_pickled(
    subject, text: str, found: list[str], directory: Path, kind: str, template: str
) -> Path:
    """`template` filled with `subject` pickled and its Python source `text`, commented, written
    to `repro_<kind>_<hash of text>.py` in `directory`."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"repro_{kind}_{digest}.py"
    commented = "\n".join(f"# {line}".rstrip() for line in text.splitlines())
    blob = base64.b64encode(pickle.dumps(subject)).decode()
    found_lines = "\n".join(f"    {line}" for line in found)
    filled = template.format(path=path.name, found=found_lines, blob=blob, source=commented)
    path.write_text(filled)
    return path
