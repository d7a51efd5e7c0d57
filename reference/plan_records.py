"""The plan of a compiled call: the records the pipeline makes and the runtimes run.

`pipeline.py` makes one frozen `Plan` per specialization of a compiled function; the shared
runtime (`runtime.py`) and its graph executors, the reference's (`compiled.py`) and the fast
backend's (`aotspec.fast`), run it, and `aotspec explain` shows it. A plan holds the functional
program (`program_records.py`), and, when the call records autograd, the `Differentiated` graphs
autograd's partition made (`autograd.py`), with the saved-tensor hooks inlined into them
(`hooks.py`, whose marks and placement are recorded here too).
Records only: the passes that make them live elsewhere.
"""

from __future__ import annotations

import enum
from functools import cached_property

import torch
import torch.fx
from attrs import field, frozen

from .graph import GraphProgram, output_node, placeholders
from .program_records import BackwardWrite, FunctionalProgram
from .synthetic_bases import SyntheticBases
from .unreached_terms import without_unreached_terms

# ---------------------------------------------------------------- saved-tensor hooks


class Placement(enum.Enum):
    """Where the saved-tensor hooks pass (`hooks.py`) puts each pack hook."""

    #: Pack right after the saved value's last forward use: the spec's placement.
    LAST_USE = "last-use"
    #: Pack at the end of the forward, as PyTorch 2.13 does: kept for comparisons.
    FORWARD_END = "forward-end"


@frozen
class InlinedHook:
    """`node.meta["saved_tensor_hook"]` of a node the saved-tensor hooks pass (`hooks.py`)
    inlined: it belongs to the `hook` ("pack" or "unpack") of the saved value named `value` in
    the forward graph (read by `aotspec explain`)."""

    hook: str
    value: str


# ---------------------------------------------------------------- sizes


@frozen
class SymbolicSizes:
    """What a symbolic plan assumes about the sizes of a call (`r[sizes.symbolic.guard]`).

    The plan's records and graphs hold symbols where the traced numbers depend on the sizes;
    `functional.inputs` holds the inputs' layouts and storage bytes over those symbols. A call
    binds each symbol from its inputs' numbers; the plan serves it when every input's numbers
    are the symbolic ones at that binding, every relation tracing decided holds, and every
    symbol is in its range."""

    #: Relations between sizes that tracing decided (sympy booleans over the symbols).
    guards: tuple
    #: Symbol -> (lowest, highest) value it may take (sympy numbers, infinities included);
    #: sizes 0 and 1 are traced as numbers, so a size's lowest is 2.
    ranges: dict
    #: The program's number arguments traced as symbols: their positions among the flat leaves.
    numbers: tuple[int, ...] = ()


# ---------------------------------------------------------------- the plan


@frozen
class Differentiated:
    """The forward and backward graphs of a functional program, and what links them."""

    #: inputs: the functional graph's inputs; outputs: its outputs, then the saved values.
    forward: GraphProgram
    #: inputs: the saved values, then one tangent per differentiable output; outputs: the
    #: gradients of `grad_inputs`.
    backward: GraphProgram
    #: Indices of the functional graph's outputs that gradients flow into.
    differentiable_outputs: tuple[int, ...]
    #: Indices of the inputs that receive a gradient, in the backward graph's output order.
    grad_inputs: tuple[int, ...]
    num_saved: int
    #: Strides of each tangent as traced (`r[autograd.tangent-layout]`).
    tangent_strides: tuple[tuple[int, ...], ...]
    #: Inputs the backward reads as the program left them (input index -> bytes of their storage
    #: it reads), rather than as they were when the call began (`r[autograd.saved-inputs]`).
    read_after_call: dict[int, int]
    #: Per gradient of `grad_inputs`, the tangents (by position) it is computed from
    #: (`r[autograd.unreached-outputs]`).
    grad_tangents: tuple[frozenset[int], ...]
    #: Writes of custom Functions' backwards into the caller's storages: the backward returns
    #: their values after the gradients (`r[autograd.custom-function.backward-writes]`).
    backward_writes: tuple[BackwardWrite, ...] = ()
    #: Per write, the tangents (by position) that reach its Function: it happens only when one
    #: of them is reached, or always when there are none.
    write_tangents: tuple[frozenset[int], ...] = ()


@frozen
class Plan:
    """Everything a runtime needs to run one specialization of a compiled function.

    Without autograd, `forward` is the functional graph and `backward` is None; with it,
    `forward` returns the functional graph's outputs and then `num_saved` saved values, which
    `backward` takes before one tangent per differentiable output."""

    #: The functional program: input facts, epilogue, outputs, and the captured program.
    functional: FunctionalProgram
    #: The forward and backward graphs and what links them, when the call records autograd.
    differentiated: Differentiated | None = None
    #: Arguments compiled as views of a base (`r[autograd.input-writes.synthetic-base]`): the
    #: runtime passes the base in their place.
    bases: SyntheticBases = SyntheticBases()
    #: A symbolic plan's assumptions about sizes (`r[sizes.symbolic.guard]`); None for a plan
    #: traced at the sizes of one call.
    symbolic: SymbolicSizes | None = None
    #: The sizes this plan runs at: a symbolic plan instantiated for a call's sizes holds its
    #: symbols' numbers, and its graphs run at them (`r[sizes.symbolic.per-call]`).
    sizes: dict = field(factory=dict, eq=False)

    @cached_property
    def forward(self) -> GraphProgram:
        """The graph a call runs first: with autograd, the partition's forward, which returns
        the functional graph's outputs and then `num_saved` saved values; without it, the
        functional graph."""
        if self.differentiated is None:
            return GraphProgram(self.functional.graph_module, self.functional.entries)
        return self.differentiated.forward

    @property
    def backward(self) -> GraphProgram | None:
        return None if self.differentiated is None else self.differentiated.backward

    @property
    def num_saved(self) -> int:
        return 0 if self.differentiated is None else self.differentiated.num_saved

    @cached_property
    def detached_inputs(self) -> frozenset[int]:
        """r[autograd.detach-no-grad-inputs]: the non-leaf inputs that require grad and get no
        gradient, which a call detaches."""
        grad_inputs = set(() if self.differentiated is None else self.differentiated.grad_inputs)
        return frozenset(
            i
            for i, meta in enumerate(self.functional.inputs)
            if meta.requires_grad and not meta.is_leaf and i not in grad_inputs
        )

    @cached_property
    def saved_inputs(self) -> dict[int, int]:
        """Saved index -> flat input index, for the saved values that are inputs: the caller's
        tensors themselves, read when the backward runs (`r[autograd.saved-inputs]`)."""
        if self.backward is None:
            return {}
        graph = self.forward.graph
        index_of = {node: i for i, node in enumerate(placeholders(graph))}
        outputs = output_node(graph).args[0]
        saved = outputs[len(outputs) - self.num_saved :]
        return {k: index_of[node] for k, node in enumerate(saved) if node in index_of}

    @cached_property
    def non_differentiable_outputs(self) -> tuple[int, ...]:
        """The forward's outputs that are not differentiable: a call marks them so."""
        if self.differentiated is None:
            return ()
        differentiable = set(self.differentiated.differentiable_outputs)
        n_outputs = len(output_node(self.forward.graph).args[0]) - self.num_saved
        return tuple(k for k in range(n_outputs) if k not in differentiable)

    @cached_property
    def saved_inputs_by_time(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """The saved inputs as (saved index, flat input index), split in two: those the backward
        reads as the call began, then those it reads as the call left them
        (`r[autograd.saved-inputs]`); a call notes each when it reads it so."""
        after = {} if self.differentiated is None else self.differentiated.read_after_call
        pairs = self.saved_inputs.items()
        return (
            tuple((k, i) for k, i in pairs if i not in after),
            tuple((k, i) for k, i in pairs if i in after),
        )

    @cached_property
    def saved_inputs_at_call(self) -> tuple[tuple[int, int | None], ...]:
        """The saved inputs the backward reads as the call began (`saved_inputs_by_time[0]`),
        each as (flat input index, the bytes of its storage at the call): every call this plan
        serves has those bytes, as its guard key holds them (`InputMeta.storage_nbytes`), so a
        call reads them only where they depend on its sizes (None)."""
        inputs = self.functional.inputs
        return tuple(
            (i, nbytes if type(nbytes := inputs[i].storage_nbytes) is int else None)
            for _, i in self.saved_inputs_by_time[False]
        )

    def backward_reaching(self, reached: tuple[bool, ...]) -> GraphProgram:
        """The backward graph for a backward that reached the differentiable outputs `reached`
        says (`r[autograd.unreached-outputs.terms]`); made once per such set."""
        if all(reached):
            return self.backward
        if reached not in self._backwards_reaching:
            self._backwards_reaching[reached] = without_unreached_terms(
                self.backward, self.num_saved, reached
            )
        return self._backwards_reaching[reached]

    @cached_property
    def _backwards_reaching(self) -> dict[tuple[bool, ...], GraphProgram]:
        return {}

    @cached_property
    def grads_read_saved(self) -> tuple[bool, ...]:
        """Per gradient of `grad_inputs`: whether the backward graph computes it from a saved
        value, as eager's derivatives of the same ops read the forward's values, so that the
        gradient eager computes with `create_graph=True` has a history
        (`r[autograd.double-backward]`); one computed from the tangents alone has none."""
        graph = self.backward.graph
        saved = set(placeholders(graph)[: self.num_saved])
        reads_saved: dict[torch.fx.Node, bool] = {}
        for node in graph.nodes:
            reads_saved[node] = node in saved or any(
                reads_saved[used] for used in node.all_input_nodes
            )
        grads = output_node(graph).args[0][: len(self.differentiated.grad_inputs)]
        return tuple(isinstance(grad, torch.fx.Node) and reads_saved[grad] for grad in grads)
