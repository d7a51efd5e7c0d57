"""`aotspec report`'s known-failures file: written from the results, keeping what a person
wrote about a failure that is still there."""

from __future__ import annotations

from aotspec.compat import _xfail
from aotspec.conformance.cases import ALL_CASES
from aotspec.conformance.runner import CaseResult

CASES = {case.name: case for case in ALL_CASES}
AOT = "torch.compile:aot_eager"


def test_the_known_failures_file_keeps_comments_of_failures_still_there(tmp_path):
    out = tmp_path / "torch-9.9.md"
    out.with_suffix(".xfail").write_text(
        f"# old header\n"
        f"{AOT} resize.fsdp-up-fill-use-down  # crash: FSDP's pattern segfaults\n"
        f"{AOT} aliasing.mutation-before-set-is-kept  # fail: the write before set_ is lost\n"
        f"{AOT} aliasing.aliased-arguments  # fail: fixed since\n"
    )
    results = [
        CaseResult(CASES["resize.fsdp-up-fill-use-down"], AOT, "crash", ("SIGSEGV",)),
        CaseResult(CASES["aliasing.mutation-before-set-is-kept"], AOT, "crash", ("SIGABRT",)),
        CaseResult(CASES["aliasing.aliased-arguments"], AOT, "pass", ()),
        CaseResult(CASES["autograd.outputs-viewed-inside-enable-grad"], AOT, "fail", ("x.grad",)),
    ]
    assert _xfail(results, out).splitlines()[1:] == [
        f"{AOT} resize.fsdp-up-fill-use-down  # crash: FSDP's pattern segfaults",
        f"{AOT} aliasing.mutation-before-set-is-kept  # crash: SIGABRT",  # it changed
        f"{AOT} autograd.outputs-viewed-inside-enable-grad  # fail: x.grad",
    ]
