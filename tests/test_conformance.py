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


def test_setup_on_a_device_moves_tensors_made_elsewhere_keeping_aliases_and_leaves():
    """`--device cuda`: a setup that clones a tensor made at import makes a CPU tensor; the
    runner moves it (here to `meta`, which needs no GPU), tensors that shared a storage still
    share one, at their own layouts, and a leaf that required grad is a leaf that does."""
    import torch

    from aotspec.conformance.runner import _moved

    base = torch.arange(6.0).reshape(2, 3)
    weight = torch.ones(3, requires_grad=True)
    world = {"x": base, "xt": base.t(), "w": weight, "n": 3, "i": torch.tensor([1])}
    moved = _moved(world, torch.device("meta"), keep=("i",))
    assert {t.device.type for t in (moved["x"], moved["xt"], moved["w"])} == {"meta"}
    assert moved["x"].untyped_storage()._cdata == moved["xt"].untyped_storage()._cdata
    assert moved["xt"].stride() == (1, 3) and moved["xt"].shape == (3, 2)
    assert moved["w"].is_leaf and moved["w"].requires_grad and moved["n"] == 3
    assert moved["i"] is world["i"]


def test_values_are_compared_on_the_cpu_whatever_the_default_device():
    """On CUDA every `Values` failed with `cpu != cuda:0`: the expected tensor was made on the
    default device and the observed values are the CPU's. `meta` stands for CUDA here."""
    import attrs
    import torch

    case = next(c for c in ALL_CASES if c.name == "memory.strided-view-reads-offset")
    on_cpu = attrs.evolve(case, setup=lambda: {"x": torch.arange(12.0, device="cpu")})
    with torch.device("meta"):
        result = run_case(on_cpu, "torch-eager")
    assert result.status == "pass", result.messages


def test_a_case_that_raises_fails_and_the_run_goes_on(monkeypatch):
    """On CUDA a setup's error (a CPU generator under the default device cuda) came out of the
    worker as a TaskError and ended the whole run: now a setup's error fails its case, and so
    does any other error of a case's code in a worker's task."""
    import attrs

    from aotspec.conformance import case as case_module
    from aotspec.conformance import runner

    case = next(c for c in ALL_CASES if c.name == "memory.strided-view-reads-offset")
    broken = attrs.evolve(case, setup=lambda: 1 / 0)
    assert run_case(broken, "torch-eager").messages == (
        "the setup raised ZeroDivisionError: division by zero",
    )
    monkeypatch.setattr(case_module.Values, "check", lambda self, outcome: 1 / 0)
    status, messages, _ = runner.run_named(case.name, "torch-eager")
    assert (status, messages) == (
        "fail",
        ("running the case raised ZeroDivisionError: division by zero",),
    )


def test_a_case_of_sizes_is_judged_at_each_size_on_one_start():
    """A case with `sizes` starts each backend once (one compiled function) and calls it once per
    size, on a fresh world of that size: an `AtSize` wrong at one size fails the case there
    only, naming the size."""
    import attrs

    from aotspec.conformance import backends
    from aotspec.conformance.case import AtSize, PeakBytes

    name = "boxed.stolen-list-at-each-size-freed-at-last-use"
    (case,) = [c for c in ALL_CASES if c.name == name]
    started, sizes_seen = [], []

    def counting(case):
        started.append(case.name)
        call = backends.reference_compiled(case)

        def counted(args):
            sizes_seen.append(args[0][0].numel())
            return call(args)

        return counted

    backend = backends.Backend("reference", counting)
    assert run_case(case, backend).status == "pass"
    assert (started, sizes_seen) == ([case.name], [4, 8, 3])
    wrong = attrs.evolve(case, expect=[*case.expect, AtSize(8, PeakBytes(32))])
    result = run_case(wrong, "reference")
    assert ("fail", ("at size 8: peak live bytes 64, expected 32",)) == (
        result.status,
        result.messages,
    )


def test_view_of_tells_a_view_from_a_tensor_of_its_own():
    """ViewOf fails where eager's output is the other kind: a view said to be none, a tensor of
    its own said to be a view."""
    import attrs

    from aotspec.conformance.case import ViewOf

    case = next(c for c in ALL_CASES if c.name.endswith("an-op-result-written-in-part-is-no-view"))
    for wrong in (ViewOf("out1", None), ViewOf("out0", "out1")):
        assert run_case(attrs.evolve(case, expect=[wrong]), "torch-eager").status == "fail"
