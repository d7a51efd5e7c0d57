"""The commands that look at one program: `aotspec check` (what no backend supports),
`aotspec explain` (its plan) and `aotspec memory` (its live bytes).

They take `FILE.py:FUNCTION`, or `MODULE:FUNCTION` for an importable module, with the conventions
of `aotspec/program_file.py`. A mistake in what they are given, a program that fails, or one
outside the specification ends the command with one line on stderr saying what was wrong and
what to do, and a non-zero exit code: 2 for the command line, 1 for the program. `check` exits
with 1 when it lists a refusal.
"""

from __future__ import annotations

import functools
import logging
import sys

from aotspec.errors import InternalError, SpecViolation, UnsupportedError
from aotspec.program_file import ProgramFile, UsageError, describe, load


def register(commands) -> None:
    """Add `check`, `explain` and `memory` to the `aotspec` command's subparsers."""
    check = commands.add_parser(
        "check",
        help="list every refusal of a program, its backward's included, with its line and rule",
    )
    _program_arguments(check)
    check.set_defaults(run=_guarded(_check))
    explain = commands.add_parser(
        "explain",
        help="print a program's plan: graphs, free points, saved set, epilogue, hooks, rules",
    )
    _program_arguments(explain)
    explain.add_argument(
        "--hooks-filter",
        default="donated",
        choices=("donated", "no_static", "all"),
        help="which saved values the hooks apply to (default: donated)",
    )
    explain.add_argument(
        "--placement",
        default="last-use",
        choices=("last-use", "forward-end"),
        help="where packs go: the spec's last use, or PyTorch 2.13's forward end",
    )
    explain.set_defaults(run=_guarded(_explain))
    memory = commands.add_parser(
        "memory",
        help="live bytes at every step of one training step: eager, unboxed, boxed, hooks",
    )
    _program_arguments(memory)
    memory.add_argument(
        "--plot",
        metavar="OUT.png|svg",
        help="plot the timelines to this file (with --sizes: the peaks against the size)",
    )
    memory.add_argument(
        "--memory-viz",
        metavar="OUT.pickle",
        help="write the boxed reference's ledgers as a torch.cuda.memory._dump_snapshot pickle",
    )
    memory.add_argument(
        "--sizes",
        metavar="DIM=A..B",
        help="the boxed reference's forward and backward peaks at each size of DIM, a keyword "
        "parameter of the argument builder (`def FUNCTION_args(DIM=16)`): A..B (every size), "
        "A..B:STEP or N,M,...; prints a table and each peak as an exact formula of DIM where one "
        "affine (or quadratic) in DIM holds at every size, or else at the largest sizes",
    )
    memory.set_defaults(run=_guarded(_memory))


def _program_arguments(parser) -> None:
    parser.add_argument(
        "program",
        metavar="FILE.py:FUNCTION",
        help="the function (or module object) to run; MODULE:FUNCTION for an importable module",
    )
    parser.add_argument(
        "--args",
        metavar="NAME",
        help="the function beside it building the arguments (default: FUNCTION_args)",
    )
    parser.add_argument(
        "--hooks",
        metavar="PACK,UNPACK",
        help="saved-tensor hooks in FILE.py, active around the call",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")


def _guarded(command):
    """`command(options)`, with the errors a user can fix reported in one line."""

    @functools.wraps(command)
    def run(options) -> int:
        # Tracing a failing program makes the fake tensor logger print the error's traceback;
        # the error itself is reported below, in one line.
        logging.getLogger("torch._subclasses.fake_tensor").disabled = True
        program = None
        try:
            program = load(options.program, options.args, options.hooks)
            return command(options, program)
        except UsageError as error:
            return _fail(str(error), 2)
        except (UnsupportedError, SpecViolation) as error:
            return _fail(" ".join(str(error).split()), 1)
        except Exception as error:
            if (
                program is None
                or isinstance(error, InternalError)
                or "(at " not in describe(error, program.path)
            ):
                raise  # not the program's: a bug of aotspec, with its traceback
            return _fail(
                f"{program.spec} raised {describe(error, program.path)}. Fix the program or "
                f"its arguments so that it runs in eager PyTorch",
                1,
            )

    return run


def _fail(message: str, code: int) -> int:
    print(f"aotspec: error: {message}", file=sys.stderr)
    return code


def _check(options, program: ProgramFile) -> int:
    """r[ops.unsupported-all]: every refusal of the program, traced on fake tensors (nothing
    runs); exit code 1 when there is one."""
    import json

    from aotspec.api import check

    refusals = check(program.fn, *program.arguments())
    if options.format == "json":
        fields = [{"problem": r.problem, "rule": r.rule, "fix": r.fix} for r in refusals]
        print(json.dumps(fields, indent=2))
    elif not refusals:
        print(f"{program.spec}: nothing refused; it compiles on both backends")
    else:
        print(f"{program.spec}: {len(refusals)} refused")
        for number, refusal in enumerate(refusals, 1):
            print(f"{number}. {refusal.problem} [rule {refusal.rule}]")
            print(f"   fix: {refusal.fix}")
    return 1 if refusals else 0


def _explain(options, program: ProgramFile) -> int:
    from aotspec.explain import explain

    explanation = explain(
        program.fn,
        *program.arguments(),
        hooks=program.hooks,
        hooks_filter=options.hooks_filter,
        placement=options.placement,
        before_backward=program.before_backward,
        show=False,
        name=program.spec,
    )
    if options.format == "json":
        print(explanation.to_json())
    else:
        explanation.print()
    return 0


def _memory(options, program: ProgramFile) -> int:
    import json

    import attrs
    from rich.console import Console

    from aotspec.memory_timeline import TrainingStep, plot, table, timelines

    if options.sizes is not None:
        return _memory_sizes(options, program)
    step = TrainingStep(program.fn, program.arguments, program.hooks, program.before_backward)
    rows = timelines(step)
    title = f"{program.spec}: one training step"
    if options.format == "json":
        print(json.dumps([attrs.asdict(row) for row in rows], indent=2))
    else:
        console = Console()
        if not console.is_terminal:
            console = Console(width=140)  # a table to keep whole in a file or a pipe
        console.print(table(rows, title + ", live bytes"))
    if options.plot:
        plot(rows, options.plot, title)
    if options.memory_viz:
        _dump_snapshot(step, options.memory_viz)
    return 0


def _memory_sizes(options, program: ProgramFile) -> int:
    """`aotspec memory --sizes DIM=...`: both peaks at each size, their formulas, the plot."""
    import json

    import attrs
    from rich.console import Console

    from aotspec import memory_sizes

    if options.memory_viz:
        raise UsageError(
            "--memory-viz writes one call's ledgers, and --sizes measures several",
            "Run --memory-viz without --sizes, with the size set in the argument builder",
        )
    sizes = memory_sizes.parse_sizes(options.sizes)
    measured, failed = memory_sizes.measure(program, sizes)
    found = memory_sizes.formulas(measured, sizes) if measured else {}
    if options.format == "json":
        fields = {
            "dimension": sizes.dimension,
            "sizes": sizes.text,
            "peaks": [attrs.asdict(peaks) for peaks in measured],
            "failures": [attrs.asdict(failure) for failure in failed],
            "formulas": {which: fit.text for which, fit in found.items()},
        }
        print(json.dumps(fields, indent=2))
    elif measured:
        console = Console()
        if not console.is_terminal:
            console = Console(width=140)  # a table to keep whole in a file or a pipe
        title = f"{program.spec}: peaks of one training step (reference ledger, bytes)"
        console.print(memory_sizes.table(measured, sizes, title))
        for which, fit in found.items():
            console.print(f"{which} peak = {fit.text}", soft_wrap=True, highlight=False)
    if options.plot and measured:
        title = f"{program.spec}: peaks of one training step over {sizes.dimension}={sizes.text}"
        memory_sizes.plot(measured, failed, found, sizes, options.plot, title)
    for failure in failed:
        _fail(f"at {sizes.dimension}={failure.size}: {failure.reason}", 1)
    return 1 if failed else 0


def _dump_snapshot(step, path: str) -> None:
    """The boxed reference's ledgers of one more training step, as a memory_viz snapshot."""
    import torch

    from aotspec.api import compile
    from aotspec.memory_viz import dump

    compiled = compile(step.fn, backend="reference")
    args = step.build_args()
    outputs = compiled(*args)
    roots = step.backward(args, outputs)
    if roots:
        torch.autograd.backward(roots)
    (plan,) = compiled.plans.values()
    run = compiled.last_run
    graphs = [("forward", plan.forward.graph, run.ledger)]
    if run.backward_ledger is not None:
        graphs.append(("backward", run.backward.graph, run.backward_ledger))
    dump(graphs, path)
