"""`aotspec explain`: a compiled program's plan, each step with the spec rule that put it there.

The facts come from what the reference already keeps, never derived again here:
- the frozen `Plan` (`reference/plan_records.py`): the forward and backward graphs, the saved
  set, the epilogue, the outputs; each node's `from_node` names the pass that made it and its
  stack trace the user's line (`reference/graph.py`, `traced_from`), and inlined hooks carry
  their `InlinedHook` mark (`reference/plan_records.py`);
- the ledgers of one run of the plan on the reference backend, forward and backward
  (`compiled.last_run`): where each storage is allocated and freed, and the live bytes after
  each step.
So `explain` runs the program once, as one training step: the call, then (when the plan has a
backward) `torch.autograd.backward` on the sum of each output that requires grad. Like a
training step it mutates the arguments it is given and accumulates `.grad`: pass ones to spend.

Conventions: `node` is an fx Node, `k` a position among saved values, `i` a flat input index.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
from collections.abc import Callable
from operator import getitem
from pathlib import Path

import attrs
import torch
import torch.fx
import torch.utils._pytree as pytree
from attrs import frozen

from aotspec.api import compile
from aotspec.program_file import training_roots
from aotspec.reference.graph import GraphProgram, output_node, placeholders
from aotspec.reference.ledger import Ledger
from aotspec.reference.lift import lift
from aotspec.reference.plan_records import Placement, Plan
from aotspec.reference.program_records import (
    CallerStorage,
    OutputIsInput,
    Rebind,
    Relayout,
    Resize,
    WriteBack,
)
from aotspec.reference.storage import Layout

# ---------------------------------------------------------------- what an explanation holds


@frozen
class Free:
    """A storage the ledger saw die at a step: the value that made it, its bytes, the rule."""

    value: str
    nbytes: int
    rule: str


@frozen
class Step:
    """One node of a graph: its code, why it is there, and what memory does at it."""

    node: str
    code: str
    #: The spec rule that put the node there, and in words why.
    rule: str
    why: str
    #: `file.py:12  the line` of the user's program (or hook) the node comes from, if any.
    source: str | None
    frees: tuple[Free, ...] = ()
    #: Live bytes after the step, from the ledger (None when that graph did not run).
    live_bytes: int | None = None


@frozen
class Graph:
    """The forward or the backward graph, step by step, with its ledger's peak."""

    name: str
    steps: tuple[Step, ...]
    peak_bytes: int | None


@frozen
class Input:
    index: int
    node: str
    name: str
    layout: str
    storage_bytes: int
    requires_grad: bool


@frozen
class Saved:
    """One value the forward saves for the backward, and where the backward frees it."""

    index: int
    node: str
    what: str
    rule: str
    freed_at: str | None


@frozen
class EpilogueStep:
    """What the call does to a caller's tensor after the forward graph."""

    action: str
    input: str
    detail: str
    rule: str


@frozen
class Output:
    index: int
    what: str
    #: The input whose storage (or object) the output is, if it aliases one.
    aliases_input: str | None
    rule: str


@frozen
class HookStep:
    """Where a pack or unpack hook sits: the nodes inlined for one saved value."""

    hook: str
    value: str
    graph: str
    nodes: tuple[str, ...]
    #: "after NODE" for a pack, "before NODE" for an unpack.
    where: str
    rule: str


@frozen
class Explanation:
    program: str
    inputs: tuple[Input, ...]
    forward: Graph
    saved: tuple[Saved, ...]
    epilogue: tuple[EpilogueStep, ...]
    outputs: tuple[Output, ...]
    hooks: tuple[HookStep, ...]
    backward: Graph | None

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self), indent=2)

    def print(self) -> None:
        """The plan as annotated Python: with rich's syntax colouring on a terminal, plain
        (unwrapped) otherwise."""
        from rich.console import Console
        from rich.syntax import Syntax

        console = Console()
        if console.is_terminal:
            console.print(Syntax(listing(self), "python", theme="ansi_dark", word_wrap=True))
        else:
            print(listing(self))


# ---------------------------------------------------------------- building one


def explain(
    fn: Callable,
    *args,
    hooks: tuple[Callable, Callable] | None = None,
    hooks_filter: str = "donated",
    placement: str = "last-use",
    before_backward: Callable | None = None,
    show: bool = True,
    name: str | None = None,
) -> Explanation:
    """Run `fn(*args)` once as a training step on the reference backend and explain its plan:
    the forward and backward graphs with each storage's free point, the saved set, the epilogue,
    the outputs and the hooks, each step with the rule that put it there. Prints it (`show`) and
    returns it. `hooks` are (pack, unpack), active around the call; `before_backward(*args)`
    runs between the call and the backward; `name` heads the listing (default: `fn`'s). The
    arguments are spent as in a training step."""
    compiled = compile(
        fn, backend="reference", hooks_filter=hooks_filter, hook_placement=placement
    )
    context = (
        torch.autograd.graph.saved_tensors_hooks(*hooks) if hooks else contextlib.nullcontext()
    )
    with context:
        outputs = compiled(*args)
    (plan,) = compiled.plans.values()
    run = compiled.last_run
    roots = training_roots(outputs)
    if plan.backward is not None and roots:
        if before_backward is not None:
            before_backward(*args)
        torch.autograd.backward(roots)
    # r[capture.lift]: the tensors the function reaches come first
    names = [slots[0].short_name() for slots in lift(fn).reaches()] + input_names(fn, args)
    explanation = _Explainer(plan, names, Placement(placement)).explain(
        name or getattr(fn, "__qualname__", repr(fn)),
        run.ledger,
        run.backward,
        run.backward_ledger,
    )
    if show:
        explanation.print()
    return explanation


def input_names(fn: Callable, args: tuple) -> list[str]:
    """The flat tensor inputs' names as the user wrote them: `x`, `weights[0]`."""
    try:
        parameters = list(inspect_parameters(fn))
    except (TypeError, ValueError):
        parameters = []
    names = []
    for path, leaf in pytree.tree_flatten_with_path(tuple(args))[0]:
        if not isinstance(leaf, torch.Tensor):
            continue
        position = path[0].idx
        if position < len(parameters) and not parameters[position][1]:
            name = parameters[position][0]
        elif parameters and parameters[-1][1]:  # *args
            name = f"{parameters[-1][0]}[{position - len(parameters) + 1}]"
        else:
            name = f"args[{position}]"
        names.append(name + pytree.keystr(path[1:]))
    return names


def inspect_parameters(fn: Callable):
    """(name, is *args) for the positional parameters of `fn`, in order."""
    for parameter in inspect.signature(fn).parameters.values():
        if parameter.kind is parameter.VAR_POSITIONAL:
            yield parameter.name, True
            return
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            yield parameter.name, False


class _Explainer:
    def __init__(self, plan: Plan, names: list[str], placement: Placement):
        self.plan = plan
        self.names = names
        self.placement = placement
        functional = plan.functional
        self.forward_saved = _saved_nodes(plan)
        self.n_outputs = len(output_node(plan.forward.graph).args[0]) - plan.num_saved
        #: Backward placeholder name -> forward saved node (what the backward reads it as).
        self.saved_by_name = {}
        if plan.backward is not None:
            for k, node in enumerate(placeholders(plan.backward.graph)[: plan.num_saved]):
                self.saved_by_name[node.name] = (k, self.forward_saved[k])
        self.inputs = functional.inputs

    def explain(
        self,
        program: str,
        ledger: Ledger,
        ran_backward: GraphProgram | None,
        backward_ledger: Ledger | None,
    ):
        """`ran_backward`: the backward graph that ran, None when none did (the plan's then)."""
        forward = self.graph("forward", self.plan.forward, ledger)
        backward = None
        if self.plan.backward is not None:
            ran_backward = ran_backward or self.plan.backward
            backward = self.graph("backward", ran_backward, backward_ledger)
        return Explanation(
            program,
            tuple(self.input_facts()),
            forward,
            tuple(self.saved(backward)),
            tuple(self.epilogue()),
            tuple(self.outputs()),
            tuple(self.hooks()),
            backward,
        )

    # ------------------------------------------------------------ inputs and graphs

    def input_facts(self):
        for i, (node, meta) in enumerate(
            zip(placeholders(self.plan.forward.graph), self.inputs, strict=True)
        ):
            yield Input(
                i,
                node.name,
                self.names[i] if i < len(self.names) else f"input {i}",
                _layout(meta.layout),
                meta.storage_nbytes,
                meta.requires_grad,
            )

    @property
    def differentiable_outputs(self) -> tuple[int, ...]:
        """The forward's outputs that carry a gradient: a write-back of one is a copy_ autograd
        records (`r[autograd.input-writes]`)."""
        differentiated = self.plan.differentiated
        return () if differentiated is None else differentiated.differentiable_outputs

    def name_of_input(self, i: int) -> str:
        return self.names[i] if i < len(self.names) else f"input {i}"

    def graph(self, name: str, program: GraphProgram, ledger: Ledger | None) -> Graph:
        nodes = list(program.graph.nodes)
        frees = _frees(nodes, ledger, lambda made, at: self.free_rule(name, made, at))
        live = {probe.step: probe.live_bytes for probe in ledger.probes} if ledger else {}
        why = self.why_forward if name == "forward" else self.why_backward
        steps = []
        for step, node in enumerate(nodes, start=1):
            rule, reason = why(node)
            steps.append(
                Step(
                    node.name,
                    _code(node, self.saved_count(name)),
                    rule,
                    reason,
                    _source(node),
                    tuple(frees.get(step, ())),
                    live.get(step),
                )
            )
        return Graph(name, tuple(steps), ledger.peak_bytes if ledger else None)

    def saved_count(self, graph: str) -> int | None:
        return self.plan.num_saved if graph == "forward" and self.plan.backward else None

    def free_rule(self, graph: str, made: torch.fx.Node | None, at: torch.fx.Node) -> str:
        """The rule that frees a storage made by `made` (None: the caller's) at node `at`."""
        mark = at.meta.get("saved_tensor_hook")
        if graph == "forward":
            if mark is not None:
                return "hooks.place.pack-after-last-use"
            if made is not None and made.op == "placeholder":
                return "boxed.steal.freed-at-last-use"
            return "boxed.args-cleared"
        if made is not None and made.name in self.saved_by_name:
            if mark is not None:
                return "hooks.place.unpack-before-first-use"
            return "autograd.saved-freed-in-backward"
        return "boxed.args-cleared"

    def why_forward(self, node: torch.fx.Node) -> tuple[str, str]:
        if node.op == "placeholder":
            i = placeholders(node.graph).index(node)
            return "capture.flat-inputs", f"flat input {i}: {self.name_of_input(i)}"
        if node.op == "output":
            if self.plan.backward is None:
                return "functionalize.outputs", "the outputs and the written storages' contents"
            return (
                "autograd.partition.saved",
                f"the outputs ({self.n_outputs}), then the values saved for the backward "
                f"({self.plan.num_saved})",
            )
        mark = node.meta.get("saved_tensor_hook")
        if mark is not None:
            if self.placement is Placement.FORWARD_END:
                where = "at the end of the forward (PyTorch 2.13's placement, not the spec's)"
            else:
                where = "right after its last forward use"
            return "hooks.place.pack-after-last-use", f"pack hook of {mark.value}, {where}"
        return _why_replayed(node)

    def why_backward(self, node: torch.fx.Node) -> tuple[str, str]:
        if node.op == "placeholder":
            if node.name in self.saved_by_name:
                k, saved = self.saved_by_name[node.name]
                rule, what = self.saved_what(k, saved)
                return rule, f"saved value {k}: {what}"
            tangents = placeholders(node.graph)[self.plan.num_saved :]
            j = self.plan.differentiated.differentiable_outputs[tangents.index(node)]
            return "autograd.tangent-layout", f"the gradient of forward output {j}"
        if node.op == "output":
            grads = ", ".join(self.name_of_input(i) for i in self.plan.differentiated.grad_inputs)
            return "autograd.joint", f"the gradients of {grads or 'no input'}"
        mark = node.meta.get("saved_tensor_hook")
        if mark is not None:
            if self.placement is Placement.FORWARD_END:
                where = "at the start of the backward (PyTorch 2.13's placement, not the spec's)"
            else:
                where = "right before its first backward use"
            return "hooks.place.unpack-before-first-use", f"unpack hook of {mark.value}, {where}"
        reread = self.reread_input(node)
        if reread is not None:
            return (
                "autograd.saved-inputs.final-contents",
                f"reads input {reread} as the call left it, when the backward runs",
            )
        source = _sources(node)
        if source and source[0].pass_name == "autograd.derivative-rules":
            origin = source[0]
            return "autograd.derivative-rules", f"derivative of {origin.name} ({_op(origin)})"
        if source and source[0].pass_name == "autograd.joint":
            return (
                "autograd.partition.recompute-views",
                f"the view {source[0].name} recomputed from its saved base",
            )
        return "autograd.joint", "gradient bookkeeping of the joint graph"

    def reread_input(self, node: torch.fx.Node) -> str | None:
        """The input a backward `as_strided` reads whole, as the call left it."""
        if node.target is not torch.ops.aten.as_strided.default:
            return None
        base = node.args[0]
        if base.op != "placeholder" or base.name not in self.saved_by_name:
            return None
        k, _ = self.saved_by_name[base.name]
        i = self.plan.saved_inputs.get(k)
        if i is None or i not in self.plan.differentiated.read_after_call:
            return None
        return self.name_of_input(i)

    # ------------------------------------------------------------ the saved set

    def saved_what(self, k: int, node: torch.fx.Node) -> tuple[str, str]:
        if k in self.plan.saved_inputs:
            i = self.plan.saved_inputs[k]
            if i in self.plan.differentiated.read_after_call:
                return (
                    "autograd.saved-inputs.final-contents",
                    f"input {self.name_of_input(i)} itself, read as the call leaves it",
                )
            return (
                "autograd.saved-inputs",
                f"input {self.name_of_input(i)} itself, read when the backward runs",
            )
        mark = node.meta.get("saved_tensor_hook")
        if mark is not None:
            return "hooks.place.pack-after-last-use", f"{node.name}, the pack of {mark.value}"
        return "autograd.partition.saved", f"{node.name}, a forward value the backward reads"

    def saved(self, backward: Graph | None):
        freed_at = {}
        if backward is not None:
            for step in backward.steps:
                for free in step.frees:
                    freed_at.setdefault(free.value, step.node)
        backward_names = (
            [n.name for n in placeholders(self.plan.backward.graph)] if backward else []
        )
        for k, node in enumerate(self.forward_saved):
            rule, what = self.saved_what(k, node)
            name = backward_names[k] if k < len(backward_names) else node.name
            yield Saved(k, node.name, what, rule, freed_at.get(name))

    # ------------------------------------------------------------ epilogue, outputs, hooks

    def epilogue(self):
        functional = self.plan.functional
        written_back = set()
        for step in functional.epilogue:
            name = self.name_of_input(step.input_index)
            if isinstance(step, Resize):
                before = self.inputs[step.input_index].storage_nbytes
                yield EpilogueStep(
                    "resize",
                    name,
                    f"resize_storage_bytes_({name}, {step.nbytes}): {before:,} -> "
                    f"{step.nbytes:,} bytes",
                    "functionalize.epilogue.resize",
                )
            elif isinstance(step, WriteBack):
                written_back.add(self.inputs[step.input_index].storage)
                how = (
                    " by a copy_ autograd records"
                    if step.input_index in functional.written_with_grad
                    and step.output_index in self.differentiable_outputs
                    else ""
                )
                yield EpilogueStep(
                    "write-back",
                    name,
                    f"{name}'s storage takes graph output {step.output_index}'s bytes{how}",
                    "functionalize.epilogue.data",
                )
            elif isinstance(step, Rebind):
                where = (
                    f"{self.name_of_input(step.storage.input_index)}'s storage"
                    if isinstance(step.storage, CallerStorage)
                    else f"graph output {step.storage.output_index}'s storage"
                )
                yield EpilogueStep(
                    "set_",
                    name,
                    f"{name}.set_({where}) as {_layout(step.layout)}",
                    "functionalize.epilogue.set",
                )
        yield from self._versions_advanced(written_back)

    def _versions_advanced(self, written_back: set[int]):
        """r[functionalize.epilogue.version]: the counters the epilogue advances after its steps,
        by storage, each object once; not those a step's own op advances (a rebinding set_, an
        in-place metadata op, a write-back autograd records)."""
        functional = self.plan.functional
        by_steps = {
            step.input_index
            for step in functional.epilogue
            if isinstance(step, (Rebind, Relayout))
            or (
                isinstance(step, WriteBack)
                and step.input_index in functional.written_with_grad
                and step.output_index in self.differentiable_outputs
            )
        }
        advanced: dict[int, list[str]] = {}
        for i in functional.captured.advanced_inputs:
            if self.inputs[i].same_object == i and i not in by_steps:
                advanced.setdefault(self.inputs[i].storage, []).append(self.name_of_input(i))
        for storage, on_it in advanced.items():
            detail = f"version advanced on {', '.join(on_it)}, as eager's ops advance it"
            if storage in functional.touched_storages - written_back:
                detail += " (the storage ends at 0 bytes: no bytes to write back)"
            elif storage not in written_back:
                detail += " (no byte written: an in-place metadata op or a set_)"
            yield EpilogueStep("version", on_it[0], detail, "functionalize.epilogue.version")

    def outputs(self):
        shared: dict[int, int] = {}
        for k, output in enumerate(self.plan.functional.outputs):
            if isinstance(output, OutputIsInput):
                name = self.name_of_input(output.input_index)
                yield Output(k, f"input {name} itself", name, "functionalize.outputs")
            elif isinstance(output.storage, CallerStorage):
                name = self.name_of_input(output.storage.input_index)
                yield Output(
                    k,
                    f"a view of input {name}'s storage, {_layout(output.layout)}",
                    name,
                    "aliasing.view.of-input",
                )
            else:
                index = output.storage.output_index
                what = f"graph output {index}, {_layout(output.layout)}"
                if index in shared:
                    what += f" (shares its storage with output {shared[index]})"
                shared.setdefault(index, k)
                yield Output(k, what, None, "functionalize.outputs")

    def hooks(self):
        graphs = [("forward", self.plan.forward)]
        if self.plan.backward is not None:
            graphs.append(("backward", self.plan.backward))
        for graph_name, program in graphs:
            nodes = list(program.graph.nodes)
            runs: dict[tuple[str, str], list[int]] = {}
            for position, node in enumerate(nodes):
                mark = node.meta.get("saved_tensor_hook")
                if mark is not None:
                    runs.setdefault((mark.hook, mark.value), []).append(position)
            for (hook, value), positions in runs.items():
                if hook == "pack":
                    where = f"after {nodes[positions[0] - 1].name}"
                    rule = "hooks.place.pack-after-last-use"
                else:
                    where = f"before {nodes[positions[-1] + 1].name}"
                    rule = "hooks.place.unpack-before-first-use"
                yield HookStep(
                    hook, value, graph_name, tuple(nodes[p].name for p in positions), where, rule
                )


def _saved_nodes(plan: Plan) -> list[torch.fx.Node]:
    outputs = output_node(plan.forward.graph).args[0]
    return list(outputs[len(outputs) - plan.num_saved :]) if plan.backward else []


def _frees(nodes, ledger: Ledger | None, rule) -> dict[int, list[Free]]:
    """Step -> the storages the ledger freed at it, each named by the node that made it."""
    if ledger is None:
        return {}
    made: dict[int, torch.fx.Node | None] = {}
    names: dict[int, str] = {}
    sizes: dict[int, int] = {}
    count: dict[int, int] = {}
    frees: dict[int, list[Free]] = {}
    for event in ledger.events:
        at = nodes[event.step - 1] if event.step > 0 else None
        if event.kind == "alloc":
            made[event.storage] = at
            count[event.step] = count.get(event.step, 0) + 1
            names[event.storage] = (
                "a caller's input"
                if at is None
                else at.name
                if count[event.step] == 1
                else f"{at.name}[{count[event.step] - 1}]"
            )
        elif event.kind == "free" and at is not None:
            frees.setdefault(event.step, []).append(
                Free(names[event.storage], sizes[event.storage], rule(made[event.storage], at))
            )
        sizes[event.storage] = event.nbytes
    return frees


def _sources(node: torch.fx.Node) -> list:
    """The `from_node` chain of `node`, nearest pass first."""
    chain = []
    sources = node.meta.get("from_node") or []
    while sources:
        chain.append(sources[0])
        sources = sources[0].from_node
    return chain


def _why_replayed(node: torch.fx.Node) -> tuple[str, str]:
    """A forward node: the functional graph replayed, from the user's captured op."""
    captured = [s for s in _sources(node) if s.pass_name == "functionalize"]
    if not captured:
        return "functionalize.storage-values", "a written storage's contents, for the epilogue"
    origin = captured[-1]
    if origin.target == str(node.target):
        return "capture.aten-graph", "your op"
    if _op(origin).split(".")[1].endswith("_"):
        return "functionalize.writes", f"{_op(origin)} made functional"
    return "functionalize.writes", f"reads written bytes back, for {_op(origin)}"


def _op(source) -> str:
    return re.sub(r"\.default$", "", source.target)


_FRAME = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n\s*(?P<code>.*)'
)


#: aotspec's own folders: frames there are the tracing machinery, not the user's program.
_OWN = (str(Path(__file__).parent), str(Path(inspect.getfile(Plan)).parent))


def user_frame(node: torch.fx.Node) -> tuple[str, int, str, str] | None:
    """(file, line, function, code) of the innermost frame of `node`'s stack trace in the user's
    code, if it kept one."""
    frames = [
        frame
        for frame in _FRAME.finditer(node.meta.get("stack_trace") or "")
        if not frame["file"].startswith(_OWN)
    ]
    if not frames:
        return None
    frame = frames[-1]
    return frame["file"], int(frame["line"]), frame["func"], frame["code"].strip()


def _source(node: torch.fx.Node) -> str | None:
    frame = user_frame(node)
    if frame is None:
        return None
    file, line, _, code = frame
    return f"{Path(file).name}:{line}  {code}"


def _layout(layout: Layout) -> str:
    dtype = str(layout.dtype).removeprefix("torch.")
    text = f"{dtype}{list(layout.sizes)}"
    contiguous = Layout.contiguous(layout.dtype, layout.sizes)
    if layout.strides != contiguous.strides or layout.offset:
        text += f" strides {list(layout.strides)} offset {layout.offset}"
    return text


def _code(node: torch.fx.Node, num_saved: int | None) -> str:
    """The node as one line of Python."""
    if node.op == "placeholder":
        return f"{node.name} = <input>"
    if node.op == "output":
        values = [_argument(value) for value in node.args[0]]
        if num_saved is None:
            return f"return ({', '.join(values)})"
        cut = len(values) - num_saved
        return f"return ({', '.join(values[:cut])}), saved=({', '.join(values[cut:])})"
    if node.op == "get_attr":
        return f"{node.name} = <constant {node.target}>"
    target = node.target
    if target is getitem:
        return f"{node.name} = {_argument(node.args[0])}[{node.args[1]}]"
    name = re.sub(r"\.default$", "", str(target))
    arguments = [_argument(a) for a in node.args]
    arguments += [f"{key}={_argument(value)}" for key, value in node.kwargs.items()]
    return f"{node.name} = {name}({', '.join(arguments)})"


def _argument(value) -> str:
    if isinstance(value, torch.fx.Node):
        return value.name
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(_argument(v) for v in value)}]"
    return repr(value)


# ---------------------------------------------------------------- as annotated Python


def _bytes(n: int | None) -> str:
    return "?" if n is None else f"{n:,} B"


def listing(explanation: Explanation) -> str:
    """The explanation as Python a reader knows: the graphs as code, the facts as comments, each
    ending with the rule that says so (`aotspec rule ID` prints it)."""
    lines = [f"# aotspec explain {explanation.program}: the reference's plan, one training step"]
    lines.append("# inputs (the caller holds each through the call):")
    for item in explanation.inputs:
        grad = ", requires grad" if item.requires_grad else ""
        lines.append(
            f"#   {item.node} = {item.name}: {item.layout}, storage {_bytes(item.storage_bytes)}"
            f"{grad}"
        )
    lines += _graph_lines(explanation.forward, "forward")
    if explanation.saved:
        lines.append("")
        lines.append("# saved for the backward  [autograd.partition.saved]")
        for saved in explanation.saved:
            freed = (
                f"; freed in the backward after {saved.freed_at}"
                if saved.freed_at
                else "; not freed by the backward (the caller holds it)"
            )
            lines.append(f"#   {saved.index}: {saved.what}{freed}  [{saved.rule}]")
    lines.append("")
    lines.append("# epilogue: on the caller's tensors, after the forward graph")
    if not explanation.epilogue:
        lines.append("#   nothing: the program mutates no input")
    for step in explanation.epilogue:
        lines.append(f"#   {step.action}: {step.detail}  [{step.rule}]")
    lines.append("# outputs")
    for output in explanation.outputs:
        lines.append(f"#   out{output.index}: {output.what}  [{output.rule}]")
    if explanation.hooks:
        lines.append("# saved-tensor hooks")
        for hook in explanation.hooks:
            lines.append(
                f"#   {hook.hook} of {hook.value}: {', '.join(hook.nodes)} in the {hook.graph}, "
                f"{hook.where}  [{hook.rule}]"
            )
    if explanation.backward is not None:
        lines += _graph_lines(explanation.backward, "backward")
    return "\n".join(lines)


def _graph_lines(graph: Graph, name: str) -> list[str]:
    inputs = [step.node for step in graph.steps if step.code.endswith("<input>")]
    lines = [
        "",
        f"def {name}({', '.join(inputs)}):  # takes one list and clears it  [boxed.args-cleared]",
    ]
    for step in graph.steps:
        if step.code.endswith("<input>"):
            lines.append(f"    # {step.node}: {step.why}  [{step.rule}]")
        else:
            lines.append(f"    {step.code}")
            where = f"; {step.source}" if step.source else ""
            lines.append(f"    #   {step.why}{where}  [{step.rule}]")
        for free in step.frees:
            lines.append(f"    #   frees {free.value}: {_bytes(free.nbytes)}  [{free.rule}]")
        if step.frees or step.code.startswith("return"):
            lines.append(f"    #   live after: {_bytes(step.live_bytes)}")
    lines.append(f"    # peak of the {name}: {_bytes(graph.peak_bytes)}  [memory.peak]")
    return lines
