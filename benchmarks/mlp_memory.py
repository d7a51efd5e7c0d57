"""Memory and call time of the compiled reference on a 4-layer MLP training step.

Run on demand: `.venv/bin/python benchmarks/mlp_memory.py`. Prints, side by side from one run:
- forward and backward peak live bytes of the compiled reference, boxed versus unboxed
  (`r[boxed.args-cleared]`: boxed frees inputs and saved values at their last use);
- the eager peak: the same step's joint graph run by the reference eager interpreter, which
  drops every value at its last use (`r[memory.eager.last-use]`);
- the time per call of `aotspec.compile(..., backend="reference")` (forward plus backward).
"""

from __future__ import annotations

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


def _inputs():
    torch.manual_seed(0)
    x = torch.randn(BATCH, WIDTH)
    weights = [torch.randn(WIDTH, WIDTH, requires_grad=True) * WIDTH**-0.5 for _ in range(LAYERS)]
    return [x, *[w.detach().requires_grad_() for w in weights]]


def _step(compiled, inputs, boxed=True):
    plan = next(iter(compiled._plans.values()))
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
        if k in plan.differentiable_outputs
    ]
    cells = [boundary.import_tensor(t) for t in [*inputs, *tangents]]
    ledger = Ledger()
    for cell in cells:
        ledger.hold(cell)
    forward = interpret(plan.forward, cells[: len(inputs)], ledger)
    saved = forward[len(forward) - plan.num_saved :]
    interpret(plan.backward, saved + cells[len(inputs) :], ledger)
    return ledger.peak_bytes


def main() -> None:
    inputs = _inputs()
    compiled = aotspec.compile(mlp, backend="reference")
    compiled(*inputs).sum().backward()  # compile once
    plan = next(iter(compiled._plans.values()))
    boxed = _step(compiled, inputs, boxed=True)
    unboxed = _step(compiled, inputs, boxed=False)
    eager_peak = _joint_eager_peak(plan, inputs)
    calls = 5
    start = time.perf_counter()
    for _ in range(calls):
        compiled(*inputs).sum().backward()
    per_call = (time.perf_counter() - start) / calls
    print(f"MLP: {LAYERS} layers, batch {BATCH}, width {WIDTH}, float32")
    print(f"{'':28}{'boxed':>14}{'unboxed':>14}{'unboxed/boxed':>15}")
    for name, b, u in [
        ("forward peak bytes", boxed.ledger.peak_bytes, unboxed.ledger.peak_bytes),
        (
            "backward peak bytes",
            boxed.backward_ledger.peak_bytes,
            unboxed.backward_ledger.peak_bytes,
        ),
    ]:
        print(f"{name:28}{b:>14,}{u:>14,}{u / b:>15.3f}")
    print(f"{'eager peak bytes (joint)':28}{eager_peak:>14,}")
    print(f"reference compiled call (forward + backward): {per_call * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
