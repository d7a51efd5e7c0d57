"""The fast backend's runtime: the reference's plans, executed by real torch ops, boxed.

The plan (`aotspec.reference.plan_records.Plan`) and the skeleton of a call
(`aotspec.reference.runtime`) are the reference's; only how a graph runs differs. Each graph
becomes a plain Python function (`fast/codegen.py`) that takes one list, clears it on entry, and
deletes every value right after its last use, so on real tensors:
- an input dies inside the call once its last use has passed, unless the caller still holds it
  (`r[boxed.args-cleared]`); a stolen list is emptied before the call (`r[boxed.steal]`);
- the backward takes the saved tensors in one list and frees each at its last use
  (`r[autograd.saved-freed-in-backward]`).
A plain plan (most training steps: graphs and saved values, nothing the call writes or checks)
runs the skeleton's steps written out for it (`fast/plain.py`), which hand what they do not
cover to the skeleton.
Nothing here imports the reference interpreter: the numbers are torch's own.
"""

from __future__ import annotations

import functools
import operator
import weakref
from collections.abc import Callable
from functools import cached_property

import torch
import torch.autograd.forward_ad as forward_ad
import torch.fx
from attrs import define, field

from aotspec.reference.graph import output_node
from aotspec.reference.optable import OpKind, lookup
from aotspec.reference.plan_records import Plan
from aotspec.reference.runtime import run_plan

from .codegen import GeneratedCode, generate
from .fusion import fuse_pointwise, triton_requested
from .plain import plain_runner

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
        return self.runner(tensors, stolen, callers)

    @cached_property
    def runner(self) -> Callable[[list, frozenset[int], list], list]:
        """`run` as one function of (tensors, stolen, callers): the skeleton's `run_plan` on
        this plan, written out for it where it is plain (`fast/plain.py`)."""
        return plain_runner(self) or functools.partial(run_plan, self.plan, self._graphs)

    @cached_property
    def _graphs(self) -> _FastGraphs:
        return _FastGraphs(self)

    @cached_property
    def may_share(self) -> tuple[tuple[int, tuple[int, ...]], ...]:
        """Per output of the forward graph that may lie on a saved value's storage, those saved
        values (by index among them): what `outputs_on_saved` compares at a call. Read from the
        plan's forward graph (a fused kernel's outputs are fresh, as its ops' are)."""
        graph = self.plan.forward.graph
        results = output_node(graph).args[0]
        n_outputs = len(results) - self.plan.num_saved
        roots = _storage_roots(graph)
        saved = [roots.get(node, _ANYWHERE) for node in results[n_outputs:]]
        pairs = []
        for k, node in enumerate(results[:n_outputs]):
            root = roots.get(node, _ANYWHERE)
            candidates = tuple(j for j, other in enumerate(saved) if _may_meet(root, other))
            if candidates:
                pairs.append((k, candidates))
        return tuple(pairs)

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


#: The op table's kinds whose results lie on storages of their own.
_FRESH_OUTPUTS = frozenset([OpKind.COMPUTE, OpKind.ATEN, OpKind.COLLECTIVE, OpKind.SIZE])

#: A storage that may be any other: a value whose aliasing the op table does not say.
_ANY = "any"
_ANYWHERE = frozenset([_ANY])


def _may_meet(a: frozenset, b: frozenset) -> bool:
    return _ANY in a or _ANY in b or not a.isdisjoint(b)


def _storage_roots(graph: torch.fx.Graph) -> dict[torch.fx.Node, frozenset]:
    """Per value of the graph, the storages it may lie on, each named by the value that made
    it: a fresh result (of a compute, ATen-valued, collective or size op of the op table) its
    own, one of several fresh results its own too, a view (a view op of the table, views its
    schema does not declare included) or another op's result what its arguments lie on; the
    inputs may share theirs; anything else (a fused kernel's, a Python function's) may lie on
    any. Two values on one storage at a call have a name in common."""
    roots: dict[torch.fx.Node, frozenset] = {}
    for node in graph.nodes:
        target = node.target
        if node.op == "placeholder":
            roots[node] = frozenset(["inputs"])
        elif node.op == "get_attr":
            roots[node] = frozenset([node])
        elif target is operator.getitem and node.args[0] in roots:
            source, index = node.args
            whole = roots[source]
            roots[node] = frozenset([(source, index)]) if whole == {source} else whole
        elif node.op == "call_function" and isinstance(target, torch._ops.OpOverload):
            if lookup(target, where=node.name).kind in _FRESH_OUTPUTS:
                roots[node] = frozenset([node])
            else:  # what any argument lies on (a view's base, or an in-place op's operand)
                on = [roots.get(a, _ANYWHERE) for a in node.all_input_nodes]
                roots[node] = frozenset([node]).union(*on)
        elif node.op != "output":
            roots[node] = _ANYWHERE
    return roots


@define
class _FastGraphs:
    """The fast backend's `Graphs`: the generated functions, which clear their list."""

    fast: FastPlan

    def forward(self, arguments: list) -> list:
        results = self.fast.forward(arguments)
        for k in range(len(results) - self.fast.plan.num_saved):
            if isinstance(results[k], torch.Tensor) and results[k]._is_view():
                # r[autograd.grad-mode-inside.views]: an output is a value of its own for
                # autograd, as the reference's are: a kernel run below autograd
                # (as_strided_scatter's) may return a view of a base of its own, and a view
                # of a view taken under torch.no_grad() would not require grad as eager's does
                results[k] = results[k].detach()
        return results

    def outputs_on_saved(self, outputs: list, saved: list) -> list[int]:
        return [
            k
            for k, candidates in self.fast.may_share
            if any(
                isinstance(saved[j], torch.Tensor)
                and saved[j].untyped_storage()._cdata == outputs[k].untyped_storage()._cdata
                for j in candidates
            )
        ]

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
        code = self.fast.backward_reaching(reached)
        if forward_ad._current_level >= 0:  # autograd's kernels carry forward-mode tangents
            return code(arguments)
        # The runtime runs the backward with grad mode off, so autograd's kernels record nothing
        # and only pass each op on: skipped, as the forward skips them (a tenth of the backward
        # graph's time); the views' kernels (ADInplaceOrView) still run, so a gradient that is
        # a view is one, sharing its base's version counter.
        with torch._C._AutoDispatchBelowAutograd():
            return code(arguments)
