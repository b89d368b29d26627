"""MeasuredPredictor keyed by GPU share: a GPU instance's times price its own share only."""

from __future__ import annotations

import pytest

from infless.profiler.database import GpuLatencyRow
from infless.scaling.gpu_profiles import GpuProfilePredictor
from infless.scaling.measured import MeasuredPredictor
from infless.scaling.predictors import AnalyticModel, AnalyticPredictor

H100 = "NVIDIA H100 80GB HBM3"
CPU = AnalyticPredictor({"m": AnalyticModel(2.0, 8.0)})


def gpu_profiles() -> GpuProfilePredictor:
    rows = [GpuLatencyRow(H100, "m", b, g, 1, 1.0 + b * 10.0 / g) for g in (20, 50) for b in (1, 8)]
    return GpuProfilePredictor(rows, [H100], fallback=CPU)


def test_a_gpu_instances_warm_up_times_price_its_exact_share_at_any_core_count() -> None:
    predictor = MeasuredPredictor(gpu_profiles())
    predictor.observe("m", 1, {1: 0.7, 8: 1.4}, gpu_pct=30)
    assert predictor.predict_latency_ms("m", 8, 1, 30) == 1.4
    assert predictor.predict_latency_ms("m", 4, 2, 30) == pytest.approx(1.0)  # interpolated


def test_other_shares_go_to_the_gpu_profiles_never_to_the_cpu_tables() -> None:
    predictor = MeasuredPredictor(gpu_profiles())
    predictor.observe("m", 1, {1: 50.0, 8: 400.0})  # a CPU instance: slow
    predictor.observe("m", 1, {1: 0.7, 8: 1.4}, gpu_pct=30)
    assert predictor.predict_latency_ms("m", 8, 1, 50) == gpu_profiles().predict_latency_ms(
        "m", 8, 1, 50
    )
    with pytest.raises(LookupError, match="measured down to 20 %"):  # the profiles' reason
        predictor.predict_latency_ms("m", 8, 1, 10)


def test_gpu_measurements_do_not_price_cpu_configurations() -> None:
    predictor = MeasuredPredictor()
    predictor.observe("m", 2, {1: 0.5}, gpu_pct=50)
    with pytest.raises(LookupError, match="nothing measured"):
        predictor.predict_latency_ms("m", 1, 2)
    predictor.observe("m", 2, {1: 4.0})
    assert predictor.predict_latency_ms("m", 1, 2) == 4.0


def test_without_a_fallback_an_unmeasured_share_is_unpriced_with_the_reason() -> None:
    predictor = MeasuredPredictor()
    predictor.observe("m", 1, {1: 0.7}, gpu_pct=30)
    with pytest.raises(LookupError, match="no instance measured 50 % of a GPU"):
        predictor.predict_latency_ms("m", 1, 1, 50)


def test_one_measured_batch_size_takes_the_profiles_shape_at_that_share() -> None:
    predictor = MeasuredPredictor(gpu_profiles())
    profiled = gpu_profiles()
    predictor.observe("m", 1, {1: 2 * profiled.predict_latency_ms("m", 1, 1, 50)}, gpu_pct=50)
    assert predictor.predict_latency_ms("m", 8, 1, 50) == pytest.approx(
        2 * profiled.predict_latency_ms("m", 8, 1, 50)
    )
