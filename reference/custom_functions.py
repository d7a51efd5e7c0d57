"""Custom autograd Functions in captured programs (`specs/capture.md`, "Custom Functions").

While capture traces a user's function, `torch.autograd.Function.apply` is intercepted
(`intercepting_apply`). The Function runs as eager runs it: autograd calls its forward under
torch.no_grad(), whose ops capture records one by one, and wraps its outputs
(`r[capture.custom-function]`). When a gradient can reach it, its backward is traced once more,
on fake tensors, into a graph of its own (`r[capture.custom-function.backward]`), and the call
becomes one node of the captured graph, `custom_function_call`, whose results the rest of the
program reads in place of the Function's outputs. Functionalization gives those results the
aliasing eager gives them (`r[capture.custom-function.outputs]`), and autograd differentiates the
node with the traced backward (`r[autograd.custom-function]`).

Conventions: `ctx` is the Function's context, which autograd also uses as its graph node;
`fake` values are capture's fake tensors; the node's `inputs` are the Function's tensor arguments
that require grad, its `outputs` every tensor it returns, its `saved` the tensors of the capture
its backward reads.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Iterator

import torch
import torch.fx
import torch.utils._pytree as pytree
from attrs import define, field, frozen
from torch._higher_order_ops.utils import reenter_make_fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.autograd.function import FunctionCtx, _SingleLevelFunction
from torch.fx.experimental.proxy_tensor import (
    disable_proxy_modes_tracing,
    get_proxy_mode,
    get_proxy_slot,
    track_tensor_tree,
)
from torch.nn.modules._functions import BackwardHookFunction

from aotspec.errors import UnsupportedError
from aotspec.versions import custom_function_apply_owner


def custom_function_call(key: int, inputs: list, outputs: list, saved: list) -> tuple:
    """The node a custom Function call becomes (`r[capture.custom-function]`): its results are
    the Function's `outputs`, whose gradients the backward of the program's custom function
    `key` turns into gradients of `inputs`, reading `saved`. On values it is the identity on
    `outputs`, which is how autograd's joint graph runs it."""
    return tuple(outputs)


@frozen
class CustomFunction:
    """What capture keeps of one custom Function call that a gradient can reach."""

    #: The Function's name, for messages.
    name: str
    #: The traced backward: inputs the saved tensors, then one gradient per differentiable
    #: output; outputs the gradients of the node's inputs in `grads_for`, then the saved tensors
    #: as the backward leaves them (it may write into them).
    backward: torch.fx.GraphModule
    num_saved: int
    #: Per output: whether it carries a gradient (eager's decision: floating point, not marked
    #: non-differentiable).
    differentiable: tuple[bool, ...]
    #: Per output: whether eager made it a view (an input returned as it is, a view of one, a
    #: view of a value the forward made).
    views: tuple[bool, ...]
    #: The positions among the node's inputs of the gradients the backward returns.
    grads_for: tuple[int, ...]


@define
class Interception:
    """The custom Functions one capture met, and what it needs to note them.

    `grad_modes` notes grad-mode changes (capture's `GradModes`); `watching_paused` suspends
    capture's watch of grad-mode changes while the backward of the Function it names is traced
    into a graph of its own."""

    grad_modes: object
    watching_paused: Callable[[str], contextlib.AbstractContextManager]
    functions: list[CustomFunction] = field(factory=list)
    #: The contexts (autograd nodes) of the calls turned into nodes.
    handled: set = field(factory=set)
    #: The contexts (by id) whose forward turned materialized gradients off.
    materialize_off: set[int] = field(factory=set)
    #: Functions applied as autograd would, not intercepted: those torch.library makes for ops
    #: the table differentiates itself (the functional collectives).
    passes_through: Callable[[type], bool] = lambda cls: False

    def apply(self, cls, args: tuple, kwargs: dict):
        """Autograd's apply of `cls` to `args` while capturing (`Function.apply` has bound them
        to the forward's parameters)."""
        grad = torch.is_grad_enabled()
        if grad:
            self.grad_modes.note(False)  # autograd runs the forward under torch.no_grad()
        try:
            result = _C_APPLY.__get__(None, cls)(*args, **kwargs)
        finally:
            if grad:
                self.grad_modes.note(True)
        returned = result if isinstance(result, tuple) else (result,)
        outputs = [t for t in returned if isinstance(t, torch.Tensor)]
        ctx = next((t.grad_fn for t in outputs if isinstance(t.grad_fn, cls._backward_cls)), None)
        if ctx is None:  # no gradient reaches it: its forward's ops are all there is
            return result
        if cls is BackwardHookFunction:
            # r[capture.module-backward-hooks]
            raise UnsupportedError(
                "a module the function calls has backward hooks "
                "(register_full_backward_hook or register_full_backward_pre_hook, on it or "
                "globally); autograd would run them on capture's stand-ins, never in the "
                "compiled backward, so the gradients would be computed as if they were not there",
                rule="capture.module-backward-hooks",
                fix="remove the hooks while the module runs inside the compiled function, or "
                "compile with torch.compile(fn, backend='aotspec'), which runs such a module's "
                "hooks outside the compiled graphs",
            )
        self._check(cls, ctx, args, outputs)
        needs = ctx.needs_input_grad
        grad_inputs = [i for i, x in enumerate(args) if isinstance(x, torch.Tensor) and needs[i]]
        differentiable = tuple(t.requires_grad for t in outputs)
        tracer = get_proxy_mode().tracer
        backward, saved, grads_for = self._trace_backward(
            ctx, args, grad_inputs, returned, differentiable
        )
        key = len(self.functions)
        self.functions.append(
            CustomFunction(
                getattr(cls, "__qualname__", cls.__name__),
                backward,
                len(saved),
                differentiable,
                tuple(t._is_view() for t in outputs),
                grads_for,
            )
        )
        self.handled.add(ctx)

        def proxy(t):
            return get_proxy_slot(t, tracer).proxy

        node = tracer.create_proxy(
            "call_function",
            custom_function_call,
            (
                key,
                [proxy(args[i]) for i in grad_inputs],
                [proxy(t) for t in outputs],
                saved,
            ),
            {},
        )
        # r[capture.custom-function]: what the program does with the outputs from here on, it
        # does with the node's results
        track_tensor_tree(outputs, node, constant=None, tracer=tracer)
        return result

    def _check(self, cls, ctx, inputs: tuple, outputs: list[torch.Tensor]) -> None:
        """r[capture.custom-function.refused]: what the specification leaves out. (Autograd
        returns an input marked dirty as the very tensor, an input not marked as a view.)"""
        name = getattr(cls, "__qualname__", cls.__name__)
        problem = None
        if any(t is x for t in outputs for x in inputs):
            problem = "marks inputs it wrote as dirty (ctx.mark_dirty)"
        elif id(ctx) in self.materialize_off:
            problem = "turns materialized gradients off (ctx.set_materialize_grads(False))"
        elif len({id(t) for t in outputs}) < len(outputs):
            problem = "returns one tensor twice"
        if problem is not None:
            raise UnsupportedError(
                f"the custom autograd.Function {name} {problem}, and a gradient can reach it",
                rule="capture.custom-function.refused",
                fix="return new tensors from its forward (clone() an input it writes or "
                "returns twice) and let its backward get zeros for unused outputs, or apply it "
                "under torch.no_grad()",
            )

    def _trace_backward(self, ctx, inputs, grad_inputs, returned, differentiable):
        """r[capture.custom-function.backward]: the backward traced into a graph of its own, on
        fake gradients laid out contiguously, under torch.no_grad() as eager's engine runs it.
        Returns the graph, the nodes of the tensors it reads (its saved values), and the
        positions among `grad_inputs` of the gradients it returns."""
        tracer = get_proxy_mode().tracer
        tensors = [t for t in returned if isinstance(t, torch.Tensor)]
        with disable_proxy_modes_tracing():
            examples = [
                t.new_empty(t.shape) for t, d in zip(tensors, differentiable, strict=True) if d
            ]
        grads_for: list[int] = []

        def backward(*grads):
            given = iter(grads)
            kind = iter(differentiable)
            grad_outputs = []
            for t in returned:
                if not isinstance(t, torch.Tensor):
                    grad_outputs.append(None)
                elif next(kind):
                    grad_outputs.append(next(given))
                else:  # eager materializes the gradient of a non-differentiable output
                    grad_outputs.append(torch.zeros(t.shape, dtype=t.dtype, device=t.device))
            with torch.no_grad():
                gradients = ctx.apply(*grad_outputs)
            checked = checked_gradients(type(ctx).__name__, gradients, inputs, grad_inputs)
            grads_for.extend(k for k, g in enumerate(checked) if g is not None)
            return [g for g in checked if g is not None]

        # The traced backward may write into capture's tensors; their writes happen in the
        # backward, not here: the rest of the capture must not see their versions move.
        reachable = _reachable_tensors(ctx, inputs, returned)
        versions = [t._version for t in reachable]
        with self.watching_paused(type(ctx)._forward_cls.__qualname__):
            graph_module = reenter_make_fx(backward)(*examples)
        torch._C._autograd._unsafe_set_version_counter(reachable, versions)
        saved = _lift_saved(graph_module, tracer)
        return graph_module, saved, tuple(grads_for)


def _reachable_tensors(ctx, inputs: tuple, returned: tuple) -> list[torch.Tensor]:
    """The capture's tensors a backward can reach: the Function's inputs and outputs, what its
    context saved or holds, and what its backward closes over (Dynamo's Functions keep their
    saved values there)."""
    backward = inspect.getattr_static(ctx._forward_cls, "backward")
    closure = getattr(getattr(backward, "__func__", backward), "__closure__", None) or ()
    closed_over = []
    for cell in closure:
        with contextlib.suppress(ValueError):  # a cell no value was assigned to yet
            closed_over.append(cell.cell_contents)
    with disable_proxy_modes_tracing():
        held = [ctx.saved_tensors, vars(ctx), closed_over]
    leaves = pytree.tree_leaves([inputs, returned, held])
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def checked_gradients(name: str, gradients, inputs: tuple, grad_inputs: list[int]) -> list:
    """r[capture.custom-function.gradients]: the backward's result checked and adjusted as
    eager's engine does: one gradient per forward input (trailing Nones beyond them allowed),
    None for non-tensors; a gradient whose shape differs is summed to the input's shape when the
    input expands to it, and cast to the input's dtype. Returns one entry per input in
    `grad_inputs`, None where it gets no gradient."""
    if not isinstance(gradients, tuple):
        gradients = (gradients,)
    n = len(inputs)
    if len(gradients) < n or any(g is not None for g in gradients[n:]):
        raise RuntimeError(
            f"function {name} returned an incorrect number of gradients "
            f"(expected {n}, got {len(gradients)})"
        )
    for i, (x, g) in enumerate(zip(inputs, gradients[:n], strict=True)):
        if not isinstance(x, torch.Tensor) and g is not None:
            raise RuntimeError(
                f"function {name} returned a gradient different than None at position {i + 1}, "
                "but the corresponding forward input was not a Variable"
            )
    checked = []
    for i in grad_inputs:
        x, g = inputs[i], gradients[i]
        if g is not None and g.shape != x.shape:
            if not _expands_to(x.shape, g.shape):
                raise RuntimeError(
                    f"Function {name} returned an invalid gradient at index {i} - got "
                    f"{list(g.shape)} but expected shape compatible with {list(x.shape)}"
                )
            g = g.sum_to_size(x.shape)
        if g is not None and g.dtype != x.dtype:
            g = g.to(x.dtype)
        checked.append(g)
    return checked


def _expands_to(shape, target) -> bool:
    """`shape` broadcasts to `target` without changing `target`."""
    if len(shape) > len(target):
        return False
    lead = len(target) - len(shape)
    return all(s in (1, t) for s, t in zip(shape, target[lead:], strict=True))


def _lift_saved(graph_module: torch.fx.GraphModule, tracer) -> list[torch.fx.Proxy]:
    """The capture's tensors the traced backward reads (its context's saved tensors and
    attributes, or tensors it closes over) are constants of its graph: they become its first
    inputs. Returns the capture's proxies of those tensors, in input order."""
    graph = graph_module.graph
    first = next(iter(graph.nodes))
    lifted: dict[torch.fx.Node, torch.fx.Node] = {}
    proxies: list[torch.fx.Proxy] = []
    constants = set()
    for node in list(graph.nodes):
        if node.op != "get_attr":
            continue
        value = getattr(graph_module, node.target)
        if not isinstance(value, FakeTensor):
            continue  # a real tensor: a constant of the backward
        outer = get_proxy_slot(value, tracer, None)
        if outer is None:
            raise UnsupportedError(
                "the backward of a custom autograd.Function reads a tensor that the captured "
                "program does not compute",
                rule="capture.custom-function.backward",
                fix="let the backward read only tensors its forward saved, set on ctx or "
                "computed from those",
            )
        if outer.proxy.node not in lifted:
            with graph.inserting_before(first):
                placeholder = graph.placeholder(f"saved_{len(lifted)}")
            placeholder.meta["val"] = value
            lifted[outer.proxy.node] = placeholder
            proxies.append(outer.proxy)
        node.replace_all_uses_with(lifted[outer.proxy.node])
        graph.erase_node(node)
        constants.add(node.target)
    for target in constants:
        delattr(graph_module, target)
    output = next(iter(reversed(graph.nodes)))
    output.args = ([*output.args[0], *lifted.values()],)
    graph.eliminate_dead_code()  # autograd's replays of views feed nothing the backward returns
    graph_module.recompile()
    return proxies


# ---------------------------------------------------------------- intercepting apply

#: Autograd's own apply. It is patched on the class `custom_function_apply_owner()` names, in
#: every Function's MRO, which intercepts Functions applied through a reference to `apply` taken
#: before capture too.
_C_APPLY = torch._C._FunctionBase.__dict__["apply"]
_APPLY_OWNER = custom_function_apply_owner()
#: What the owner's own `apply` is when not patched (None: it inherits autograd's).
_OWNER_APPLY = _APPLY_OWNER.__dict__.get("apply")
_ORIGINAL_SET_MATERIALIZE_GRADS = FunctionCtx.set_materialize_grads
_state = threading.local()
_patch_lock = threading.Lock()
_patch_users = 0


def _active() -> Interception | None:
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else None


def _apply(cls, *args, **kwargs):
    interception = _active()
    if (
        interception is None  # or another thread
        or interception.passes_through(cls)
        or torch._C._are_functorch_transforms_active()  # r[capture.custom-function.refused]
    ):
        return _C_APPLY.__get__(None, cls)(*args, **kwargs)
    if cls.setup_context is not _SingleLevelFunction.setup_context:
        # as autograd does: the forward's defaults filled in, so that `needs_input_grad` and
        # the arguments line up
        bound = inspect.signature(cls.forward).bind(*args, **kwargs)
        bound.apply_defaults()
        args, kwargs = bound.args, bound.kwargs
    return interception.apply(cls, args, kwargs)


def _set_materialize_grads(ctx, value: bool) -> None:
    interception = _active()
    if interception is not None and not value:
        interception.materialize_off.add(id(ctx))
    _ORIGINAL_SET_MATERIALIZE_GRADS(ctx, value)


@contextlib.contextmanager
def intercepting_apply(interception: Interception) -> Iterator[Interception]:
    """Autograd's apply of every Function goes through `interception` in this thread while the
    context is active (the patch is on PyTorch's classes, shared by all threads; other threads
    get the original behaviour)."""
    global _patch_users
    with _patch_lock:
        if _patch_users == 0:
            _APPLY_OWNER.apply = classmethod(_apply)
            FunctionCtx.set_materialize_grads = _set_materialize_grads
        _patch_users += 1
    _state.stack = [*getattr(_state, "stack", []), interception]
    try:
        yield interception
    finally:
        _state.stack = _state.stack[:-1]
        with _patch_lock:
            _patch_users -= 1
            if _patch_users == 0:
                if _OWNER_APPLY is None:
                    del _APPLY_OWNER.apply
                else:
                    _APPLY_OWNER.apply = _OWNER_APPLY
                FunctionCtx.set_materialize_grads = _ORIGINAL_SET_MATERIALIZE_GRADS
