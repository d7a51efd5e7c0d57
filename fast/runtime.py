"""The fast backend's runtime: the reference's plans, executed by real torch ops, boxed.

The plans (functional forward graph, backward graph, saved values, epilogue, outputs) come from
the reference's passes; only their execution differs. Each graph becomes a plain Python function
(`fast/codegen.py`) that takes one list, clears it on entry, and deletes every value right after
its last use, so on real tensors:
- an input dies inside the call once its last use has passed, unless the caller still holds it
  (`r[boxed.args-cleared]`); a stolen list is emptied before the call (`r[boxed.steal]`);
- the backward takes the saved tensors in one list and frees each at its last use
  (`r[autograd.saved-freed-in-backward]`).
Nothing here imports the reference interpreter: the numbers are torch's own.
"""

from __future__ import annotations

import torch
import torch.fx
from attrs import define

from aotspec.reference.autograd import TrainingPlan
from aotspec.reference.epilogue import (
    apply_epilogue,
    build_outputs,
    SavedInputs,
    detached_where_needed,
    tangents_as_traced,
)
from aotspec.reference.functionalize import FunctionalProgram

from .codegen import GeneratedCode, generate
from .fusion import fuse_pointwise, triton_requested


def _generated(graph_module: torch.fx.GraphModule, name: str) -> GeneratedCode:
    """The boxed code of one graph; with Triton (CUDA inputs, or AOTSPEC_TRITON=1) its pointwise
    chains run as fused kernels. On CPU the graph runs op by op, as the reference's plan says."""
    if triton_requested(graph_module):
        graph_module = fuse_pointwise(graph_module, use_triton=True)
    return generate(graph_module, name)


@define
class FastPlan:
    """A plan with its graphs compiled to boxed Python code."""

    plan: FunctionalProgram | TrainingPlan
    forward: GeneratedCode
    backward: GeneratedCode | None

    @classmethod
    def of(cls, plan: FunctionalProgram | TrainingPlan) -> FastPlan:
        if isinstance(plan, TrainingPlan):
            forward, backward = plan.forward.graph_module, plan.backward.graph_module
            return cls(plan, _generated(forward, "forward"), _generated(backward, "backward"))
        return cls(plan, _generated(plan.graph_module, "forward"), None)

    @property
    def functional(self) -> FunctionalProgram:
        return self.plan.functional if isinstance(self.plan, TrainingPlan) else self.plan

    @property
    def source(self) -> str:
        """The generated code, forward then backward, for reading."""
        parts = [self.forward.code] + ([self.backward.code] if self.backward is not None else [])
        return "\n".join(parts)


def run_fast(fast: FastPlan, tensors: list, stolen: frozenset[int] = frozenset()) -> list[torch.Tensor]:
    """Run `fast` on the caller's `tensors` (the runtime's own list; stolen entries are dropped
    from it, so the graph's list holds their last references); returns the outputs."""
    program = fast.functional
    caller_storages = [None if i in stolen else t.untyped_storage() for i, t in enumerate(tensors)]
    if fast.backward is not None:
        inputs = detached_where_needed(fast.plan, tensors)
        # r[boxed.steal]: a stolen input that needs no gradient reaches the forward through `call`,
        # not through apply's arguments (which live until apply returns), so the boxed forward's
        # list holds its last reference and frees it at its last use.
        handed_over = {i: inputs[i] for i in stolen if not inputs[i].requires_grad}
        for i in handed_over:
            inputs[i] = tensors[i] = None
        call = _Call(fast, handed_over)
        flats = list(_Forward.apply(call, *inputs))
    else:
        arguments = list(tensors)
        for i in stolen:
            tensors[i] = None  # a stolen input is only read; the graph frees it at its last use
        flats = fast.forward(arguments)  # clears `arguments`
    apply_epilogue(program, tensors, caller_storages, flats)
    if fast.backward is not None:
        call.saved_inputs.after_call()
    return build_outputs(program, tensors, caller_storages, flats)


@define
class _Call:
    fast: FastPlan
    #: Stolen inputs by flat index, handed to the forward outside apply's arguments.
    handed_over: dict[int, torch.Tensor]
    saved_inputs: SavedInputs | None = None

    def arguments(self, tensors: tuple) -> list:
        return [self.handed_over.pop(i) if i in self.handed_over else t for i, t in enumerate(tensors)]


class _Forward(torch.autograd.Function):
    """The compiled forward as one autograd node; its backward runs the boxed backward graph."""

    @staticmethod
    def forward(ctx, call: _Call, *tensors):
        fast = call.fast
        plan: TrainingPlan = fast.plan
        results = fast.forward(call.arguments(tensors))
        n_outputs = len(results) - plan.num_saved
        ctx.fast = fast
        ctx.saved = results[n_outputs:]  # plain references: handed over whole to the backward
        # r[autograd.saved-inputs]: a saved input is the caller's tensor; its version is noted.
        call.saved_inputs = SavedInputs.at_call(plan, {k: ctx.saved[k] for k in plan.saved_inputs})
        ctx.saved_inputs = call.saved_inputs
        flats = results[:n_outputs]
        ctx.mark_non_differentiable(*[f for k, f in enumerate(flats) if k not in plan.differentiable_outputs])
        return tuple(flats)

    @staticmethod
    def backward(ctx, *grads):
        fast: FastPlan = ctx.fast
        plan: TrainingPlan = fast.plan
        ctx.saved_inputs.check()
        ctx.saved_inputs = None
        arguments = ctx.saved + tangents_as_traced(plan, grads)
        ctx.saved = None  # the list below is now the only holder of the saved tensors
        results = fast.backward(arguments)  # clears `arguments`: saved tensors die at last use
        input_grads: list = [None] * len(plan.functional.inputs)
        for i, grad in zip(plan.grad_inputs, results, strict=True):
            input_grads[i] = grad
        return (None, *input_grads)
