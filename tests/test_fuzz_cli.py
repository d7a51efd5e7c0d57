"""`aotspec fuzz` as CI runs it: exit codes, shards that split a campaign without overlap, a
campaign that resumes, crashes isolated, and repros that fail on their own.

The failing backends are Dynamo backend callables of a module in a temporary directory
(`MODULE:CALLABLE`): one that doubles every output, one that segfaults.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from itertools import islice

import pytest

from aotspec.cli import main
from aotspec.fuzz.campaign import Shard
from aotspec.fuzz.judge import draw_at, kinds_for, signature

BACKENDS = '''
import ctypes


def doubled(graph_module, example_inputs):
    """Runs the graph, then doubles every output: wrong values."""

    def run(*args):
        return [out * 2 for out in graph_module(*args)]

    return run


def segfault(graph_module, example_inputs):
    def run(*args):
        ctypes.string_at(0)

    return run
'''


@pytest.fixture
def here(tmp_path, monkeypatch):
    (tmp_path / "my_backends.py").write_text(textwrap.dedent(BACKENDS))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _indices(path) -> list[int]:
    return [json.loads(line)["index"] for line in path.read_text().splitlines()]


def test_shards_split_a_campaign_without_overlap():
    shards = [Shard.parse(f"{i}/3") for i in (1, 2, 3)]
    taken = [set(islice(shard.indices(), 20)) for shard in shards]
    assert set().union(*taken) == set(range(60))
    assert sum(map(len, taken)) == 60
    with pytest.raises(ValueError, match="1 <= I <= N"):
        Shard.parse("4/3")


def test_a_program_is_the_same_wherever_it_is_drawn():
    """Index i of a seed is one program: what a shard or a resumed run relies on."""
    kinds = kinds_for("fast")
    assert draw_at(5, 7, kinds)[1] == draw_at(5, 7, kinds)[1]
    assert draw_at(5, 7, kinds)[2] != draw_at(6, 7, kinds)[2]


def test_shards_and_resume_on_a_correct_backend(here, capsys):
    """torch-eager agrees with itself: exit 0. Two shards judge disjoint programs; a campaign
    resumes where it stopped, and refuses to start again over an old one."""
    for shard in ("1/2", "2/2"):
        argv = ["fuzz", "--backend", "torch-eager", "--programs", "3", "--shard", shard]
        assert main([*argv, "--out", f"shard{shard[0]}"]) == 0
    first, second = (
        _indices(here / "shard1/results.jsonl"),
        _indices(here / "shard2/results.jsonl"),
    )
    assert (first, second) == ([0, 2, 4], [1, 3, 5])
    argv = ["fuzz", "--backend", "torch-eager", "--out", "shard1", "--shard", "1/2"]
    assert main([*argv, "--programs", "5"]) == 2
    assert "pass --resume" in capsys.readouterr().err
    assert main([*argv, "--programs", "5", "--resume"]) == 0
    assert _indices(here / "shard1/results.jsonl") == [0, 2, 4, 6, 8]
    assert main([*argv, "--programs", "5", "--resume", "--seed", "1"]) == 2


def test_a_wrong_backend_gets_a_shrunk_repro_that_fails_alone(here, capsys):
    """Whatever the first programs hit (doubled outputs, or a Dynamo error on the way), each
    distinct failure is shrunk and written as a repro that fails alone and passes on eager."""
    argv = ["fuzz", "--backend", "my_backends:doubled", "--programs", "2", "--budget", "90s"]
    assert main([*argv, "--out", "found"]) == 1
    assert "FAIL " in capsys.readouterr().out
    failures = [
        json.loads(line) for line in (here / "found/failures.jsonl").read_text().splitlines()
    ]
    assert any(failure["shrunk"] for failure in failures), failures
    repros = sorted((here / "found").glob("repro_*.py"))
    assert len(repros) == len({failure["signature"] for failure in failures})
    for repro in repros:
        alone = subprocess.run([sys.executable, str(repro)], capture_output=True, text=True)
        assert alone.returncode == 1, alone.stdout + alone.stderr
        assert "my_backends:doubled" in alone.stderr
        eager = subprocess.run([sys.executable, str(repro), "torch-eager"], capture_output=True)
        assert eager.returncode == 0, eager.stderr


def test_a_segfault_is_a_failure_and_the_campaign_goes_on(here, capsys):
    argv = ["fuzz", "--backend", "my_backends:segfault", "--programs", "3", "--budget", "30s"]
    assert main([*argv, "--out", "crashed", "-v"]) == 1
    printed = capsys.readouterr().out
    # Each program is judged, each crash in a new worker (Dynamo may fail on a program before
    # the backend runs: a failure of its own).
    assert printed.count("program ") == 3
    assert printed.count("fail: crash SIGSEGV") >= 1
    (repro,) = (here / "crashed").glob("repro_crash_sigsegv_*.py")
    alone = subprocess.run([sys.executable, str(repro)], capture_output=True)
    assert alone.returncode == -11  # SIGSEGV, on its own
    on_eager = subprocess.run([sys.executable, str(repro), "torch-eager"], capture_output=True)
    assert on_eager.returncode == 0, on_eager.stderr


def test_signatures_name_the_error_or_the_observable_not_the_numbers():
    setstorage = "the backend raised RuntimeError: setStorage: sizes [4, 4], storage offset 0"
    assert signature([setstorage]) == signature([setstorage.replace("[4, 4]", "[2, 3, 1]")])
    assert signature(["out1 values: Tensor-likes are not close!"]) == "values of an output"
    assert signature(["x0.storage_nbytes: expected 0, got 16"]) == (
        "storage_nbytes of a caller's tensor"
    )
    assert signature(["b0.grad values: mismatch"]) == "gradient values"
    # What torch.compile's backends raise is told by the error inside the wrapper.
    wrapped = "the backend raised BackendCompilerFailed: backend='{}' raised: RuntimeError: no"
    assert signature([wrapped.format("inductor")]) == "error RuntimeError: no"
    assert signature([wrapped.format("aot_eager")]) == "error RuntimeError: no"
    # One bug of the runtime's lifetimes shows after many nodes: one signature, one repro.
    late = "forward, after {}: alive [('abs_1', 0), ('sub', 0)] on the reference, [] on fast"
    assert signature([late.format("abs_1")]) == signature([late.format("sigmoid")])
    assert signature([late.format("abs_1")]) != signature(["backward" + late[7:].format("mul")])


#: A bug planted in the fast backend of every process started with its directory on PYTHONPATH
#: (the fuzz campaign, its fork server and workers, a repro run alone): an off-by-one in the
#: generated code's lifetimes, each value deleted one node after its last use
#: (what r[boxed.args-cleared] says: "every intermediate dies right after its last use").
LATE_DEL = """
import aotspec.fast.codegen as codegen

_last_uses = codegen.last_uses


def last_uses(graph):
    dies_at = _last_uses(graph)
    nodes = list(graph.nodes)
    late = {node: [] for node in nodes}
    for node, following in zip(nodes, nodes[1:] + nodes[-1:]):
        late[following] += dies_at[node]
    return late


codegen.last_uses = last_uses
"""


def test_a_bug_planted_in_the_fast_backend_is_found_and_its_repro_fails_alone(tmp_path):
    """`aotspec fuzz --backend fast` on a fast backend that frees each value one node late:
    the reference's memory facts catch it, and the repro fails alone on the buggy backend and
    passes on the correct one and on eager."""
    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "sitecustomize.py").write_text(LATE_DEL)
    planted = {**os.environ, "PYTHONPATH": str(plant)}
    argv = [sys.executable, "-m", "aotspec.cli", "fuzz", "--backend", "fast"]
    argv += ["--programs", "6", "--budget", "20s", "--out", str(tmp_path / "found")]
    fuzz = subprocess.run(argv, env=planted, capture_output=True, text=True)
    assert fuzz.returncode == 1, fuzz.stdout + fuzz.stderr
    assert "FAIL memory " in fuzz.stdout, fuzz.stdout
    repro = sorted((tmp_path / "found").glob("repro_memory_*.py"))[0]

    def alone(*backend, env=None):
        return subprocess.run([sys.executable, str(repro), *backend], env=env, capture_output=True)

    buggy = alone(env=planted)
    assert buggy.returncode == 1 and b"on the reference" in buggy.stderr, buggy.stderr
    assert alone().returncode == 0  # the fast backend without the bug
    assert alone("torch-eager").returncode == 0
