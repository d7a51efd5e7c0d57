"""The records the compile passes hand on: to each other, to the plan and to the runtime.

A compiled call's pipeline (`pipeline.py`) runs the passes in turn; each makes a record the next
reads, and the runtime (`runtime.py`, `epilogue.py`) reads them back when it calls the program:
- `CapturedProgram`, what capture (`capture.py`) makes of the user's function: its aten graph,
  and how to go from the user's arguments to the graph's inputs and from its outputs back;
- `InputMeta` and `input_facts`, what a compiled program assumes about its flat inputs (the
  guard of a compiled function compares them);
- `FunctionalProgram`, what functionalization (`functionalize.py`) makes of a captured program:
  a graph without mutations, the epilogue that applies the program's mutations to the caller's
  tensors (`WriteBack`, `Resize`, `Relayout`, `Rebind`), how each output is laid out
  (`OutputIsInput`, `OutputView`), and what autograd (`autograd.py`) reads besides
  (`StandIns`, `CustomCall`).
Records only: no pass lives here, so the runtime, the fast backend and the tools that show a
plan read them without importing the passes.

Conventions: `n` counts bytes; an input index is a flat tensor input's position.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from attrs import field, frozen

from aotspec.errors import UnsupportedError

from .custom_functions import CustomFunction
from .optable import OpEntry
from .storage import Layout
from .symbols import settled

# ---------------------------------------------------------------- the captured program


class _TensorSlot:
    """Marks a flat leaf that is a tensor (a graph input or output) in the leaf tuples of a
    `CapturedProgram`."""

    def __repr__(self) -> str:
        return "<tensor>"


TENSOR = _TensorSlot()


class _NumberSlot:
    """Marks a flat leaf of the return value that is a number read from tensor values: the graph
    returns, after its tensor outputs, the tensor it is read from."""

    def __repr__(self) -> str:
        return "<number>"


NUMBER = _NumberSlot()


@frozen
class ValueCheck:
    """r[capture.data-dependent.checks]: the function raises `error(*error_args)` when the bool of
    graph output `output_index`, a copy of the one-element tensor it converts to bool, is
    `raises_when`; capture traced the path where it does not raise."""

    output_index: int
    raises_when: bool
    error: type[BaseException]
    error_args: tuple[Any, ...]


@frozen
class CapturedProgram:
    """A captured program: the graph plus how to get from user arguments to it and back."""

    graph_module: torch.fx.GraphModule
    #: pytree spec of (args, kwargs) as the user passed them.
    in_spec: pytree.TreeSpec
    #: For each flat leaf of (args, kwargs): TENSOR if it is a graph input, else the constant.
    in_leaves: tuple[Any, ...]
    #: pytree spec of the user's return value.
    out_spec: pytree.TreeSpec
    #: For each flat leaf of the return value: TENSOR if it is a graph output, NUMBER if it is
    #: read from one of the graph outputs after those, else the constant.
    out_leaves: tuple[Any, ...]
    #: Op table entry of every call_function node, looked up once at capture.
    entries: dict[torch.fx.Node, OpEntry]
    name: str
    #: Flat inputs the function calls `requires_grad_()` on (`r[autograd.requires-grad-inside]`).
    requires_grad_inputs: frozenset[int] = frozenset()
    #: Flat outputs the function calls `requires_grad_()` on after their last use
    #: (`r[autograd.requires-grad-inside.outputs]`).
    requires_grad_outputs: frozenset[int] = frozenset()
    #: The custom Functions a gradient reaches, by the key their `custom_function_call` nodes
    #: name (`r[capture.custom-function]`).
    custom_functions: tuple[CustomFunction, ...] = ()
    #: Flat inputs whose values, read at capture, the program is specialized on
    #: (`r[capture.data-dependent.input-values]`).
    values_read: frozenset[int] = frozenset()
    #: The value checks whose outcome only decides whether the function raises, in the order it
    #: makes them; their graph outputs come last (`r[capture.data-dependent.checks]`).
    checks: tuple[ValueCheck, ...] = ()
    #: Flat inputs whose version counter the function's ops advanced as they traced, as
    #: eager's advance the caller's (`r[functionalize.epilogue.version]`).
    advanced_inputs: tuple[int, ...] = ()
    #: The fake tensors the function was traced on, as it left them (its graph's placeholders
    #: hold detached copies taken before it ran): functionalization traces on them again where
    #: they are as converting its inputs would make them.
    traced_inputs: tuple[torch.Tensor, ...] = field(default=(), eq=False, repr=False)

    @property
    def graph(self) -> torch.fx.Graph:
        return self.graph_module.graph

    def raise_failed_check(self, value_of: Callable[[int], Any]) -> None:
        """r[capture.data-dependent.checks]: eager's exception for the first check, in the
        function's order, that fails; `value_of(k)` is the number graph output `k` holds."""
        for check in self.checks:
            if bool(value_of(check.output_index)) == check.raises_when:
                raise check.error(*check.error_args)

    def tensor_inputs(self, args, kwargs) -> list[torch.Tensor]:
        leaves, _ = pytree.tree_flatten((tuple(args), dict(kwargs)))
        return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]

    @cached_property
    def _returns_tensors(self) -> type | None:
        """`tuple` or `list` when the function returns a flat tuple or list of tensors, `object`
        when it returns one tensor: what `unflatten_outputs` builds without pytree."""
        if any(leaf is not TENSOR for leaf in self.out_leaves):
            return None
        if self.out_spec.is_leaf():
            return object
        spec = self.out_spec
        flat = spec.type in (tuple, list) and spec.num_nodes == spec.num_leaves + 1
        return spec.type if flat else None

    def unflatten_outputs(self, graph_outputs: list) -> Any:
        returns = self._returns_tensors
        if returns is object:
            return graph_outputs[0]
        if returns is not None:
            return returns(graph_outputs)
        n_tensors = sum(leaf is TENSOR for leaf in self.out_leaves)
        tensors, read = iter(graph_outputs[:n_tensors]), iter(graph_outputs[n_tensors:])
        leaves = [
            next(tensors)
            if leaf is TENSOR
            else next(read).item()  # r[capture.data-dependent.returned]: read as the call returns
            if leaf is NUMBER
            else leaf
            for leaf in self.out_leaves
        ]
        return pytree.tree_unflatten(leaves, self.out_spec)


# ---------------------------------------------------------------- what a compiled program assumes


@frozen
class InputMeta:
    """What a compiled program assumes about one flat tensor input; a change means recompiling."""

    layout: Layout
    #: Inputs with equal `storage` share one storage (the index of the first input on it).
    storage: int
    storage_nbytes: int = field(converter=settled)
    requires_grad: bool
    is_leaf: bool
    #: The index of the first input that is this very object (its own index if none).
    same_object: int

    @classmethod
    def of(cls, tensors: list[torch.Tensor]) -> tuple[InputMeta, ...]:
        return tuple(
            cls(
                Layout(dtype, tuple(sizes), strides, offset),
                storage,
                nbytes,
                requires_grad,
                is_leaf,
                same,
            )
            for (
                dtype,
                sizes,
                strides,
                offset,
                storage,
                nbytes,
                requires_grad,
                is_leaf,
                same,
            ) in input_facts(tensors)
        )


def input_facts(tensors: list[torch.Tensor]) -> tuple[tuple, ...]:
    """`InputMeta.of(tensors)` as plain tuples, cheap to build and hash: a compiled function's
    guard."""
    first_on_storage: dict[int, int] = {}
    first_object: dict[int, int] = {}
    on_storage, on_object = first_on_storage.setdefault, first_object.setdefault
    strided = torch.strided
    facts = []
    for i, t in enumerate(tensors):
        # the refusals' own tests inline: they run at every call, for every input
        if t.layout is not strided:
            refuse_layout(f"flat input {i}", f"has layout {t.layout}")  # before its storage
        if t.is_conj() or t.is_neg():
            refuse_lazy_bits(i, t)
        storage = t.untyped_storage()
        facts.append(
            (
                t.dtype,
                t.shape,
                t.stride(),
                t.storage_offset(),
                on_storage(storage._cdata, i),
                storage.nbytes(),
                t.requires_grad,
                t.is_leaf,
                on_object(id(t), i),
            )
        )
    return tuple(facts)


def refuse_layout(what: str, problem: str) -> None:
    """r[memory.layout.strided-only]: a tensor without a strided layout has no storage read
    through a layout; it cannot be an input, an output or a value of a captured program."""
    raise UnsupportedError(
        f"{what} {problem}: only strided tensors have layouts on storages",
        rule="memory.layout.strided-only",
        fix="make and use sparse tensors outside the compiled function, and pass it dense ones "
        "(to_dense())",
    )


def refuse_lazy_bits(i: int, t: torch.Tensor) -> None:
    """r[memory.layout.conj-neg.inputs]: an argument read through eager's lazy conjugate or
    negation."""
    if t.is_conj() or t.is_neg():
        bit = "conjugate" if t.is_conj() else "negative"
        raise UnsupportedError(
            f"flat input {i} has eager's lazy {bit} bit (a conj() or .imag view of a conjugate)",
            rule="memory.layout.conj-neg.inputs",
            fix="pass x.resolve_conj().resolve_neg() (a copy), or take the conjugate inside the "
            "compiled function",
        )


# ---------------------------------------------------------------- the result


@frozen
class CallerStorage:
    """The caller's storage that flat input `input_index` reads at entry."""

    input_index: int


@frozen
class GraphStorage:
    """A storage the program made: graph output `output_index` holds its bytes (the op result that
    made it, or, once the program wrote or resized it, a 1-D tensor of its contents)."""

    output_index: int


@frozen
class WriteBack:
    """r[functionalize.epilogue.data]: the caller's storage takes graph output `output_index`'s
    bytes."""

    input_index: int
    output_index: int


@frozen
class Resize:
    """r[functionalize.epilogue.resize]: the caller's storage is resized to `nbytes`."""

    input_index: int
    nbytes: int


@frozen
class Relayout:
    """r[functionalize.epilogue.metadata]: the caller's tensor object takes the in-place metadata
    op `op(tensor, *args)` the program applied to it, under the grad mode it ran under; `layout`
    is the layout it leaves the tensor in."""

    input_index: int
    op: torch._ops.OpOverload
    args: tuple
    layout: Layout
    grad_enabled: bool


@frozen
class Rebind:
    """r[functionalize.epilogue.set]: the caller's tensor object is set_ to `storage` and
    `layout`."""

    input_index: int
    storage: CallerStorage | GraphStorage
    layout: Layout


@frozen
class OutputIsInput:
    """The output is the caller's very tensor object `input_index` (after any rebinding)."""

    input_index: int


@frozen
class OutputView:
    """The output reads `storage` through `layout`: a real alias of whatever else reads it."""

    storage: CallerStorage | GraphStorage
    layout: Layout
    #: The input the output was viewed from, when there is one: the output is built as a view of
    #: that very tensor, so autograd attributes its gradient as eager does.
    through: int | None = None
    #: False for a view the program took under torch.no_grad() (r[autograd.grad-mode-inside]).
    made_with_grad: bool = True
    #: (A view of) a detach()ed value: it carries no gradient (`r[autograd.detach]`).
    detached: bool = False
    #: A view taken of a detach()ed value, not the detach() result itself: a view for autograd.
    view_of_detached: bool = False
    #: (A view of) one of several views one op returned (`r[autograd.multi-output-views]`).
    multi_output: bool = False
    #: (A view of) a view a custom Function returned: the graph output holding its value, which
    #: carries the Function's gradient where the storage's contents do not
    #: (`r[capture.custom-function.outputs]`).
    gradient_from: int | None = None
    #: An op's result, no view in eager: handed out as a tensor of its own, not as a view of
    #: the graph's output (`r[functionalize.outputs.own]`).
    own: bool = False


@frozen
class BackwardWrite:
    """r[autograd.custom-function.backward-writes]: a custom Function's backward writes a tensor
    it read that lies on flat input `input_index`'s storage, through `layout`: after the backward
    graph, the caller's storage takes the written values."""

    input_index: int
    layout: Layout


@frozen
class CustomCall:
    """A custom Function's node in the functional graph (`r[autograd.custom-function]`)."""

    function: CustomFunction
    #: Its backward, functionalized: its graph takes and returns what `function.backward` does.
    backward: FunctionalProgram
    #: (position among the saved values, where the write reaches the caller or None) for each
    #: saved value the backward writes into.
    writes: tuple[tuple[int, BackwardWrite | None], ...] = ()


@frozen
class StandIns:
    """Values of the functional graph that autograd does not treat as ordinary op results, found
    by the replay (each maps a node of the functional graph to a flat input index)."""

    #: The whole contents of a caller storage that a resize up from 0 bytes made, by the first
    #: input on that storage (`r[autograd.no-grad-input-writes.identity]`).
    resized_contents: dict[torch.fx.Node, int]
    #: The last contents the program gave a caller storage, by first input
    #: (`r[autograd.saved-inputs]`).
    final_contents: dict[torch.fx.Node, int]
    #: Reads through an input that set_ rebound under torch.no_grad() (`r[autograd.no-grad-set]`).
    read_as_input: dict[torch.fx.Node, int]
    #: Contents of a caller storage that several inputs requiring grad read, read through one of
    #: them, the input given (`r[autograd.no-grad-input-writes.identity]`).
    read_through_input: dict[torch.fx.Node, int]
    #: Writes under torch.no_grad(): as_strided_scatters into the old contents, their first
    #: argument (`r[autograd.no-grad-writes]`).
    no_grad_writes: frozenset[torch.fx.Node]
    #: Those of them made with grad mode on, through a detach()ed alias (`r[autograd.detach]`).
    detached_writes: frozenset[torch.fx.Node] = frozenset()
    #: The storage contents behind tensors an in-place metadata op relaid out under
    #: torch.no_grad() and the program read or returned afterwards
    #: (`r[autograd.no-grad-metadata]`).
    stale_histories: frozenset[torch.fx.Node] = frozenset()

    def kept_in(self, graph: torch.fx.Graph) -> StandIns:
        """Only the nodes still in `graph` (dead code elimination removes some)."""
        alive = set(graph.nodes)

        def kept(mapping: dict) -> dict:
            return {node: i for node, i in mapping.items() if node in alive}

        return StandIns(
            kept(self.resized_contents),
            kept(self.final_contents),
            kept(self.read_as_input),
            kept(self.read_through_input),
            frozenset(node for node in self.no_grad_writes if node in alive),
            frozenset(node for node in self.detached_writes if node in alive),
            frozenset(node for node in self.stale_histories if node in alive),
        )


@frozen
class FunctionalProgram:
    """What functionalization makes of a captured program (`r[functionalize.storage-values]`):
    a graph without mutations, the epilogue that applies the program's mutations to the
    caller's tensors, and how each user output is laid out on a storage."""

    graph_module: torch.fx.GraphModule
    entries: dict[torch.fx.Node, OpEntry]
    inputs: tuple[InputMeta, ...]
    #: Applied in order after the graph: storage resizes, in-place metadata ops, storage writes,
    #: then rebindings.
    epilogue: tuple[WriteBack | Resize | Relayout | Rebind, ...]
    #: One per tensor the user's function returns, in pytree order.
    outputs: tuple[OutputIsInput | OutputView, ...]
    captured: CapturedProgram
    #: Values autograd treats as standing for something else.
    stand_ins: StandIns
    #: Caller storages (by first input) the program wrote or resized at some point.
    touched_storages: frozenset[int] = frozenset()
    #: Caller storages the program wrote (a custom Function's backward: the saved values it
    #: writes, `r[autograd.custom-function.backward-writes]`), and those it wrote with grad mode
    #: on, through a tensor that records history (`r[autograd.input-writes]`).
    written: frozenset[int] = frozenset()
    written_with_grad: frozenset[int] = frozenset()
    #: Caller storages (by first input) whose reads send their gradient to the input they read
    #: through: several input objects requiring grad read them, or one in another dtype than the
    #: storage's (`r[autograd.no-grad-input-writes.identity]`).
    read_through_storages: frozenset[int] = frozenset()
    #: Inputs that set_ rebound with grad mode on (`r[autograd.input-writes.set]`).
    rebound_with_grad: frozenset[int] = frozenset()
    #: The custom Functions' nodes of the graph (`r[autograd.custom-function]`).
    custom_calls: dict[torch.fx.Node, CustomCall] = field(factory=dict)
    #: With `functionalize(..., values_out=True)`: the graph outputs holding the value of each
    #: output of the program, after the storages' contents.
    output_values: tuple[int, ...] = ()
    #: Caller storages (by first input) an as_strided_ read in other locations than the tensor it
    #: relaid out read before (`r[autograd.metadata.as-strided]`).
    relocated: frozenset[int] = frozenset()

    @property
    def graph(self) -> torch.fx.Graph:
        return self.graph_module.graph

    @cached_property
    def caller_storages_read(self) -> tuple[int, ...]:
        """The flat inputs whose storages, as the call began, the epilogue acts on or an output
        is built on (`reads_caller_storages`)."""
        read = {step.input_index for step in self.epilogue if not isinstance(step, Rebind)}
        read.update(
            where.input_index
            for where in [step.storage for step in self.epilogue if isinstance(step, Rebind)]
            + [output.storage for output in self.outputs if isinstance(output, OutputView)]
            if isinstance(where, CallerStorage)
        )
        return tuple(sorted(read))

    @cached_property
    def reads_caller_storages(self) -> bool:
        """Whether the epilogue acts on the caller's storages or an output is built on one (as a
        view of the caller's, or a view carrying a custom Function's gradient): then a call
        notes the storages its inputs read at entry."""
        return bool(self.epilogue) or self.outputs_on_caller_storages

    @cached_property
    def outputs_on_caller_storages(self) -> bool:
        """Whether an output is built on a caller's storage: a view of the caller's, or a view
        carrying a custom Function's gradient."""
        return any(
            isinstance(output, OutputView)
            and (output.gradient_from is not None or isinstance(output.storage, CallerStorage))
            for output in self.outputs
        )
