"""Test configuration: hypothesis profiles, chosen with HYPOTHESIS_PROFILE (default `ci`).

- ci: bounded and reproducible: 500 examples per property, a fixed seed sequence, no deadline
  (a reference run traces with make_fx: tens of milliseconds a program, more on the first).
- dev: more examples, random seeds, for local fuzzing.
- nightly: many examples, for long unattended runs.
- mutants: ci's examples without shrinking, for the mutation run (`python -m tests.mutants`): a
  planted bug fails a test exactly when it fails under ci, without minutes of shrinking.

Every profile prints the `@reproduce_failure` blob of a failing example.
"""

from __future__ import annotations

import io
import logging
import os
import sys

import torch  # noqa: F401 (torch sets its loggers up on import; the tweak below must come after)
from hypothesis import HealthCheck, Phase, settings
from rich.console import Console

_COMMON = dict(
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)

settings.register_profile("ci", max_examples=500, derandomize=True, **_COMMON)
#: A tenth of `ci`'s examples, the same ones first: `tools/matrix.py --profile quick` on a busy
#: machine, where four pairs under `ci` take hours.
settings.register_profile("quick", max_examples=50, derandomize=True, **_COMMON)
settings.register_profile("dev", max_examples=2_000, **_COMMON)
settings.register_profile("nightly", max_examples=20_000, **_COMMON)
settings.register_profile(
    "mutants",
    settings.get_profile("ci"),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)


def pytest_report_header(config) -> str:
    return f"hypothesis profile: {PROFILE} (max_examples={settings.default.max_examples})"


def pytest_terminal_summary(terminalreporter) -> None:
    """The differential tests' coverage of this run (aotspec/fuzz/coverage.py), when any ran."""
    coverage = sys.modules.get("aotspec.fuzz.coverage")
    if coverage is None or not coverage.COUNTS:
        return
    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(coverage.table())
    terminalreporter.write(console.file.getvalue())


# pytest attaches its log capture to non-propagating loggers too, so torch's structured trace
# log (always at DEBUG) records every tensor make_fx fakes, and every failure of a test that
# traces prints pages of those DEBUG lines. Keep it quiet unless a trace is asked for.
if not os.environ.get("TORCH_TRACE"):
    logging.getLogger("torch.__trace").setLevel(logging.WARNING)
