"""The package check's command line: an example request comes with its content type."""

from __future__ import annotations

from pathlib import Path

import pytest

from infless.workers.package_check import _arguments


def test_examples_alone_or_with_expected_outputs_are_enough() -> None:
    arguments = _arguments(["pkg", "--examples", "in.npz", "--expected", "out.npz"])
    assert arguments.package_dir == "pkg"
    assert arguments.examples == Path("in.npz")
    assert arguments.expected == Path("out.npz")
    assert arguments.request is None


@pytest.mark.parametrize(
    "extra", [["--request", "body.bin"], ["--content-type", "application/json"]]
)
def test_a_request_without_its_content_type_is_refused(
    extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        _arguments(["pkg", "--examples", "in.npz", *extra])
    assert "--request and --content-type go together" in capsys.readouterr().err
