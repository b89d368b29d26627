"""loadgen's progress bar: drawn only when stderr is a terminal and it was not turned off
(`-q`, `--quiet`, `--no-progress`)."""

from __future__ import annotations

import argparse
import io

import pytest

from loadgen.cliargs import add_common_flags
from loadgen.progress import RichProgress, make_progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert make_progress(True) is None  # a script, a pipe, CI
    monkeypatch.setattr("sys.stderr", Terminal())
    assert isinstance(make_progress(True), RichProgress)
    assert make_progress(False) is None


@pytest.mark.parametrize("flag", ["-q", "--quiet", "--no-progress"])
def test_quiet_turns_it_off(flag: str) -> None:
    parser = argparse.ArgumentParser()
    add_common_flags(parser)
    assert parser.parse_args([flag]).no_progress
    assert not parser.parse_args([]).no_progress
