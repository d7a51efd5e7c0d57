"""Plant one mutant in this process, then run pytest: `python -m tests.mutants.plant NAME ARGS...`
(NAME `none`: plant nothing, the baseline a mutant's run is compared with).

The mutant's module is compiled from its source with the snippet replaced, when the tests first
import it (an import hook ahead of every other finder): the file on disk is never touched, so an
interrupted run leaves nothing behind, and nothing is cached as bytecode. The process writes what
happened to the JSON file `$AOTSPEC_MUTANT_REPORT`: whether the mutated module was imported, and
the first test that failed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
from pathlib import Path

from .catalog import MUTANTS, Mutant


class _MutatedLoader(importlib.machinery.SourceFileLoader):
    """Loads the module from its source with the mutant's snippet replaced."""

    def __init__(self, fullname: str, path: str, mutant: Mutant):
        super().__init__(fullname, path)
        self.mutant = mutant
        self.planted = False

    def get_code(self, fullname):
        source = Path(self.path).read_text()
        code = compile(self.mutant.apply(source), self.path, "exec", dont_inherit=True)
        self.planted = True
        return code


class _Planter(importlib.abc.MetaPathFinder):
    """Finds the mutant's module as the other finders do, with a loader that plants it."""

    def __init__(self, mutant: Mutant):
        self.mutant = mutant
        self.loader: _MutatedLoader | None = None

    def find_spec(self, fullname, path, target=None):
        if fullname != self.mutant.module:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        self.loader = _MutatedLoader(fullname, spec.origin, self.mutant)
        spec.loader = self.loader
        return spec


class _FirstFailure:
    """A pytest plugin noting the first test that failed."""

    def __init__(self):
        self.failed: str | None = None

    def pytest_runtest_logreport(self, report):
        if report.failed and self.failed is None:
            self.failed = report.nodeid

    def pytest_collectreport(self, report):
        if report.failed and self.failed is None:
            self.failed = f"collecting {report.nodeid}"


def main(name: str, pytest_args: list[str]) -> int:
    planter = None
    if name != "none":
        (mutant,) = [m for m in MUTANTS if m.name == name]
        planter = _Planter(mutant)
        sys.meta_path.insert(0, planter)
    import pytest

    first = _FirstFailure()
    status = pytest.main(pytest_args, plugins=[first])
    report = {
        "planted": planter is None or (planter.loader is not None and planter.loader.planted),
        "failed": first.failed,
        "status": int(status),
    }
    Path(os.environ["AOTSPEC_MUTANT_REPORT"]).write_text(json.dumps(report))
    return int(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
