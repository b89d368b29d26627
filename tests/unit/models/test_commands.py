"""`infless models build|list` through the CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infless.cli import main
from infless.models.commands import DEFAULT_REPOSITORY, REPOSITORY_ENV, resolve_repository
from infless.models.zoo import ZOO


def test_build_then_cached(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "build", "mnist", "--repository", str(tmp_path)]) == 0
    first = capsys.readouterr().out
    assert "mnist" in first
    assert first.rstrip().endswith("built")
    assert main(["models", "build", "mnist", "--repository", str(tmp_path)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("cached")


def test_unknown_name_fails_before_building(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models", "build", "mnist", "nope", "--repository", str(tmp_path)]) == 2
    assert "unknown zoo model 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "mnist").exists()


def test_list_json_reports_every_model_and_build_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REPOSITORY_ENV, str(tmp_path))
    assert main(["models", "build", "mnist"]) == 0
    capsys.readouterr()
    assert main(["models", "list", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["repository"] == str(tmp_path)
    rows = {row["name"]: row for row in document["models"]}
    assert set(rows) == set(ZOO)
    assert rows["mnist"]["built"] is True
    assert rows["ssd"]["built"] is False
    assert rows["dssm-2365"]["inputs"] == ["query_ids: int64[32]", "doc_ids: int64[64]"]
    assert 0.75 < rows["resnet-50"]["weights_bytes"] / (98 * 1024 * 1024) < 1.25


def test_list_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "list", "--repository", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + len(ZOO)
    assert any(line.startswith("bert-v1") and "input_ids: int64[64]" in line for line in lines)


def test_repository_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REPOSITORY_ENV, raising=False)
    assert resolve_repository(None) == DEFAULT_REPOSITORY == Path("state/models")
    monkeypatch.setenv(REPOSITORY_ENV, "/srv/models")
    assert resolve_repository(None) == Path("/srv/models")
    assert resolve_repository(Path("mine")) == Path("mine")
