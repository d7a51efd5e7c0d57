#!/usr/bin/env bash
# The GPU check in one command, on a CUDA machine whose Python has torch and the other
# dependencies already (no network): install aotspec over them, then run every section.
#   bash benchmarks/gpu_check.sh OUT_DIR [--budget-s 420]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: benchmarks/gpu_check.sh OUT_DIR [--budget-s SECONDS]}"
shift
python3 -m pip install -q --no-deps --no-build-isolation -e .
PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py --out "$out" "$@"
