"""What differs between the torch releases aotspec runs on, in one place.

Each difference is one small function or constant, named for what it does, whose docstring says
which releases differ and how; it detects the behaviour by feature where it can, never by
version number. Anything aotspec cannot handle on a release raises a named `UnsupportedError`
rather than giving a wrong result. `tests/test_versions.py` holds one test per difference.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx


def make_fx_keeping_detach(fn: Callable, **options) -> Callable[..., torch.fx.GraphModule]:
    """`make_fx(fn, **options)` that records `aten.detach` as `aten.detach`.

    From torch 2.14, make_fx given no decomposition table decomposes `aten.detach` into
    `aten.alias` (a no-op decomposition, pytorch/pytorch#186845): the graph it returns lets a
    gradient through where eager's detach stops it. An explicit table, even an empty one, keeps
    detach on every release; aotspec's passes differentiate the graphs they trace, so they pass
    one."""
    return make_fx(fn, decomposition_table=options.pop("decomposition_table", {}), **options)
