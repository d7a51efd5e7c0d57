"""The fast backend against torch eager and torch.compile(backend="aot_eager"): time and memory.

Run on demand: `.venv/bin/python benchmarks/fast_backend.py` (under a minute on 2 cores), or with
`--profile` to add a cProfile of 200 fast MLP steps (top 15 functions by own time). All numbers
come from one process, measured side by side, on one intra-op thread; the backends take turns,
one call each, so a load on a shared machine slows them alike:
1. call time (median of repeated forward + backward calls after a warm-up that compiles) of an
   MLP training step and of an attention block, for torch eager, aotspec fast, aot_eager and
   aotspec reference (fewer repeats), with the ratios fast/eager, fast/aot_eager, reference/fast;
2. first-call (compile) time, fast versus aot_eager (median of 3): a fresh `aotspec.compile`
   object, and `torch._dynamo.reset()` before each aot_eager one; imports and one-time setup are
   already warm in both, so this is the cost of compiling one more function;
3. peak live bytes on real tensors (`aotspec.tracker.MemoryTracker`): of the backward alone
   (from when the forward has returned, `reset_peak`, to the end of `backward()`) and of forward
   plus backward, for eager, fast and aot_eager; next to them, the reference's backward ledger;
4. the saving of a bfloat16 pack hook (`saved_tensors_hooks(pack=to bf16, unpack=to float32)`
   around the call) on a 16-layer tanh chain: forward + backward peak of fast with
   hooks_filter="donated" versus no hooks, and of eager and aot_eager with and without the hooks;
   also the bytes alive when the forward returns (the saved tensors), where the saving shows: the
   forward + backward peak of this chain is at the end of the backward, when all 16 weight
   gradients are alive.

Peaks count the storages the step allocates: the inputs and weights are made before the tracker
starts and are not registered, so they are not counted (their sizes are printed). Gradients are
reset to None before each measured step, so every backend allocates them.

The attention block (batch 4, seq 64, dim 64, 4 heads) is written with ops `aotspec.compile`
supports as they are: q/k/v/o projections as matmuls with weight matrices, heads by `view` and
`transpose`, `torch.softmax(q @ k^T / sqrt(d_head))`, `@ v`, a residual and
`torch.nn.functional.layer_norm`. No reformulation was needed.
"""

from __future__ import annotations

import os

# One BLAS thread for numpy too (the reference backend's kernels), set before numpy loads: with
# its default of one thread per core, OpenBLAS's threads spin against any other load on a 2-core
# machine and the reference's call time swings from 12 ms to 180 ms.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import cProfile  # noqa: E402
import math  # noqa: E402
import pstats  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

import aotspec  # noqa: E402
from aotspec.tracker import MemoryTracker  # noqa: E402

MLP_BATCH, MLP_WIDTH, MLP_LAYERS = 64, 256, 4
ATT_BATCH, ATT_SEQ, ATT_DIM, ATT_HEADS = 4, 64, 64, 4
CHAIN_BATCH, CHAIN_WIDTH, CHAIN_LAYERS = 256, 512, 16
REPEATS = {"torch eager": 50, "aotspec fast": 50, "aot_eager": 50, "aotspec reference": 5}
FIRST_CALLS = 3  # first-call times: median of this many fresh compilations


# ---------------------------------------------------------------- the steps


def mlp_step(x, *weights):
    for w in weights[:-1]:
        x = torch.relu(x @ w.t())
    return (x @ weights[-1].t()).pow(2).mean()


def attention_step(x, wq, wk, wv, wo, gamma, beta):
    b, s, d = x.shape

    def heads(t):
        return t.view(b, s, ATT_HEADS, d // ATT_HEADS).transpose(1, 2)

    q, k, v = heads(x @ wq), heads(x @ wk), heads(x @ wv)
    scores = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // ATT_HEADS), dim=-1)
    attended = (scores @ v).transpose(1, 2).reshape(b, s, d)
    y = torch.nn.functional.layer_norm(x + attended @ wo, (d,), gamma, beta)
    return y.pow(2).mean()


def chain_step(x, *weights):
    for w in weights:
        x = torch.tanh(x @ w)
    return x.pow(2).mean()


def _weight(rows, cols):
    return (torch.randn(rows, cols) * rows**-0.5).requires_grad_()


def mlp_inputs():
    torch.manual_seed(0)
    return [torch.randn(MLP_BATCH, MLP_WIDTH)] + [
        _weight(MLP_WIDTH, MLP_WIDTH) for _ in range(MLP_LAYERS)
    ]


def attention_inputs():
    torch.manual_seed(0)
    projections = [_weight(ATT_DIM, ATT_DIM) for _ in range(4)]
    gamma = (1 + 0.1 * torch.randn(ATT_DIM)).requires_grad_()
    beta = (0.1 * torch.randn(ATT_DIM)).requires_grad_()
    return [torch.randn(ATT_BATCH, ATT_SEQ, ATT_DIM), *projections, gamma, beta]


def chain_inputs():
    torch.manual_seed(0)
    return [torch.randn(CHAIN_BATCH, CHAIN_WIDTH)] + [
        _weight(CHAIN_WIDTH, CHAIN_WIDTH) for _ in range(CHAIN_LAYERS)
    ]


WORKLOADS = {
    f"MLP ({MLP_LAYERS} layers, batch {MLP_BATCH}, width {MLP_WIDTH})": (mlp_step, mlp_inputs),
    f"attention (batch {ATT_BATCH}, seq {ATT_SEQ}, dim {ATT_DIM}, {ATT_HEADS} heads)": (
        attention_step,
        attention_inputs,
    ),
}


def _backends(fn):
    return {
        "torch eager": fn,
        "aotspec fast": aotspec.compile(fn, backend="fast"),
        "aot_eager": torch.compile(fn, backend="aot_eager"),
        "aotspec reference": aotspec.compile(fn, backend="reference"),
    }


def _clear_grads(inputs):
    for t in inputs:
        t.grad = None


# ---------------------------------------------------------------- 1. call time


def _call_times(steps: dict, inputs) -> dict[str, float]:
    """Median seconds per forward + backward call of each step, after a warm-up call (which
    compiles). The steps take turns, one call each per round, so a load that comes and goes on a
    shared machine slows them alike and the ratios hold."""
    for step in steps.values():
        step(*inputs).backward()
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for turn in range(max(REPEATS.values())):
        for name, step in steps.items():
            if turn < REPEATS[name]:
                start = time.perf_counter()
                step(*inputs).backward()
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def call_times() -> None:
    print("1. Call time: forward + backward, median ms per call (after a warm-up call)")
    names = list(REPEATS)
    print(f"{'':48}" + "".join(f"{name:>19}" for name in names))
    ratios = []
    for workload, (fn, make_inputs) in WORKLOADS.items():
        inputs = make_inputs()
        torch._dynamo.reset()
        ms = {name: seconds * 1e3 for name, seconds in _call_times(_backends(fn), inputs).items()}
        print(f"{workload:48}" + "".join(f"{ms[name]:>19.3f}" for name in names))
        ratios.append((workload, ms))
    print(f"{'':48}{'fast/eager':>19}{'fast/aot_eager':>19}{'reference/fast':>19}")
    for workload, ms in ratios:
        fast = ms["aotspec fast"]
        print(
            f"{workload:48}{fast / ms['torch eager']:>19.2f}{fast / ms['aot_eager']:>19.2f}"
            f"{ms['aotspec reference'] / fast:>19.1f}"
        )
    print(f"  repeats: {', '.join(f'{name} {n}' for name, n in REPEATS.items())}")


# ---------------------------------------------------------------- 2. first-call time


def _first_calls(makers: dict, inputs) -> dict[str, float]:
    """Median seconds of the first call of a freshly made step, for each maker, taking turns."""
    samples: dict[str, list[float]] = {name: [] for name in makers}
    for _ in range(FIRST_CALLS):
        for name, make_step in makers.items():
            _clear_grads(inputs)
            step = make_step()
            start = time.perf_counter()
            step(*inputs).backward()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def _fresh_aot_eager(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="aot_eager")


def first_call_times() -> None:
    print(
        "\n2. First call (compile + forward + backward), "
        f"median ms of {FIRST_CALLS} fresh compilations"
    )
    print(f"{'':48}{'aotspec fast':>15}{'aot_eager':>15}{'fast/aot_eager':>16}")
    for workload, (fn, make_inputs) in WORKLOADS.items():
        inputs = make_inputs()
        makers = {
            "fast": lambda: aotspec.compile(fn, backend="fast"),
            "aot_eager": lambda: _fresh_aot_eager(fn),
        }
        seconds = _first_calls(makers, inputs)
        fast, aot = seconds["fast"] * 1e3, seconds["aot_eager"] * 1e3
        print(f"{workload:48}{fast:>15.1f}{aot:>15.1f}{fast / aot:>16.3f}")


# ---------------------------------------------------------------- 3. peak bytes


def _peaks(step, inputs) -> tuple[int, int, int]:
    """(bytes alive when the forward returns, backward peak, forward + backward peak) of one warm
    step on real tensors."""
    step(*inputs).backward()  # warm-up: compiles outside the tracker
    _clear_grads(inputs)
    tracker = MemoryTracker()
    with tracker:
        loss = step(*inputs)
        tracker.sweep()
        forward_peak, after_forward = tracker.peak_bytes, tracker.live_bytes
        tracker.reset_peak()  # the backward's peak from here on
        loss.backward()
        del loss
    return after_forward, tracker.peak_bytes, max(forward_peak, tracker.peak_bytes)


def _reference_backward_peak(fn, inputs) -> int:
    compiled = aotspec.compile(fn, backend="reference")
    compiled(*inputs).backward()
    _clear_grads(inputs)
    compiled(*inputs).backward()
    return compiled.last_run.backward_ledger.peak_bytes


def peak_bytes() -> None:
    print(
        "\n3. Peak live bytes of one warm step on real tensors "
        "(MemoryTracker; inputs and weights not counted)"
    )
    for workload, (fn, make_inputs) in WORKLOADS.items():
        inputs = make_inputs()
        torch._dynamo.reset()
        input_bytes = sum(t.untyped_storage().nbytes() for t in inputs)
        print(f"{workload}: inputs {input_bytes:,} bytes")
        print(
            f"{'':24}{'after forward':>15}{'backward peak':>15}"
            f"{'fwd+bwd peak':>15}{'bwd / eager':>13}"
        )
        rows = {}
        for name, step in list(_backends(fn).items())[:3]:
            rows[name] = _peaks(step, inputs)
            _clear_grads(inputs)
        eager_backward = rows["torch eager"][1]
        for name, (start, backward, whole) in rows.items():
            print(
                f"{name:24}{start:>15,}{backward:>15,}{whole:>15,}"
                f"{backward / eager_backward:>13.3f}"
            )
        reference = _reference_backward_peak(fn, inputs)
        print(
            f"{'reference ledger':24}{'':>15}{reference:>15,}{'':>15}"
            f"{reference / eager_backward:>13.3f}"
        )


# ---------------------------------------------------------------- 4. bfloat16 pack hook


def pack_bf16(t):
    return t.to(torch.bfloat16)


def unpack_f32(t):
    return t.to(torch.float32)


def _hooked(step):
    def hooked_step(*inputs):
        with torch.autograd.graph.saved_tensors_hooks(pack_bf16, unpack_f32):
            return step(*inputs)

    return hooked_step


def pack_hook_saving() -> None:
    print(
        f"\n4. bfloat16 pack hook: {CHAIN_LAYERS}-layer chain x = tanh(x @ w), "
        f"batch {CHAIN_BATCH}, width {CHAIN_WIDTH}; "
        "forward + backward peak bytes (inputs and weights not counted)"
    )
    inputs = chain_inputs()
    fast = aotspec.compile(chain_step, backend="fast", hooks_filter="donated")
    torch._dynamo.reset()
    aot_eager = torch.compile(chain_step, backend="aot_eager")
    rows = {
        "eager, no hooks": chain_step,
        "eager, bf16 hooks": _hooked(chain_step),
        "fast, no hooks": fast,
        "fast, bf16 hooks (donated)": _hooked(fast),
        "aot_eager, no hooks": aot_eager,
        "aot_eager, bf16 hooks": _hooked(aot_eager),
    }
    peaks = {}
    for name, step in rows.items():
        peaks[name] = _peaks(step, inputs)
        _clear_grads(inputs)
    base = peaks["eager, no hooks"]
    print(
        f"{'':30}{'after forward':>15}{'backward peak':>15}{'fwd+bwd peak':>15}"
        f"{'after fwd x eager':>19}{'fwd+bwd x eager':>17}"
    )
    for name, (start, backward, whole) in peaks.items():
        print(
            f"{name:30}{start:>15,}{backward:>15,}{whole:>15,}"
            f"{start / base[0]:>19.3f}{whole / base[2]:>17.3f}"
        )
    for column, k in [("after forward", 0), ("fwd+bwd peak", 2)]:
        print(
            f"  {column}, hooks/no hooks: eager {peaks['eager, bf16 hooks'][k] / base[k]:.3f}, "
            f"fast {peaks['fast, bf16 hooks (donated)'][k] / peaks['fast, no hooks'][k]:.3f}; "
            "fast with hooks / eager with hooks "
            f"{peaks['fast, bf16 hooks (donated)'][k] / peaks['eager, bf16 hooks'][k]:.3f}"
        )
    grads = sum(t.untyped_storage().nbytes() for t in inputs if t.requires_grad)
    print(
        f"  (the weights' gradients alone are {grads:,} bytes, "
        "all alive at the end of the backward)"
    )


# ---------------------------------------------------------------- profile


def profile_fast_mlp(calls: int = 200, top: int = 15) -> None:
    print(
        f"\ncProfile of {calls} aotspec fast MLP steps (forward + backward), top {top} by own time"
    )
    inputs = mlp_inputs()
    step = aotspec.compile(mlp_step, backend="fast")
    step(*inputs).backward()
    start = time.perf_counter()
    for _ in range(calls):
        step(*inputs).backward()
    print(f"  unprofiled: {(time.perf_counter() - start) / calls * 1e3:.3f} ms per call")
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    for _ in range(calls):
        step(*inputs).backward()
    profile.disable()
    print(f"  profiled: {(time.perf_counter() - start) / calls * 1e3:.3f} ms per call")
    pstats.Stats(profile).sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--profile", action="store_true", help="add a cProfile of 200 fast MLP steps"
    )
    args = parser.parse_args()
    # One intra-op thread: on a 2-core machine with anything else running, OpenMP's second thread
    # makes every backend's timing swing by an order of magnitude.
    torch.set_num_threads(1)
    print(
        f"torch {torch.__version__}, float32, {torch.get_num_threads()} torch thread, "
        f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}\n"
    )
    call_times()
    first_call_times()
    peak_bytes()
    pack_hook_saving()
    if args.profile:
        profile_fast_mlp()


if __name__ == "__main__":
    main()
