"""GPU shares priced from measured profiles: interpolation over b and g, and the refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from infless.profiler.database import GpuLatencyRow, ProfileDatabase
from infless.scaling.gpu_profiles import GpuCurve, GpuProfilePredictor
from infless.scaling.predictors import AnalyticModel, AnalyticPredictor
from infless.scaling.profiled import load_planning_predictor

H100 = "NVIDIA H100 80GB HBM3"
A10 = "NVIDIA A10"


def launch_plus_work_ms(batch_size: int, gpu_pct: int) -> float:
    """A model whose batch costs a fixed launch time plus work spread over the share's SMs."""
    return 2.0 + 0.5 * batch_size * 100.0 / gpu_pct


def rows(
    device: str = H100,
    model: str = "m",
    shares: tuple[int, ...] = (20, 50, 100),
    batches: tuple[int, ...] = (1, 2, 4, 8),
) -> list[GpuLatencyRow]:
    return [
        GpuLatencyRow(device, model, b, g, 1, launch_plus_work_ms(b, g))
        for g in shares
        for b in batches
    ]


def test_measured_points_are_returned_as_measured() -> None:
    curve = GpuCurve([(r.batch_size, r.gpu_pct, r.exec_ms) for r in rows()])
    assert curve.shares_pct == (20, 50, 100)
    assert curve.exec_ms(4, 50) == launch_plus_work_ms(4, 50)


def test_between_batch_sizes_the_time_is_linear_and_below_the_smallest_it_is_the_smallest() -> None:
    curve = GpuCurve([(1, 50, 3.0), (4, 50, 6.0)])
    assert curve.exec_ms(2, 50) == pytest.approx(4.0)
    assert curve.exec_ms(3.5, 50) == pytest.approx(5.5)  # a mean batch may be fractional
    assert GpuCurve([(2, 50, 3.0)]).exec_ms(1, 50) == 3.0


def test_between_shares_the_time_is_linear_in_one_over_g() -> None:
    """t = a + w/g is exactly what MPS does to a kernel that fills its SMs: reproduced."""
    curve = GpuCurve([(r.batch_size, r.gpu_pct, r.exec_ms) for r in rows()])
    for share in (25, 30, 40, 70, 90):
        assert curve.exec_ms(8, share) == pytest.approx(launch_plus_work_ms(8, share))
    # a straight line in g would price 30 % slower than it runs
    t20, t50 = launch_plus_work_ms(8, 20), launch_plus_work_ms(8, 50)
    assert curve.exec_ms(8, 30) < t20 + (t50 - t20) * (30 - 20) / (50 - 20)


def test_a_share_above_the_largest_measured_is_never_slower() -> None:
    curve = GpuCurve([(1, 20, 9.0), (1, 50, 4.0)])
    assert curve.exec_ms(1, 100) == 4.0


def test_a_share_below_the_smallest_measured_is_refused() -> None:
    curve = GpuCurve([(1, 20, 9.0), (1, 50, 4.0)])
    with pytest.raises(LookupError, match=r"10 % is below .*measured down to 20 %"):
        curve.exec_ms(1, 10)


def test_a_batch_beyond_the_largest_measured_is_refused_naming_it() -> None:
    curve = GpuCurve([(1, 20, 9.0), (8, 20, 20.0), (1, 50, 4.0), (16, 50, 12.0)])
    with pytest.raises(LookupError, match=r"batch 32 is beyond the largest .* \(16\) at 50 %"):
        curve.exec_ms(32, 50)
    with pytest.raises(LookupError, match=r"batch 16 .* \(8\) at 20 %"):  # 30 % needs both
        curve.exec_ms(16, 30)


def test_points_that_are_not_measurements_are_ignored() -> None:
    curve = GpuCurve([(1, 0, 1.0), (1, 150, 1.0), (0, 50, 1.0), (1, 50, -1.0), (1, 50, 3.0)])
    assert curve.shares_pct == (50,)
    assert curve.exec_ms(1, 50) == 3.0


def test_the_predictor_prices_only_this_servers_devices() -> None:
    predictor = GpuProfilePredictor(rows(A10), [H100])
    with pytest.raises(LookupError, match=f"no GPU profile of m on {H100}.*profile --gpu m"):
        predictor.predict_latency_ms("m", 1, 1, 30)
    predictor = GpuProfilePredictor([*rows(A10), *rows(H100)], [H100])
    assert predictor.predict_latency_ms("m", 4, 1, 50) == launch_plus_work_ms(4, 50)


def test_the_cores_do_not_change_a_gpu_batchs_time() -> None:
    predictor = GpuProfilePredictor(rows(), [H100])
    at_one = predictor.predict_latency_ms("m", 8, 1, 30)
    assert all(predictor.predict_latency_ms("m", 8, c, 30) == at_one for c in (2, 4, 16))


def test_refusals_name_the_model_the_device_and_the_fix() -> None:
    predictor = GpuProfilePredictor(rows(shares=(20, 50)), [H100])
    with pytest.raises(LookupError, match=rf"m on {H100}: 10 % .*down to 20 %.*profile --gpu m"):
        predictor.predict_latency_ms("m", 1, 1, 10)
    with pytest.raises(LookupError, match="no GPU on this server"):
        GpuProfilePredictor(rows(), []).predict_latency_ms("m", 1, 1, 30)


def test_cpu_configurations_go_to_the_fallback() -> None:
    cpu = AnalyticPredictor({"m": AnalyticModel(2.0, 8.0)})
    predictor = GpuProfilePredictor(rows(), [H100], fallback=cpu)
    assert predictor.predict_latency_ms("m", 4, 2) == cpu.predict_latency_ms("m", 4, 2)
    with pytest.raises(LookupError, match="no CPU latency predictor"):
        GpuProfilePredictor(rows(), [H100]).predict_latency_ms("m", 4, 2)


def test_devices_of_several_names_price_a_share_at_the_slowest() -> None:
    slow = [GpuLatencyRow(A10, "m", r.batch_size, r.gpu_pct, 1, 3 * r.exec_ms) for r in rows()]
    predictor = GpuProfilePredictor([*rows(H100), *slow], [H100, A10, H100])
    assert predictor.device_names == (H100, A10)
    assert predictor.predict_latency_ms("m", 2, 1, 50) == 3 * launch_plus_work_ms(2, 50)
    with pytest.raises(LookupError, match=A10):
        GpuProfilePredictor(rows(H100), [H100, A10]).predict_latency_ms("m", 2, 1, 50)


def test_the_state_dirs_gpu_profiles_price_shares_for_this_servers_devices(
    tmp_path: Path,
) -> None:
    assert load_planning_predictor(tmp_path, ["m"], []) is None  # no GPU, nothing profiled
    with ProfileDatabase(tmp_path / "profiles.sqlite") as db:
        db.add_gpu_latency([*rows(H100), *rows(A10, model="m"), *rows(H100, model="other")])
    predictor = load_planning_predictor(tmp_path, ["m"], [H100])
    assert predictor is not None
    assert predictor.predict_latency_ms("m", 8, 1, 50) == launch_plus_work_ms(8, 50)
    with pytest.raises(LookupError, match="no GPU profile of other"):  # not asked for
        predictor.predict_latency_ms("other", 8, 1, 50)
    with pytest.raises(LookupError):  # g = 0: no operator profiles here
        predictor.predict_latency_ms("m", 8, 1, 0)
