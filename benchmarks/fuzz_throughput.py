"""Throughput of `aotspec fuzz`: programs judged per second per worker, isolation included.

Run on demand: `.venv/bin/python benchmarks/fuzz_throughput.py [BACKEND] [PROGRAMS]` (default
`fast`, 200). It runs one campaign (seed 0) with one worker process in a temporary directory,
exactly as `aotspec fuzz --jobs 1` does: drawing each program, judging it against eager PyTorch
and, on `fast`, the reference's memory facts, in a worker that survives crashes. The clock
starts after a warm-up campaign, so the worker's start and the first compilations are not in it;
per-kind rates follow, from the campaign's results.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from aotspec.fuzz.campaign import Campaign


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "fast"
    programs = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    with tempfile.TemporaryDirectory() as scratch:
        campaign = Campaign(backend, Path(scratch), seed=0, jobs=1)
        campaign.start(resume=False)
        campaign.run(programs=10, budget=None)  # warm-up: worker start, first compilations
        start = time.monotonic()
        campaign.run(programs=10 + programs, budget=None)
        seconds = time.monotonic() - start
        lines = (Path(scratch) / "results.jsonl").read_text().splitlines()[10:]
        kinds = Counter(json.loads(line)["kind"] for line in lines)
    print(
        f"{backend}: {programs} programs in {seconds:.1f} s with 1 worker: "
        f"{programs / seconds:.1f} programs/s per core"
    )
    print("programs by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))


if __name__ == "__main__":
    main()
