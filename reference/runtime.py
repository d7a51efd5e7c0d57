"""One runtime skeleton for a compiled call, shared by the reference and the fast backend.

A backend says only how it runs one graph of a `Plan` on one boxed list (`Graphs`); the
skeleton does the rest, in this order, on the caller's real torch tensors:

1. Without autograd, the forward graph runs boxed on the inputs; a stolen input is dropped from
   the runtime's list first, so the graph's list holds its last reference
   (`r[boxed.steal.freed-at-last-use]`).
2. With autograd, the forward runs inside one `torch.autograd.Function`: non-leaf inputs that
   get no gradient are detached (`r[autograd.detach-no-grad-inputs]`), saved inputs are noted
   with their versions (`r[autograd.saved-inputs]`), and the saved values stay with the node.
3. A value check that fails raises eager's exception, before anything reaches the caller
   (`r[capture.data-dependent.checks]`); else the epilogue acts on the caller's tensors and
   the outputs are built as views (`epilogue.py`).
4. The backward checks the saved inputs (`r[autograd.saved-inputs.version]`), lays the
   tangents out as traced (`r[autograd.tangent-layout]`), runs the backward graph boxed on the
   saved values and tangents (`r[autograd.saved-freed-in-backward]`; the node keeps them when
   the graph is retained, `r[autograd.retain-graph]`), writes what custom Functions' backwards
   wrote into the caller's tensors (`epilogue.py`), and scatters the gradients to the inputs
   that receive one.

No reference interpreter here: the fast backend uses this module as it is.
"""

from __future__ import annotations

import weakref
from typing import Protocol

import torch
from attrs import define, field

from aotspec.errors import SECOND_BACKWARD, SpecViolation, UnsupportedError
from aotspec.versions import untraced_by_dynamo

from .boundary import NOTHING_TO_DO, autocast_off
from .epilogue import (
    apply_backward_writes,
    apply_epilogue,
    build_outputs,
    raise_failed_check,
)
from .plan_records import Plan
from .storage import Layout


class Graphs(Protocol):
    """How a backend runs a plan's graphs. Each call takes one list and clears it, so every
    value dies right after its last use (`r[boxed.args-cleared]`)."""

    def forward(self, arguments: list) -> list:
        """The forward graph on the flat inputs: torch outputs, then the saved values in the
        backend's own form."""

    def outputs_on_saved(self, outputs: list, saved: list) -> list[int]:
        """Indices of the forward's torch `outputs` whose storage a value of `saved` reads."""

    def backward(
        self,
        arguments: list,
        saved_inputs: dict[int, torch.Tensor],
        retain: bool,
        reached: tuple[bool, ...],
    ) -> list:
        """The backward graph on the saved values and then the tangents; `saved_inputs` are
        the caller's tensors of the saved values that are inputs, by saved index; `retain`:
        the autograd node still holds the saved values (`r[autograd.retain-graph]`); `reached`:
        per tangent, whether a gradient reached its output (`plan.backward_reaching`). Clears
        both. Returns one torch gradient per input in `plan.differentiated.grad_inputs`."""


def run_plan(
    plan: Plan, graphs: Graphs, tensors: list, stolen: frozenset[int], callers: list = ()
) -> list:
    """Run `plan` on the caller's `tensors` (the runtime's own list: stolen entries are dropped
    from it); returns the flat outputs. With synthetic bases, `tensors` are the program's inputs
    (the bases in place of their views) and `callers` the caller's flat tensors. A step the plan
    has nothing for (no check, no epilogue, no saved input read as the call left it) is skipped:
    a small step's call costs about as much as its ops."""
    program = plan.functional
    captured = program.captured
    for i in captured.requires_grad_inputs:
        tensors[i].requires_grad_()  # r[autograd.requires-grad-inside]: as the program does
    caller_storages = None
    if program.reads_caller_storages:  # those the call reads, but a stolen one's
        caller_storages = [None] * len(tensors)
        for i in program.caller_storages_read:
            if i not in stolen:
                caller_storages[i] = tensors[i].untyped_storage()
    call = None
    if plan.backward is None:
        arguments = list(tensors)
        for i in stolen:
            tensors[i] = None  # r[boxed.steal.freed-at-last-use]: only the graph's list holds it
        with autocast_off():  # r[capture.autocast]
            flats = graphs.forward(arguments)
    else:
        call, flats = _forward_recorded(plan, graphs, tensors, stolen)
    if captured.checks:
        raise_failed_check(program, flats)  # r[capture.data-dependent.checks]
    if program.epilogue or captured.advanced_inputs:
        apply_epilogue(program, tensors, caller_storages, flats)
    if plan.bases.relayouts:
        # r[autograd.input-writes.synthetic-base.metadata]: before the versions are noted
        plan.bases.relayout_callers(callers)
    if call is not None and plan.saved_inputs_by_time[True]:
        call.saved_inputs.after_call()
    outputs = build_outputs(program, tensors, caller_storages, flats)
    for k in captured.requires_grad_outputs:
        outputs[k].requires_grad_()  # r[autograd.requires-grad-inside.outputs]: as it returns
    return outputs


def _forward_recorded(
    plan: Plan, graphs: Graphs, tensors: list, stolen: frozenset[int]
) -> tuple[_Call, list]:
    """The forward graph run inside one autograd node (`_Forward`) on `tensors`; the node's
    call, and the graph's torch outputs."""
    inputs = detached_where_needed(plan, tensors) if plan.detached_inputs else list(tensors)
    # r[boxed.steal.freed-at-last-use]: a stolen input reaches the forward through `call`,
    # not through apply's arguments (which live until apply returns), so the boxed
    # forward's list holds its last reference and frees it at its last use; one that
    # requires grad is passed to apply as a stand-in of one element that carries its
    # history.
    handed_over = {i: inputs[i] for i in stolen} if stolen else {}
    # r[autograd.custom-function.backward-writes]: the caller's tensors the backward writes
    writes = plan.differentiated.backward_writes
    targets = {write.input_index: tensors[write.input_index] for write in writes} if writes else {}
    call = _Call(plan, graphs, handed_over, targets)
    # r[autograd.grad-mode-inside]: the node records what the program's ops under
    # torch.enable_grad() computed, even when the call is made under torch.no_grad()
    grad_enabled = torch.is_grad_enabled()
    torch._C._set_grad_enabled(True)  # (`torch.enable_grad()` is two Python calls more)
    try:
        for i in handed_over:
            inputs[i] = tensors[i] = _stand_in(inputs[i])
        return call, list(_apply_forward(call, *inputs))
    finally:
        torch._C._set_grad_enabled(grad_enabled)


@define
class _Call:
    plan: Plan
    graphs: Graphs
    #: Stolen inputs by flat index, handed to the forward outside apply's arguments.
    handed_over: dict[int, torch.Tensor]
    #: The caller's tensors the backward writes into, by flat index.
    targets: dict[int, torch.Tensor]
    saved: list | None = None
    #: The outputs on a saved value's storage, as aliases without history, with their versions
    #: when the forward returned (`r[autograd.saved-outputs.version]`).
    outputs_saved: list[tuple[torch.Tensor, int]] = field(factory=list)
    saved_inputs: SavedInputs | None = None

    def arguments(self, tensors: tuple) -> list:
        handed_over = self.handed_over
        if not handed_over:
            return list(tensors)
        return [handed_over.pop(i) if i in handed_over else t for i, t in enumerate(tensors)]

    def take_saved(self, retain: bool) -> tuple[list, SavedInputs]:
        """The saved values (a list the backward graph may clear) and the saved inputs, for one
        backward. r[autograd.retain-graph]: a backward that retains the graph gets a copy and
        the node keeps them for the next; one that does not takes them away."""
        if self.saved_inputs is None:
            if self.plan.num_saved:
                raise RuntimeError(SECOND_BACKWARD)  # r[autograd.retain-graph]
            return [], SavedInputs(self.plan, {})
        _check_saved_outputs(self.outputs_saved)
        if retain:
            return list(self.saved), self.saved_inputs
        saved, saved_inputs = self.saved, self.saved_inputs
        self.saved = self.saved_inputs = None
        return saved, saved_inputs


def _stand_in(stolen: torch.Tensor) -> torch.Tensor | None:
    """What apply gets in a stolen tensor's place (`_StandIn`); None when it needs no gradient."""
    return _StandIn.apply(stolen) if stolen.requires_grad else None


class _StandIn(torch.autograd.Function):
    """r[boxed.steal.freed-at-last-use]: a stolen tensor's place among apply's arguments: one
    element expanded to its sizes, whose history is the tensor's, so that its gradient reaches
    the tensor's history without apply holding the tensor itself."""

    @staticmethod
    def forward(ctx, t):
        return t.new_empty(()).expand(t.shape)

    @staticmethod
    def backward(ctx, grad):
        return grad


class _Forward(torch.autograd.Function):
    """The compiled forward as one autograd node; its backward runs the backward graph."""

    @staticmethod
    def forward(ctx, call: _Call, *tensors):
        plan = call.plan
        arguments = call.arguments(tensors)
        # r[autograd.saved-inputs]: a saved input is the caller's tensor (not a copy), read when
        # the backward runs; its version is noted now.
        call.saved_inputs = SavedInputs.at_call(plan, arguments)
        # r[ops.aten-values.grad-mode]: the kernels run as eager's run where autograd records,
        # grad mode on and autograd's kernels skipped (`grad_on_recording_nothing`, inlined:
        # apply runs this function with grad mode off, and its guard restores the mode after)
        torch._C._set_grad_enabled(True)
        with torch._C._AutoDispatchBelowAutograd(), autocast_off():  # r[capture.autocast]
            results = call.graphs.forward(arguments)  # clears `arguments`
        torch._C._set_grad_enabled(False)
        n_outputs = len(results) - plan.num_saved
        flats, saved = results[:n_outputs], results[n_outputs:]
        del results
        on_saved = call.graphs.outputs_on_saved(flats, saved)
        if on_saved:
            call.outputs_saved = [(flats[k].detach(), flats[k]._version) for k in on_saved]
        returned = {id(flat) for flat in flats}
        # r[autograd.saved-freed-in-backward]: handed over whole to the backward; an output is
        # saved as an alias without history, which does not hold this node in a cycle
        if not returned.isdisjoint(map(id, saved)):
            saved = [t.detach() if id(t) in returned else t for t in saved]
        call.saved = saved
        del saved
        ctx.call = call
        # r[autograd.double-backward]: what a gradient of a gradient would be taken for, weakly
        ctx.differentiated = [weakref.ref(t) for t in tensors if t is not None and t.requires_grad]
        if plan.non_differentiable_outputs:
            ctx.mark_non_differentiable(*[flats[k] for k in plan.non_differentiable_outputs])
        # r[autograd.unreached-outputs]: outputs the backward does not reach get None, not zeros.
        ctx.set_materialize_grads(False)
        ctx.tangent_shapes = [
            (flats[k].shape, flats[k].dtype, flats[k].device)
            for k in plan.differentiated.differentiable_outputs
        ]
        return tuple(flats)

    @staticmethod
    @untraced_by_dynamo  # r[capture.backward-inside]: Dynamo never traces it, nor what it runs
    def backward(ctx, *grads):
        return _backward(ctx, grads)


def _backward(ctx, grads: tuple) -> tuple:
    """`_Forward.backward`: the backward graph run for one node."""
    call: _Call = ctx.call
    plan = call.plan
    retain = torch._C._autograd._get_current_graph_task_keep_graph()
    saved, saved_inputs = call.take_saved(retain)
    saved_inputs.check()
    # the graph clears them: a retained node keeps its own, else the node no longer holds them
    saved_input_tensors = dict(saved_inputs.tensors) if retain else saved_inputs.tensors
    arguments = saved + tangents_as_traced(plan, grads, ctx.tangent_shapes)
    # r[autograd.saved-freed-in-backward]: unless the graph is retained, the list is the only
    # holder of the saved values, and the backward graph clears it, so each dies at its last
    # use (r[boxed.steal.freed-at-last-use]: a stolen saved input too).
    del saved, saved_inputs
    create_graph = torch.is_grad_enabled()
    # r[autograd.double-backward]: no partial history is recorded; r[capture.autocast]
    # r[autograd.unreached-outputs.terms]: the backward graph drops their terms
    differentiated = plan.differentiated
    reached = tuple([grads[k] is not None for k in differentiated.differentiable_outputs])
    # (grad mode is off already unless the backward creates a graph)
    with torch.no_grad() if create_graph else NOTHING_TO_DO, autocast_off():
        # clears both
        results = call.graphs.backward(arguments, saved_input_tensors, retain, reached)
    input_grads: list = [None] * len(plan.functional.inputs)
    if differentiated.backward_writes:
        written = results[len(differentiated.grad_inputs) :]
        del results[len(differentiated.grad_inputs) :]
        apply_backward_writes(plan, call.targets, written, reached)
    if all(reached):
        for i, grad in zip(differentiated.grad_inputs, results, strict=True):
            input_grads[i] = grad
    else:
        grads_and_tangents = zip(
            differentiated.grad_inputs, results, differentiated.grad_tangents, strict=True
        )
        for i, grad, tangents in grads_and_tangents:
            # r[autograd.unreached-outputs]: from unreached outputs only, no gradient at all.
            if not tangents or any(reached[j] for j in tangents):
                input_grads[i] = grad
    if create_graph:
        _give_first_order_histories(ctx, plan, grads, input_grads)
    return (None, *input_grads)


#: `_Forward.apply` without the Python layer of `torch.autograd.Function.apply`, which binds
#: default arguments for a `setup_context` (`_Forward` has none), hands the call to functorch's
#: transforms (refused before any call, `r[boundary.import]`) and unwraps the tensors of a
#: transform that has exited (tensors without a storage, which the guard's facts refuse first):
#: the node it makes is the same.
_apply_forward = torch._C._FunctionBase.__dict__["apply"].__get__(None, _Forward)


def _give_first_order_histories(ctx, plan: Plan, grads: tuple, input_grads: list) -> None:
    """r[autograd.double-backward]: after a backward with create_graph=True, a gradient that
    eager's would compute with a history (from a saved value, or from incoming gradients that
    have one) gets the function's inputs as its history, through a node that refuses to be
    differentiated."""
    inputs = [t for t in (ref() for ref in ctx.differentiated) if t is not None]
    incoming_history = any(grad is not None and grad.requires_grad for grad in grads)
    for i, reads_saved in zip(plan.differentiated.grad_inputs, plan.grads_read_saved, strict=True):
        if input_grads[i] is not None and (reads_saved or incoming_history):
            input_grads[i] = _FirstOrderOnly.apply(input_grads[i], *inputs)


class _FirstOrderOnly(torch.autograd.Function):
    """r[autograd.double-backward]: a gradient that a backward with `create_graph=True` took
    through a compiled function; it has the function's inputs as its history, and a backward
    through it raises, where one through the backward graph's own ops would silently miss every
    term that the saved values carry."""

    @staticmethod
    def forward(ctx, grad, *inputs):
        return grad.detach()

    @staticmethod
    def backward(ctx, *grads):
        raise UnsupportedError(
            "a double backward: a backward through a gradient that a compiled function's "
            "backward computed with create_graph=True",
            rule="autograd.double-backward",
            fix="take higher-order gradients of eager code (torch.func.hessian, or calling the "
            "function uncompiled), or compile only the part that needs first-order gradients",
        )


def detached_where_needed(plan: Plan, tensors: list) -> list:
    """r[autograd.detach-no-grad-inputs]: a non-leaf input that statically gets no gradient is
    detached, so autograd does not walk the graph behind it (PyTorch #134193); leaves are not."""
    detached = list(tensors)
    for i in plan.detached_inputs:
        detached[i] = tensors[i].detach()
    return detached


@define
class SavedInputs:
    """The saved inputs of one call (`r[autograd.saved-inputs]`): the caller's tensors by saved
    index, with what the backward checks before it reads them. Those the backward reads as the
    call began are noted when the forward graph takes them; those it reads as the call left
    them, once the epilogue has run (the call's own writes are the forward's)."""

    plan: Plan
    tensors: dict[int, torch.Tensor]
    #: (tensor, its version then, bytes its storage must hold: exactly these when the backward
    #: reads it as the call left it, else at most these, the storage's size at the call)
    noted: list[tuple[torch.Tensor, int, int, bool]] = field(factory=list)

    @classmethod
    def at_call(cls, plan: Plan, arguments: list) -> SavedInputs:
        """The saved inputs among the forward graph's `arguments`, those it reads as the call
        began noted."""
        tensors = {k: arguments[i] for k, i in plan.saved_inputs.items()}
        noted = [
            (
                t := arguments[i],
                t._version,
                t.untyped_storage().nbytes() if nbytes is None else nbytes,  # as the key holds
                False,
            )
            for i, nbytes in plan.saved_inputs_at_call
        ]
        return cls(plan, tensors, noted)

    def after_call(self) -> None:
        """Notes those the backward reads as the call left them."""
        after = self.plan.differentiated.read_after_call
        tensors = self.tensors
        for k, i in self.plan.saved_inputs_by_time[True]:
            self.noted.append((tensors[k], tensors[k]._version, after[i], True))

    def check(self) -> None:
        """Before the backward runs any op: each saved input still holds what the forward read.
        A storage as big as it was at the call is big enough; a smaller one is measured against
        the tensor's layout."""
        for t, version, nbytes, exact in self.noted:
            if t._version == version and t.untyped_storage().nbytes() >= nbytes:
                continue  # as the forward left it, and big enough: nothing to measure
            if not exact and t.untyped_storage().nbytes() < nbytes:
                nbytes = Layout.of(t).extent_bytes()
            _check_saved_input(t, version, nbytes)


def _check_saved_outputs(outputs_saved: list[tuple[torch.Tensor, int]]) -> None:
    """r[autograd.saved-outputs.version]: the caller wrote no output that a saved value reads
    since the forward returned; eager's check on its saved variables."""
    for t, version in outputs_saved:
        if t._version != version:
            raise SpecViolation(
                "one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{t.type()} {list(t.shape)}], an output of the compiled "
                f"function or the base of one, is at version {t._version}; expected version "
                f"{version} instead",
                rule="autograd.saved-outputs.version",
                fix="write the output only after the backward has run, or write a clone of it",
            )


def _check_saved_input(t: torch.Tensor, version: int, nbytes: int) -> None:
    if t._version != version:
        # r[autograd.saved-inputs.version]: eager's check on its saved variables, same words.
        raise SpecViolation(
            "one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: [{t.type()} {list(t.shape)}] is at version {t._version}; "
            f"expected version {version} instead",
            rule="autograd.saved-inputs.version",
            fix="write this input only after the backward has run, or clone it inside the "
            "function and let the backward read the clone",
        )
    if nbytes > t.untyped_storage().nbytes():
        # r[autograd.saved-inputs.in-bounds]: eager would read freed memory here.
        raise SpecViolation(
            f"the backward reads {nbytes} bytes of a saved input's storage ({t.type()} "
            f"{list(t.shape)}), which holds {t.untyped_storage().nbytes()}",
            rule="autograd.saved-inputs.in-bounds",
            fix="resize the storage up and refill it before the backward (FSDP gathers "
            "parameters again in its pre-backward hook)",
        )


def tangents_as_traced(plan: Plan, grads, shapes) -> list[torch.Tensor]:
    """r[autograd.tangent-layout]: the gradients of the differentiable outputs, each laid out
    like the tangent the backward graph was traced with (autograd may pass an expanded one);
    zeros for an output the backward did not reach (`shapes`: its shape, dtype and device)."""
    tangents = []
    differentiated = plan.differentiated
    for k, strides, (shape, dtype, device) in zip(
        differentiated.differentiable_outputs, differentiated.tangent_strides, shapes, strict=True
    ):
        grad = grads[k]
        if grad is None:
            grad = torch.empty_strided(shape, strides, dtype=dtype, device=device).zero_()
        elif grad.stride() != strides:
            grad = torch.empty_strided(
                grad.shape, strides, dtype=grad.dtype, device=grad.device
            ).copy_(grad)
        tangents.append(grad)
    return tangents
