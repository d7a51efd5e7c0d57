"""`aotspec explain`: the plan's steps, free points, saved set, epilogue, outputs and hooks, each
with the rule that put it there; the command line's JSON and its one-line errors.

Expected facts come from the spec's rules and eager PyTorch's arithmetic by hand (byte counts
carry their sums), never from the explainer's own output."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import attrs
import pytest
import torch

import aotspec
from aotspec.cli import main
from aotspec.rules import all_rules

EXAMPLES = Path(__file__).parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

import fsdp  # noqa: E402  (examples/, put on the path above)


def rules_cited(explanation) -> set[str]:
    """Every rule ID the explanation names."""
    found = set()

    def walk(value):
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "rule":
                    found.add(item)
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    walk(attrs.asdict(explanation))
    return found


def two_layers(x, w1, w2):
    h = torch.relu(x @ w1)
    return h @ w2


def two_layers_args():
    torch.manual_seed(0)
    return (
        torch.randn(4, 8),
        torch.randn(8, 8).requires_grad_(),
        torch.randn(8, 8).requires_grad_(),
    )


def pack_bf16(t):
    return t.to(torch.bfloat16)


def unpack_f32(t):
    return t.to(torch.float32)


def step(explanation, graph: str, node: str):
    (found,) = [s for s in getattr(explanation, graph).steps if s.node == node]
    return found


def test_readme_fsdp_example_shows_the_epilogue_and_every_free_point():
    explanation = aotspec.explain(fsdp.step, *fsdp.step_args(), show=False)
    # w is written and resized up and back to 0 bytes: no resize and no write-back remain, but
    # its version advances as after eager's in-place copy_ (r[functionalize.epilogue.version])
    (epilogue,) = explanation.epilogue
    assert ("version", "w", "functionalize.epilogue.version") == (
        epilogue.action,
        epilogue.input,
        epilogue.rule,
    )
    assert "ends at 0 bytes" in epilogue.detail
    # copy_ becomes a functional copy of src (r[functionalize.writes]); the copy dies right after
    # its last use, the multiplication (r[boxed.args-cleared]): 16 bytes, float32[4]
    frees = [
        (s.node, f.value, f.nbytes, f.rule) for s in explanation.forward.steps for f in s.frees
    ]
    assert [("mul", "clone", 16, "boxed.args-cleared")] == frees
    assert "functionalize.writes" == step(explanation, "forward", "clone").rule
    assert "capture.aten-graph" == step(explanation, "forward", "mul").rule
    assert "fsdp.py:12" in step(explanation, "forward", "mul").source
    # peak: the inputs 0 + 16 + 16, the copy 16 and the product 16 before the copy goes
    assert 64 == explanation.forward.peak_bytes
    assert explanation.backward is None
    assert rules_cited(explanation) <= set(all_rules())


def test_hooked_mlp_shows_hook_placement_saved_set_and_free_points():
    explanation = aotspec.explain(
        two_layers, *two_layers_args(), hooks=(pack_bf16, unpack_f32), show=False
    )
    # relu's output is saved for mm's derivative; its pack goes right after its last forward use,
    # the second mm (r[hooks.place.pack-after-last-use]), and frees it there: 4 x 8 float32
    (pack,) = [h for h in explanation.hooks if h.hook == "pack"]
    assert ("relu", "forward", "after mm_1") == (pack.value, pack.graph, pack.where)
    pack_step = step(explanation, "forward", pack.nodes[-1])
    assert [("relu", 128, "hooks.place.pack-after-last-use")] == [
        (f.value, f.nbytes, f.rule) for f in pack_step.frees
    ]
    # the unpack goes right before the first backward op reading relu, and frees the packed
    # bfloat16 copy there: 4 x 8 x 2 bytes (r[hooks.place.unpack-before-first-use])
    (unpack,) = [h for h in explanation.hooks if h.hook == "unpack"]
    assert ("relu", "backward") == (unpack.value, unpack.graph)
    nodes = [s.node for s in explanation.backward.steps]
    first_reader = unpack.where.removeprefix("before ")
    assert nodes.index(unpack.nodes[-1]) + 1 == nodes.index(first_reader)
    unpack_step = step(explanation, "backward", unpack.nodes[-1])
    assert [(64, "hooks.place.unpack-before-first-use")] == [
        (f.nbytes, f.rule) for f in unpack_step.frees
    ]
    # the saved set: x and w2 themselves (mm's derivative rules read them) and relu's pack
    whats = {saved.rule for saved in explanation.saved}
    assert {"autograd.saved-inputs", "hooks.place.pack-after-last-use"} == whats
    assert 3 == len(explanation.saved)
    # every step of the backward comes from a rule, and each value it makes dies in it
    derivative_rules = [
        s for s in explanation.backward.steps if s.rule == "autograd.derivative-rules"
    ]
    assert derivative_rules and all(
        s.source and "test_explain.py" in s.source for s in derivative_rules
    )
    assert rules_cited(explanation) <= set(all_rules())


def mutate(w, b, x):
    torch.ops.inductor.resize_storage_bytes_(w, 16)  # gathered, and kept
    w.copy_(x)
    b.add_(1)
    return b.view(2, 2), x


def mutate_args():
    w = torch.empty(4)
    w.untyped_storage().resize_(0)
    return w, torch.zeros(4), torch.randn(4)


def rebind(a, src):
    with torch.no_grad():
        a.set_(src)
    return a * 2


def test_epilogue_resize_write_back_and_rebinding_and_outputs_aliasing_inputs():
    explanation = aotspec.explain(mutate, *mutate_args(), show=False)
    actions = [(e.action, e.input, e.rule) for e in explanation.epilogue]
    # r[functionalize.epilogue.resize] first, then the writes, then the versions
    assert ("resize", "w", "functionalize.epilogue.resize") == actions[0]
    assert ("write-back", "w", "functionalize.epilogue.data") in actions
    assert ("write-back", "b", "functionalize.epilogue.data") in actions
    assert "0 -> 16 bytes" in explanation.epilogue[0].detail
    # out0 views b's storage (r[aliasing.view.of-input]); out1 is x itself
    out0, out1 = explanation.outputs
    assert ("b", "aliasing.view.of-input") == (out0.aliases_input, out0.rule)
    assert ("x", "functionalize.outputs") == (out1.aliases_input, out1.rule)
    rebound = aotspec.explain(rebind, torch.zeros(3), torch.ones(3), show=False)
    assert [("set_", "a", "functionalize.epilogue.set")] == [
        (e.action, e.input, e.rule) for e in rebound.epilogue
    ]


def test_lifted_tensors_are_named_and_batch_norm_statistics_keep_their_versions():
    """r[capture.lift]: the tensors a closure reaches come first, named as its code reads them;
    r[ops.aten-mutations.versions]: batch norm's update is written back without a version, the
    program's own in-place op on running_var advances it, and neither write carries history."""
    norm = torch.nn.BatchNorm1d(3)
    scale = torch.ones(3, requires_grad=True)

    def forward(x):
        norm.running_var.add_(0.0)
        return (scale * norm.running_mean).sum() + norm(x).sum()

    explanation = aotspec.explain(forward, torch.randn(4, 3), show=False)
    lifted = ["BatchNorm1d.weight", "BatchNorm1d.bias", "BatchNorm1d.running_mean"]
    assert lifted == [explanation.inputs[k].name for k in range(3)]
    assert ["scale", "x"] == [i.name for i in explanation.inputs[-2:]]
    epilogue = {(e.action, e.input): e.detail for e in explanation.epilogue}
    writes = [i for action, i in epilogue if action == "write-back"]
    assert ["running_mean", "running_var", "num_batches_tracked"] == [
        name.removeprefix("BatchNorm1d.") for name in writes
    ]
    assert not any("autograd records" in epilogue[("write-back", i)] for i in writes)
    versions = [i for action, i in epilogue if action == "version"]
    assert ["BatchNorm1d.running_var", "BatchNorm1d.num_batches_tracked"] == versions


PROGRAM = f"{__file__}:two_layers"


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_has_the_plan_for_tools(capsys):
    code, out, _ = run_cli(
        capsys, "explain", PROGRAM, "--hooks", "pack_bf16,unpack_f32", "--format", "json"
    )
    assert 0 == code
    plan = json.loads(out)
    assert {
        "program",
        "inputs",
        "forward",
        "saved",
        "epilogue",
        "outputs",
        "hooks",
        "backward",
    } == set(plan)
    assert {"node", "code", "rule", "why", "source", "frees", "live_bytes"} == set(
        plan["forward"]["steps"][0]
    )
    assert ["x", "w1", "w2"] == [item["name"] for item in plan["inputs"]]
    assert {"pack", "unpack"} == {hook["hook"] for hook in plan["hooks"]}


def test_text_listing_names_a_rule_on_every_step(capsys):
    code, out, err = run_cli(capsys, "explain", PROGRAM)
    assert (0, "") == (code, err)
    assert "def forward(" in out and "def backward(" in out
    assert "[autograd.saved-freed-in-backward]" in out


BAD = Path(__file__).parent / "programs_with_errors.py"


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (["explain", "nothing"], 2, "expected FILE.py:FUNCTION or MODULE:FUNCTION"),
        (["check", "no_such_package.steps:f"], 2, "no module no_such_package.steps"),
        (["explain", "missing.py:f"], 2, "no file missing.py"),
        (["explain", f"{BAD}:nope"], 2, "defines no function nope"),
        (["explain", f"{BAD}:no_builder"], 2, "Define `def no_builder_args()"),
        (["explain", f"{BAD}:shapes"], 1, "RuntimeError"),
        (["explain", f"{BAD}:unsupported"], 1, "[rule memory.layout]"),
        (["memory", f"{BAD}:unsupported"], 1, "[rule memory.layout]"),
        (["explain", f"{BAD}:shapes", "--args", "raising"], 2, "raising() in"),
        (["explain", f"{BAD}:shapes", "--hooks", "one"], 2, "--hooks expects PACK,UNPACK"),
        (["explain", f"{Path(__file__).parent / 'conftest.py'}:x"], 2, "defines no function x"),
    ],
)
def test_errors_are_one_line_with_the_fix(capsys, argv, code, message):
    got, out, err = run_cli(capsys, *argv)
    assert code == got
    assert "" == out
    assert 1 == len(err.strip().splitlines()), err
    assert err.startswith("aotspec: error: ") and message in err
    assert "Traceback" not in err


def test_an_import_error_of_the_program_file_is_one_line(capsys, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\n1 / 0\n")
    code, _, err = run_cli(capsys, "explain", f"{broken}:f")
    assert 2 == code
    assert "ZeroDivisionError: division by zero (at broken.py:2)" in err


def test_check_lists_every_refused_op_with_its_line_and_rule(capsys):
    """r[ops.unsupported-all] on the command line: both ops, not only the first, each with the
    line of the program that calls it; nothing runs."""
    code, out, err = run_cli(capsys, "check", f"{BAD}:two_refused")
    assert (1, "") == (code, err)
    source = BAD.read_text().splitlines()
    first = next(n for n, line in enumerate(source, 1) if "prims.sin" in line)
    lines = out.splitlines()
    assert lines[0].endswith("two_refused: 2 refused")
    assert "prims.sin.default" in lines[1] and f"programs_with_errors.py:{first} " in lines[1]
    assert lines[1].endswith("[rule ops.table]")
    assert "aten.mm.dtype" in lines[3] and f"programs_with_errors.py:{first + 1} " in lines[3]
    assert lines[3].endswith("[rule ops.aten-values]")


def test_check_lists_the_backwards_refusals_too(capsys):
    """r[ops.unsupported-all]: the check goes on past the refused forward op to the backward,
    and lists the refusal it meets there (complex svd's derivative, which checks values)."""
    code, out, _ = run_cli(capsys, "check", f"{BAD}:refused_forward_and_backward")
    assert 1 == code
    lines = out.splitlines()
    assert lines[0].endswith("refused_forward_and_backward: 2 refused")
    assert "prims.sin.default" in lines[1] and lines[1].endswith("[rule ops.table]")
    assert "_linalg_svd" in lines[3]
    assert lines[3].endswith("[rule ops.aten-derivatives.value-checks]")


def test_check_takes_an_importable_module_and_a_module_object(capsys, monkeypatch):
    """`MODULE:FUNCTION` names what `import MODULE` finds from here; the function may be an
    nn.Module, whose parameters and buffers are inputs, as `aotspec.check` takes them."""
    monkeypatch.chdir(BAD.parent)
    monkeypatch.syspath_prepend(str(BAD.parent))
    code, out, err = run_cli(capsys, "check", "programs_with_errors:batch_norm")
    assert (0, "") == (code, err)
    assert "nothing refused" in out
    code, out, _ = run_cli(capsys, "check", "programs_with_errors:two_refused", "--format", "json")
    assert 1 == code
    assert ["ops.table", "ops.aten-values"] == [item["rule"] for item in json.loads(out)]
