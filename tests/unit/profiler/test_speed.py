"""The machine speed index: pairing it with measurements, rescaling profiles, predicting."""

from __future__ import annotations

import pytest
import torch

from infless.profiler.database import ProfileRow
from infless.profiler.graph import OperatorGraph, OpNode, OpSignature, TensorInfo
from infless.profiler.operators import measure_threads, summarise
from infless.profiler.predictor import CombinedOperatorPredictor
from infless.profiler.reference import measure_speed
from infless.profiler.speed import (
    SpeedIndex,
    normalise,
    rescale,
    speed_factor,
    typical_index,
)

SIG = OpSignature("a", "function:torch.a", "{}", (TensorInfo((1, 4), "float32", 0),))


def _chain() -> OperatorGraph:
    return OperatorGraph("one", (OpNode("a", SIG, ()),), ("a",), "fx")


def test_an_index_answers_for_the_largest_measured_thread_count_at_or_below() -> None:
    index = SpeedIndex.of({2: 1.0, 1: 2.0, 4: 0.0})  # a 0 ms figure is no measurement
    assert index.ref_ms == ((1, 2.0), (2, 1.0))
    assert index.at(1) == 2.0
    assert index.at(3) == 1.0
    assert SpeedIndex.of({2: 1.0}).at(1) is None


def test_the_factor_is_the_ratio_of_reference_times_and_one_when_unknown() -> None:
    then = SpeedIndex.of({1: 2.0, 2: 1.0})
    slower = SpeedIndex.of({1: 3.0, 2: 1.8})
    assert speed_factor(slower, then, 1) == pytest.approx(1.5)
    assert speed_factor(slower, then, 2) == pytest.approx(1.8)
    assert speed_factor(None, then, 1) == 1.0
    assert speed_factor(slower, None, 1) == 1.0
    assert speed_factor(SpeedIndex.of({2: 1.0}), then, 1) == 1.0


def test_a_row_is_rescaled_to_another_speed_and_a_row_without_index_is_left_alone() -> None:
    row = ProfileRow("k", 4, 1, 0, time_ms=2.0, min_ms=1.8, cold_ms=3.0, ref_ms=1.0)
    faster = rescale(row, 0.5)
    assert (faster.time_ms, faster.min_ms, faster.cold_ms, faster.ref_ms) == pytest.approx(
        (1.0, 0.9, 1.5, 0.5)
    )
    unknown = ProfileRow("k", 4, 1, 0, time_ms=2.0)
    assert rescale(unknown, 0.5) == unknown
    base = SpeedIndex.of({1: 0.5})
    assert normalise([row, unknown], base) == [faster, unknown]
    assert normalise([row], None) == [row]


def test_the_typical_index_is_the_median_per_thread_count_of_indexed_rows() -> None:
    points = [(1, 1.0), (1, 3.0), (1, 2.0), (2, 0.5), (2, 0.0)]
    assert typical_index(points) == SpeedIndex.of({1: 2.0, 2: 0.5})
    assert typical_index([(1, 0.0)]) is None


def _predictor(
    rows: list[ProfileRow], profile_speed: SpeedIndex | None
) -> CombinedOperatorPredictor:
    predictor = CombinedOperatorPredictor(offset_pct=0.0, profile_speed=profile_speed)
    predictor.add_profiles(rows)
    predictor.register("one", _chain())
    return predictor


def test_rows_profiled_at_different_speeds_are_predicted_at_one_speed() -> None:
    # batch 1 was profiled while the machine ran twice as slow as for batch 2
    rows = [
        ProfileRow(SIG.key, 1, 1, 0, time_ms=4.0, ref_ms=2.0),
        ProfileRow(SIG.key, 2, 1, 0, time_ms=3.0, ref_ms=1.0),
    ]
    as_measured = _predictor(rows, None)
    assert as_measured.predict_raw_ms("one", 1, 1) == pytest.approx(4.0)
    typical = _predictor(rows, SpeedIndex.of({1: 1.0}))
    assert typical.predict_raw_ms("one", 1, 1) == pytest.approx(2.0)
    assert typical.predict_raw_ms("one", 2, 1) == pytest.approx(3.0)


def test_predictions_follow_the_speed_now_per_thread_count() -> None:
    rows = [
        ProfileRow(SIG.key, b, c, 0, time_ms=float(b) / c, ref_ms={1: 2.0, 2: 1.0}[c])
        for b in (1, 2, 4)
        for c in (1, 2)
    ]
    base = SpeedIndex.of({1: 2.0, 2: 1.0})
    predictor = _predictor(rows, base)
    assert predictor.predict_raw_ms("one", 4, 1) == pytest.approx(4.0)
    now = SpeedIndex.of({1: 3.0, 2: 1.2})  # 1.5x slower on one thread, 1.2x on two
    assert predictor.predict_raw_ms("one", 4, 1, speed=now) == pytest.approx(6.0)
    assert predictor.predict_raw_ms("one", 4, 2, speed=now) == pytest.approx(2.4)
    assert predictor.predict_latency_ms("one", 4, 2, speed=now) == pytest.approx(2.4)
    predictor.speed_now = now  # the default speed for callers that pass none
    assert predictor.predict_raw_ms("one", 4, 1) == pytest.approx(6.0)
    assert sum(predictor.breakdown_ms("one", 4, 1).values()) == pytest.approx(6.0)


def test_more_threads_never_predict_slower_even_when_only_one_count_got_slower() -> None:
    rows = [ProfileRow(SIG.key, 1, c, 0, time_ms=t, ref_ms=1.0) for c, t in ((1, 1.0), (2, 0.8))]
    predictor = _predictor(rows, SpeedIndex.of({1: 1.0, 2: 1.0}))
    now = SpeedIndex.of({1: 1.0, 2: 2.0})  # two threads now run at half speed
    assert predictor.predict_raw_ms("one", 1, 2, speed=now) == pytest.approx(1.0)


def test_the_paired_reference_is_averaged_over_the_repetitions_the_figure_keeps() -> None:
    # repetitions 1 and 2 are the fastest half: their reference calls describe the speed
    m = summarise([3.0, 1.0, 2.0, 4.0], [3.0, 1.0, 2.0, 4.0], [30.0, 10.0, 20.0, 40.0])
    assert m.fast_ms == pytest.approx(1.5)
    assert m.ref_ms == pytest.approx(15.0)
    assert summarise([1.0, 2.0], [1.0, 2.0], []).ref_ms == 0.0


def test_each_repetition_is_followed_by_a_warm_and_a_timed_reference_call() -> None:
    calls: list[int] = []
    found = measure_threads(
        lambda: None,
        (1, 2),
        min_reps=3,
        max_reps=3,
        max_spread=float("inf"),
        reference=lambda: calls.append(torch.get_num_threads()),
    )
    # at the thread count measured: 3 repetitions x (warm, timed); at two threads a timed
    # call a neighbour interrupted is timed again, so there may be more there
    assert calls.count(1) == 3 * 2
    assert calls.count(2) >= 3 * 2
    assert set(calls) == {1, 2}
    assert [m.reps for m in found.values()] == [3, 3]


def test_the_speed_now_is_measured_at_each_thread_count_predicted_for() -> None:
    seen: set[int] = set()

    def kernel() -> None:
        seen.add(torch.get_num_threads())

    index = measure_speed((1, 2), kernel=kernel, budget_s=0.001)
    assert seen == {1, 2}
    assert [c for c, _ in index.ref_ms] == [1, 2]
