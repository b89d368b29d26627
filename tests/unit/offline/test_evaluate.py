"""End-to-end evaluation on synthetic traces whose winners are known by construction, and
the `coldstart-eval` command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from infless.cli import main
from infless.offline.coldstart.evaluate import EvalConfig, EvalResult, evaluate
from tests.support.traces import write_trace

CFG = EvalConfig(fixed_keepalive_min=(10, 60), hhp_range_h=(4,), lsth_gammas=(0.5, 1.0))


def periodic(n: int = 20, minutes: int = 1440, period: int = 30) -> np.ndarray:
    counts = np.zeros((n, minutes), dtype=np.int64)
    for f in range(n):
        counts[f, f % period :: period] = 1
    return counts


def blocks_and_pauses(n: int = 10, minutes: int = 1440) -> np.ndarray:
    """10 h of hourly calls, then 2 h busy blocks (a call every 2 min) and 100-min pauses."""
    counts = np.zeros((n, minutes), dtype=np.int64)
    for f in range(n):
        counts[f, f:600:60] = 1
        for start in range(600 + f, minutes, 220):
            counts[f, start : min(start + 120, minutes) : 2] = 1
    return counts


def point(result: EvalResult, policy: str, param: float) -> tuple[int, float]:
    for p in result.results[policy].curve:
        if p.param == param:
            return p.metrics.cold_starts, p.metrics.wasted_memory_gb_s
    raise AssertionError(f"{policy} has no point {param}")


def test_histograms_learn_a_30_minute_period_that_fixed_keep_alive_cannot() -> None:
    counts = periodic()
    result = evaluate(counts, np.full(20, 512.0), CFG)
    fixed10, fixed60 = point(result, "fixed", 10), point(result, "fixed", 60)
    hhp, lsth = point(result, "hhp", 4), point(result, "lsth", 0.5)
    assert fixed10[0] == int(counts.sum())  # every 30-min gap outlives a 10-min keep-alive
    assert hhp[0] == 20  # only each function's first call is cold
    assert fixed60[0] == 20
    assert hhp[1] < 0.5 * fixed60[1]  # pre-warming near the period wastes far less
    assert lsth == hhp  # 2 ITs an hour: the short histogram is too thin, LSTH is HHP
    assert result.results["fixed"].headline.wasted_memory_normalized_pct == pytest.approx(100.0)


def test_lsth_trades_cold_starts_for_waste_after_a_regime_change() -> None:
    # The long histogram's tail holds the hourly and 100-min gaps, so HHP keeps instances
    # through every pause; LSTH's short (busy) histogram halves that keep-alive.
    result = evaluate(blocks_and_pauses(), np.full(10, 512.0), CFG)
    hhp, lsth = point(result, "hhp", 4), point(result, "lsth", 0.5)
    assert lsth[1] < 0.95 * hhp[1]
    assert lsth[0] > hhp[0]
    assert point(result, "lsth", 1.0) == hhp


def test_results_are_split_by_pattern_class_when_classes_are_given() -> None:
    counts = np.vstack([periodic(4), blocks_and_pauses(4)])
    classes = np.array(["periodic"] * 4 + ["bursty"] * 4)
    result = evaluate(counts, np.full(8, 256.0), CFG, classes)
    by_class = result.results["hhp"].by_class
    assert set(by_class) == {"periodic", "bursty"}
    assert sum(m.invocations for m in by_class.values()) == int(counts.sum())
    assert result.class_sizes["periodic"] == 4


def test_config_errors_name_the_value() -> None:
    with pytest.raises(ValueError, match="lru"):
        EvalConfig(policies=("lru",))
    with pytest.raises(ValueError, match="gamma=2"):
        EvalConfig(lsth_gammas=(2.0,))
    with pytest.raises(ValueError, match="one value per function"):
        evaluate(periodic(2), np.ones(3), CFG)


def test_command_prints_a_table_and_ends_with_one_json_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, memory, plot = tmp_path / "inv.csv", tmp_path / "mem.csv", tmp_path / "out.png"
    write_trace(trace, periodic(6, minutes=600))
    memory.write_text(
        "HashApp,HashOwner,SampleCount,AverageAllocatedMb\n"
        + "".join(f"f{i},f{i},1,{128 * (i + 1)}\n" for i in range(6))
    )
    argv = ["coldstart-eval", "--trace", str(trace), "--memory", str(memory), "--plot"]
    argv += [str(plot), "--gamma", "0.3,0.5,0.7", "--seed", "3", "--json"]
    assert main(argv) == 0
    out = capsys.readouterr().out.strip().splitlines()
    data = json.loads(out[-1])
    assert set(data) == {"fixed", "hhp", "lsth"}
    for entry in data.values():
        for key in (
            "cold_start_rate",
            "q3_function_cold_start_pct",
            "wasted_memory_gb_s",
            "wasted_memory_normalized_pct",
        ):
            assert isinstance(entry[key], float)
    assert [p["gamma"] for p in data["lsth"]["curve"]] == [0.3, 0.5, 0.7]
    assert data["fixed"]["wasted_memory_normalized_pct"] == pytest.approx(100.0)
    assert any("LSTH vs HHP" in line for line in out)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_command_selects_policies_and_reports_bad_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "inv.csv"
    write_trace(trace, periodic(3, minutes=120))
    assert main(["coldstart-eval", "--trace", str(trace), "--policy", "hhp", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out.strip().splitlines()[-1])) == {"hhp"}
    assert main(["coldstart-eval", "--trace", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["coldstart-eval", "--trace", str(trace), "--policy", "lru"])
