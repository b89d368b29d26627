"""The `infless profile` / `infless predict` command line (parsing and argument errors)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from infless.cli import build_parser
from infless.profiler import commands


def test_both_subcommands_are_registered_with_their_options() -> None:
    args = build_parser("profile").parse_args(["profile", "mnist", "--quick", "--max-threads", "1"])
    assert args.names == ["mnist"]
    assert args.quick
    assert args.max_threads == 1
    args = build_parser("predict").parse_args(["predict", "resnet-50", "--measure", "--json"])
    assert args.name == "resnet-50"
    assert args.measure
    assert args.json
    assert not args.speed_now
    args = build_parser("predict").parse_args(["predict", "resnet-50", "--speed-now"])
    assert args.speed_now


def test_quick_without_names_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    commands.configure(parser, "profile")
    args = parser.parse_args(["--quick"])
    args.command = "profile"
    assert commands.run(args) == 2
    assert "--quick" in capsys.readouterr().err


def test_an_unknown_model_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    commands.configure(parser, "predict")
    args = parser.parse_args(["no-such-model", "--state-dir", str(tmp_path)])
    args.command = "predict"
    assert commands.run(args) == 2
    assert "no-such-model" in capsys.readouterr().err


def test_configure_does_not_import_torch_itself() -> None:
    source = Path(commands.__file__).read_text()
    header = source.split("def run(", 1)[0]
    assert "import torch" not in header
    imports = [line for line in header.splitlines() if line.startswith(("import", "from"))]
    assert all("torch" not in line and "extract" not in line for line in imports)
