"""benchmarks/gpu_check.py --cpu: the GPU check's every section on CPU tensors, Triton's
interpreter and small sizes, so that the script keeps working between GPU runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
SECTIONS = [
    "environment",
    "triton_tests",
    "fused_pointwise",
    "memory",
    "memory_viz",
    "conformance",
    "step_time",
]


def test_gpu_check_on_cpu_writes_every_section(tmp_path):
    """Every section runs (or is skipped for the budget, with a note) and none fails; what each
    measured is in the JSON and the markdown, with aotspec's memory_viz export beside them."""
    command = [sys.executable, str(SCRIPT), "--cpu", "--out", str(tmp_path), "--budget-s", "50"]
    subprocess.run(command, check=True, timeout=170, capture_output=True)
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert SECTIONS == list(report["sections"])
    statuses = {name: section["status"] for name, section in report["sections"].items()}
    assert set(statuses.values()) <= {"ok", "skipped"}, report
    for name, section in report["sections"].items():
        assert section["status"] == "ok" or "budget" in section["note"], section
    assert statuses["environment"] == "ok"
    assert statuses["triton_tests"] == "ok"
    triton = report["sections"]["triton_tests"]
    assert triton["counts"]["passed"] > 0 and triton["launches"] > 0, triton
    markdown = (tmp_path / "gpu_check.md").read_text()
    assert all(f"| {name} | {statuses[name]} |" in markdown for name in SECTIONS)
    if statuses["memory_viz"] == "ok":
        assert (tmp_path / "aotspec_memory_viz.pickle").stat().st_size > 0
