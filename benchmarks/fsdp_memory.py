"""FSDP's parameter pattern with autograd, on real tensors: what each backend keeps alive.

Run on demand: `.venv/bin/python benchmarks/fsdp_memory.py`. Side by side, for an
8-layer MLP whose parameters live sharded (0-byte storages) between uses: each layer gathers its
parameter under torch.no_grad() (resize up, copy_), uses it, and frees it (resize to 0); before
the backward the caller gathers every parameter again, as FSDP's pre-backward hook does.

Per backend, one warm step (`aotspec.tracker.MemoryTracker`; inputs, shards and parameters
tracked):
- bytes alive once the forward returned: activations the backward needs, plus whatever copy of
  a gathered parameter a backend keeps (`r[autograd.saved-inputs]` says: none);
- the forward's peak and the backward's peak;
- whether x.grad and every parameter's .grad equal eager's.
`torch.compile(backend="aot_eager")` runs in a child process: PyTorch 2.13 segfaults on this
pattern (docs/torch-2.13.md section 2.3, case 3), and the child's exit status is reported.
"""

from __future__ import annotations

import os
import subprocess
import sys

import torch

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
torch.set_num_threads(1)

import aotspec  # noqa: E402
from aotspec.tracker import MemoryTracker  # noqa: E402

LAYERS, BATCH, WIDTH = 8, 64, 512
resize_storage_bytes_ = torch.ops.inductor.resize_storage_bytes_


def fsdp_mlp(x, *params_and_shards):
    params, shards = params_and_shards[:LAYERS], params_and_shards[LAYERS:]
    for w, shard in zip(params, shards, strict=True):
        resize_storage_bytes_(w, shard.numel() * shard.element_size())
        with torch.no_grad():
            w.copy_(shard)
        x = torch.relu(x @ w)
        resize_storage_bytes_(w, 0)
    return x


def _world():
    torch.manual_seed(0)
    x = torch.randn(BATCH, WIDTH, requires_grad=True)
    shards = [torch.randn(WIDTH, WIDTH) * WIDTH**-0.5 for _ in range(LAYERS)]
    params = []
    for _ in range(LAYERS):
        w = torch.nn.Parameter(torch.empty(WIDTH, WIDTH))
        w.untyped_storage().resize_(0)
        params.append(w)
    return x, params, shards


def _regather(params, shards):
    for w, shard in zip(params, shards, strict=True):
        w.untyped_storage().resize_(shard.numel() * shard.element_size())
        with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(w):
            w.copy_(shard)


def measure(fn) -> dict:
    """One warm step: a first call compiles (and leaves tracing garbage), so it runs beforehand."""
    x, params, shards = _world()
    fn(x, *params, *shards)
    x, params, shards = _world()
    tracker = MemoryTracker()
    tracker.track(x, *params, *shards)
    with tracker:
        y = fn(x, *params, *shards)
        tracker.mark("forward returned")  # sweeps what died since the last op
        forward_peak = tracker.peak_bytes
        left = tracker.live_bytes
        _regather(params, shards)
        tracker.reset_peak()
        y.sum().backward()
        backward_peak = tracker.peak_bytes
    grads = [x.grad] + [w.grad for w in params]
    return {
        "left after forward": left,
        "forward peak": forward_peak,
        "backward peak": backward_peak,
        "grads": grads,
    }


def _aot_eager_in_a_child() -> str:
    code = (
        "import sys; sys.path.insert(0, 'benchmarks'); import torch, fsdp_memory as b; "
        "r = b.measure(torch.compile(b.fsdp_mlp, backend='aot_eager')); "
        "print('ran', r['left after forward'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600
    )
    if done.returncode == 0:
        return done.stdout.strip().splitlines()[-1]
    last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    return f"failed, exit status {done.returncode}: {last[:160]}"


def main() -> None:
    layer = WIDTH * WIDTH * 4
    print(
        f"{LAYERS} layers of {WIDTH}x{WIDTH} float32 ({layer:,} bytes each), batch {BATCH}; "
        "bytes on real tensors"
    )
    eager = measure(fsdp_mlp)
    rows = {"eager": eager}
    rows["fast"] = measure(aotspec.compile(fsdp_mlp, backend="fast"))
    keys = ("left after forward", "forward peak", "backward peak")
    print(f"{'':10}" + "".join(f"{k:>22}" for k in keys) + "   grads equal eager's")
    for name, row in rows.items():
        same = all(
            torch.allclose(a, b, atol=1e-5)
            for a, b in zip(row["grads"], eager["grads"], strict=True)
        )
        cells = "".join(f"{row[k]:>14,} ({row[k] / eager[k]:.3f})" for k in keys)
        print(f"{name:10}{cells}   {same}")
    print(f"aot_eager: {_aot_eager_in_a_child()}")


if __name__ == "__main__":
    main()
