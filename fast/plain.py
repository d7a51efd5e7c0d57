"""The runtime skeleton of `reference/runtime.py`, written out for one plain plan.

On a small step the skeleton's generic steps cost about as much as the step's forward ops: each
asks the plan what it holds (lists that are empty on most plans), walks the inputs and outputs in
loops, and runs in frames of its own. For a plan that holds none of its rarer features, the fast
backend runs a call through functions generated from the plan instead, as Dynamo generates its
guards: the same steps, in the skeleton's order and by the same rules, with what the plan holds
written in (the saved inputs noted by name, the tangents' layouts, where each gradient goes).

A plan is plain when a call of it records autograd (it has a backward graph), reads no caller
storage, writes none (no epilogue, no check, no write by a custom Function's backward, no
`requires_grad_()` inside), has no synthetic bases, no input to detach, no saved input read as
the call left it and no non-differentiable output, and returns each output as a value of the
forward graph of its own (itself, where laid out as the output; else `build_outputs` builds it).
What a call brings that the written-out steps do not cover goes to the skeleton itself: a
stolen input to `run_plan`; to `_backward`, a backward that creates a graph, one that does not
reach every output, one under autocast or inside a forward-mode level. The reference backend
always takes the skeleton, so the differential tests compare these steps with it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
import torch.autograd.forward_ad as forward_ad

from aotspec.reference.boundary import autocast_off
from aotspec.reference.epilogue import _laid_out_like, build_outputs
from aotspec.reference.graph import output_node
from aotspec.reference.program_records import GraphStorage, OutputView
from aotspec.reference.runtime import SavedInputs, _backward, _Call, run_plan
from aotspec.versions import untraced_by_dynamo


def plain_runner(fast) -> Callable | None:
    """`run_plan` for the plan of `fast` (a `FastPlan`), written out: `run(tensors, stolen,
    callers)`; None where the plan is not plain."""
    if not _is_plain(fast):
        return None
    plan = fast.plan
    names = {
        "torch": torch,
        "plan": plan,
        "graphs": fast._graphs,
        "program": plan.functional,
        "fast": fast,
        "SavedInputs": SavedInputs,
        "_Call": _Call,
        "run_plan": run_plan,
        "skeleton_backward": _backward,
        "build_outputs": build_outputs,
        "laid_out_like": _laid_out_like,
        "autocast_off": autocast_off,
        "forward_ad": forward_ad,
        "Tensor": torch.Tensor,
        "weakref": weakref.ref,
    }
    lines = [
        *_forward_lines(plan, bool(fast.may_share)),
        *_backward_lines(plan, names),
        *_run_lines(plan, names),
    ]
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<aotspec.fast plain call>", "exec"), names)  # noqa: S102 (our source)
    node = type(  # named as the skeleton's node, whose grad_fn it stands for
        "_Forward",
        (torch.autograd.Function,),
        {
            "forward": staticmethod(names["forward"]),
            # r[capture.backward-inside]: Dynamo never traces it, nor what it runs
            "backward": staticmethod(untraced_by_dynamo(names["backward"])),
        },
    )
    # the node applied without Function.apply's Python layer, as the skeleton's `_apply_forward`
    # (`run` reads it as a global, at each call)
    names["apply"] = torch._C._FunctionBase.__dict__["apply"].__get__(None, node)
    return names["run"]


def _is_plain(fast) -> bool:
    plan = fast.plan
    program = plan.functional
    captured = program.captured
    differentiated = plan.differentiated
    if differentiated is None or plan.non_differentiable_outputs:
        return False
    if plan.detached_inputs or plan.saved_inputs_by_time[True] or differentiated.backward_writes:
        return False
    if captured.requires_grad_inputs or captured.requires_grad_outputs or captured.checks:
        return False
    if program.reads_caller_storages or program.epilogue or captured.advanced_inputs:
        return False
    if plan.bases.groups or plan.bases.relayouts:
        return False
    flats = [_flat_of(output) for output in program.outputs]
    return None not in flats and len(set(flats)) == len(flats)


def _flat_of(output) -> int | None:
    """The forward's output an output is built from, where it may be that output itself (a view
    of a graph's storage made with grad, with no rule of its own); else None. One made under
    torch.no_grad() is itself only where no gradient reaches it
    (`r[autograd.grad-mode-inside.views]`), which `build_outputs` decides per call."""
    plain = (
        isinstance(output, OutputView)
        and isinstance(output.storage, GraphStorage)
        and output.made_with_grad
        and output.gradient_from is None
        and not (output.detached or output.multi_output)
    )
    return output.storage.output_index if plain else None


def _n_outputs(plan) -> int:
    return len(output_node(plan.forward.graph).args[0]) - plan.num_saved


def _forward_lines(plan, may_share: bool) -> list[str]:
    """`_Forward.forward` (and `_FastGraphs.forward`), written out; `may_share`: an output may
    lie on a saved value's storage (`FastPlan.may_share`)."""
    n_inputs, n_outputs = len(plan.functional.inputs), _n_outputs(plan)
    tensors = [f"t{i}" for i in range(n_inputs)]
    saved_tensors = ", ".join(f"{k}: t{i}" for k, i in plan.saved_inputs.items())
    noted = []
    for i, nbytes in plan.saved_inputs_at_call:
        held = f"t{i}.untyped_storage().nbytes()" if nbytes is None else repr(nbytes)
        noted.append(f"(t{i}, t{i}._version, {held}, False)")
    lines = [
        "def forward(ctx, call, *tensors):",
        *([f"    {''.join(t + ', ' for t in tensors)}= tensors"] if tensors else []),
        "    # r[autograd.saved-inputs]: the caller's tensors, their versions noted now",
        f"    call.saved_inputs = SavedInputs(plan, {{{saved_tensors}}}, [{', '.join(noted)}])",
        f"    arguments = [{', '.join(tensors)}]",
        "    # r[ops.aten-values.grad-mode]: grad mode on, autograd's kernels skipped",
        "    torch._C._set_grad_enabled(True)",
        "    with torch._C._AutoDispatchBelowAutograd():",
        "        if torch._C._is_any_autocast_enabled():",
        "            with autocast_off():  # r[capture.autocast]",
        "                results = fast.forward(arguments)",
        "        else:",
        "            results = fast.forward(arguments)",
        "    torch._C._set_grad_enabled(False)",
    ]
    for k in range(n_outputs):  # r[autograd.grad-mode-inside.views]: values of their own
        lines += [
            f"    if isinstance(results[{k}], Tensor) and results[{k}]._is_view():",
            f"        results[{k}] = results[{k}].detach()",
        ]
    # the inputs that require grad: as the key's facts say, which every call of the plan has
    differentiated = ", ".join(
        f"weakref(t{i})" for i, meta in enumerate(plan.functional.inputs) if meta.requires_grad
    )
    shapes = ", ".join(
        f"(flats[{k}].shape, flats[{k}].dtype, flats[{k}].device)"
        for k in plan.differentiated.differentiable_outputs
    )
    lines += [
        f"    flats, saved = results[:{n_outputs}], results[{n_outputs}:]",
        "    del results",
    ]
    if may_share:  # r[autograd.saved-outputs.version]: those outputs' versions noted now
        lines += [
            "    on_saved = graphs.outputs_on_saved(flats, saved)",
            "    if on_saved:",
            "        call.outputs_saved = [",
            "            (flats[k].detach(), flats[k]._version) for k in on_saved",
            "        ]",
        ]
    return [
        *lines,
        "    # r[autograd.saved-freed-in-backward]: an output saved as an alias without history",
        "    returned = {id(flat) for flat in flats}",
        "    if not returned.isdisjoint(map(id, saved)):",
        "        saved = [t.detach() if id(t) in returned else t for t in saved]",
        "    call.saved = saved",
        "    del saved",
        "    ctx.call = call",
        "    # r[autograd.double-backward]: what a gradient of a gradient is taken for, weakly",
        f"    ctx.differentiated = [{differentiated}]",
        "    ctx.set_materialize_grads(False)  # r[autograd.unreached-outputs]",
        f"    ctx.tangent_shapes = [{shapes}]",
        "    return tuple(flats)",
    ]


def _backward_lines(plan, names: dict) -> list[str]:
    """`_backward` (and `_FastGraphs.backward`) for a backward that reaches every output, with no
    graph to create, outside autocast and forward mode; any other goes to `_backward`."""
    differentiated = plan.differentiated
    reached = " or ".join(f"grads[{k}] is None" for k in differentiated.differentiable_outputs)
    lines = [
        "def backward(ctx, *grads):",
        f"    if ({reached or 'False'}) or torch.is_grad_enabled()"
        " or torch._C._is_any_autocast_enabled() or forward_ad._current_level >= 0:",
        "        return skeleton_backward(ctx, grads)",
        "    call = ctx.call",
        "    retain = torch._C._autograd._get_current_graph_task_keep_graph()",
        "    saved, saved_inputs = call.take_saved(retain)",
        "    saved_inputs.check()  # r[autograd.saved-inputs.version]",
        "    del saved_inputs",
    ]
    for j, (k, strides) in enumerate(
        zip(differentiated.differentiable_outputs, differentiated.tangent_strides, strict=True)
    ):
        names[f"strides{j}"] = strides
        lines += [  # r[autograd.tangent-layout]
            f"    grad = grads[{k}]",
            f"    if grad.stride() != strides{j}:",
            f"        grad = torch.empty_strided(grad.shape, strides{j}, dtype=grad.dtype, "
            "device=grad.device).copy_(grad)",
            "    saved.append(grad)",
        ]
    # r[autograd.saved-freed-in-backward]: the list alone holds the saved values; the graph
    # clears it, so each dies at its last use
    gradients = ["None"] * len(plan.functional.inputs)
    for j, i in enumerate(differentiated.grad_inputs):
        gradients[i] = f"results[{j}]"
    return [
        *lines,
        *(["    del grad"] if differentiated.differentiable_outputs else []),
        "    with torch._C._AutoDispatchBelowAutograd():",
        "        results = fast.backward(saved)",
        f"    return (None, {', '.join(gradients)}{',' if not gradients else ''})",
    ]


def _run_lines(plan, names: dict) -> list[str]:
    """`run_plan` for a plain plan: the node applied, and the outputs built."""
    outputs = plan.functional.outputs
    for k, output in enumerate(outputs):
        names[f"layout{k}"] = output.layout
    laid_out = " and ".join(
        f"laid_out_like(flats[{output.storage.output_index}], layout{k})"
        for k, output in enumerate(outputs)
    )
    built = ", ".join(f"flats[{output.storage.output_index}]" for output in outputs)
    return [
        "def run(tensors, stolen, callers):",
        "    if stolen:",
        "        return run_plan(plan, graphs, tensors, stolen, callers)",
        "    call = _Call(plan, graphs, {}, {})",
        "    # r[autograd.grad-mode-inside]: the node records under torch.no_grad() too",
        "    grad_enabled = torch.is_grad_enabled()",
        "    torch._C._set_grad_enabled(True)",
        "    try:",
        "        flats = apply(call, *tensors)",
        "    finally:",
        "        torch._C._set_grad_enabled(grad_enabled)",
        f"    if {laid_out or 'True'}:  # each the graph's value itself",
        f"        return [{built}]",
        "    return build_outputs(program, tensors, None, list(flats))",
    ]
