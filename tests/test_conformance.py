"""Every conformance case on every backend, plus the command line that runs them."""

import functools

import pytest

from aotspec.cli import main
from aotspec.conformance.backends import BACKENDS
from aotspec.conformance.cases import ALL_CASES
from aotspec.conformance.runner import RANKS_ON_CPU, run_case, run_cases, run_in_group

ALL_BACKENDS = list(BACKENDS)
EAGER_BACKENDS = ["reference-eager", "torch-eager"]


@functools.cache
def _results_in_group() -> dict:
    """The cases that run on several ranks, on every backend, in one spawned group (its start
    costs seconds)."""
    spread = [case for case in ALL_CASES if case.ranks > 1]
    return {(r.case.name, r.backend): r for r in run_in_group(spread, ALL_BACKENDS)}


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("case", ALL_CASES, ids=lambda case: case.name)
def test_case(case, backend):
    if case.ranks > 1:
        result = _results_in_group()[case.name, backend]
    else:
        result = run_case(case, backend)
    if result.status == "skip":
        pytest.skip(result.messages[0])
    assert result.status == "pass", "\n".join(result.messages)


def test_cli_prints_a_table_per_rule_and_exits_zero(capsys):
    assert main(["conformance", "--backend", "reference-eager", "-k", "aliasing"]) == 0
    printed = capsys.readouterr().out
    assert "aliasing.set.rebinds" in printed
    assert "reference-eager" in printed
    assert "0 failed" in printed


def test_cli_rejects_an_unknown_backend(capsys):
    assert main(["conformance", "--backend", "inductor-typo"]) == 2
    assert "valid backends: " + ", ".join(BACKENDS) in capsys.readouterr().err


def test_a_failing_expectation_fails_the_case():
    """The runner is not a rubber stamp: a wrong expectation on a right backend fails."""
    import attrs

    from aotspec.conformance.case import Values

    case = next(c for c in ALL_CASES if c.name == "aliasing.copy-seen-through-alias")
    wrong = attrs.evolve(case, expect=[Values("x_alias", [[9.0, 9.0], [9.0, 9.0]])])
    for backend in EAGER_BACKENDS:
        assert run_case(wrong, backend).status == "fail"


def test_cases_of_several_ranks_are_skipped_on_another_device():
    """`--device cuda`: gloo's groups hold CPU tensors, so a case of several ranks is skipped
    there with the reason, by run_case and run_cases alike, before anything touches the device
    (this runs without a GPU)."""
    spread = next(case for case in ALL_CASES if case.ranks > 1)
    alone = run_case(spread, "fast", device="cuda")
    (listed,) = run_cases([spread], ["fast"], device="cuda")
    for result in (alone, listed):
        assert ("skip", (RANKS_ON_CPU,)) == (result.status, result.messages)
