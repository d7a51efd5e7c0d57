"""The catalog of planted bugs (tests/mutants/catalog.py) stays plantable: each mutant's snippet
occurs exactly once in its file and the mutated module compiles, so `python -m tests.mutants`
runs every one (the run itself is on demand, not in CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutants.catalog import MUTANTS, ROOT


def test_names_are_unique():
    names = [mutant.name for mutant in MUTANTS]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda mutant: mutant.name)
def test_each_mutant_plants(mutant):
    source = mutant.mutated_source()
    assert source != (ROOT / mutant.file).read_text()
    compile(source, mutant.file, "exec")
    assert all((ROOT / test.split("::")[0]).exists() for test in mutant.tests)
    assert mutant.why


def test_the_modules_are_the_ones_the_tests_import():
    assert {mutant.module.split(".")[1] for mutant in MUTANTS} >= {"fast", "reference"}
    for mutant in MUTANTS:
        assert Path(mutant.file).suffix == ".py"
        __import__(mutant.module)
