"""Held-out splits: which functions and minutes each holds, the per-split figures, and the
`coldstart-eval --split` report."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from infless.cli import main
from infless.offline.coldstart.evaluate import EvalConfig, evaluate
from infless.offline.coldstart.splits import (
    TUNING_SPLIT,
    Spread,
    evaluate_splits,
    trace_splits,
    train_mask,
)
from tests.support.traces import write_trace

CFG = EvalConfig(hhp_range_h=(4,), lsth_gammas=(0.3, 1.0), lsth_headline_gamma=0.3)
IDS = [f"{k:064x}" for k in range(200)]


def busy_with_pauses(n: int, minutes: int, seed: int = 0) -> np.ndarray:
    """Busy functions (many requests a minute) that pause a few minutes between bursts."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((n, minutes), dtype=np.int64)
    for f in range(n):
        t = int(rng.integers(0, 10))
        while t < minutes:
            end = min(t + int(rng.integers(3, 8)), minutes)
            counts[f, t:end] = rng.integers(20, 60, size=end - t)
            t = end + int(rng.integers(2, 4))
    return counts


def test_the_hash_split_is_fixed_by_the_ids_and_the_salt() -> None:
    mask = train_mask(IDS)
    assert np.array_equal(mask, train_mask(list(IDS)))
    assert 70 < int(mask.sum()) < 130  # about half
    assert not np.array_equal(mask, train_mask(IDS, salt="a"))


def test_time_splits_cut_the_trace_or_count_after_the_first_half() -> None:
    splits = {s.name: s for s in trace_splits(IDS, 1440)}
    assert next(iter(splits)) == TUNING_SPLIT
    crossed = {"train/early", "train/late", "test/early", "test/late"}
    assert set(splits) == crossed | {"train", "test", "early", "late"}
    assert (splits["early"].end_min, splits["early"].warmup_min) == (720, 0)
    assert (splits["late"].end_min, splits["late"].warmup_min) == (1440, 720)
    assert np.array_equal(splits["test/late"].functions, ~splits["train/late"].functions)
    assert bool(splits["late"].functions.all())
    with pytest.raises(ValueError, match="1 minute"):
        trace_splits(IDS, 1)


def test_each_split_counts_its_own_functions_and_minutes() -> None:
    counts = busy_with_pauses(40, 240)
    ids = IDS[:40]
    memory = np.full(40, 256.0)
    results = {r.name: r for r in evaluate_splits(counts, memory, trace_splits(ids, 240), CFG, [0])}
    train = train_mask(ids)
    late = results["train/late"].runs[0].hhp
    assert late.invocations == int(counts[train, 120:].sum())
    early = results["test/early"].runs[0].hhp
    assert early.invocations == int(counts[~train, :120].sum())
    # the late half is replayed with the early half as history: the same as evaluating the
    # whole trace with a warm-up
    whole = evaluate(counts[train], memory[train], replace(CFG, warmup_min=120))
    assert late == whole.results["hhp"].headline
    assert results["late"].minutes_counted == 120


def test_lsth_keeps_busy_functions_warm_through_their_pauses_on_every_split() -> None:
    counts = busy_with_pauses(40, 480)
    results = evaluate_splits(
        counts, np.full(40, 512.0), trace_splits(IDS[:40], 480), CFG, seeds=[0, 1]
    )
    for r in results:
        # HHP's per-request tail is bin 0 for such functions: most pauses end cold
        assert r.cold_delta_pct().high < -20.0, r.name
        # γ = 1 is the long histogram alone: HHP on a window longer than the trace
        assert r.cold_delta_pct(1.0) == Spread(0.0, 0.0, 0.0)
        assert len(r.runs) == 2


def test_a_spread_needs_values() -> None:
    assert Spread.of([3.0, -1.0, 1.0]) == Spread(1.0, -1.0, 3.0)
    with pytest.raises(ValueError, match="at least one"):
        Spread.of([])
    with pytest.raises(ValueError, match="seeds is empty"):
        evaluate_splits(np.ones((2, 4), dtype=np.int64), np.ones(2), [], CFG, [])


def test_command_reports_each_split_and_keeps_the_json_keyed_by_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "inv.csv"
    write_trace(trace, busy_with_pauses(12, 240))
    argv = ["coldstart-eval", "--trace", str(trace), "--gamma", "0.3,0.5", "--json"]
    assert main([*argv, "--split", "--split-seeds", "2"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    data = json.loads(out[-1])
    assert {"fixed", "hhp", "lsth", "splits"} == set(data)
    assert len(data["splits"]) == 8
    first = data["splits"][0]
    assert first["split"] == TUNING_SPLIT
    assert [run["seed"] for run in first["runs"]] == [0, 1]
    assert set(first["by_gamma"]) == {"0.3", "0.5"}
    assert first["cold_delta_pct"]["low"] <= first["cold_delta_pct"]["mean"]
    assert any("per split" in line for line in out)
    assert main(argv) == 0  # without --split: the same keys as before
    plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(plain) == {"fixed", "hhp", "lsth"}
    assert main([*argv, "--split", "--policy", "fixed,hhp"]) == 2
    assert "must include both" in capsys.readouterr().err
