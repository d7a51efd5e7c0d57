"""Lifting: tensors a function reads without taking them as arguments become inputs.

`r[capture.lift]`: a compiled function's inputs are the tensors it reaches from its code, then
its flat tensor arguments. It reaches them through a closure cell, through a global name its
code uses, or as a parameter, buffer or tensor attribute of a module reached that way (or of
the module compiled, or of a bound method's module). Functions reached the same way are
followed, so a helper that reads a global module lifts that module's tensors too. Each call
looks them up again, so the tensors a call uses are the ones in place at that call, and a tensor
reached twice is one input.
"""

from __future__ import annotations

import functools
import operator
import types
import weakref
from collections.abc import Callable, Iterator
from itertools import chain

import torch
from attrs import Factory, define, frozen
from torch._C._dynamo.guards import dict_version

#: Modules whose functions are library code, not the user's: they are not followed.
_LIBRARY_PREFIXES = ("torch", "numpy", "builtins", "functools", "typing")


@frozen
class Reach:
    """Where a lifted tensor sits: a slot that holds it, read and written by name."""

    #: "cell" (a closure cell), "global" (a function's globals), "parameter", "buffer" or
    #: "attribute" (of a module).
    kind: str
    owner: object
    name: str

    def get(self):
        return _slot_value(self.kind, self.owner, self.name)

    def put(self, value) -> None:
        """Stores `value` in the slot without the checks nn.Module's setattr makes, so a stand-in
        of the tensor (a fake tensor while tracing) can take a parameter's place."""
        if self.kind == "cell":
            self.owner.cell_contents = value
        elif self.kind == "global":
            self.owner[self.name] = value
        elif self.kind == "parameter":
            self.owner._parameters[self.name] = value
        elif self.kind == "buffer":
            self.owner._buffers[self.name] = value
        else:
            self.owner.__dict__[self.name] = value

    def short_name(self) -> str:
        """The name the function's code reads it by: `w`, or `BatchNorm1d.running_mean`."""
        if self.kind in ("cell", "global"):
            return self.name
        return f"{type(self.owner).__name__}.{self.name}"

    def describe(self) -> str:
        if self.kind == "cell":
            return f"closure variable {self.name}"
        if self.kind == "global":
            return f"global {self.name}"
        return f"{type(self.owner).__name__}.{self.name} ({self.kind})"


def _slot_value(kind: str, owner, name: str):
    if kind == "cell":
        return owner.cell_contents
    if kind == "global":
        return owner[name]
    if kind == "parameter":
        return owner._parameters[name]
    if kind == "buffer":
        return owner._buffers[name]
    return owner.__dict__[name]


@frozen
class Lifted:
    """The tensors one call lifts: `tensors[k]` is the tensor in the slots `reaches()[k]`."""

    tensors: tuple[torch.Tensor, ...]
    #: What the guard keeps: which slots hold which lifted input (not the tensors, which are
    #: inputs and guarded as such), which modules reached are in training mode, and the code
    #: the call runs: the modules' classes and the code of the functions followed
    #: (`r[capture.module-mode]`).
    key: tuple
    #: The slots of each tensor, looked up when the call compiles (`wrap`).
    reaches: Callable[[], tuple[tuple[Reach, ...], ...]]

    def wrap(self, fn):
        """`fn` as a function of (the lifted tensors as a list, *args, **kwargs): while it runs,
        the slots hold the tensors given in the list (the trace's stand-ins)."""
        reaches = self.reaches()

        def with_lifted_inputs(lifted: list, *args, **kwargs):
            saved = [[reach.get() for reach in slots] for slots in reaches]
            try:
                for slots, stand_in in zip(reaches, lifted, strict=True):
                    for reach in slots:
                        reach.put(stand_in)
                return fn(*args, **kwargs)
            finally:
                for slots, values in zip(reaches, saved, strict=True):
                    for reach, value in zip(slots, values, strict=True):
                        reach.put(value)

        with_lifted_inputs.__qualname__ = getattr(fn, "__qualname__", repr(fn))
        return with_lifted_inputs


#: What a call of a function that reaches no tensor and no module from its code lifts: nothing,
#: with the key a walk of it gives.
NOTHING_LIFTED = Lifted((), ((), (), (), ()), tuple)


def lift(fn) -> Lifted:
    """r[capture.lift]: the tensors `fn` reaches from its code, in a stable order."""
    return _walk(fn).lifted()


class Lifter:
    """r[capture.lift] at every call of one function, without walking again what has not
    changed: the latest walk is kept with what it read (each function's code, closure cells and
    globals it uses; each module's class, attributes, and parameters, buffers and submodules by
    name), and is walked again when any of those is a different object. The tensors are read
    from their slots at each call, so a call uses the tensors in place at that call; and the walk
    holds weakly what can die, so an object the caller drops between calls dies then, as without
    the walk."""

    def __init__(self, fn) -> None:
        self._fn = fn
        self._walk: _Walk | None = None

    def lift(self) -> Lifted:
        walk = self._walk
        if walk is None or walk.changed():
            walk = self._walk = _walk(self._fn)
        return walk.lifted()


#: What every module's `__dict__` holds for nn.Module's own bookkeeping (hooks, flags), which
#: no slot is read through; its parameters, buffers and submodules are read by name.
_MODULE_BOOKKEEPING = frozenset(vars(torch.nn.Module())) - {
    "training",
    "_parameters",
    "_buffers",
    "_modules",
}
_SLOT_DICTS = (
    operator.attrgetter("_parameters"),
    operator.attrgetter("_buffers"),
    operator.attrgetter("_modules"),
)
_TRAINING = operator.attrgetter("training")
#: The dict of a module that holds a slot of each kind it has.
_SLOT_DICT = {"parameter": _SLOT_DICTS[0], "buffer": _SLOT_DICTS[1]}


class _Walk:
    """The slots one walk found, and what it read to find them (`_read`: the modules' classes,
    attributes, and parameters, buffers and submodules with their names; `readers[k]` of the
    functions followed), as the objects' ids in order. What the walk found is held by weak
    reference where it can be; when one of those dies (its id may go to another object), the
    walk is stale and lets go of the rest. Reading is C-level iteration: it runs at each call.

    What the modules hold is read only where one of their dicts may have changed: a dict's
    version (PEP 509, as Dynamo's guards read it) changes whenever a key is set to another
    value, added or deleted, so where the modules' attribute dicts and their slot dicts that
    held anything keep their versions, and those that held nothing are still empty, the
    modules hold what they held (their classes and the functions' reads are read anyway)."""

    def __init__(self, reaches: tuple, modules: tuple, reads: _Reads, root) -> None:
        self._stale = False
        self._readers = reads.readers
        #: Per module, the names of its attributes that are not nn.Module's bookkeeping.
        self._attributes = [
            operator.itemgetter(*sorted(set(vars(module)) - _MODULE_BOOKKEEPING))
            for module in modules
        ]
        self._lengths = list(map(len, map(vars, modules)))
        #: Each module's parameters, buffers and submodules, as dicts (the attributes read
        #: above hold the same dicts), with their sizes; the names and values of those not
        #: empty are read.
        self._slot_dicts = [*chain.from_iterable(map(read, modules) for read in _SLOT_DICTS)]
        self._slot_lengths = list(map(len, self._slot_dicts))
        self._filled = [slots for slots in self._slot_dicts if slots]
        self._empty = [slots for slots in self._slot_dicts if not slots]
        values = list(self._read(list(modules), reads.functions))
        self._ids = list(map(id, values))
        self._versions = self._versions_of(list(modules))
        self._unversioned_ids = list(map(id, self._unversioned(list(modules), reads.functions)))
        #: What the walk read that takes no weak reference (cells, dicts, numbers...).
        self._kept: list = []
        #: What takes one, watched (a tensor is read from its slot anew at each call).
        self._watched = [
            self._hold(value) for value in values if not isinstance(value, torch.Tensor)
        ] + [weakref.ref(slots[0].get(), self._forget) for slots in reaches]
        self._functions = [self._hold(fn) for fn in reads.functions]
        self._reaches = tuple(
            tuple((reach.kind, self._hold(reach.owner), reach.name) for reach in slots)
            for slots in reaches
        )
        self._modules = [self._hold(module) for module in modules]
        self._first_slots = [slots[0] for slots in self._reaches]
        #: Where each tensor's first slot is a module's parameter or buffer: those dicts (held
        #: already in `_slot_dicts`; one replaced is an attribute `changed()` sees) and names.
        first = [slots[0] for slots in reaches]
        self._first_in_dicts = None
        if all(reach.kind in _SLOT_DICT for reach in first):
            dicts = [_SLOT_DICT[reach.kind](reach.owner) for reach in first]
            self._first_in_dicts = (dicts, [reach.name for reach in first])
        slots_key = tuple(
            tuple((reach.kind, id(reach.owner), reach.name) for reach in slots)
            for slots in reaches
        )
        #: What the guard keeps (`Lifted.key`): it holds while `changed()` says no, as the
        #: modules' `training` flags and instance `forward`s are among their attributes read,
        #: and their classes and the functions followed are read too (r[capture.module-mode];
        #: the compiled function's own code is the compiled function's).
        self._key = (
            slots_key,
            tuple(map(_TRAINING, modules)),
            tuple(map(_code_run, modules)),
            tuple(fn.__code__ for fn in reads.functions if fn is not root),
        )

    def _read(self, modules: list, functions) -> Iterator:
        if not modules:  # a function reaching no module (a Dynamo graph's): its reads alone
            return chain.from_iterable(map(operator.call, self._readers, functions))
        return chain(
            map(type, modules),
            chain.from_iterable(map(operator.call, self._attributes, map(vars, modules))),
            chain.from_iterable(map(dict.keys, self._filled)),
            chain.from_iterable(map(dict.values, self._filled)),
            chain.from_iterable(map(operator.call, self._readers, functions)),
        )

    def _versions_of(self, modules: list) -> list[int] | None:
        """The versions of the modules' attribute dicts and of their slot dicts that held
        anything; None where one that held nothing holds something now."""
        if any(self._empty):
            return None
        return [*map(dict_version, map(vars, modules)), *map(dict_version, self._filled)]

    def _unversioned(self, modules: list, functions) -> Iterator:
        """What the walk reads that no dict version watches: the modules' classes, and what the
        functions read (their code, closure cells and globals)."""
        return chain(
            map(type, modules),
            chain.from_iterable(map(operator.call, self._readers, functions)),
        )

    def _hold(self, value):
        """A callable giving `value` back: a weak reference where `value` takes one."""
        if type(value).__weakrefoffset__:
            return weakref.ref(value, self._forget)
        self._kept.append(value)
        return functools.partial(_same, value)

    def _forget(self, _) -> None:
        """An object the walk found died: the walk lets go of everything it holds."""
        self._stale = True
        self._kept, self._watched, self._functions, self._modules = [], [], [], []
        self._reaches, self._first_slots, self._attributes = (), [], []
        self._first_in_dicts = None
        self._slot_dicts, self._filled, self._empty = [], [], []

    def changed(self) -> bool:
        if self._stale:
            return True
        modules = list(map(operator.call, self._modules))
        functions = list(map(operator.call, self._functions))
        versions = self._versions_of(modules)
        if versions == self._versions:  # the modules hold what they held
            return list(map(id, self._unversioned(modules, functions))) != self._unversioned_ids
        if list(map(len, map(vars, modules))) != self._lengths:  # an attribute added
            return True
        if list(map(len, self._slot_dicts)) != self._slot_lengths:
            return True
        try:
            if list(map(id, self._read(modules, functions))) != self._ids:
                return True
        except KeyError:  # an attribute deleted
            return True
        self._versions = versions  # set again to what it held
        return False

    def lifted(self) -> Lifted:
        if self._first_in_dicts is not None:  # the tensors read in one pass
            tensors = tuple(map(dict.__getitem__, *self._first_in_dicts))
        else:
            tensors = tuple(
                [_slot_value(kind, owner(), name) for kind, owner, name in self._first_slots]
            )
        return Lifted(tensors, self._key, self.reaches)

    def reaches(self) -> tuple[tuple[Reach, ...], ...]:
        return tuple(
            tuple(Reach(kind, owner(), name) for kind, owner, name in slots)
            for slots in self._reaches
        )


def _code_run(module: torch.nn.Module) -> tuple:
    """What a module runs (`r[capture.module-mode]`): its class, and a `forward` set on the
    instance, by its code where it has one."""
    forward = vars(module).get("forward")
    forward = getattr(forward, "__func__", forward)
    return type(module), getattr(forward, "__code__", forward)


def _same(value):
    return value


@define
class _Reads:
    """What a walk reads from the functions it follows, as it goes."""

    readers: list = Factory(list)
    functions: list = Factory(list)

    def record(self, read, fn: types.FunctionType) -> None:
        self.readers.append(read)
        self.functions.append(fn)


def _walk(fn) -> _Walk:
    by_tensor: dict[int, list[Reach]] = {}
    tensors: list[torch.Tensor] = []
    modules: list[torch.nn.Module] = []
    reads = _Reads()
    for reach in _reaches(fn, set(), modules, reads):
        tensor = reach.get()
        if id(tensor) not in by_tensor:
            by_tensor[id(tensor)] = []
            tensors.append(tensor)
        by_tensor[id(tensor)].append(reach)
    reaches = tuple(tuple(by_tensor[id(t)]) for t in tensors)
    return _Walk(reaches, tuple(modules), reads, getattr(fn, "__func__", fn))


def _reaches(value, seen: set[int], modules: list, reads: _Reads) -> Iterator[Reach]:
    """The slots of the tensors `value` reaches; the modules it reaches are added to
    `modules`, and what the walk reads to `reads`."""
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, torch.nn.Module):
        yield from _module_reaches(value, seen, modules, reads)
    elif isinstance(value, types.MethodType):
        yield from _reaches(value.__self__, seen, modules, reads)
        yield from _reaches(value.__func__, seen, modules, reads)
    elif isinstance(value, types.FunctionType) and not _is_library(value):
        yield from _function_reaches(value, seen, modules, reads)


_EMPTY_CELL = object()


def _function_reads(code: types.CodeType):
    """What a walk of a function with this code reads from it."""
    names = tuple(_global_names(code))
    unbound = (_EMPTY_CELL,) * len(names)

    def read(fn: types.FunctionType) -> tuple:
        cells = map(_cell_contents, fn.__closure__ or ())
        return (fn.__code__, fn.__module__, *cells, *map(fn.__globals__.get, names, unbound))

    return read


def _cell_contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # a cell not yet filled (a name bound after the function)
        return _EMPTY_CELL


def _function_reaches(
    fn: types.FunctionType, seen: set[int], modules: list, reads: _Reads
) -> Iterator[Reach]:
    reads.record(_function_reads(fn.__code__), fn)
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
        contents = _cell_contents(cell)
        if contents is _EMPTY_CELL:
            continue
        if isinstance(contents, torch.Tensor):
            yield Reach("cell", cell, name)
        else:
            yield from _reaches(contents, seen, modules, reads)
    for name in _global_names(fn.__code__):
        if name not in fn.__globals__:
            continue
        contents = fn.__globals__[name]
        if isinstance(contents, torch.Tensor):
            yield Reach("global", fn.__globals__, name)
        else:
            yield from _reaches(contents, seen, modules, reads)


def _module_reaches(
    module: torch.nn.Module, seen: set[int], modules: list, reads: _Reads
) -> Iterator[Reach]:
    for owner in module.modules():
        if owner is not module and id(owner) in seen:
            continue
        seen.add(id(owner))
        modules.append(owner)  # r[capture.module-mode]
        for name, parameter in owner._parameters.items():
            if parameter is not None:
                yield Reach("parameter", owner, name)
        for name, buffer in owner._buffers.items():
            if buffer is not None:
                yield Reach("buffer", owner, name)
        for name, attribute in vars(owner).items():
            if isinstance(attribute, torch.Tensor):
                yield Reach("attribute", owner, name)


def _global_names(code: types.CodeType) -> Iterator[str]:
    """Names the code (and the code of functions and comprehensions it defines) reads as
    globals."""
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _global_names(constant)


def _is_library(fn: types.FunctionType) -> bool:
    module = getattr(fn, "__module__", None) or ""
    return module.split(".")[0] in _LIBRARY_PREFIXES
