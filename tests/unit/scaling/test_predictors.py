"""Table, analytic, scaled and cached predictors."""

from __future__ import annotations

import math

import pytest

from infless.scaling.predictors import (
    AnalyticModel,
    AnalyticPredictor,
    CachedPredictor,
    ScaledPredictor,
    TablePredictor,
    table_from_measurements,
)

REFERENCE_ROWS = """\
# model cpuThreads gpuPercent batch latency_ms
resnet-50 2 10 1 60
resnet-50 2 10 4 112.5
resnet-50 2 10 8 9999
resnet-50 16 50 32 304.9
resnet-50 2 0 1 152
"""


def test_reference_profile_rows_are_parsed() -> None:
    table = TablePredictor.parse_reference(REFERENCE_ROWS)
    assert table.predict_latency_ms("resnet-50", 4, 2, 10) == 112.5
    assert table.predict_latency_ms("resnet-50", 1, 2, 0) == 152.0
    assert table.predict_latency_ms("resnet-50", 32, 16, 50) == 304.9
    assert math.isinf(table.predict_latency_ms("resnet-50", 8, 2, 10))  # the 9999 sentinel
    assert (1, 2, 0) in table.configurations("resnet-50")


def test_batches_between_measured_ones_are_interpolated() -> None:
    table = TablePredictor.parse_reference(REFERENCE_ROWS)
    assert table.predict_latency_ms("resnet-50", 2, 2, 10) == pytest.approx(60 + 52.5 / 3)
    assert table.predict_latency_ms("resnet-50", 1, 16, 50) == 304.9  # below: the smallest


def test_unmeasured_configurations_raise_lookup_error() -> None:
    table = TablePredictor.parse_reference(REFERENCE_ROWS)
    with pytest.raises(LookupError, match="4 cores"):
        table.predict_latency_ms("resnet-50", 1, 4, 0)
    with pytest.raises(LookupError, match="beyond"):
        table.predict_latency_ms("resnet-50", 64, 16, 50)


def test_malformed_profile_lines_name_the_line() -> None:
    with pytest.raises(ValueError, match="line 2"):
        TablePredictor.parse_reference("m 1 0 1 5\nm 1 0 2\n")


def test_warm_up_measurements_become_a_table() -> None:
    table = table_from_measurements("m", [(1, 2, 0, 5.0), (4, 2, 0, 11.0)])
    assert table.predict_latency_ms("m", 2, 2) == pytest.approx(7.0)


def test_analytic_model() -> None:
    model = AnalyticModel(fixed_ms=2.0, per_item_ms=8.0, batch_exp=1.0, cpu_exp=1.0)
    predictor = AnalyticPredictor({"m": model})
    assert predictor.predict_latency_ms("m", 4, 2) == pytest.approx(2.0 + 8.0 * 4 / 2)
    assert math.isinf(predictor.predict_latency_ms("m", 4, 2, 10))  # no GPU model
    gpu = AnalyticModel(2.0, 8.0, batch_exp=1.0, cpu_exp=1.0, gpu_per_pct=0.1)
    assert gpu.latency_ms(4, 2, 20) == pytest.approx(2.0 + 32.0 / 4.0)
    with pytest.raises(LookupError):
        predictor.predict_latency_ms("other", 1, 1)


def test_scaled_and_cached_predictors() -> None:
    calls: list[tuple[str, int, int, int]] = []

    class Counting:
        def predict_latency_ms(
            self, model_key: str, batch_size: int, cpus: int, gpu_pct: int = 0
        ) -> float:
            calls.append((model_key, batch_size, cpus, gpu_pct))
            if model_key == "missing":
                raise LookupError(model_key)
            return 10.0

    cached = CachedPredictor(ScaledPredictor(Counting(), 1.5))
    assert cached.predict_latency_ms("m", 1, 1) == 15.0
    assert cached.predict_latency_ms("m", 1, 1) == 15.0
    for _ in range(2):
        with pytest.raises(LookupError):
            cached.predict_latency_ms("missing", 1, 1)
    assert len(calls) == 2
    cached.clear()
    cached.predict_latency_ms("m", 1, 1)
    assert len(calls) == 3
    with pytest.raises(ValueError, match="factor"):
        ScaledPredictor(Counting(), 0.0)
