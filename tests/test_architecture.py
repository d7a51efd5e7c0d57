"""The package's layering: no import cycle, and the public API reaches the passes only through
the plan module (`reference/plan.py`).

Imports are read from the source with `ast`, at any depth (an import inside a function is still
a dependency), except those under `if TYPE_CHECKING:`, which never run.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Package name -> folder, as pyproject.toml's package-dir maps them.
PACKAGES = {
    "aotspec": ROOT / "aotspec",
    "aotspec.fuzz": ROOT / "aotspec" / "fuzz",
    "aotspec.fuzz.strategies": ROOT / "aotspec" / "fuzz" / "strategies",
    "aotspec.reference": ROOT / "reference",
    "aotspec.fast": ROOT / "fast",
    "aotspec.conformance": ROOT / "conformance",
    "aotspec.conformance.cases": ROOT / "conformance" / "cases",
    "aotspec.examples": ROOT / "examples",
}
#: The compile passes of the reference, which only the plan module runs.
PASSES = {"capture", "functionalize", "autograd", "hooks"}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.glob("*.py"):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            found[name] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that `name` imports when it runs."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    found.add(f"{base}.{alias.name}")  # a submodule imported by name
                elif base in known:
                    found.add(base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports_of(name, path, known) for name, path in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component that has one (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for used in sorted(graph[node]):
            if used not in index:
                connect(used)
                low[node] = min(low[node], low[used])
            elif used in on_stack:
                low[node] = min(low[node], index[used])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_import_reader_sees_relative_and_absolute_imports():
    graph = import_graph()
    assert "aotspec.reference.plan" in graph["aotspec.reference.compiled"]
    assert "aotspec.reference.runtime" in graph["aotspec.fast.runtime"]


def test_the_api_reaches_the_passes_only_through_the_plan():
    graph = import_graph()
    passes = {f"aotspec.reference.{name}" for name in PASSES}
    assert graph["aotspec.api"] & passes == set()
    assert "aotspec.reference.plan" in graph["aotspec.api"]


def test_the_eager_interpreter_depends_on_no_compile_pass():
    graph = import_graph()
    compile_side = {
        f"aotspec.reference.{name}"
        for name in ("functionalize", "autograd", "hooks", "plan", "runtime", "compiled")
    }
    eager_side = ["interpreter", "eager", "tape", "rules", "eager_backward"]
    for name in eager_side:
        reached = _reachable(graph, f"aotspec.reference.{name}")
        assert reached & compile_side == set(), name


def test_the_fast_backend_never_imports_the_interpreter():
    graph = import_graph()
    interpreter_side = {
        f"aotspec.reference.{name}"
        for name in ("interpreter", "eager", "tape", "eager_backward", "compiled")
    }
    for name in [n for n in graph if n.startswith("aotspec.fast")]:
        assert _reachable(graph, name) & interpreter_side == set(), name


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    stack = [start]
    while stack:
        for used in graph[stack.pop()]:
            if used not in seen:
                seen.add(used)
                stack.append(used)
    return seen


def test_importing_aotspec_loads_no_triton():
    """Triton is torch's dependency, loaded only where a kernel may be built (`fast/` imports it
    inside `launch` and `interpreting`): importing aotspec and its fast backend loads none."""
    program = (
        "import sys, aotspec, aotspec.fast.runtime, aotspec.reference.storage\n"
        "assert 'triton' not in sys.modules, sorted(m for m in sys.modules if 'triton' in m)\n"
    )
    subprocess.run([sys.executable, "-c", program], check=True, timeout=120)
