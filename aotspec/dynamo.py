"""`torch.compile(model, backend="aotspec")`: aotspec as a Dynamo backend.

Registered through the `torch_dynamo_backends` entry point (pyproject.toml), so Dynamo finds it
by name. Dynamo hands a backend the fx graph it captured (torch-level calls; parameters lifted to
inputs) and example inputs; `aotspec_backend` passes the graph to `aotspec.compile`, which
captures it to aten itself, plans it and runs it on the chosen backend, with the contract of
docs/contract.md (input mutations reach the caller, gradients flow through `.backward()`).

Choosing the aotspec backend: `torch.compile(..., options={"backend": "reference"})`. Dynamo
passes `options` (and `mode`, when one is given) through to a registered backend as keyword
arguments (`torch._TorchCompileWrapper`); without the option, `$AOTSPEC_BACKEND` decides, else
`"fast"`, as for `aotspec.compile`. `options` may also name `steal` and `hooks_filter`.

The example inputs are not used: `aotspec.compile` specializes on the real tensors of each call,
and on the Python numbers Dynamo passes as 0-d tensors, which the backend hands it as numbers
(`r[capture.dynamo-numbers]`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.fx.traceback

import aotspec

#: The keys `options` may hold, each an `aotspec.compile` keyword argument.
OPTIONS = ("backend", "steal", "hooks_filter")


def aotspec_backend(
    graph_module: torch.fx.GraphModule, example_inputs, *, options: dict | None = None, mode=None
) -> Callable:
    """The Dynamo backend: `graph_module` compiled by `aotspec.compile` with `options`."""
    if mode is not None:
        raise ValueError(
            f"torch.compile(mode={mode!r}) is an inductor setting; "
            "the aotspec backend has no modes. "
            f"Leave mode out, and choose the aotspec backend with options={{'backend': ...}}"
        )
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(
            f"unknown options {unknown} for torch.compile(backend='aotspec'); valid options: "
            f"{', '.join(map(repr, OPTIONS))} (the keyword arguments of aotspec.compile)"
        )
    compiled = aotspec.compile(_keeping_source_lines(graph_module), **options)
    numbers = _numbers_passed_as_tensors(graph_module)
    if not numbers:
        return compiled

    def call(*args):
        # r[capture.dynamo-numbers]: each such input is its number again, a constant of the
        # capture, so a call with another number compiles again (aotspec.compile's guard)
        return compiled(*[arg.item() if i in numbers else arg for i, arg in enumerate(args)])

    return call


def _numbers_passed_as_tensors(graph_module: torch.fx.GraphModule) -> frozenset[int]:
    """The positions of the graph's inputs that stand for a Python number of the user's call,
    which Dynamo passes as a 0-d tensor once it has seen the number change (`r[capture.dynamo-
    numbers]`)."""
    placeholders = [node for node in graph_module.graph.nodes if node.op == "placeholder"]
    return frozenset(
        i
        for i, node in enumerate(placeholders)
        if getattr(node.meta.get("grapharg"), "pass_arg_as_tensor", False)
    )


class _Interpreter(torch.fx.Interpreter):
    """Runs Dynamo's graph on the user's numbers where it reads them from 0-d tensors."""

    def call_method(self, target, args, kwargs):
        if target == "item" and isinstance(args[0], int | float | bool):
            return args[0]  # r[capture.dynamo-numbers]: the number itself
        return super().call_method(target, args, kwargs)


def _keeping_source_lines(graph_module: torch.fx.GraphModule) -> Callable:
    """The graph's function, run node by node with each node's metadata in effect, so that the
    aten ops capture records from it carry the user's source line that Dynamo noted for the node
    (errors then name the user's line, not Dynamo's generated code: `r[ops.table]`)."""

    def forward(*args):
        with torch.fx.traceback.preserve_node_meta():
            return _Interpreter(graph_module).run(*args)

    forward.__qualname__ = getattr(graph_module.forward, "__qualname__", "forward")
    return forward
