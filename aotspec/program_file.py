"""A program named on the command line as `FILE.py:FUNCTION`, with what the tools need to run it.

The conventions of `aotspec explain` and `aotspec memory` (README, "Seeing a plan"):
- `FILE.py:FUNCTION` names a function (or a module object) defined at the top level of FILE.py,
  and `MODULE:FUNCTION` one of a module Python can import (`mypackage.steps:train_step`);
- its arguments come from a builder in the same file: `FUNCTION_args()` unless `--args NAME`
  names another; it returns the positional arguments as a tuple, a fresh set on each call (a
  training step mutates them and accumulates `.grad`);
- the builder's parameters that can be passed by keyword are its named sizes
  (`def mlp_args(batch=512)`): `aotspec memory --sizes batch=8..64` builds the arguments at each
  size, and the other commands call the builder with its defaults;
- `--hooks PACK,UNPACK` names saved-tensor hooks in the same file, active around the call;
- `FUNCTION_before_backward(*args)`, when the file defines it, runs between the forward and the
  backward, as the caller would there (FSDP gathers its parameters again).
Every mistake in these is a `UsageError`: one line saying what was wrong and what to do.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
import torch.utils._pytree as pytree
from attrs import frozen


class UsageError(Exception):
    """A mistake in what the command line names; the message is one line with the fix."""

    def __init__(self, problem: str, fix: str):
        super().__init__(f"{problem}. {fix}")


@frozen
class ProgramFile:
    """A function to run, how to build its arguments, and what the caller does around it."""

    #: `FILE.py:FUNCTION`, as given.
    spec: str
    path: Path
    fn: Callable
    build_args: Callable[[], tuple]
    hooks: tuple[Callable, Callable] | None = None
    before_backward: Callable | None = None

    @property
    def name(self) -> str:
        return self.fn.__name__

    def arguments(self, **sizes: int) -> tuple:
        """A fresh set of arguments from the builder, given these named sizes."""
        builder = self.build_args.__name__
        called = ", ".join(f"{name}={value}" for name, value in sizes.items())
        try:
            args = self.build_args(**sizes)
        except Exception as error:  # noqa: BLE001  (the user's code: reported in one line)
            raise UsageError(
                f"{builder}({called}) in {self.path.name} raised {describe(error, self.path)}",
                f"Fix {builder} so that it returns {self.name}'s arguments",
            ) from None
        if not isinstance(args, (tuple, list)):
            raise UsageError(
                f"{builder}() returned a {type(args).__name__}, not a tuple of arguments",
                f"Return {self.name}'s positional arguments as a tuple, e.g. `return (x, w)`",
            )
        return tuple(args)

    def size_names(self) -> tuple[str, ...]:
        """The builder's named sizes: its parameters that can be passed by keyword."""
        keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        parameters = inspect.signature(self.build_args).parameters.values()
        return tuple(p.name for p in parameters if p.kind in keyword)

    def check_size_name(self, name: str) -> None:
        """Raise a `UsageError` unless the builder has a named size `name`."""
        names = self.size_names()
        if name in names:
            return
        builder = self.build_args.__name__
        raise UsageError(
            f"{builder}() in {self.path.name} has no size named {name!r} (its sizes: "
            f"{', '.join(names) or 'none'})",
            f"Name one of them, or give {builder} a keyword parameter for that size, e.g. "
            f"`def {builder}({name}=16)`, and build the arguments from it",
        )


def load(spec: str, args: str | None = None, hooks: str | None = None) -> ProgramFile:
    """The program `spec` names (`FILE.py:FUNCTION` or `MODULE:FUNCTION`), with its builder and
    hooks."""
    source, colon, function = spec.rpartition(":")
    is_file = source.endswith(".py")
    is_module = all(part.isidentifier() for part in source.split("."))
    if not colon or not (is_file or is_module) or not function.isidentifier():
        raise UsageError(
            f"expected FILE.py:FUNCTION or MODULE:FUNCTION, got {spec!r}",
            "Name a Python file (or an importable module) and a function defined in it, e.g. "
            "examples/mlp.py:mlp",
        )
    if is_file:
        path = Path(source)
        if not path.is_file():
            raise UsageError(f"no file {source}", "Check the path (relative to this directory)")
        module = _import(path)
    else:
        module = _import_module(source)
        path = Path(module.__file__)
    fn = _function(module, path, function, f"function {function}")
    builder = _function(
        module,
        path,
        args or f"{function}_args",
        f"argument builder {args or function + '_args'}() for {function}",
        fix=f"Define `def {function}_args(): return (...)` in {path.name}, returning "
        f"{function}'s positional arguments, or name another builder with --args NAME",
    )
    before_backward = getattr(module, f"{function}_before_backward", None)
    return ProgramFile(spec, path, fn, builder, _hooks(module, path, hooks), before_backward)


def _import_module(name: str):
    """The module `name`, imported as `python -c "import NAME"` run here would import it."""
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        found = importlib.util.find_spec(name)
    except ModuleNotFoundError:  # a parent package is missing
        found = None
    if found is None or found.origin is None:
        raise UsageError(
            f"no module {name}", "Name a module Python can import from here, or a FILE.py"
        )
    try:
        return importlib.import_module(name)
    except Exception as error:  # noqa: BLE001  (the user's module: reported in one line)
        raise UsageError(
            f"importing {name} raised {describe(error, Path(found.origin))}",
            f"Fix {name} so that `python -c 'import {name}'` runs",
        ) from None


def _import(path: Path):
    name = f"aotspec_program_{path.stem}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    # As `python FILE.py` would: the file's own folder first, so its sibling modules import.
    sys.path.insert(0, str(path.resolve().parent))
    try:
        module_spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001  (the user's file: reported in one line)
        raise UsageError(
            f"importing {path} raised {describe(error, path)}",
            f"Fix {path.name} so that `python {path}` runs",
        ) from None
    return module


def _function(module, path: Path, name: str, what: str, fix: str | None = None) -> Callable:
    found = getattr(module, name, None)
    if callable(found):
        return found
    defined = sorted(
        key
        for key, value in vars(module).items()
        if callable(value) and getattr(value, "__module__", None) == module.__name__
    )
    raise UsageError(
        f"{path.name} defines no {what}",
        fix or f"Name one of the functions {path.name} defines: {', '.join(defined) or 'none'}",
    )


def _hooks(module, path: Path, names: str | None) -> tuple[Callable, Callable] | None:
    if names is None:
        return None
    parts = names.split(",")
    if len(parts) != 2:
        raise UsageError(
            f"--hooks expects PACK,UNPACK, got {names!r}",
            "Name the pack and the unpack function, comma-separated, e.g. --hooks pack,unpack",
        )
    pack, unpack = (part.strip() for part in parts)
    return (
        _function(module, path, pack, f"pack hook {pack}"),
        _function(module, path, unpack, f"unpack hook {unpack}"),
    )


def describe(error: BaseException, path: Path) -> str:
    """`Type: message (at FILE:LINE)`, on one line, at the innermost frame in `path`."""
    message = " ".join(str(error).split())
    where = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if Path(frame.filename).resolve() == path.resolve()
    ]
    at = f" (at {path.name}:{where[-1].lineno})" if where else ""
    return f"{type(error).__name__}: {message}{at}"


def training_roots(outputs) -> list[torch.Tensor]:
    """What one training step backpropagates from: the sum of each output that requires grad."""
    leaves = pytree.tree_leaves(outputs)
    return [t.sum() for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]
