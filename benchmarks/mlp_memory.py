"""Memory and call time of the compiled reference on a 4-layer MLP training step.

Run on demand: `.venv/bin/python benchmarks/mlp_memory.py [--batch N]`. Prints, side by side from
one run:
- forward and backward peak live bytes of the compiled reference, boxed versus unboxed
  (`r[boxed.args-cleared]`: boxed frees inputs and saved values at their last use);
- the eager peak: the same step's joint graph run by the reference eager interpreter, which
  drops every value at its last use (`r[memory.eager.last-use]`);
- the time per call of `aotspec.compile(..., backend="reference")` (forward plus backward).
"""

from __future__ import annotations

import argparse
import os
import time

# The reference computes with numpy: one BLAS thread keeps its timing steady on a loaded 2-core
# machine.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch

import aotspec
from aotspec.reference.boundary import Boundary
from aotspec.reference.compiled import run_compiled
from aotspec.reference.interpreter import interpret
from aotspec.reference.ledger import Ledger

BATCH, WIDTH, LAYERS = 64, 256, 4


def mlp(x, *weights):
    for w in weights[:-1]:
        x = torch.relu(x @ w.t())
    return x @ weights[-1].t()


def _inputs(batch: int = BATCH):
    torch.manual_seed(0)
    x = torch.randn(batch, WIDTH)
    weights = [torch.randn(WIDTH, WIDTH, requires_grad=True) * WIDTH**-0.5 for _ in range(LAYERS)]
    return [x, *[w.detach().requires_grad_() for w in weights]]


def _step(compiled, inputs, boxed=True):
    plan = next(iter(compiled.plans.values()))
    run = run_compiled(plan, list(inputs), boxed=boxed)
    run.outputs[0].sum().backward()
    return run


def _joint_eager_peak(plan, inputs) -> int:
    """The forward and backward as one graph on the eager interpreter (tangent: ones)."""
    boundary = Boundary()
    outputs = plan.forward.graph.output_node().args[0]
    tangents = [
        torch.ones(node.meta["val"].shape)
        for k, node in enumerate(outputs)
        if k in plan.differentiated.differentiable_outputs
    ]
    cells = [boundary.import_tensor(t) for t in [*inputs, *tangents]]
    ledger = Ledger()
    for cell in cells:
        ledger.hold(cell)
    forward = interpret(plan.forward, cells[: len(inputs)], ledger)
    saved = forward[len(forward) - plan.num_saved :]
    interpret(plan.backward, saved + cells[len(inputs) :], ledger)
    return ledger.peak_bytes


def measure(batch: int = BATCH) -> dict[str, int]:
    """Peak bytes of one training step (`aotspec memory examples/mlp.py:mlp` shows the same)."""
    inputs = _inputs(batch)
    compiled = aotspec.compile(mlp, backend="reference")
    compiled(*inputs).sum().backward()  # compile once
    plan = next(iter(compiled.plans.values()))
    boxed = _step(compiled, inputs, boxed=True)
    unboxed = _step(compiled, inputs, boxed=False)
    return {
        "boxed forward peak": boxed.ledger.peak_bytes,
        "boxed backward peak": boxed.backward_ledger.peak_bytes,
        "unboxed forward peak": unboxed.ledger.peak_bytes,
        "unboxed backward peak": unboxed.backward_ledger.peak_bytes,
        "eager peak (joint)": _joint_eager_peak(plan, inputs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=BATCH)
    batch = parser.parse_args().batch
    peaks = measure(batch)
    inputs = _inputs(batch)
    compiled = aotspec.compile(mlp, backend="reference")
    compiled(*inputs).sum().backward()  # compile once
    calls = 5
    start = time.perf_counter()
    for _ in range(calls):
        compiled(*inputs).sum().backward()
    per_call = (time.perf_counter() - start) / calls
    print(f"MLP: {LAYERS} layers, batch {batch}, width {WIDTH}, float32")
    print(f"{'':28}{'boxed':>14}{'unboxed':>14}{'unboxed/boxed':>15}")
    for name in ("forward", "backward"):
        b, u = peaks[f"boxed {name} peak"], peaks[f"unboxed {name} peak"]
        print(f"{name + ' peak bytes':28}{b:>14,}{u:>14,}{u / b:>15.3f}")
    print(f"{'eager peak bytes (joint)':28}{peaks['eager peak (joint)']:>14,}")
    print(f"reference compiled call (forward + backward): {per_call * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
