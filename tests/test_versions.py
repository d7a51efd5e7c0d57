"""What differs between torch releases (`aotspec/versions.py`): one test per difference, each
failing if the detection is wrong on the torch these tests run on."""

from __future__ import annotations

import pytest
import torch

from aotspec import versions


@pytest.mark.parametrize(
    ("version", "release"),
    [("2.13.0+cpu", (2, 13)), ("2.11.0+cu130", (2, 11)), ("2.16.0.dev20260101", (2, 16))],
)
def test_torch_release_reads_major_and_minor(version, release):
    assert release == versions.torch_release(version)


@pytest.mark.parametrize("version", ["2.11.0", "2.13.0+cpu", "2.15.1+cu128"])
def test_supported_releases_import(version):
    versions.check_torch(version)


@pytest.mark.parametrize("version", ["2.10.0", "2.16.0a0", "3.0.0"])
def test_a_release_outside_the_range_is_refused_naming_the_range(version):
    with pytest.raises(ImportError, match=r"torch >=2\.11,<2\.16 \(2\.11 to 2\.15\).*" + version):
        versions.check_torch(version)


def test_this_torch_is_supported():
    """The torch the tests run on is in the range, so `import aotspec` passed its check."""
    versions.check_torch(torch.__version__)


def test_add_note_appends_to_the_notes_python_prints():
    error = ValueError("wrong")
    versions.add_note(error, "first")
    versions.add_note(error, "second")
    assert ["first", "second"] == error.__notes__
