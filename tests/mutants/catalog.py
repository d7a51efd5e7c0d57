"""The planted bugs: each a small textual patch of one file, and why it is a bug someone could
write.

A `Mutant` replaces `original`, which must occur exactly once in `file`, by `replacement`, and
names the tests that should kill it (`tests`: pytest arguments, run in order with `-x`, so the
likeliest killers come first). A mutant no test kills says why in `equivalent`: the bug changes
nothing any observable can see, or only what the project deliberately leaves unobserved.

Areas: the fast backend's code generation, runtime, fusion and Triton kernels (`fast/`), and
what it shares with the reference: the runtime skeleton (`reference/runtime.py`), the epilogue
(`reference/epilogue.py`), the guard key (`aotspec/api.py`, `input_facts` in
`reference/program_records.py`) and hook inlining (`reference/hooks.py`).
"""

from __future__ import annotations

from pathlib import Path

from attrs import frozen

ROOT = Path(__file__).resolve().parents[2]

#: Where each top-level directory's modules live in the package (pyproject's package-dir).
PACKAGES = {"fast": "aotspec.fast", "reference": "aotspec.reference", "aotspec": "aotspec"}


@frozen
class Mutant:
    name: str
    file: str
    original: str
    replacement: str
    why: str
    tests: tuple[str, ...]
    #: Why no test can kill it, for a survivor that is equivalent.
    equivalent: str | None = None

    @property
    def module(self) -> str:
        """The dotted name the tests import `file` by."""
        directory, *rest = Path(self.file).with_suffix("").parts
        return ".".join([PACKAGES[directory], *rest])

    def apply(self, source: str) -> str:
        """`source` with the bug planted; raises if `original` is not there exactly once."""
        count = source.count(self.original)
        if count != 1:
            raise ValueError(
                f"mutant {self.name}: its original snippet occurs {count} times in {self.file} "
                "(the file changed: update the snippet in tests/mutants/catalog.py)"
            )
        return source.replace(self.original, self.replacement)

    def mutated_source(self) -> str:
        return self.apply((ROOT / self.file).read_text())


# ---------------------------------------------------------------- which tests run

FAST = "tests/test_differential_fast.py"
FUSION = "tests/test_fusion_differential.py"
TRITON = "tests/test_triton.py"
CODEGEN = "tests/test_codegen.py"
COMPILED = "tests/test_differential_compiled.py"
HOOKS = "tests/test_differential_hooks.py"
HOOK_UNITS = "tests/test_hooks.py"
COMPILE = "tests/test_compile.py"
GUARDS = "tests/test_guards.py"
CONFORMANCE = "tests/test_conformance.py"
EPILOGUE = "tests/test_epilogue.py"
AOTDISPATCH = "tests/aotdispatch"
CALLING_PATTERNS = "tests/test_calling_patterns.py"
SIZES = "tests/test_differential_sizes.py"
FACTS_GUARD = "tests/test_facts_guard.py"

#: Code generation and the fast runtime: the fast differential tests first.
ON_FAST = (FAST, FUSION, CODEGEN, COMPILE)
ON_FUSION = (FUSION, TRITON)
#: Code both backends share: eager is the only independent oracle, then the hand-written cases
#: and PyTorch's own AOTAutograd tests.
ON_SHARED = (COMPILED, FAST, EPILOGUE, GUARDS, COMPILE, CONFORMANCE, AOTDISPATCH)
ON_GUARDS = (GUARDS, COMPILE, HOOK_UNITS, AOTDISPATCH)
#: The generated check of the latest key's tensor facts (`aotspec/guard.py`).
ON_FACTS_GUARD = (FACTS_GUARD, GUARDS, COMPILE)
ON_HOOKS = (HOOKS, HOOK_UNITS, FAST, CONFORMANCE, AOTDISPATCH)


MUTANTS: tuple[Mutant, ...] = (
    # ------------------------------------------------------------ code generation
    Mutant(
        "codegen.dead-values-live",
        "fast/codegen.py",
        "dead = [value.name for value in dies_after[node]]",
        "dead = [value.name for value in dies_after[node] if value is not node]",
        "A value nobody reads is never 'last used', so it is easy to forget that it dies where "
        "it is made: it then lives to the end of the call.",
        ON_FAST,
    ),
    Mutant(
        "codegen.arguments-not-cleared",
        "fast/codegen.py",
        '    lines.append("    arguments.clear()")\n',
        "",
        "The boxed list is the function's argument: forgetting to clear it keeps every input "
        "alive until the call returns (the unboxed calling convention).",
        ON_FAST,
    ),
    Mutant(
        "codegen.only-first-dead-deleted",
        "fast/codegen.py",
        "lines.append(f\"    del {', '.join(dead)}\")",
        'lines.append(f"    del {dead[0]}")',
        "A node that is the last use of several values: deleting one name per node looks right "
        "on chains, where each node ends one value.",
        ON_FAST,
    ),
    Mutant(
        "codegen.minus-infinity-sign",
        "fast/codegen.py",
        '("inf" if value > 0 else "-inf")',
        '"inf"',
        "Rendering a non-finite float constant: the sign of -inf is lost (the issue's example).",
        ON_FAST,
    ),
    Mutant(
        "codegen.nan-as-infinity",
        "fast/codegen.py",
        '("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))',
        '("inf" if value > 0 else "-inf")',
        "Non-finite constants handled as infinities only: nan renders as -inf.",
        ON_FAST,
    ),
    Mutant(
        "codegen.bindings-under-torch-function",
        "fast/codegen.py",
        "        if _has_torch_function(arguments):\n",
        "        if False:\n",
        "Torch's bindings of the ops called under a __torch_function__ mode: the mode sees "
        "torch functions where it saw aten overloads (and torch.device's would move factories).",
        (CODEGEN, FAST, FUSION, COMPILE),
    ),
    Mutant(
        "entries.overloads-only",
        "fast/entries.py",
        "seen = (func, _compared(args, self.stand_ins), _compared(kwargs, self.stand_ins))",
        "seen = (func,)",
        "A trial that compares only which overloads a binding reaches: torch._C._nn.mse_loss "
        "without a reduction reaches mse_loss too, with reduction 'none' where the overload's "
        "default is 'mean'.",
        (CODEGEN, FAST, FUSION, COMPILE),
    ),
    Mutant(
        "peephole.written-argument-passed",
        "fast/peephole.py",
        "(value, schema[name].alias_info is None) for",
        "(value, True) for",
        "A view laid out as its source passed to every op, an in-place one too: the write lands "
        "in the same elements, but the op returns the source where the graph returns the view.",
        (CODEGEN, "tests/test_fast_runtime.py"),
    ),
    Mutant(
        "peephole.returned-view-passed",
        "fast/peephole.py",
        "        return [(value, False) for value in values]\n",
        "        return [(value, True) for value in values]\n",
        "The graph's outputs passed as their sources too: a weight's gradient, t of t of mm's "
        "result, is no longer the view eager returns to torch.autograd.grad and tensor hooks.",
        ("tests/test_fast_runtime.py", CODEGEN),
    ),
    # ------------------------------------------------------------ the fast runtime
    Mutant(
        "fast-runtime.fusion-never-requested",
        "fast/runtime.py",
        "    if triton_requested(graph_module):\n",
        "    if False:\n",
        "The fused path silently disabled (a refactoring that drops the call): every value stays "
        "right, only Triton never runs.",
        ON_FUSION,
    ),
    Mutant(
        "fast-runtime.fused-without-triton",
        "fast/runtime.py",
        "fuse_pointwise(graph_module, use_triton=True)",
        "fuse_pointwise(graph_module)",
        "The pass's default is `use_triton=False`: groups are fused but run as torch ops.",
        ON_FUSION,
    ),
    Mutant(
        "fast-runtime.backward-below-autograd-under-forward-ad",
        "fast/runtime.py",
        "        if forward_ad._current_level >= 0:",
        "        if False:",
        "The backward graph run below autograd's kernels always, as they record nothing in it: "
        "they also carry an incoming gradient's forward-mode tangent, which is then dropped.",
        ("tests/test_fast_runtime.py", FAST),
    ),
    Mutant(
        "plain.saved-inputs-unchecked",
        "fast/plain.py",
        '        "    saved_inputs.check()  # r[autograd.saved-inputs.version]",\n',
        "",
        "The written-out backward of a plain plan skips the saved inputs' check (it looks like "
        "bookkeeping): a weight written between the call and the backward is read as it is now.",
        ("tests/test_fast_runtime.py", CONFORMANCE, FAST),
    ),
    Mutant(
        "plain.tangents-as-given",
        "fast/plain.py",
        '            f"    if grad.stride() != strides{j}:",\n',
        '            "    if False:",\n',
        "The written-out backward passes the incoming gradients as autograd gives them (expanded "
        "by sum's backward) rather than laid out as the backward graph was traced.",
        ("tests/test_fast_runtime.py", CONFORMANCE, FAST),
    ),
    # ------------------------------------------------------------ fusion
    Mutant(
        "fusion.cpu-falls-back-to-torch",
        "fast/fusion.py",
        'return device.type == "cuda" or interpreting()',
        'return device.type == "cuda"',
        "Only CUDA runs kernels: on CPU under TRITON_INTERPRET=1 the kernels silently fall "
        "back to torch ops, so CI tests no kernel.",
        ON_FUSION,
    ),
    Mutant(
        "fusion.shapes-not-compared",
        "fast/fusion.py",
        "g.open and g.shape == shape and g.device == device",
        "g.open and g.device == device",
        "A reader of another shape (broadcast up) joins the group, and the kernel runs over the "
        "wrong shape.",
        ON_FUSION,
    ),
    Mutant(
        "fusion.groups-never-close",
        "fast/fusion.py",
        "            if group not in joined:\n                group.open = False\n",
        "            pass\n",
        "A group stays open after an outside node read one of its values, so a later member "
        "moves the value past its reader.",
        ON_FUSION,
    ),
    Mutant(
        "fusion.bool-arithmetic-fused",
        "fast/fusion.py",
        "    if compute == torch.bool and rule.compute_in is ComputeIn.RESULT:\n"
        "        return None  # bool arithmetic (add is or, ...) has no Triton spelling here\n",
        "",
        "Arithmetic on bool tensors looks like any other integer dtype; in a kernel, `+` on int1 "
        "wraps where PyTorch's is a logical or.",
        ON_FUSION,
    ),
    Mutant(
        "fusion.comparison-in-left-dtype",
        "fast/fusion.py",
        "return torch.result_type(*operands) if len(operands) == 2 else operands[0].dtype",
        "return operands[0].dtype",
        "A comparison computed in its left operand's dtype: an int tensor against a float "
        "(tensor or scalar) truncates the float.",
        ON_FUSION,
    ),
    Mutant(
        "fusion.non-finite-scalars-inlined",
        "fast/fusion.py",
        "return isinstance(argument, float) and math.isfinite(argument)",
        "return isinstance(argument, float)",
        "Every float scalar inlined into the kernel's source: inf and nan are no Triton literals.",
        ON_FUSION,
    ),
    Mutant(
        "fusion.outputs-only-when-all-users-outside",
        "fast/fusion.py",
        "any(user not in members for user in node.users)",
        "all(user not in members for user in node.users)",
        "A value read both inside and outside its group is not stored by the kernel.",
        ON_FUSION,
    ),
    Mutant(
        "fusion.any-layout-fused",
        "fast/fusion.py",
        "        or tuple(value.stride()) != contiguous_strides(value.shape)\n",
        "",
        "The kernel stores contiguous results; fusing an op whose eager result is laid out "
        "otherwise changes the output's strides.",
        ON_FUSION,
    ),
    # ------------------------------------------------------------ Triton kernels
    Mutant(
        "triton.relu-turns-nan-to-zero",
        "fast/triton_kernels.py",
        'return f"tl.where({x} < 0, 0, {x})"',
        'return f"tl.where({x} > 0, {x}, 0)"',
        "relu as `x > 0 ? x : 0`: NaN becomes 0 where PyTorch's relu keeps it.",
        ON_FUSION,
    ),
    Mutant(
        "triton.clamp-bounds-swapped",
        "fast/triton_kernels.py",
        "    if low is not None:\n        x = _maximum(x, low)\n"
        "    return x if high is None else _minimum(x, high)\n",
        "    if high is not None:\n        x = _minimum(x, high)\n"
        "    return x if low is None else _maximum(x, low)\n",
        "clamp's bounds applied upper first: the same unless min > max, where PyTorch gives max.",
        ON_FUSION,
    ),
    Mutant(
        "triton.maximum-drops-nan",
        "fast/triton_kernels.py",
        'return f"tl.maximum({x}, {y}, propagate_nan=tl.PropagateNan.ALL)"',
        'return f"tl.maximum({x}, {y})"',
        "Triton's maximum ignores NaN by default; torch.maximum propagates it.",
        ON_FUSION,
    ),
    Mutant(
        "triton.sub-ignores-alpha",
        "fast/triton_kernels.py",
        'return f"{x} - {y}" if alpha == 1 else _plus_scaled(x, -alpha, y, dtype)',
        'return f"{x} - {y}"',
        "`sub`'s alpha (from `x.sub_(y, alpha=2)`) forgotten in the expression.",
        ON_FUSION,
    ),
    Mutant(
        "triton.alpha-rounded-twice",
        "fast/triton_kernels.py",
        '    if dtype.is_floating_point:\n        return f"tl.fma({float(alpha)!r}, {y}, {x})"\n',
        "",
        "`x + alpha * y` as written, rounding the product and then the sum, where eager's "
        "kernels round once (a fused multiply-add): the kernels' code until issue 16 found it.",
        ON_FUSION,
    ),
    Mutant(
        "triton.threshold-backward-strict",
        "fast/triton_kernels.py",
        'return f"tl.where({x} <= {threshold}, 0, {grad})"',
        'return f"tl.where({x} < {threshold}, 0, {grad})"',
        "relu's backward at the kink: PyTorch gives 0 where x equals the threshold.",
        ON_FUSION,
    ),
    Mutant(
        "triton.to-bool-truncates",
        "fast/triton_kernels.py",
        'return f"{_atom(expression)} != 0"  # nonzero is True',
        'return f"{_atom(expression)}.to(tl.int8).to(tl.int1)"',
        "A cast to bool through an integer: 0.5 truncates to 0, where PyTorch's bool is True "
        "for every nonzero value.",
        ON_FUSION,
    ),
    Mutant(
        "triton.float16-not-widened",
        "fast/triton_kernels.py",
        "REDUCED_FLOATS = frozenset({torch.float16, torch.bfloat16})",
        "REDUCED_FLOATS = frozenset({torch.bfloat16})",
        "float16 computed in float16 rather than float32 (`r[ops.opmath]`): a chain rounds "
        "differently.",
        ON_FUSION,
    ),
    Mutant(
        "triton.one-element-not-launched",
        "fast/triton_kernels.py",
        "    if program.numel > 0:\n",
        "    if program.numel > 1:\n",
        "An off-by-one guard against empty launches skips one-element tensors.",
        ON_FUSION,
    ),
    Mutant(
        "triton.broadcast-size-one-read-as-full",
        "fast/triton_kernels.py",
        "stretched = d < lead or tensor.shape[d - lead] != size",
        "stretched = d < lead",
        "Broadcasting only leading dims: a size-1 dim of an input read with its own stride.",
        ON_FUSION,
    ),
    Mutant(
        "triton.where-condition-cast",
        "fast/triton_kernels.py",
        "@pointwise(aten.where.self, uncast=frozenset({0}))",
        "@pointwise(aten.where.self)",
        "where's bool condition cast to the compute dtype like its other operands.",
        ON_FUSION,
        equivalent="The cast condition is 0 or 1, in the float or integer dtype the step computes "
        "in, and tl.where tests its condition for nonzero (Triton casts it to int1 by comparing "
        "with 0 on the GPU; numpy's where does the same in the interpreter): every element picks "
        "the same operand, so no observable can differ. Kept to show an equivalent mutant.",
    ),
    Mutant(
        "fast-runtime.outputs-on-saved-unchecked",
        "fast/runtime.py",
        "            if candidates:\n                pairs.append((k, candidates))\n",
        "",
        "Outputs taken never to lie on a saved value's storage (the check of each pair left out "
        "as costly): the caller's write into one between the call and the backward goes unseen.",
        ("tests/test_fast_runtime.py", CONFORMANCE, FAST),
    ),
    # ------------------------------------------------------------ the runtime skeleton
    Mutant(
        "runtime.non-leaf-inputs-not-detached",
        "reference/runtime.py",
        "        detached[i] = tensors[i].detach()\n",
        "        detached[i] = tensors[i]\n",
        "Detaching looks redundant when no gradient flows to the input: autograd then walks the "
        "graph behind it (PyTorch #134193).",
        ON_SHARED,
    ),
    Mutant(
        "runtime.stolen-grad-inputs-not-seen-by-autograd",
        "reference/runtime.py",
        "            inputs[i] = tensors[i] = _stand_in(inputs[i])\n",
        "            inputs[i] = tensors[i] = None\n",
        "Every stolen input handed to the forward outside apply's arguments, with no stand-in "
        "for those that require grad: autograd no longer sees them as inputs.",
        ON_SHARED,
    ),
    Mutant(
        "runtime.stolen-grad-inputs-through-apply",
        "reference/runtime.py",
        "            inputs[i] = tensors[i] = _stand_in(inputs[i])\n",
        "            inputs[i] = tensors[i] = (\n"
        "                inputs[i] if inputs[i].requires_grad else None\n"
        "            )\n",
        "A stolen input that requires grad passed to apply itself, whose arguments hold it until "
        "the forward returns: it outlives its last use.",
        (CALLING_PATTERNS, *ON_SHARED),
    ),
    Mutant(
        "runtime.unreached-outputs-get-zeros",
        "reference/runtime.py",
        "ctx.set_materialize_grads(False)",
        "ctx.set_materialize_grads(True)",
        "autograd.Function's default: outputs the backward does not reach get zero gradients, "
        "so their inputs get a zero .grad instead of none.",
        ON_SHARED,
    ),
    Mutant(
        "runtime.never-retain",
        "reference/runtime.py",
        "retain = torch._C._autograd._get_current_graph_task_keep_graph()",
        "retain = False",
        "retain_graph ignored: the first backward takes the saved values away.",
        ON_SHARED,
    ),
    Mutant(
        "runtime.call-under-caller-grad-mode",
        "reference/runtime.py",
        "torch._C._set_grad_enabled(True)  # (",
        "torch._C._set_grad_enabled(grad_enabled)  # (",
        "The node applied under the caller's grad mode: under torch.no_grad() no output records "
        "what the program computed under enable_grad().",
        ON_SHARED,
    ),
    Mutant(
        "runtime.tangents-as-given",
        "reference/runtime.py",
        "        elif grad.stride() != strides:\n",
        "        elif False:\n",
        "Tangents passed as autograd gives them (expanded by sum's backward) rather than laid "
        "out as traced.",
        ON_SHARED,
    ),
    Mutant(
        "runtime.saved-input-bytes-not-the-keys",
        "reference/plan_records.py",
        "            (i, nbytes if type(nbytes := inputs[i].storage_nbytes) is int else None)\n",
        "            (i, 0)\n",
        "The bytes a saved input's storage held at the call taken as none: a backward after the "
        "storage was resized down reads past its end unchecked.",
        (CONFORMANCE,),
    ),
    Mutant(
        "runtime.saved-input-version-unchecked",
        "reference/runtime.py",
        "-> None:\n    if t._version != version:\n",
        "-> None:\n    if t._version < version:\n",
        "A version check that only looks backwards: a saved input written after the call is "
        "read as it is now.",
        ON_SHARED,
    ),
    Mutant(
        "runtime.saved-outputs-unchecked",
        "reference/runtime.py",
        "        _check_saved_outputs(self.outputs_saved)\n",
        "",
        "No version check on saved outputs: a caller's write into one between the forward and "
        "the backward changes the gradient silently.",
        ON_SHARED,
    ),
    Mutant(
        "runtime.saved-outputs-held-with-history",
        "reference/runtime.py",
        "            saved = [t.detach() if id(t) in returned else t for t in saved]\n",
        "            saved = list(saved)\n",
        "An output saved as the object itself: it holds its own grad_fn in a cycle, and a forward "
        "dropped without a backward keeps its saved values until the garbage collector runs.",
        ON_SHARED,
    ),
    Mutant(
        "runtime.backward-records-history",
        "reference/runtime.py",
        "    with torch.no_grad() if create_graph else NOTHING_TO_DO, autocast_off():\n",
        "    with autocast_off():\n",
        "The backward graph recorded under create_graph=True: a second derivative through it "
        "misses the saved values' terms.",
        ON_SHARED,
        equivalent="every gradient that recording would give a history (one read from a saved "
        "value, or from incoming gradients with a history) is then replaced by the node that "
        "refuses a double backward, and the others record nothing, their operands having none: "
        "what is left is the time and memory of a graph nobody reads",
    ),
    # ------------------------------------------------------------ the epilogue
    Mutant(
        "epilogue.window-only-written",
        "reference/epilogue.py",
        "    if not _covers(layout, storage):\n        _write_bytes(storage, flat.detach())\n",
        "",
        "A write with history into a view argument: only the argument's window is copied, the "
        "rest of its storage keeps stale bytes.",
        ON_SHARED,
    ),
    Mutant(
        "epilogue.versions-per-argument",
        "reference/epilogue.py",
        "        if t is not None and t._version == version:\n",
        "        if t is not None:\n",
        "One object passed twice, or a view passed with its base, gets their version counter "
        "advanced twice.",
        ON_SHARED,
    ),
    Mutant(
        "capture.quiet-writes-advance-versions",
        "reference/aten.py",
        "                mark_quiet_write()  # r[ops.aten-mutations.versions]\n",
        "                mark_quiet_write()  # r[ops.aten-mutations.versions]\n"
        "                torch.autograd.graph.increment_version(t)\n",
        "Batch norm's update of its running statistics advances their versions, which eager's "
        "kernel leaves alone: a backward that saved them fails its version check.",
        ("tests/test_write_versions.py",),
    ),
    Mutant(
        "capture.foreach-writes-keep-versions",
        "reference/aten.py",
        "                torch.autograd.graph.increment_version(t)\n",
        "                pass\n",
        "A _foreach_ op's writes leave the versions of the list's tensors, which eager's kernel "
        "advances: a backward that saved one misses the write.",
        ("tests/test_write_versions.py",),
    ),
    Mutant(
        "epilogue.views-under-caller-grad-mode",
        "reference/epilogue.py",
        "        if output.made_with_grad == grad_enabled:\n",
        "        if True:\n",
        "Output views built under the caller's grad mode, not the program's.",
        ON_SHARED,
    ),
    Mutant(
        "epilogue.no-grad-view-as-laid-out-is-the-value",
        "reference/epilogue.py",
        "    keeps_history = output.made_with_grad or not flat.requires_grad\n",
        "    keeps_history = True\n",
        "An output view taken under torch.no_grad() that reads its value as the value is laid "
        "out (t() of a 1-D tensor) is the graph's output itself, with the value's history.",
        ON_SHARED,
    ),
    Mutant(
        "epilogue.detached-view-keeps-grad",
        "reference/epilogue.py",
        "base = t.detach() if t.requires_grad else t",
        "base = t",
        "A view of a detached value taken from the flat, which requires grad.",
        ON_SHARED,
    ),
    # ------------------------------------------------------------ the guard key
    Mutant(
        "guard.grad-mode",
        "aotspec/api.py",
        "            grad_enabled,\n            autocast,\n",
        "            autocast,\n",
        "The grad mode left out of the key: a call under torch.no_grad() reuses a training plan.",
        ON_GUARDS,
    ),
    Mutant(
        "guard.autocast",
        "aotspec/api.py",
        "            autocast,\n            default_dtype,\n",
        "            default_dtype,\n",
        "The autocast state left out of the key: a plan captured under autocast keeps its casts "
        "in calls without it.",
        ON_GUARDS,
    ),
    Mutant(
        "guard.default-dtype",
        "aotspec/api.py",
        "            default_dtype,\n            None if hooks is None else hooks.key,\n",
        "            None if hooks is None else hooks.key,\n",
        "The default dtype left out of the key: torch.ones keeps the first call's dtype.",
        ON_GUARDS,
    ),
    Mutant(
        "guard.module-mode",
        "reference/lift.py",
        "tuple(map(_TRAINING, modules))",
        "()",
        "Training mode left out of the key: model.eval() reuses the training plan's dropout and "
        "batch norm.",
        ON_GUARDS,
    ),
    Mutant(
        "lift.empty-slot-dicts-unwatched",
        "reference/lift.py",
        "        if any(self._empty):\n",
        "        if False:\n",
        "Only the versions of the dicts that held something are compared: a buffer registered "
        "on a module that had none changes no version, and the walk misses it.",
        (
            f"{CALLING_PATTERNS}::"
            "test_a_buffer_registered_on_a_module_that_had_none_is_read_at_the_next_call",
            *ON_GUARDS,
        ),
    ),
    Mutant(
        "guard.hooks",
        "aotspec/api.py",
        "            None if hooks is None else hooks.key,\n            static,\n",
        "            static,\n",
        "The active saved-tensor hooks left out of the key.",
        ON_GUARDS,
    ),
    Mutant(
        "guard.constants-by-type",
        "aotspec/api.py",
        "        return (type(leaf), leaf)\n",
        "        return (type(leaf),)\n",
        "Non-tensor arguments keyed by type only: a new scalar reuses the plan that baked in "
        "the old one.",
        ON_GUARDS,
    ),
    Mutant(
        "guard.requires-grad",
        "reference/program_records.py",
        "                t.requires_grad,\n                t.is_leaf,\n",
        "                t.is_leaf,\n",
        "requires_grad left out of the input facts.",
        ON_GUARDS,
    ),
    Mutant(
        "guard.storage-sharing",
        "reference/program_records.py",
        "                on_storage(storage._cdata, i),\n",
        "",
        "Aliasing between arguments left out of the input facts.",
        ON_GUARDS,
    ),
    Mutant(
        "guard.storage-bytes",
        "reference/program_records.py",
        "                storage.nbytes(),\n",
        "",
        "Storage sizes left out of the input facts: a zero-byte parameter reuses the plan of a "
        "gathered one.",
        ON_GUARDS,
    ),
    Mutant(
        "guard.sizes",
        "reference/program_records.py",
        "                t.shape,\n                t.stride(),\n"
        "                t.storage_offset(),\n"
        "                on_storage(storage._cdata, i),\n"
        "                storage.nbytes(),\n",
        "                None,\n                None,\n"
        "                t.storage_offset(),\n"
        "                on_storage(storage._cdata, i),\n"
        "                None,\n",
        "Sizes left out of the input facts (shape, strides, storage bytes): a plan made at one "
        "size serves every size.",
        (SIZES, GUARDS),
    ),
    Mutant(
        "guard.strides",
        "reference/program_records.py",
        "                t.stride(),\n                t.storage_offset(),\n",
        "                t.storage_offset(),\n",
        "Strides left out of the input facts: a transposed argument reuses a contiguous plan.",
        ON_GUARDS,
    ),
    Mutant(
        "guard.latest-unchecked",
        "aotspec/api.py",
        "return self.facts_hold(tensors)",
        "return True",
        "The latest call's plan reused without checking the tensors' facts.",
        ON_FACTS_GUARD,
    ),
    Mutant(
        "guard.generated-metadata",
        "aotspec/guard.py",
        'tests = [f"metadata_holds({objects})"]',
        "tests = []",
        "The generated check of the latest key leaves out the tensors' dtypes, sizes, strides "
        "and requires_grad (Dynamo's tensor check).",
        ON_FACTS_GUARD,
    ),
    Mutant(
        "guard.generated-leaf",
        "aotspec/guard.py",
        'f"t{i}.storage_offset() == offset{i} and t{i}.is_leaf is leaf{i} "',
        'f"t{i}.storage_offset() == offset{i} "',
        "The generated check of the latest key leaves out whether each tensor is a leaf.",
        ON_FACTS_GUARD,
    ),
    Mutant(
        "guard.generated-storage-sharing",
        "aotspec/guard.py",
        '    tests += _same_partition("s{}._cdata", storages)\n',
        "",
        "The generated check of the latest key leaves out which inputs share a storage.",
        ON_FACTS_GUARD,
    ),
    Mutant(
        "guard.generated-base-layout",
        "aotspec/guard.py",
        'f"(b{i} := base_of(t{i})).shape == base_shape{i} and b{i}.stride() == base_stride{i} "',
        'f"(b{i} := base_of(t{i})).shape == base_shape{i} "',
        "The generated check of the latest key leaves out the strides of the inputs' bases.",
        ON_FACTS_GUARD,
    ),
    # ------------------------------------------------------------ hook inlining
    Mutant(
        "hooks.pack-after-first-use",
        "reference/hooks.py",
        "last_use[used] = node",
        "last_use.setdefault(used, node)",
        "Pack placed after the saved value's first use rather than its last.",
        ON_HOOKS,
    ),
    Mutant(
        "hooks.donated-packs-outputs",
        "reference/hooks.py",
        "if node not in placeholders and node not in returned]",
        "if node not in placeholders]",
        "`donated` selects outputs too, though the caller holds them.",
        ON_HOOKS,
    ),
    Mutant(
        "hooks.unpack-at-backward-start",
        "reference/hooks.py",
        "    if placement is Placement.FORWARD_END:\n        for node in list(pending):\n",
        "    if True:\n        for node in list(pending):\n",
        "Every unpack at the start of the backward rather than before its first use.",
        ON_HOOKS,
    ),
    Mutant(
        "hooks.traced-once-per-shape",
        "reference/hooks.py",
        "key = (tuple(value.shape), value.stride(), value.storage_offset(), value.dtype)",
        "key = (tuple(value.shape), value.dtype)",
        "Hooks traced once per shape: a saved value of another layout reuses a trace whose "
        "ops assume the first layout.",
        ON_HOOKS,
    ),
    Mutant(
        "hooks.closures-ignored",
        "reference/hooks.py",
        "        cells = tuple(_cell_behaviour(cell, seen) for cell in value.__closure__ or ())\n",
        "        cells = ()\n",
        "Hooks compared by code only: hooks made anew with another closure value reuse a plan.",
        ON_HOOKS + (GUARDS,),
    ),
    Mutant(
        "hooks.retyped-results-unchecked",
        "reference/hooks.py",
        "        if after != before[node]:\n",
        "        if False:\n",
        "A backward typed again from unpack's dtype lets a derivative's intermediate change dtype "
        "(tanh's 1 - out * out rounds in bfloat16, where eager's kernel computes in float32).",
        (HOOK_UNITS, HOOKS, CONFORMANCE, AOTDISPATCH),
    ),
)
