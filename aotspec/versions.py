"""What differs between the torch releases aotspec runs on, in one place.

Each difference is one small function or constant, named for what it does, whose docstring says
which releases differ and how; it detects the behaviour by feature where it can, never by
version number. Anything aotspec cannot handle on a release raises a named `UnsupportedError`
rather than giving a wrong result. `tests/test_versions.py` holds one test per difference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator

import torch.fx
import torch.utils.checkpoint
from torch.autograd.function import _SingleLevelFunction
from torch.fx.experimental.proxy_tensor import make_fx


def make_fx_keeping_detach(fn: Callable, **options) -> Callable[..., torch.fx.GraphModule]:
    """`make_fx(fn, **options)` that records `aten.detach` as `aten.detach`.

    From torch 2.14, make_fx given no decomposition table decomposes `aten.detach` into
    `aten.alias` (a no-op decomposition, pytorch/pytorch#186845): the graph it returns lets a
    gradient through where eager's detach stops it. An explicit table, even an empty one, keeps
    detach on every release; aotspec's passes differentiate the graphs they trace, so they pass
    one."""
    return make_fx(fn, decomposition_table=options.pop("decomposition_table", {}), **options)


def custom_function_apply_owner() -> type:
    """The class on whose `apply` capture intercepts every custom autograd.Function's apply.

    Through torch 2.13, `Function.apply` is Python: it binds the forward's defaults, leaves
    functorch transforms to their own path, and calls autograd's C apply as `super().apply`, which
    `_SingleLevelFunction`, next in every Function's MRO, can intercept. From torch 2.14,
    `Function.apply` is the C apply itself, which does both: it is intercepted on `Function`."""
    function = torch.autograd.Function
    if function.__dict__.get("apply") is torch._C._FunctionBase.__dict__["apply"]:
        return function
    return _SingleLevelFunction


@contextlib.contextmanager
def checkpoint_generator_replaced(region: Callable[[Callable], Generator]) -> Iterator[None]:
    """While active, `checkpoint(fn, ..., use_reentrant=False)` runs the generator
    `region(context_fn)` around `fn` in place of its own, which enters saved_tensors_hooks.

    Through torch 2.13, checkpoint calls `_checkpoint_without_reentrant_generator(fn,
    preserve_rng_state, context_fn, determinism_check, debug, *args, **kwargs)`. From torch 2.14
    it calls `_checkpoint_without_reentrant_generator_impl(fn, args, kwargs, *, context_fn, ...)`
    (the old name stays for other callers), and replacing the old name alone leaves checkpoint
    entering its hooks inside the captured function."""
    module = torch.utils.checkpoint
    name = "_checkpoint_without_reentrant_generator_impl"
    if hasattr(module, name):

        def generator(fn, args, kwargs, *, context_fn=module.noop_context_fn, **options):
            return region(context_fn)

    else:
        name = "_checkpoint_without_reentrant_generator"

        def generator(fn, preserve_rng_state=True, context_fn=module.noop_context_fn, *a, **k):
            return region(context_fn)

    original = getattr(module, name)
    setattr(module, name, generator)
    try:
        yield
    finally:
        setattr(module, name, original)


def apply_references_intercepted() -> bool:
    """Whether capture sees a custom Function applied through a reference to its `apply` taken
    before capture (`op = MyFunction.apply`, as libraries write it); where it does not, such a
    Function is refused (`r[capture.custom-function.refused]`).

    Through torch 2.13 that reference is the Python `Function.apply`, which reaches the class
    capture patches through `super().apply`. From torch 2.14 it is autograd's C apply bound to
    the Function, which no patch of a class reaches."""
    return custom_function_apply_owner() is not torch.autograd.Function
