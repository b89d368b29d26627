"""Heavy libraries are extras: a command that needs a missing one fails naming the fix.

matplotlib is made missing by an empty `sys.modules` entry, which `find_spec` reads as "not
installed"; no command gets far enough to import it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from infless.cli import main
from infless.extras import EXAMPLES, PLOTS, MissingExtra, has_module, require_extra
from infless.sim.figures.__main__ import main as figures_main
from tests.support.traces import write_trace

PLOTS_FIX = "pip install 'infless[plots]'"


@pytest.fixture
def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)


def test_require_extra_names_the_module_and_the_pip_command() -> None:
    require_extra("numpy", EXAMPLES, "anything")  # installed: nothing happens
    assert not has_module("infless_no_such_module")
    with pytest.raises(MissingExtra) as caught:
        require_extra("infless_no_such_module", PLOTS, "--plot")
    assert str(caught.value) == (
        f"--plot needs infless_no_such_module, which is not installed; install it with: {PLOTS_FIX}"
    )


@pytest.mark.usefixtures("no_matplotlib")
def test_coldstart_plot_without_matplotlib_fails_before_evaluating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "inv.csv"
    write_trace(trace, np.ones((2, 30), dtype=np.int64))
    argv = ["coldstart-eval", "--trace", str(trace), "--plot", str(tmp_path / "out.png")]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert PLOTS_FIX in captured.err
    assert captured.out == ""  # no table: it stopped before the evaluation
    assert not (tmp_path / "out.png").exists()


@pytest.mark.usefixtures("no_matplotlib")
def test_coldstart_without_plot_needs_no_matplotlib(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "inv.csv"
    write_trace(trace, np.ones((2, 30), dtype=np.int64))
    assert main(["coldstart-eval", "--trace", str(trace), "--policy", "fixed"]) == 0
    assert "fixed" in capsys.readouterr().out


@pytest.mark.usefixtures("no_matplotlib")
def test_a_load_run_without_matplotlib_names_the_extra(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["loadgen", "synthetic", "--gateway", "http://127.0.0.1:9", "--duration-s", "1"]
    assert main(argv) == 2
    assert PLOTS_FIX in capsys.readouterr().err


@pytest.mark.usefixtures("no_matplotlib")
def test_figures_without_matplotlib_name_the_extra(capsys: pytest.CaptureFixture[str]) -> None:
    assert figures_main(["fig17", "--small"]) == 2
    assert PLOTS_FIX in capsys.readouterr().err
