"""Aliasing arguments written with history, compiled as views of their base.

`r[autograd.input-writes.synthetic-base]`: when a write with grad mode on lands in a storage that
several arguments read, and they are all views of one base tensor (or that base itself), the
program is compiled as a function of the base: each argument of the group becomes, inside the
program, the view of the base with the argument's layout, so the one tensor object the write's
history goes to is the base, and the caller's arguments, views of it, take theirs from it when
read, as eager's views do. PyTorch's AOTAutograd calls such a base a synthetic base.
An in-place metadata op the program applies to such an argument relays out the program's own
view of the base; the op is noted while the program is traced and applied again to the caller's
tensor object after the call (`r[autograd.input-writes.synthetic-base.metadata]`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
import torch.utils._pytree as pytree
from attrs import define, field, frozen

from aotspec.errors import InternalError, UnsupportedError

from .optable import METADATA_OPS


@frozen
class ViewOfBase:
    """Stands, in the arguments of the compiled program, for the argument at flat tensor index
    `argument`, which the program takes as a view of base `base` instead."""

    argument: int
    base: int


@frozen
class ArgumentRelayout:
    """r[autograd.input-writes.synthetic-base.metadata]: the in-place metadata op
    `op(argument, *args, **kwargs)` the program applied to the caller's flat tensor `argument`,
    under the grad mode it ran under."""

    argument: int
    op: Callable
    args: tuple
    kwargs: tuple[tuple[str, object], ...]
    grad_enabled: bool


@frozen
class SyntheticBases:
    """The groups of aliasing arguments one specialization compiles as views of a base."""

    #: Per base, the flat tensor indices of the arguments that are views of it, ascending.
    groups: tuple[tuple[int, ...], ...] = ()
    #: Output positions (among the tensor outputs) that are an argument of a group: the caller's
    #: own tensor object, as eager returns it.
    returned: tuple[tuple[int, int], ...] = ()
    #: The in-place metadata ops on arguments of a group, in the program's order.
    relayouts: tuple[ArgumentRelayout, ...] = ()
    _grouped: frozenset[int] = field(init=False)

    @_grouped.default
    def _grouped_default(self) -> frozenset[int]:
        return frozenset(i for group in self.groups for i in group)

    def merged(self, indices: list[int], tensors: list[torch.Tensor]) -> SyntheticBases:
        """These groups with the arguments at `indices` (flat indices of the program compiled with
        these groups: a base stands for its group) made one group, which needs a common base."""
        members = set()
        for i in indices:
            members.update(self.groups[i] if i < len(self.groups) else [self.original(i)])
        group = tuple(sorted(members))
        if len({id(base_of(tensors[i])) for i in group}) != 1:
            raise UnsupportedError(
                f"the program writes with grad mode on into a storage that flat inputs "
                f"{list(group)} share, and gradients flow through it, but they are not all views "
                "of one base tensor: its history would belong to more than one tensor object",
                rule="autograd.input-writes.aliased",
                fix="pass one tensor of that storage and take the others as views of it inside "
                "the function, or write under torch.no_grad()",
            )
        if group in self.groups:  # compiled as views of their base, and still not one object
            raise InternalError(
                f"a write with history lands in the storage of flat inputs {list(group)} after "
                "they were compiled as views of their base"
            )
        kept = [g for g in self.groups if not members.intersection(g)]
        return SyntheticBases(tuple(sorted([*kept, group])))

    def original(self, index: int) -> int:
        """The caller's flat tensor index of the compiled program's input `index`, not a base."""
        ungrouped = (i for i in itertools.count() if i not in self._grouped)
        return next(itertools.islice(ungrouped, index - len(self.groups), None))

    def program_index(self, original: int) -> int:
        """The compiled program's input for the caller's flat tensor index `original`: its
        group's base, or its place after the bases."""
        for base, group in enumerate(self.groups):
            if original in group:
                return base
        return len(self.groups) + sum(1 for i in range(original) if i not in self._grouped)

    def inputs(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """The compiled program's flat inputs for a call with `tensors`: each group's base, looked
        up again (the guard keeps which arguments share a base), then the other arguments."""
        if not self.groups:
            return tensors
        bases = [base_of(tensors[group[0]]) for group in self.groups]
        return bases + [t for i, t in enumerate(tensors) if i not in self._grouped]

    def with_caller_objects(self, outputs: list, tensors: list[torch.Tensor]) -> list:
        """The outputs with each one that is an argument of a group replaced by the caller's
        tensor object, which eager returns."""
        for position, argument in self.returned:
            outputs[position] = tensors[argument]
        return outputs

    def relayout_callers(self, tensors: list[torch.Tensor]) -> None:
        """r[autograd.input-writes.synthetic-base.metadata]: each in-place metadata op the
        program applied to an argument of a group, applied again to the caller's object."""
        for step in self.relayouts:
            with torch.set_grad_enabled(step.grad_enabled):
                step.op(tensors[step.argument], *step.args, **dict(step.kwargs))

    def program(self, fn: Callable, args: tuple, kwargs: dict, tensors: list[torch.Tensor]):
        """(`fn` as a function of the bases and the other arguments, its arguments, and the
        record of which outputs are arguments of a group and of the in-place metadata ops on
        them, filled while it is traced)."""
        leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
        tensor_positions = [p for p, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        stand_for: dict[int, ViewOfBase] = {}
        for base, group in enumerate(self.groups):
            for i in group:
                stand_for[tensor_positions[i]] = ViewOfBase(i, base)
        layouts = {i: _layout_in(tensors[i], base_of(tensors[i])) for i in self._grouped}
        traced = Traced([], [])

        def of_bases(bases: list, *args, **kwargs):
            leaves, spec = pytree.tree_flatten((args, kwargs))
            views = {}
            for position, leaf in enumerate(leaves):
                if isinstance(leaf, ViewOfBase):
                    layout = layouts[leaf.argument]
                    base = bases[leaf.base]
                    view = base if layout is None else base.as_strided(*layout)
                    views[leaf.argument] = leaves[position] = view
            args, kwargs = pytree.tree_unflatten(leaves, spec)
            traced.relayouts.clear()
            with _NoteRelayouts(views, traced.relayouts):
                result = fn(*args, **kwargs)
            _refuse_relaid_out(views, layouts, traced.relayouts)
            outputs = [leaf for leaf in pytree.tree_leaves(result) if torch.is_tensor(leaf)]
            traced.returned.clear()
            traced.returned.extend(
                (position, argument)
                for position, output in enumerate(outputs)
                for argument, view in views.items()
                if output is view and layouts[argument] is not None
            )
            return result

        of_bases.__qualname__ = getattr(fn, "__qualname__", repr(fn))
        replaced = [stand_for.get(p, leaf) for p, leaf in enumerate(leaves)]
        new_args, new_kwargs = pytree.tree_unflatten(replaced, spec)
        bases = [base_of(tensors[group[0]]) for group in self.groups]
        return of_bases, ([*bases], *new_args), new_kwargs, traced


@define
class Traced:
    """What tracing the program of the bases found out (`SyntheticBases.program`)."""

    #: (output position, argument): outputs that are an argument of a group.
    returned: list[tuple[int, int]]
    relayouts: list[ArgumentRelayout]


class _NoteRelayouts(torch.overrides.TorchFunctionMode):
    """Notes the in-place metadata ops the program applies to the views standing for arguments
    of a group (`views`: argument -> view)."""

    def __init__(self, views: dict, notes: list[ArgumentRelayout]):
        super().__init__()
        self.arguments = {id(view): argument for argument, view in views.items()}
        self.notes = notes

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in METADATA_OPS and id(args[0]) in self.arguments:
            argument = self.arguments[id(args[0])]
            step = ArgumentRelayout(
                argument, func, tuple(args[1:]), tuple(kwargs.items()), torch.is_grad_enabled()
            )
            self.notes.append(step)
        return func(*args, **kwargs)


def bases_key(tensors: list[torch.Tensor], facts: tuple[tuple, ...]) -> tuple:
    """What a compiled function's guard keeps of the bases of arguments that share a storage with
    another (`facts` from `input_facts`, whose fifth field is the first input on the storage):
    which share a base, and its layout."""
    if all(fact[4] == i for i, fact in enumerate(facts)):
        return ()
    first_with_base: dict[int, int] = {}
    return tuple(
        (first_with_base.setdefault(id(base_of(t)), i), _layout(base_of(t)))
        for i, t in enumerate(tensors)
    )


def base_of(t: torch.Tensor) -> torch.Tensor:
    """The tensor `t` is a view of, or `t` itself."""
    return t if t._base is None else t._base


def _layout_in(t: torch.Tensor, base: torch.Tensor) -> tuple | None:
    """`t`'s layout as `as_strided` arguments, None when `t` is the base itself."""
    return None if t is base else _layout(t)


def _layout(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset())


def _refuse_relaid_out(views: dict, layouts: dict, relayouts: list[ArgumentRelayout]) -> None:
    """A group's argument is a view made inside the program: a change of its layout by anything
    but the in-place metadata ops noted for the caller's object (set_, resize_, an op on the
    base) would relay out that view, not the caller's tensor object, which eager relays out."""
    noted = {step.argument for step in relayouts}
    for argument, view in views.items():
        layout = layouts[argument]
        if layout is not None and argument not in noted and _layout(view) != layout:
            raise UnsupportedError(
                f"flat input {argument} aliases other inputs, the program writes their storage "
                "with history, and it changes the input's layout in place by other means than "
                "t_, transpose_, squeeze_, unsqueeze_, swapdims_ or as_strided_ (set_, resize_, "
                "...)",
                rule="autograd.input-writes.synthetic-base",
                fix="change the layout of a view taken inside the function instead, or pass one "
                "tensor of that storage",
            )
