"""The generator's state as ops of a program (`r[capture.rng-state]`).

A function that calls `torch.manual_seed`, `torch.seed`, `torch.get_rng_state` or
`torch.set_rng_state` acts on the default generator at that point of each call in eager. Capture
records each such call as one of these ops, so every run of the program acts on the caller's
generator at the same point, in order with the program's draws (they are tagged as random ops,
`r[ops.random]`, so nothing drops or moves them). Seeding and setting return an empty tensor, for
the graph to have a value to keep in order.
"""

from __future__ import annotations

import secrets

import torch

#: What marks these ops as acting on the generator: the graph keeps them where they ran.
_SEEDED = (torch.Tag.nondeterministic_seeded,)

#: The bytes of the CPU generator's state (`torch.get_rng_state().numel()`).
_STATE_BYTES = torch.default_generator.get_state().numel()

#: The functions as torch defines them, which the ops' kernels call.
_manual_seed = torch.random.manual_seed
_get_rng_state = torch.random.get_rng_state
_set_rng_state = torch.random.set_rng_state


@torch.library.custom_op("aotspec::manual_seed", mutates_args=(), tags=_SEEDED)
def manual_seed(seed: int) -> torch.Tensor:
    """`torch.manual_seed(seed)` when the program runs: every device's default generator."""
    _manual_seed(seed)
    return torch.empty(0)


@manual_seed.register_fake
def _(seed):
    return torch.empty(0)


@torch.library.custom_op("aotspec::seed", mutates_args=(), tags=_SEEDED)
def seed() -> torch.Tensor:
    """`torch.seed()` when the program runs: a nondeterministic seed, returned as a 0-d int64
    tensor (63 bits, so the number reads back as the seed it is)."""
    drawn = secrets.randbits(63)
    _manual_seed(drawn)
    return torch.tensor(drawn, dtype=torch.int64)


@seed.register_fake
def _():
    return torch.empty((), dtype=torch.int64)


@torch.library.custom_op("aotspec::get_rng_state", mutates_args=(), tags=_SEEDED)
def get_rng_state() -> torch.Tensor:
    """`torch.get_rng_state()` when the program runs: the CPU generator's state, a fresh tensor."""
    return _get_rng_state()


@get_rng_state.register_fake
def _():
    return torch.empty(_STATE_BYTES, dtype=torch.uint8)


@torch.library.custom_op("aotspec::set_rng_state", mutates_args=(), tags=_SEEDED)
def set_rng_state(state: torch.Tensor) -> torch.Tensor:
    """`torch.set_rng_state(state)` when the program runs: the CPU generator takes `state`."""
    _set_rng_state(state)
    return torch.empty(0)


@set_rng_state.register_fake
def _(state):
    return torch.empty(0)
