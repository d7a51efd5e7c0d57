"""Cases for specs/autograd.md's "Activation checkpointing": checkpointed regions, what they save
and recompute, and the random ops they refuse.

Expected gradients are worked out by hand from the chain rule.
"""

import functools

import torch
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from aotspec.errors import UnsupportedError

from ..case import COMPILED_ONLY, Case, LiveBytesAfter, Raises, Values
from ._autograd_common import _ANGLES, _leaves


def _two_sines(x):
    return x.sin().sin()


def _checkpointed_sines(x):
    return checkpoint(_two_sines, x, use_reentrant=False).sum()


def _checkpointed_sines_squared(x):
    y = checkpoint(_two_sines, x, use_reentrant=False)
    return (y * y).sum()


def _doubled_plus_one_in_place(x):
    y = x * 2
    y.add_(1)
    return y


def _checkpointed_write(x):
    return checkpoint(_doubled_plus_one_in_place, x, use_reentrant=False).sum()


def _half_dropped(x):
    return torch.nn.functional.dropout(x, 0.5)


def _checkpointed_dropout(x):
    return checkpoint(_half_dropped, x, use_reentrant=False).sum()


def _save_matmuls(ctx, op, *args, **kwargs):
    if op is torch.ops.aten.mm.default:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def _selectively_checkpointed_sines(x):
    # the form torch.utils.checkpoint documents for a selective policy: a functools.partial
    policy = functools.partial(create_selective_checkpoint_contexts, _save_matmuls)
    return checkpoint(_two_sines, x, use_reentrant=False, context_fn=policy).sum()


CASES = [
    Case(
        name="autograd.checkpointed-value-is-recomputed",
        rules=["checkpoint.region", "checkpoint.saved", "checkpoint.recompute"],
        setup=lambda: _leaves(x=_ANGLES),
        args=["x"],
        program=_checkpointed_sines,
        backward=True,
        expect=[
            # d/dx sin(sin(x)) = cos(sin(x)) * cos(x)
            Values("x.grad", _ANGLES.sin().cos() * _ANGLES.cos()),
            # x 16 bytes; sin makes a (16); sin_1 makes b (16) and a dies there, as the
            # backward recomputes it from x instead of keeping it: 32 (48 unchecked)
            LiveBytesAfter("sin_1", 32),
        ],
        skip={"reference-eager": "the eager interpreter keeps every saved value"},
    ),
    Case(
        name="autograd.checkpointed-output-saved-outside-is-kept",
        rules=["checkpoint.saved"],
        setup=lambda: _leaves(x=_ANGLES),
        args=["x"],
        program=_checkpointed_sines_squared,
        backward=True,
        # d/dx sin(sin(x))^2 = 2 sin(sin(x)) cos(sin(x)) cos(x)
        expect=[
            Values("x.grad", 2 * _ANGLES.sin().sin() * _ANGLES.sin().cos() * _ANGLES.cos())
        ],
    ),
    Case(
        name="autograd.checkpointed-write-is-refused",
        rules=["checkpoint.functional", "boundary.failed-call"],
        setup=lambda: _leaves(x=_ANGLES),
        args=["x"],
        program=_checkpointed_write,
        # eager runs it: out0 = sum(2x + 1) = 10
        expect=[Raises(UnsupportedError, rule="checkpoint.functional")],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="autograd.selective-checkpoint-policy-is-refused",
        rules=["checkpoint.region", "boundary.failed-call"],
        setup=lambda: _leaves(x=_ANGLES),
        args=["x"],
        program=_selectively_checkpointed_sines,
        # eager runs it: out0 = sum(sin(sin(x))), x.grad = cos(sin(x)) cos(x) after a backward
        expect=[Raises(UnsupportedError, rule="checkpoint.region", match="context_fn")],
        skip=COMPILED_ONLY,
    ),
    Case(
        name="autograd.checkpointed-random-op-is-refused",
        rules=["checkpoint.random", "boundary.failed-call"],
        setup=lambda: _leaves(x=_ANGLES),
        args=["x"],
        program=_checkpointed_dropout,
        # eager replays the generator's state when it recomputes the dropout
        expect=[Raises(UnsupportedError, rule="checkpoint.random")],
        skip=COMPILED_ONLY,
    ),
]
