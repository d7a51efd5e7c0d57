"""The package's layering: no import cycle; the records apart from the passes; the public API
reaches the passes only through the pipeline module (`reference/pipeline.py`); the runtime side
(the shared runtime, the reference's graph executor, the fast backend) reaches no pass.

Imports are read from the source with `ast`, at any depth: an import inside a function, or under
`if TYPE_CHECKING:`, is still a dependency (a module that names another's types knows it).
"""

from __future__ import annotations

import ast
import re
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
#: The compile passes of the reference, which only the pipeline module runs.
PASSES = {"capture", "functionalize", "autograd", "hooks"}
#: The records the passes hand on, to each other, to the plan and to the runtime.
RECORDS = {"program_records", "plan_records"}
#: What runs a plan: the shared runtime skeleton, its epilogue, the reference's graph executor.
RUNTIME = {"runtime", "epilogue", "compiled"}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.glob("*.py"):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            found[name] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that `name` imports, when it runs or for type checking."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
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
    assert "aotspec.reference.plan_records" in graph["aotspec.reference.compiled"]
    assert "aotspec.reference.runtime" in graph["aotspec.fast.runtime"]


def test_the_import_reader_counts_type_checking_imports(tmp_path):
    path = tmp_path / "typed.py"
    path.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    assert imports_of("package.typed", path, {"package.b"}) == {"package.b"}


def test_the_api_reaches_the_passes_only_through_the_pipeline():
    graph = import_graph()
    passes = {f"aotspec.reference.{name}" for name in PASSES}
    assert graph["aotspec.api"] & passes == set()
    assert "aotspec.reference.pipeline" in graph["aotspec.api"]


def test_the_records_reach_no_pass_and_no_runtime():
    """The records sit below the code that makes them and the code that reads them."""
    graph = import_graph()
    above = {f"aotspec.reference.{name}" for name in PASSES | RUNTIME | {"pipeline"}}
    for name in RECORDS:
        assert _reachable(graph, f"aotspec.reference.{name}") & above == set(), name


def test_the_runtime_side_reaches_no_pass():
    """The shared runtime, the reference's graph executor and the fast backend run a plan from
    its records: they stand beside the passes, not on top of them."""
    graph = import_graph()
    compile_side = {f"aotspec.reference.{name}" for name in PASSES | {"pipeline"}}
    runtime_side = [f"aotspec.reference.{name}" for name in RUNTIME]
    runtime_side += [name for name in graph if name.startswith("aotspec.fast")]
    for name in runtime_side:
        assert _reachable(graph, name) & compile_side == set(), name


def test_the_tools_that_show_a_plan_import_records_not_passes():
    """`aotspec explain` and the memory tools compile through the public API and read the plan's
    records; they import no pass and not the pipeline themselves."""
    graph = import_graph()
    compile_side = {f"aotspec.reference.{name}" for name in PASSES | {"pipeline"}}
    for name in ("explain", "memory_timeline", "memory_sizes", "memory_viz"):
        assert graph[f"aotspec.{name}"] & compile_side == set(), name


def test_the_eager_interpreter_depends_on_no_compile_pass():
    graph = import_graph()
    compile_side = {
        f"aotspec.reference.{name}"
        for name in ("functionalize", "autograd", "hooks", "pipeline", "runtime", "compiled")
    }
    eager_side = ["interpreter", "eager", "tape", "traced_rules", "eager_backward"]
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


def _module_map() -> list[set[str]]:
    """The floors of `reference/__init__.py`'s module map: per bullet, the modules it names."""
    doc = ast.get_docstring(ast.parse((ROOT / "reference" / "__init__.py").read_text()))
    bullets = re.split(r"\n- ", doc.split("\n- ", 1)[1])
    return [set(re.findall(r"\b(\w+)\.py\b", bullet)) for bullet in bullets]


def test_the_reference_module_map_names_every_module_in_floor_order():
    """Every module of the reference is on the map, and imports only modules on its floor or
    below it."""
    floors = _module_map()
    floor_of = {name: k for k, names in enumerate(floors) for name in names}
    on_disk = {path.stem for path in (ROOT / "reference").glob("*.py")} - {"__init__"}
    assert on_disk - set(floor_of) == set(), "modules missing from the map"
    assert set(floor_of) - on_disk == set(), "modules on the map that do not exist"
    graph = import_graph()
    prefix = "aotspec.reference."
    for name in on_disk:
        for used in graph[prefix + name]:
            if used.startswith(prefix):
                stem = used.removeprefix(prefix)
                assert floor_of[stem] <= floor_of[name], f"{name} imports {stem}, above it"


def test_importing_the_reference_loads_neither_the_fast_backend_nor_triton():
    """The fast backend (and Triton behind it) loads when a fast-backend function first runs."""
    probe = (
        "import sys, aotspec.reference.storage, aotspec\n"
        "loaded = [m for m in sys.modules if m == 'triton' or m.startswith('aotspec.fast')]\n"
        "assert loaded == [], loaded\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_importing_aotspec_loads_no_triton():
    """Triton is torch's dependency, loaded only where a kernel may be built (`fast/` imports it
    inside `launch` and `interpreting`): importing aotspec and its fast backend loads none."""
    program = (
        "import sys, aotspec, aotspec.fast.runtime, aotspec.reference.storage\n"
        "assert 'triton' not in sys.modules, sorted(m for m in sys.modules if 'triton' in m)\n"
    )
    subprocess.run([sys.executable, "-c", program], check=True, timeout=120)


#: The longest a library function may be (issue 24): past it a function does more than one thing.
LONGEST_FUNCTION = 80


def test_no_library_function_is_longer_than_the_limit():
    """Functions of aotspec/, reference/, fast/ and conformance/ (tests and tools aside) fit in
    `LONGEST_FUNCTION` lines, decorators and docstring included."""
    too_long = []
    for folder in ("aotspec", "reference", "fast", "conformance"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                    lines = node.end_lineno - first + 1
                    if lines > LONGEST_FUNCTION:
                        where = path.relative_to(ROOT)
                        too_long.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    assert not too_long, "split these functions:\n" + "\n".join(too_long)
