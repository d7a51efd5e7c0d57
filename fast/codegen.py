"""Python source for one graph of a plan: boxed, with `del` right after each value's last use.

    def forward(arguments):
        x, w = arguments
        arguments.clear()
        t = aten.t.default(w)
        del w
        mm = aten.mm.default(x, t)
        del x, t
        return [mm]

The function takes one list and clears it on entry (`r[boxed.args-cleared]`), so the list no
longer holds the inputs; each value is deleted right after the node that reads it last, so a
tensor dies there unless the caller or a graph output still holds it. The code is a plain
function: no module call and no wrapper holding arguments or results.

`aten.mm.default` reads as in PyTorch, but is bound to the quickest entry that calls that very
overload with the same arguments (`fast/entries.py`: the overload's own C entry, or torch's
binding `torch.mm` where a trial shows it equal). A torch function honours `__torch_function__`
where the overload's entry would not, so a call whose arguments, or whose mode, have a torch
function to honour runs the same code bound to the overloads' own entries (`GeneratedCode`).
"""

from __future__ import annotations

import contextlib
import math
import operator
import types
from collections.abc import Callable
from types import SimpleNamespace

import attrs
import sympy
import torch
import torch.fx
from attrs import frozen
from torch._C import _has_torch_function, _len_torch_dispatch_stack
from torch._ops import _len_torch_dispatch_stack_pre_dispatch
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._sympy.printers import PythonPrinter

from aotspec.errors import InternalError
from aotspec.reference.collectives import COLLECTIVES, on_group
from aotspec.reference.lifetimes import last_uses
from aotspec.reference.optable import CLONES_STORAGE, OpKind, lookup
from aotspec.reference.symbols import SizeBinding, is_symbolic, settled

from .entries import quickest_entry
from .peephole import views_undone


def _modes_off() -> contextlib.AbstractContextManager:
    """The dispatch modes switched off for a layout fix-up; nothing to enter when none is on
    (the common case, where entering `_disable_current_modes` would cost more than the fix-up
    itself: it runs at every call of a plan whose op needs one, `mse_loss`'s mean)."""
    if _len_torch_dispatch_stack() or _len_torch_dispatch_stack_pre_dispatch():
        return _disable_current_modes()
    return contextlib.nullcontext()


def meta_strided(value: torch.Tensor, strides: tuple[int, ...], nbytes: int) -> torch.Tensor:
    """r[ops.fresh-output.meta-layout]: the kernel's fresh output `value`, laid out on its own
    storage with the meta kernel's strides, the storage `nbytes` long (only its strides change
    where the dims that differ hold one element). The relayout is the op's, not ops of the
    program: it runs with the dispatch modes off, so a mode watching the program sees the op
    and its one storage."""
    with _modes_off():
        storage = value.untyped_storage()
        if value.storage_offset() != 0 or nbytes > storage.nbytes():  # not its own: copied
            copy = torch.empty_strided(value.shape, strides, dtype=value.dtype)
            return copy.copy_(value)
        if value.stride() != strides:
            dims = zip(value.stride(), strides, value.shape, strict=True)
            moved = any(a != b and n > 1 for a, b, n in dims)
            values = value.clone() if moved else None
            value.as_strided_(value.shape, strides)
            if values is not None:
                value.copy_(values)
        if storage.nbytes() != nbytes:  # `mse_loss`'s mean, on the storage of every term
            storage.resize_(nbytes)
        return value


def meta_placed(value: torch.Tensor, strides: tuple[int, ...], offset: int) -> torch.Tensor:
    """r[ops.fresh-output.cloned-storage]: the kernel's result, which it laid out as its first
    argument on a clone of that argument's storage, moved on that storage to the meta value's
    strides and storage offset; the op's own work, with the dispatch modes off."""
    with _modes_off():
        values = value.clone()
        value.as_strided_(value.shape, strides, offset)
        return value.copy_(values)


#: Names the generated code reads; graph values never shadow them (see `_check_names`). Each
#: function gets its own `aten`, holding the ops it calls.
_BUILTIN_NAMES = {
    "torch": torch,
    "aten": None,
    "inf": math.inf,
    "nan": math.nan,
    "meta_strided": meta_strided,
    "meta_placed": meta_placed,
}


@frozen
class GeneratedCode:
    """A graph's generated function, its source, and the graph it runs (the plan's, with the
    views it need not make left out, `fast/peephole.py`). The function calls
    the quickest entries of its ops; `exact`, the same code, their own entries, for a call with a
    torch function to honour. The code of a symbolic plan's graph is a function of the sizes its
    layout lines read (`symbols`, in the order `sized` and `exact_sized` take their numbers);
    `at` makes its functions for a call's sizes."""

    graph: torch.fx.Graph
    code: str
    function: Callable[[list], list] | None
    exact: Callable[[list], list] | None
    symbols: tuple[sympy.Symbol, ...] = ()
    sized: Callable[..., Callable[[list], list]] | None = None
    exact_sized: Callable[..., Callable[[list], list]] | None = None

    def __call__(self, arguments: list) -> list:
        # A `__torch_function__` mode, or an argument of a subclass that has its own: the
        # overloads' own entries, which it sees as it did before any binding was chosen
        if _has_torch_function(arguments):
            return self.exact(arguments)
        return self.function(arguments)

    def at(self, binding: SizeBinding) -> GeneratedCode:
        """r[sizes.symbolic.per-call]: this code at a call's sizes; no code is generated again."""
        if self.sized is None:
            return self
        numbers = [binding[s] for s in self.symbols]
        return attrs.evolve(self, function=self.sized(*numbers), exact=self.exact_sized(*numbers))


def generate(graph_module: torch.fx.GraphModule, name: str = "forward") -> GeneratedCode:
    """The boxed code of a graph. A symbolic plan's is generated once, for every size: its ops
    read their sizes from their inputs, and the lines laying outputs out as traced compute their
    numbers from the sizes' symbols, the parameters of a function that makes the code's function
    for a call's sizes (`GeneratedCode.at`)."""
    graph = views_undone(graph_module.graph)
    _check_names(graph)
    names = dict(_BUILTIN_NAMES)
    ops = _Ops()
    names.update({node.name: None for node in graph.nodes})  # taken: globals never get these names
    sizes = _SizeNames(names)
    lines = [f"def {name}(arguments):"]
    placeholders = [node.name for node in graph.nodes if node.op == "placeholder"]
    if placeholders:
        lines.append(
            f"    {', '.join(placeholders)}{',' if len(placeholders) == 1 else ''} = arguments"
        )
    lines.append("    arguments.clear()")
    dies_after = last_uses(graph)  # the plan's last-use table; returned values die at the output
    for node in graph.nodes:
        if node.op == "placeholder":
            pass
        elif node.op == "get_attr":  # a constant of the graph, bound to a global of the code
            constant = _fresh_name(node.name, names)
            names[constant] = getattr(graph_module, node.target)
            lines.append(f"    {node.name} = {constant}")
        elif node.op == "call_function":
            lines.append(f"    {node.name} = {_call(node, names, ops)}")
            lines += _meta_layout(node, sizes.spelled)  # r[ops.fresh-output.meta-layout]
        elif node.op == "output":
            results = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            lines.append(f"    return {_render(list(results), names)}")
            continue
        else:
            raise InternalError(f"cannot generate code for a {node.op} node: {node.format_node()}")
        dead = [value.name for value in dies_after[node]]
        if dead:
            lines.append(f"    del {', '.join(dead)}")
    if sizes.symbols:  # r[sizes.symbolic.per-call]: a function of the sizes makes the code's
        parameters = ", ".join(sizes.symbols.values())
        lines = [f"def sized({parameters}):", *(f"    {line}" for line in lines)]
        lines.append(f"    return {name}")
    code = "\n".join(lines) + "\n"
    namespace = dict(names, aten=ops.quickest())
    exec(compile(code, f"<aotspec.fast {name}>", "exec"), namespace)  # noqa: S102 (our own source)
    defined = namespace["sized" if sizes.symbols else name]
    exact_names = dict(namespace, aten=ops.exact())
    exact = types.FunctionType(defined.__code__, exact_names, defined.__name__)
    if sizes.symbols:
        return GeneratedCode(graph, code, None, None, tuple(sizes.symbols), defined, exact)
    return GeneratedCode(graph, code, defined, exact)


class _SizeNames(PythonPrinter):
    """The Python source of a traced number: the number, or its symbolic expression (`//` for
    floor division, `max`, ...) over the names of its symbols, each taken from `names` the first
    time it is read."""

    def __init__(self, names: dict):
        super().__init__()
        self.names = names
        self.symbols: dict[sympy.Symbol, str] = {}

    def spelled(self, numbers) -> str:
        """`numbers` (a number, or a tuple of them) as Python source."""
        if isinstance(numbers, tuple):
            items = [self.spelled(n) for n in numbers]
            return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
        number = settled(numbers)
        return f"({self.doprint(number.node.expr)})" if is_symbolic(number) else repr(number)

    def _print_Symbol(self, symbol: sympy.Symbol) -> str:
        if symbol not in self.symbols:
            self.symbols[symbol] = _fresh_name(f"size_{symbol}", self.names)
            self.names[self.symbols[symbol]] = None
        return self.symbols[symbol]


def _meta_layout(node: torch.fx.Node, spelled: Callable[[object], str]) -> list[str]:
    """The lines that lay a fresh output out as the meta kernel did where the torch kernel may
    not have: the strides of an output of two dims or more of a table or ATen-valued op
    (`mse_loss_backward` of a transposed input), and the storage's bytes of an ATen-valued op's
    (`mse_loss`'s mean). Their numbers are spelled by `spelled` (symbolic ones as expressions of
    the sizes' symbols)."""
    value = node.meta.get("val")
    source = node.args[0] if node.target is operator.getitem else node
    if not (isinstance(value, torch.Tensor) and isinstance(source.target, torch._ops.OpOverload)):
        return []  # not a tensor, or a fused kernel's output, laid out as its group says
    if value.layout != torch.strided:
        return []  # a sparse output (embedding_bag's gradient) has no strides or storage
    kind = lookup(source.target, where=source.name).kind
    plain_compute = kind is OpKind.COMPUTE and source.target not in CLONES_STORAGE
    if kind not in (OpKind.ATEN, OpKind.COMPUTE) or (plain_compute and value.dim() < 2):
        return []  # laid out by its kernel as the meta kernel lays it out
    strides = spelled(tuple(value.stride()))
    # The storage in the kernel's dtype: under autocast a kernel may keep float32 where the meta
    # kernel says bfloat16 (r[ops.fresh-output.meta-layout] keeps the kernel's dtype)
    elements = spelled(value.untyped_storage().nbytes() // value.element_size())
    nbytes = f"{elements} * {node.name}.element_size()"
    relaid = f"        {node.name} = meta_strided({node.name}, {strides}, {nbytes})"
    if kind is OpKind.ATEN:
        # r[ops.aten-values.workspace]: an output whose sizes only the kernel knows (the meta
        # kernel's is empty: mkldnn_rnn_layer's workspace) keeps the kernel's layout. The sizes
        # are compared last: comparing a torch.Size costs the most, and the common case (the
        # kernel laid the output out as the meta kernel) is settled before it.
        shape = spelled(tuple(value.shape))
        test = (
            f"({node.name}.stride() != {strides} or "
            f"{node.name}.untyped_storage().nbytes() != {nbytes}) and {node.name}.shape == {shape}"
        )
        return [f"    if {test}:", relaid]
    if kind is OpKind.COMPUTE and source.target in CLONES_STORAGE:
        # r[ops.fresh-output.cloned-storage]: the kernel lays the result out as its argument,
        # at its storage offset, where the traced meta value may start at 0
        offset = spelled(value.storage_offset())
        test = f"{node.name}.storage_offset() != {offset} or {node.name}.stride() != {strides}"
        placed = f"        {node.name} = meta_placed({node.name}, {strides}, {offset})"
        return [f"    if {test}:", placed]
    if kind is OpKind.COMPUTE and value.dim() >= 2:
        if all(type(n) is int and n > 1 for n in value.shape) and value.is_contiguous():
            # no dim of one element or none: an output of these sizes has the (contiguous) meta
            # strides exactly when it is contiguous, a question cheaper than its strides
            return [f"    if not {node.name}.is_contiguous():", relaid]
        return [f"    if {node.name}.stride() != {strides}:", relaid]
    return []


def _call(node: torch.fx.Node, names: dict, ops: _Ops) -> str:
    if node.target is operator.getitem:
        source, index = node.args
        return f"{source.name}[{index}]"
    arguments = [_render(a, names) for a in node.args]
    arguments += [f"{key}={_render(value, names)}" for key, value in node.kwargs.items()]
    target = node.target
    if isinstance(target, torch._ops.OpOverload) and target.namespace == "aten":
        function = ops.called_by(node)
    else:
        function = _function_name(target, names)
    return f"{function}({', '.join(arguments)})"


class _Ops:
    """The aten overloads a function calls, each bound, as `aten.mm.default`, to its own C entry
    (`_op`, all that OpOverload.__call__ calls: one Python frame less per op), or to the
    quickest entry that calls it as that entry does at every call site (`fast/entries.py`)."""

    def __init__(self) -> None:
        self._quickest: dict[torch._ops.OpOverload, Callable] = {}

    def called_by(self, node: torch.fx.Node) -> str:
        """The name `node`'s overload is called by."""
        overload = node.target
        quickest = quickest_entry(node)
        if self._quickest.setdefault(overload, quickest) is not quickest:
            self._quickest[overload] = overload._op  # call sites that need different ones
        return f"aten.{overload._opname}.{overload._overloadname}"

    def quickest(self) -> SimpleNamespace:
        return self._namespace(self._quickest)

    def exact(self) -> SimpleNamespace:
        return self._namespace({overload: overload._op for overload in self._quickest})

    @staticmethod
    def _namespace(entries: dict) -> SimpleNamespace:
        aten = SimpleNamespace()
        for overload, entry in entries.items():
            packet = aten.__dict__.setdefault(overload._opname, SimpleNamespace())
            setattr(packet, overload._overloadname, entry)
        return aten


def _function_name(target, names: dict) -> str:
    name = _fresh_name(
        getattr(target, "__name__", None) or getattr(target, "name", None) or "function", names
    )
    # r[collectives.values]: a collective runs on the group and is waited for by `communicate`,
    # which names it when it fails or times out (r[collectives.timeout])
    names[name] = on_group(target) if target in COLLECTIVES else target
    return name


def _render(value, names: dict) -> str:
    if isinstance(value, torch.fx.Node):
        return value.name
    if isinstance(value, (list, tuple)):
        items = ", ".join(_render(v, names) for v in value)
        return (
            f"[{items}]"
            if isinstance(value, list)
            else f"({items}{',' if len(value) == 1 else ''})"
        )
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return repr(value)
    if isinstance(value, float):
        return (
            repr(value)
            if math.isfinite(value)
            else ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))
        )
    if isinstance(value, torch.dtype):
        return str(value)  # torch.float32
    name = _fresh_name("constant", names)  # devices, layouts, memory formats, ...: bound by name
    names[name] = value
    return name


def _fresh_name(base: str, names: dict) -> str:
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in base)
    candidate, n = f"_{base}", 0
    while candidate in names:
        n += 1
        candidate = f"_{base}_{n}"
    return candidate


def _check_names(graph: torch.fx.Graph) -> None:
    clashes = [
        node.name
        for node in graph.nodes
        if node.name in _BUILTIN_NAMES or node.name == "arguments"
    ]
    if clashes:
        raise InternalError(
            f"graph values named {clashes} would shadow names the generated code reads"
        )
