"""`aotspec memory FILE.py:FUNCTION --sizes DIM=A..B`: the boxed reference's peaks at each size
of a named size of the argument builder, and each peak as an exact formula of that size.

The expected bytes are derived by hand from the ledger's rules (`r[memory.peak]`: the inputs,
then each value from the step that makes it to its last use, `r[boxed.args-cleared]`; the saved
values and the tangent laid out like its output in the backward, `r[autograd.tangent-layout]`,
`r[autograd.saved-freed-in-backward]`, saved inputs held by the caller, `r[autograd.saved-inputs]`)
and eager's sizes (a float32 element is 4 bytes)."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from aotspec.cli import main
from aotspec.memory_sizes import Formula, formula, interpolate, parse_sizes, polynomial_text
from aotspec.program_file import UsageError

IN, OUT, WIDTH = 8, 16, 4


def linear(x, w):
    return torch.relu(x @ w)


def linear_args(batch=4):
    return torch.randn(batch, IN), torch.randn(IN, OUT, requires_grad=True)


def linear_forward_peak(batch: int) -> int:
    # x and w, the caller's; mm; relu made while mm is still alive (mm dies after relu)
    return 4 * batch * IN + 4 * IN * OUT + 4 * batch * OUT + 4 * batch * OUT


def linear_backward_peak(batch: int) -> int:
    # x (saved input, held by the caller), the tangent, relu (saved), threshold_backward's result;
    # then x, threshold_backward's result and w's gradient made from them
    at_threshold_backward = 4 * batch * IN + 3 * 4 * batch * OUT
    at_weight_gradient = 4 * batch * IN + 4 * batch * OUT + 4 * IN * OUT
    return max(at_threshold_backward, at_weight_gradient)


def scores(q, k):
    """Attention scores of one head: quadratic in the sequence length."""
    return q @ k.t()


def scores_args(seq=8):
    return (
        torch.randn(seq, WIDTH, requires_grad=True),
        torch.randn(seq, WIDTH, requires_grad=True),
    )


def scores_forward_peak(seq: int) -> int:
    return 2 * 4 * seq * WIDTH + 4 * seq * seq  # q, k, the scores


def scores_backward_peak(seq: int) -> int:
    # q and k (saved inputs), the tangent, q's gradient, then k's made while the tangent lives
    return 2 * 4 * seq * WIDTH + 4 * seq * seq + 2 * 4 * seq * WIDTH


def rows_of_four(x):
    return x.view(-1, 4).sum(dim=1)


def rows_of_four_args(n=8):
    return (torch.randn(n, requires_grad=True),)


def at_most_eight_args(n=8):
    if n > 8:
        raise ValueError(f"no data for {n} rows")
    return rows_of_four_args(n)


def fixed(x):
    return x * 2


def fixed_args():
    return (torch.randn(4, requires_grad=True),)


def run_json(capsys, *argv) -> tuple[int, dict]:
    code = main(["memory", *argv, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_linear_peaks_are_affine_in_the_batch(capsys):
    code, result = run_json(capsys, f"{__file__}:linear", "--sizes", "batch=2..10:2")
    assert code == 0
    assert [2, 4, 6, 8, 10] == [p["size"] for p in result["peaks"]]
    for peaks in result["peaks"]:
        assert linear_forward_peak(peaks["size"]) == peaks["forward_peak_bytes"]
        assert linear_backward_peak(peaks["size"]) == peaks["backward_peak_bytes"]
    # 4*8 + 4*16 + 4*16 = 160 bytes per row of the batch, w's 512 bytes once
    assert result["formulas"]["forward"] == (
        "160*batch + 512 bytes (affine in batch: fitted at 2, 4, checked at 6, 8, 10)"
    )
    # below batch 4 the weight's gradient makes the peak, from 4 on threshold_backward's step
    assert result["formulas"]["backward"] == (
        "224*batch bytes for batch from 4 to 10 (affine: fitted at 4, 6, checked at 8, 10); "
        "neither affine nor quadratic in batch over 2..10:2"
    )


def test_attention_scores_are_quadratic_in_the_sequence_length(capsys):
    code, result = run_json(capsys, f"{__file__}:scores", "--sizes", "seq=4,8,12,16,24")
    assert code == 0
    for peaks in result["peaks"]:
        assert scores_forward_peak(peaks["size"]) == peaks["forward_peak_bytes"]
        assert scores_backward_peak(peaks["size"]) == peaks["backward_peak_bytes"]
    assert result["formulas"]["forward"] == (
        "4*seq**2 + 32*seq bytes (quadratic in seq: fitted at 4, 8, 12, checked at 16, 24)"
    )
    assert result["formulas"]["backward"].startswith("4*seq**2 + 64*seq bytes (quadratic")


def test_three_sizes_cannot_check_a_quadratic(capsys):
    code, result = run_json(capsys, f"{__file__}:scores", "--sizes", "seq=4..12:4")
    assert code == 0
    assert result["formulas"]["forward"] == (
        "not affine in seq over 4..12:4; a quadratic formula needs 4 sizes to be checked"
    )


def test_two_sizes_cannot_check_a_formula(capsys):
    code, result = run_json(capsys, f"{__file__}:linear", "--sizes", "batch=4,8")
    assert code == 0
    assert 2 == len(result["peaks"])
    assert result["formulas"]["forward"].startswith("cannot be checked: 2 size(s) measured")


def test_table_formula_and_plot(capsys, tmp_path):
    png = tmp_path / "sizes.png"
    assert 0 == main(["memory", f"{__file__}:linear", "--sizes", "batch=1..3", "--plot", str(png)])
    out = capsys.readouterr().out
    assert f"{linear_forward_peak(3):,}" in out and f"{linear_backward_peak(3):,}" in out
    assert "forward peak = 160*batch + 512 bytes (affine in batch" in out
    assert png.read_bytes().startswith(b"\x89PNG")


def test_a_size_at_which_the_program_fails_is_named_and_the_others_kept(capsys):
    code = main(["memory", f"{__file__}:rows_of_four", "--sizes", "n=4..12:2", "--format", "json"])
    captured = capsys.readouterr()
    assert code == 1
    result = json.loads(captured.out)
    assert [4, 8, 12] == [p["size"] for p in result["peaks"]]
    assert [6, 10] == [f["size"] for f in result["failures"]]
    assert "at n=6: " in captured.err and "at n=10: " in captured.err
    assert "rows_of_four raised RuntimeError" in captured.err
    assert "test_memory_sizes.py:" in captured.err  # the program's line
    # x, the sums (a quarter of its bytes): 4n + n
    assert result["formulas"]["forward"].startswith("5*n bytes (affine in n")


def test_a_size_at_which_the_builder_fails_is_named(capsys):
    argv = [f"{__file__}:rows_of_four", "--args", "at_most_eight_args", "--sizes", "n=4,8,12"]
    code, result = run_json(capsys, *argv)
    assert code == 1
    assert [4, 8] == [p["size"] for p in result["peaks"]]
    assert [12] == [f["size"] for f in result["failures"]]
    assert result["failures"][0]["reason"].startswith(
        "at_most_eight_args(n=12) in test_memory_sizes.py raised ValueError: no data for 12 rows "
        "(at test_memory_sizes.py:"
    )


@pytest.mark.parametrize(
    "program, sizes, message",
    [
        (
            "linear",
            "seq=4..8",
            "linear_args() in test_memory_sizes.py has no size named 'seq' (its sizes: batch)",
        ),
        (
            "fixed",
            "batch=4..8",
            "fixed_args() in test_memory_sizes.py has no size named 'batch' (its sizes: none)",
        ),
        ("linear", "batch=8..4", "--sizes batch=8..4: the range goes down (8 > 4)"),
        ("linear", "batch=4..8:0", "--sizes batch=4..8:0: the step is 0"),
        ("linear", "batch:4..8", "--sizes expects DIM=A..B, DIM=A..B:STEP or DIM=N,M,..."),
    ],
)
def test_command_line_mistakes_exit_2_with_one_line(capsys, program, sizes, message):
    assert 2 == main(["memory", f"{__file__}:{program}", "--sizes", sizes])
    err = capsys.readouterr().err
    assert message in err
    assert 1 == len(err.strip().splitlines())


def test_memory_viz_is_one_call_not_several(capsys, tmp_path):
    argv = ["memory", f"{__file__}:linear", "--sizes", "batch=1..3"]
    assert 2 == main([*argv, "--memory-viz", str(tmp_path / "s.pickle")])
    assert "--memory-viz writes one call's ledgers" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, values",
    [
        ("batch=8..64:8", (8, 16, 24, 32, 40, 48, 56, 64)),
        ("batch=3..5", (3, 4, 5)),
        ("seq=32,8,16,8", (8, 16, 32)),
        ("seq=7..7", (7,)),
    ],
)
def test_parse_sizes(text, values):
    assert values == parse_sizes(text).values


@pytest.mark.parametrize(
    "text",
    [
        "batch",
        "batch=",
        "batch=1..",
        "batch=a..b",
        "batch=-2..4",
        "batch=1..4:2:3",
        "2=1..4",
        "batch=1,,2",
    ],
)
def test_parse_sizes_refuses_bad_syntax(text):
    with pytest.raises(UsageError, match="--sizes expects DIM=A..B"):
        parse_sizes(text)


def test_formulas_in_exact_fractions():
    # 3/2 bytes per unit of n, exact at odd n: fractions, not floats fitted and rounded
    odd = [(n, (3 * n + 1) // 2) for n in (1, 3, 5, 7)]
    assert (Fraction(1, 2), Fraction(3, 2)) == interpolate(odd[:2])
    assert formula(odd, "n", "1..7:2").text.startswith("(3/2)*n + (1/2) bytes (affine in n")
    off_by_one = [(1, 10), (2, 20), (3, 30), (4, 41)]
    assert formula(off_by_one, "n", "1..4") == Formula(
        None, "neither affine nor quadratic in n over 1..4"
    )
    assert "-n**2 + 2*n" == polynomial_text(interpolate([(0, 0), (1, 1), (2, 0)]), "n")


def test_command_end_to_end_in_a_process(tmp_path):
    svg = tmp_path / "sizes.svg"
    command = "import sys; from aotspec.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = ["memory", f"{__file__}:scores", "--sizes", "seq=2..8:2", "--plot", str(svg)]
    done = subprocess.run(
        [sys.executable, "-c", command, *argv], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert "forward peak = 4*seq**2 + 32*seq bytes (quadratic in seq" in done.stdout
    assert f"{scores_backward_peak(8):,}" in done.stdout
    assert b"<svg" in svg.read_bytes()[:400]


def test_with_hooks_the_peaks_are_those_of_the_hooks_at_last_use(capsys):
    """The MLP of examples/mlp.py at its default batch, 512, with its bfloat16 hooks: the peaks
    the README gives for `aotspec memory` with the packs at last use."""
    example = str(Path(__file__).parent.parent / "examples" / "mlp.py")
    argv = [f"{example}:mlp", "--hooks", "pack_bf16,unpack_f32", "--sizes", "batch=512"]
    code, result = run_json(capsys, *argv)
    assert code == 0
    assert [{"size": 512, "forward_peak_bytes": 3_407_872, "backward_peak_bytes": 3_670_016}] == (
        result["peaks"]
    )
