"""The fast backend's runtime: the reference's plans, executed by real torch ops, boxed.

The plan (`aotspec.reference.plan_records.Plan`) and the skeleton of a call
(`aotspec.reference.runtime`) are the reference's; only how a graph runs differs. Each graph
becomes a plain Python function (`fast/codegen.py`) that takes one list, clears it on entry, and
deletes every value right after its last use, so on real tensors:
- an input dies inside the call once its last use has passed, unless the caller still holds it
  (`r[boxed.args-cleared]`); a stolen list is emptied before the call (`r[boxed.steal]`);
- the backward takes the saved tensors in one list and frees each at its last use
  (`r[autograd.saved-freed-in-backward]`).
Nothing here imports the reference interpreter: the numbers are torch's own.
"""

from __future__ import annotations

import weakref
from functools import cached_property

import torch
import torch.fx
from attrs import define, field

from aotspec.reference.plan_records import Plan
from aotspec.reference.runtime import run_plan

from .codegen import GeneratedCode, generate
from .fusion import fuse_pointwise, triton_requested

#: The code of a symbolic plan's graph, generated at its first size and shared by every size
#: (`r[sizes.symbolic.per-call]`): the graphs of a plan at a call's sizes are the plan's own.
_SYMBOLIC_CODE: weakref.WeakKeyDictionary[torch.fx.GraphModule, GeneratedCode] = (
    weakref.WeakKeyDictionary()
)


def _generated(graph_module: torch.fx.GraphModule, name: str, sizes: dict) -> GeneratedCode:
    """The boxed code of one graph, at a symbolic plan's `sizes`; with Triton (CUDA inputs, or
    AOTSPEC_TRITON=1) its pointwise chains run as fused kernels. On CPU the graph runs op by op,
    as the reference's plan says."""
    if not sizes:
        return _generated_once(graph_module, name)
    if graph_module not in _SYMBOLIC_CODE:
        _SYMBOLIC_CODE[graph_module] = _generated_once(graph_module, name)
    return _SYMBOLIC_CODE[graph_module].at(sizes)


def _generated_once(graph_module: torch.fx.GraphModule, name: str) -> GeneratedCode:
    if triton_requested(graph_module):
        graph_module = fuse_pointwise(graph_module, use_triton=True)
    return generate(graph_module, name)


@define
class FastPlan:
    """A plan with its graphs compiled to boxed Python code."""

    plan: Plan
    forward: GeneratedCode
    backward: GeneratedCode | None
    #: The backward's code for a backward that did not reach every differentiable output.
    backwards_reaching: dict[tuple[bool, ...], GeneratedCode] = field(factory=dict)

    @classmethod
    def of(cls, plan: Plan) -> FastPlan:
        forward = _generated(plan.forward.graph_module, "forward", plan.sizes)
        if plan.backward is None:
            return cls(plan, forward, None)
        return cls(plan, forward, _generated(plan.backward.graph_module, "backward", plan.sizes))

    def backward_reaching(self, reached: tuple[bool, ...]) -> GeneratedCode:
        """r[autograd.unreached-outputs.terms]: made once per set of outputs reached."""
        if all(reached):
            return self.backward
        if reached not in self.backwards_reaching:
            graph_module = self.plan.backward_reaching(reached).graph_module
            code = _generated(graph_module, "backward", self.plan.sizes)
            self.backwards_reaching[reached] = code
        return self.backwards_reaching[reached]

    def run(self, tensors: list, stolen: frozenset[int] = frozenset(), callers: list = ()) -> list:
        """Run the plan on the caller's `tensors` (the runtime's own list; stolen entries are
        dropped from it, so the graph's list holds their last references); returns the outputs.
        With synthetic bases, `callers` are the caller's flat tensors (`run_plan`)."""
        return run_plan(self.plan, self._graphs, tensors, stolen, callers)

    @cached_property
    def _graphs(self) -> _FastGraphs:
        return _FastGraphs(self)

    @property
    def functional(self):
        return self.plan.functional

    @property
    def bases(self):
        return self.plan.bases

    @property
    def source(self) -> str:
        """The generated code, forward then backward, for reading."""
        parts = [self.forward.code] + ([self.backward.code] if self.backward is not None else [])
        return "\n".join(parts)


@define
class _FastGraphs:
    """The fast backend's `Graphs`: the generated functions, which clear their list."""

    fast: FastPlan

    def forward(self, arguments: list) -> list:
        return self.fast.forward(arguments)

    def outputs_on_saved(self, outputs: list, saved: list) -> list[int]:
        storages = {t.untyped_storage()._cdata for t in saved if isinstance(t, torch.Tensor)}
        return [k for k, t in enumerate(outputs) if t.untyped_storage()._cdata in storages]

    def backward(
        self,
        arguments: list,
        saved_inputs: dict[int, torch.Tensor],
        retain: bool,
        reached: tuple[bool, ...],
    ) -> list:
        # A saved input is the caller's tensor object itself, already in `arguments`, which
        # then holds it alone (a stolen one dies at its last use)
        saved_inputs.clear()
        return self.fast.backward_reaching(reached)(arguments)
