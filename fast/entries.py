"""The quickest Python entry point that calls one aten overload exactly as its own entry does.

An overload's own entry (`aten.addmm.default`, or its C function `_op`, which the generated code
calls) matches its arguments against the overload's schema the JIT's boxed way and calls the
dispatcher boxed. torch's bindings of the op (`torch.addmm`, the method `Tensor.t`,
`torch._C._nn.linear`) parse them with the parser generated for the op and call it unboxed:
about a microsecond less for `addmm`, a third of one for `relu`, at every call of every op.

A binding picks its overload from its arguments' Python types, and may fill in arguments itself,
so one is used for a call site only where a trial shows it reaches that very overload with the
very arguments the overload's entry passes: both are called on stand-ins of the call's arguments
(meta tensors where the call has tensors) under a dispatch mode that stops them at the first op
they dispatch, before any kernel runs, and what the mode saw is compared. A trial's answer holds
for every call whose arguments have the same Python types, and is kept by them.

A binding is a torch function: a `__torch_function__` mode or subclass would see `torch.empty`
where it sees `aten.empty.memory_format` from the overload's entry (and `torch.device`'s mode
would move it), so the generated code calls the overloads' own entries on a call where a torch
function is to be honoured (`fast/codegen.py`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

#: Where a binding of an op named `name` may be found, the quickest first: a method of tensors
#: (its first argument is the tensor), a function of `torch`, of `torch.nn.functional`'s C part.
_BINDINGS = (torch._C.TensorBase, torch._C._VariableFunctions, torch._C._nn)

#: The trials' answers: per overload and the Python types of a call's arguments, the binding that
#: reaches the overload as its entry does, or None where none does.
_ANSWERS: dict[tuple, Callable | None] = {}


def quickest_entry(node: torch.fx.Node) -> Callable:
    """The quickest entry that calls `node`'s aten overload on `node`'s arguments exactly as the
    overload's own entry (`_op`) does, where no torch function is to be honoured."""
    overload = node.target
    try:
        key = (overload, _kind(node.args), _kind(node.kwargs))
    except _Unknown:  # an argument the graph does not say enough of
        return overload._op
    if key not in _ANSWERS:
        _ANSWERS[key] = _tried(overload, node.args, node.kwargs)
    return _ANSWERS[key] or overload._op


class _Unknown(Exception):  # noqa: N818 (not an error: a trial is not made)
    """A graph value the graph does not say enough of for a trial to stand in for it."""


def _kind(value):
    """What a trial's answer depends on of `value`, hashable: its Python type as the generated
    code passes it, a tensor's dtype and rank, a list's or a tuple's items, a dict's keys and
    values."""
    if isinstance(value, torch.fx.Node):
        traced = value.meta.get("val")
        if isinstance(traced, torch.Tensor):
            if traced.layout != torch.strided or _hint(traced) is None:
                raise _Unknown
            return ("Tensor", traced.dtype, traced.dim())
        if isinstance(traced, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return type(traced).__name__.removeprefix("Sym").lower()  # a number at a call
        if isinstance(traced, (int, float, bool)):
            return type(traced).__name__
        raise _Unknown
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, *map(_kind, value))
    if isinstance(value, dict):
        return ("dict", *((name, _kind(item)) for name, item in value.items()))
    return type(value).__name__


def _hint(traced: torch.Tensor) -> tuple | None:
    """The sizes and strides of a traced tensor, numbers where they are symbols (their example
    values); None where one has none."""
    numbers = []
    for layout in (traced.shape, traced.stride()):
        hinted = [n.node.hint if isinstance(n, torch.SymInt) else n for n in layout]
        if any(n is None for n in hinted):
            return None
        numbers.append(tuple(hinted))
    return tuple(numbers)


def _tried(overload: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Callable | None:
    """The first binding of `overload`'s op that, on stand-ins of `args` and `kwargs`, dispatches
    what `overload`'s entry dispatches, with the same arguments, and returns the same structure;
    None where none does."""
    args, kwargs = _stand_ins((args, kwargs))
    recording = _Recording([id(t) for t in _tensors((args, kwargs))])
    with _disable_current_modes(), torch._C.DisableTorchFunction(), recording:
        expected = recording.dispatched_by(overload._op, args, kwargs)
        if expected is None or not expected[0] or expected[0][0][0] is not overload:
            return None
        for bindings in _BINDINGS:
            binding = getattr(bindings, overload._opname, None)
            if binding is not None and recording.dispatched_by(binding, args, kwargs) == expected:
                return binding
    return None


def _stand_ins(value):
    """`value` with each graph value standing in by a value of its Python type: a tensor by a
    meta tensor of its dtype and layout, a number by a number."""
    if isinstance(value, torch.fx.Node):
        traced = value.meta["val"]
        if isinstance(traced, torch.Tensor):
            shape, strides = _hint(traced)
            return torch.empty_strided(shape, strides, dtype=traced.dtype, device="meta")
        return {"int": 2, "float": 2.0, "bool": True}[_kind(value)]
    if isinstance(value, (list, tuple)):
        return type(value)(map(_stand_ins, value))
    if isinstance(value, dict):
        return {name: _stand_ins(item) for name, item in value.items()}
    return value


class _Recording(TorchDispatchMode):
    """Notes each op dispatched, with its arguments as `_compared` gives them (the tensors of a
    trial's arguments, `stand_ins`, by position), and answers it without running a kernel (a
    meta kernel written in Python costs more than the rest of a trial): an empty meta tensor per
    tensor it returns, an empty list per list of them, a zero per number. A binding that reads
    those answers (a composite op) fails, and is not used."""

    def __init__(self, stand_ins: list[int]):
        super().__init__()
        self.stand_ins = stand_ins
        self.dispatched: list[tuple] = []

    def dispatched_by(self, entry: Callable, args: tuple, kwargs: dict) -> tuple | None:
        """The ops, with their arguments, that `entry(*args, **kwargs)` dispatches, and the
        structure of what it returns; None where it fails. Called with this mode on."""
        self.dispatched = []
        try:
            result = entry(*args, **kwargs)
        except Exception:  # noqa: BLE001 (a binding that cannot take these arguments)
            return None
        return tuple(self.dispatched), _structure(result)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        seen = (func, _compared(args, self.stand_ins), _compared(kwargs, self.stand_ins))
        self.dispatched.append(seen)
        answers = tuple(map(_answer, func._schema.returns))
        return answers[0] if len(answers) == 1 else answers


def _answer(returned: torch._C.Argument):
    kind = returned.type.kind()
    if kind == "TensorType":
        return torch.empty(0, device="meta")
    if kind == "ListType":
        return []
    return 0


def _structure(value):
    """A result's structure: a namedtuple of torch's bindings is the tuple of the overload's
    entry (the generated code indexes it), a list is not."""
    if isinstance(value, (list, tuple)):
        kind = "list" if isinstance(value, list) else "tuple"
        return (kind, *map(_structure, value))
    return type(value).__name__


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []


def _compared(value, stand_ins: list[int]):
    """`value`, what a dispatch mode saw, in a form compared by `==`: a stand-in tensor by its
    position, another tensor by its dtype, sizes, strides and device (a number the entry wrapped
    comes as the number), a number with its type (`1 != 1.0` to an op)."""
    if isinstance(value, torch.Tensor):
        if id(value) in stand_ins:
            return ("stand-in", stand_ins.index(id(value)))
        return ("tensor", value.dtype, value.shape, value.stride(), value.device)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, *(_compared(item, stand_ins) for item in value))
    if isinstance(value, dict):
        return ("dict", *((name, _compared(item, stand_ins)) for name, item in value.items()))
    return (type(value).__name__, repr(value))
