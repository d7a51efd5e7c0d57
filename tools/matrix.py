"""aotspec across (Python, torch) pairs: conformance and the differential tests, one table.

Run on demand, not in CI: `.venv/bin/python tools/matrix.py` runs the default pairs,
`--pair 3.12:2.14.1` (repeatable) picks others. For each pair it makes a virtual environment,
`ENVS/py312-t2141` (`--envs`, default `$AOTSPEC_MATRIX_ENVS` or `~/.cache/aotspec/matrix`), or
reuses the one there; installs torch, the other dependencies of `pyproject.toml` and aotspec
(editable, this checkout) into it; then runs there

1. `aotspec conformance --backend fast --backend reference --backend torch-eager`, and
2. the differential tests (`tests/test_differential_*.py`) under hypothesis' `ci` profile
   (`--profile`),

and prints one table, a row per pair. Each pair's output goes to `ENVS/logs/`, named in the
table's caption. A torch other than the CPU build on this machine's disk comes from the registry
as a CUDA build (a few GB, minutes to install); the machine's pip constraints, which cap torch
at the releases on disk, are lifted for that one install. A pair whose Python interpreter is not
found, or whose install fails, gets a row saying so.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from xml.etree import ElementTree

import tomllib
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent

#: The pairs run by default: this checkout's own (3.11, 2.13.0), the two releases after it, and
#: the GPU image's (3.12, 2.11.0).
PAIRS = (("3.11", "2.13.0"), ("3.12", "2.14.1"), ("3.13", "2.15.0"), ("3.12", "2.11.0"))
BACKENDS = ("fast", "reference", "torch-eager")
#: Requirements that come with torch itself, not from the registry beside it (a CUDA build
#: brings its Triton).
_WITH_TORCH = ("torch", "triton")
_TRITON = ("triton",)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pair",
        action="append",
        metavar="PYTHON:TORCH",
        help=f"a pair to run, e.g. 3.12:2.14.1 (repeatable; default: {_pairs_text()})",
    )
    parser.add_argument("--envs", type=Path, default=_default_envs(), help="where envs live")
    parser.add_argument("--jobs", type=int, default=1, help="conformance worker processes")
    parser.add_argument("--parallel", type=int, default=1, help="pairs run at once (default 1)")
    parser.add_argument(
        "--profile", default="ci", help="hypothesis profile of the differential tests (default ci)"
    )
    parser.add_argument(
        "--timeout", type=int, default=3600, help="seconds each step of a pair may run"
    )
    options = parser.parse_args()
    pairs = [tuple(pair.split(":", 1)) for pair in options.pair] if options.pair else PAIRS
    logs = options.envs / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)

    def run(pair: tuple[str, str]) -> tuple:
        python, torch_version = pair
        console.print(f"[bold]Python {python}, torch {torch_version}[/bold]")
        return _run_pair(python, torch_version, options, logs, console)

    with ThreadPoolExecutor(options.parallel) as pool:
        rows = list(pool.map(run, pairs))
    table = Table(
        title="aotspec across Python and torch releases",
        caption=f"conformance cells: passed/failed/crashed/skipped; differential tests under "
        f"hypothesis profile {options.profile}; logs: {logs}",
    )
    for column in ("Python", "torch", *BACKENDS, "differential", "minutes"):
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    # a pipe or a file gets the whole table, not one wrapped to 80 columns
    Console(width=None if sys.stdout.isatty() else 130).print(table)
    return 0 if all(_green(row) for row in rows) else 1


def _pairs_text() -> str:
    return ", ".join(f"{python}:{torch_version}" for python, torch_version in PAIRS)


def _default_envs() -> Path:
    return Path(
        os.environ.get("AOTSPEC_MATRIX_ENVS", Path.home() / ".cache" / "aotspec" / "matrix")
    )


def _run_pair(python: str, torch_version: str, options, logs: Path, console) -> tuple:
    start = time.monotonic()
    name = f"py{python.replace('.', '')}-t{torch_version.replace('.', '')}"
    log = logs / f"{name}.log"
    log.write_text("")

    def row(*cells: str) -> tuple:
        return (python, *cells, f"{(time.monotonic() - start) / 60:.1f}")

    interpreter = _interpreter(python)
    if interpreter is None:
        return row(torch_version, f"no python{python} found", "", "", "")
    env = options.envs / name
    console.print(f"  {name}: environment {env}")
    if not _install(interpreter, env, torch_version, log, options.timeout):
        return row(torch_version, f"install failed ({log.name})", "", "", "")
    installed = _output(
        [str(env / "bin" / "python"), "-c", "import torch; print(torch.__version__)"]
    )
    console.print(f"  {name}: conformance")
    results = logs / f"{name}.conformance.json"
    results.unlink(missing_ok=True)
    backends = [arg for backend in BACKENDS for arg in ("--backend", backend)]
    jobs = ["--jobs", str(options.jobs)]
    _step(
        [env / "bin" / "aotspec", "conformance", *backends, *jobs, "--json", results],
        log,
        options.timeout,
    )
    conformance = _conformance_cells(results)
    console.print(f"  {name}: differential tests")
    junit = logs / f"{name}.differential.xml"
    junit.unlink(missing_ok=True)
    tests = sorted(
        str(path.relative_to(ROOT)) for path in ROOT.glob("tests/test_differential_*.py")
    )
    _step(
        [
            env / "bin" / "python",
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *tests,
            f"--junitxml={junit}",
        ],
        log,
        options.timeout,
        HYPOTHESIS_PROFILE=options.profile,
    )
    return row(installed, *conformance, _pytest_cell(junit))


def _interpreter(version: str) -> str | None:
    """A `pythonX.Y` that runs: on PATH, or one of pyenv's versions (whose shims on PATH run only
    the versions pyenv selected)."""
    pyenv = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(glob.glob(f"{pyenv}/versions/{version}.*/bin/python{version}"))
    for candidate in filter(None, candidates):
        found = _output([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        if found == version:
            return candidate
    return None


def _install(interpreter: str, env: Path, torch_version: str, log: Path, timeout: int) -> bool:
    """Make `env` (or reuse it when its torch is `torch_version`) and install aotspec there."""
    python = env / "bin" / "python"
    have = _output([str(python), "-c", "import torch; print(torch.__version__)"])
    if have.split("+")[0] != torch_version:
        shutil.rmtree(env, ignore_errors=True)
        if not _step([interpreter, "-m", "venv", env], log, timeout):
            return False
        # The machine's pip constraints cap torch at the releases on its disk: lift them here.
        if not _step(
            [python, "-m", "pip", "install", f"torch=={torch_version}", *_dependencies()],
            log,
            timeout,
            PIP_CONSTRAINT="/dev/null",
        ):
            return False
    # A CUDA build of torch brings the Triton it was built with; the CPU build brings none, and
    # aotspec's fast backend imports it: then pyproject.toml's.
    if not _output([str(python), "-c", "import triton; print(triton.__version__)"]):
        if not _step([python, "-m", "pip", "install", *_dependencies(_TRITON)], log, timeout):
            return False
    # The checkout's code, whatever Python versions its metadata admits today; the dependencies
    # are those installed above.
    return _step(
        [
            python,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--ignore-requires-python",
            "-e",
            ROOT,
        ],
        log,
        timeout,
    )


def _dependencies(names: tuple[str, ...] | None = None) -> list[str]:
    """pyproject.toml's dependencies named `names`; by default all but torch's own, with
    setuptools, which builds the editable install."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    if names is not None:
        return [r for r in project["dependencies"] if re.split(r"[^\w-]", r, 1)[0] in names]
    requirements = [
        requirement
        for requirement in project["dependencies"]
        if re.split(r"[^\w-]", requirement, 1)[0] not in _WITH_TORCH
    ]
    return [*requirements, "setuptools>=68"]


def _step(command: list, log: Path, timeout: int, **environment: str) -> bool:
    """Run `command` in the checkout, appending its output to `log`; whether it exited 0."""
    command = [str(part) for part in command]
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        try:
            done = subprocess.run(
                command,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **environment},
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            out.write(f"\n(timed out after {timeout} s)\n")
            return False
    return done.returncode == 0


def _output(command: list[str]) -> str:
    """`command`'s stdout, stripped; empty when it cannot run or fails."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except OSError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _conformance_cells(results: Path) -> list[str]:
    """passed/failed/crashed/skipped per backend, from `aotspec conformance --json`."""
    if not results.exists():
        return ["no result"] * len(BACKENDS)
    records = json.loads(results.read_text())["results"]
    cells = []
    for backend in BACKENDS:
        mine = [record["status"] for record in records if record["backend"] == backend]
        counts = [mine.count(status) for status in ("pass", "fail", "crash", "skip")]
        text = "/".join(map(str, counts))
        cells.append(text if counts[1] + counts[2] == 0 else f"[red]{text}[/red]")
    return cells


def _pytest_cell(junit: Path) -> str:
    """`N passed` or the failures and errors too, from pytest's JUnit XML."""
    if not junit.exists():
        return "[red]no result[/red]"
    suite = ElementTree.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    tests, failures, errors, skipped = (
        int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")
    )
    passed = tests - failures - errors - skipped
    if failures + errors:
        return f"[red]{passed} passed, {failures} failed, {errors} errors[/red]"
    return f"{passed} passed, {skipped} skipped" if skipped else f"{passed} passed"


def _green(row: tuple) -> bool:
    return not any("[red]" in cell or "failed" in cell or "no " in cell for cell in row)


if __name__ == "__main__":
    sys.exit(main())
