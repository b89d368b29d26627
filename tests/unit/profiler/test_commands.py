"""The `infless profile` / `infless predict` command line (parsing and argument errors)."""

from __future__ import annotations

import argparse
import json
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


def test_predict_measure_pairs_each_cell_with_the_machine_speed_while_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from infless.cli import main

    argv = ["predict", "mnist", "--state-dir", str(tmp_path), "--batches", "1,2"]
    argv += ["--max-threads", "1", "--budget-ms", "5", "--json"]
    assert main([*argv, "--measure"]) == 0
    measured = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["cells"]
    assert main(argv) == 0  # same database, nothing measured: the profiles' typical speed
    typical = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["cells"]
    assert [c["batch"] for c in measured] == [1, 2]
    for cell, at_typical in zip(measured, typical, strict=True):
        assert cell["measured_ms"] > 0
        assert cell["error_pct"] == pytest.approx(
            100.0 * (cell["predicted_raw_ms"] - cell["measured_ms"]) / cell["measured_ms"]
        )
        # predicted for the speed measured with it, which is never exactly the typical one
        assert cell["predicted_raw_ms"] != at_typical["predicted_raw_ms"]
