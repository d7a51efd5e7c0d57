"""Cases for specs/boxed-calls.md: a boxed call's argument list, cleared or stolen, and when the
tensors it held are freed.

Expected observables come from the rules and from eager PyTorch.
"""

import math

import torch

from aotspec.errors import UnsupportedError

from ..case import (
    COMPILED_ONLY,
    AtSize,
    Case,
    FreedBy,
    Length,
    PeakBytes,
    PlansTraced,
    Raises,
    Values,
)


def _chain_on_list(xs):
    a = xs[0].sin()
    return a.cos()


def _exp_chain_on_list(xs):
    a = xs[0].exp()  # exp saves its result, not the activation
    return a.exp()


def _activation_with_history():
    leaf = torch.zeros(4, requires_grad=True)
    return {"leaf": leaf, "xs": [leaf * 1]}


def _write_into_list(xs):
    xs[0].add_(1.0)
    return xs[0].sin()


def _list_held_elsewhere():
    x = torch.zeros(4)
    return {"x": x, "xs": [x]}


CASES = [
    Case(
        name="boxed.caller-held-input-stays-alive",
        rules=["boxed.args-cleared", "memory.peak"],
        setup=_list_held_elsewhere,
        args=["xs"],
        program=_chain_on_list,
        expect=[
            Values("out0", [1.0, 1.0, 1.0, 1.0]),
            Length("xs", 1),
            # x 16 (the caller keeps it); sin 16 more; cos 16 more, then sin's dies: peak 48.
            PeakBytes(48),
        ],
    ),
    Case(
        name="boxed.stolen-list-freed-at-last-use",
        rules=["boxed.steal", "boxed.steal.freed-at-last-use", "boxed.args-cleared"],
        setup=lambda: {"xs": [torch.zeros(4)]},
        args=["xs"],
        program=_chain_on_list,
        steal=["xs"],
        expect=[
            Values("out0", [1.0, 1.0, 1.0, 1.0]),
            Length("xs", 0),
            # the stolen input (16) dies right after sin (32 -> 16); cos makes 16 more: peak 32.
            PeakBytes(32),
        ],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="boxed.stolen-activation-with-grad-freed-at-last-use",
        rules=["boxed.steal.freed-at-last-use", "autograd.saved-freed-in-backward"],
        setup=_activation_with_history,
        args=["xs"],
        program=_exp_chain_on_list,
        steal=["xs"],
        backward=True,
        expect=[
            Values("out0", torch.full((4,), math.e)),
            # d/dx exp(exp(x)) at 0: e * 1
            Values("leaf.grad", torch.full((4,), math.e)),
            Length("xs", 0),
            # the stolen activation (16) dies right after the first exp (32 -> 16), which is
            # saved; the second exp makes 16 more, also saved: peak 32.
            PeakBytes(32),
        ],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="boxed.stolen-tensor-written-is-rejected",
        rules=["boxed.steal.read-only", "boundary.failed-call"],
        setup=lambda: {"xs": [torch.zeros(4)]},
        args=["xs"],
        program=_write_into_list,
        steal=["xs"],
        # the spec refuses before the call: the list and its tensor are left as they were
        expect=[Raises(UnsupportedError, rule="boxed.steal.read-only")],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="boxed.steal-of-a-tuple-is-rejected",
        rules=["boxed.steal.lists-only"],
        setup=lambda: {"xs": (torch.zeros(4),)},
        args=["xs"],
        program=_chain_on_list,
        steal=["xs"],
        expect=[
            Raises(TypeError, rule="boxed.steal.lists-only", match="must be a list of tensors")
        ],
        skip=COMPILED_ONLY,
    ),
]


#: Sizes of the stolen tensor, one compiled function called at each in turn (a smaller one last:
#: a plan of a larger size must not serve it).
_STOLEN_SIZES = (4, 8, 3)


def _stolen_ramp(n):
    return {"xs": [torch.arange(float(n))]}


CASES.append(
    Case(
        name="boxed.stolen-list-at-each-size-freed-at-last-use",
        rules=[
            "boxed.steal.freed-at-last-use",
            "boxed.args-cleared",
            "memory.peak",
            "sizes.symbolic.per-call",
        ],
        setup=_stolen_ramp,
        args=["xs"],
        program=_chain_on_list,
        steal=["xs"],
        sizes=_STOLEN_SIZES,
        dynamic=True,
        expect=[
            Length("xs", 0),
            FreedBy("forward", made_by="arg0_1", freed_by="sin"),
            # eager's values at each size
            *[AtSize(n, Values("out0", _chain_on_list(**_stolen_ramp(n)))) for n in _STOLEN_SIZES],
            # at size n: the stolen input (4n) dies right after sin (8n -> 4n); cos makes 4n
            # more: peak 8n bytes, 32, 64 and 24.
            *[AtSize(n, PeakBytes(8 * n)) for n in _STOLEN_SIZES],
            # one plan, its length a symbol, serves the three sizes (r[sizes.symbolic.guard])
            PlansTraced(1),
        ],
        skip=COMPILED_ONLY,
    )
)
