"""The pure predictor: interpolation, monotonicity, the offset, chains and branches."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infless.profiler.database import ProfileRow
from infless.profiler.graph import OperatorGraph, OpNode, OpSignature, TensorInfo
from infless.profiler.predictor import (
    DEFAULT_OFFSET_PCT,
    Calibration,
    CombinedOperatorPredictor,
    MissingProfile,
)
from infless.profiler.tables import BatchCurve, OpTable


def _sig(kind: str) -> OpSignature:
    return OpSignature(kind, f"function:torch.{kind}", "{}", (TensorInfo((1, 4), "float32", 0),))


def _rows(kind: str, table: dict[tuple[int, int], float]) -> list[ProfileRow]:
    return [ProfileRow(_sig(kind).key, b, c, 0, t) for (b, c), t in table.items()]


def _linear_table(per_sample_ms: float, fixed_ms: float = 0.0) -> dict[tuple[int, int], float]:
    return {
        (b, c): (fixed_ms + per_sample_ms * b) / c for b in (1, 2, 4, 8, 16, 32) for c in (1, 2)
    }


def _diamond() -> OperatorGraph:
    nodes = (
        OpNode("a", _sig("a"), ()),
        OpNode("b", _sig("b"), ("a",)),
        OpNode("c", _sig("c"), ("a",)),
        OpNode("d", _sig("d"), ("b", "c")),
    )
    return OperatorGraph("diamond", nodes, ("d",), "fx")


def _predictor(**kwargs: object) -> CombinedOperatorPredictor:
    predictor = CombinedOperatorPredictor(**kwargs)  # type: ignore[arg-type]
    for kind, per_sample in (("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0)):
        predictor.add_profiles(_rows(kind, _linear_table(per_sample)))
    predictor.register("diamond", _diamond())
    return predictor


def test_interpolation_is_linear_between_profiled_batches() -> None:
    curve = BatchCurve.of([(1, 1.0), (2, 2.0), (4, 3.0), (8, 7.0)])
    assert curve.at(3) == pytest.approx(2.5)
    assert curve.at(6) == pytest.approx(5.0)
    assert curve.at(4) == pytest.approx(3.0)


def test_beyond_the_profiled_batches_it_extrapolates_with_the_last_slope() -> None:
    curve = BatchCurve.of([(1, 1.0), (16, 10.0), (32, 18.0)])
    assert curve.at(64) == pytest.approx(18.0 + 0.5 * 32)
    assert BatchCurve.of([(4, 2.0)]).at(8) == pytest.approx(4.0)  # one point: proportional
    assert BatchCurve.of([(4, 2.0), (8, 3.0)]).at(1) == pytest.approx(2.0)  # below: clamped


def test_an_operator_table_keeps_its_profile_and_takes_the_best_thread_count() -> None:
    table = OpTable.of(
        [
            ProfileRow("k", 1, 1, 0, 2.0),
            ProfileRow("k", 2, 1, 0, 1.5),  # faster at a larger batch: kept as measured
            ProfileRow("k", 4, 1, 0, 4.0),
            ProfileRow("k", 1, 2, 0, 3.0),  # slower with more threads: one thread is better
            ProfileRow("k", 2, 2, 0, 1.0),
            ProfileRow("k", 4, 2, 0, 2.5),
        ]
    )
    assert table.at(2, 1) == pytest.approx(1.5)
    assert table.at(1, 2) == pytest.approx(2.0)
    assert table.at(3, 2) <= table.at(3, 1)
    assert table.at(8, 4) == table.at(8, 2)  # beyond the profiled threads: the best known


def _chain_of(tables: dict[str, dict[int, float]]) -> CombinedOperatorPredictor:
    """A chain model of one operator per entry, each profiled on one thread only."""
    predictor = CombinedOperatorPredictor(offset_pct=0.0)
    names = list(tables)
    for kind, times in tables.items():
        predictor.add_profiles(ProfileRow(_sig(kind).key, b, 1, 0, t) for b, t in times.items())
    nodes = tuple(
        OpNode(kind, _sig(kind), (names[i - 1],) if i else ()) for i, kind in enumerate(names)
    )
    predictor.register("chain", OperatorGraph("chain", nodes, (names[-1],), "fx"))
    return predictor


def test_the_model_total_is_made_monotone_over_the_batch_not_each_operator() -> None:
    # "a" runs faster at 16 than at 8 (another kernel); "b" grows enough to outweigh it
    predictor = _chain_of({"a": {1: 1.0, 8: 8.0, 16: 6.0}, "b": {1: 1.0, 8: 4.0, 16: 8.0}})
    assert predictor.predict_raw_ms("chain", 8, 1) == pytest.approx(12.0)
    assert predictor.predict_raw_ms("chain", 16, 1) == pytest.approx(14.0)  # not 8 + 8
    # alone, the dip would make the model faster at 16: the prediction holds the level of 8
    alone = _chain_of({"a": {1: 1.0, 8: 8.0, 16: 6.0}})
    assert [alone.predict_raw_ms("chain", b, 1) for b in (8, 12, 16, 20)] == pytest.approx(
        [8.0, 8.0, 8.0, 8.0]
    )
    assert alone.predict_raw_ms("chain", 32, 1) == pytest.approx(8.0)  # flat, never falling


def test_chains_add_and_branches_take_the_max_or_the_sum() -> None:
    per_sample = 1.0 + max(2.0, 3.0) + 4.0
    assert _predictor(branch_mode="max", offset_pct=0.0).predict_raw_ms(
        "diamond", 4, 1
    ) == pytest.approx(4 * per_sample)
    assert _predictor(branch_mode="sum").predict_raw_ms("diamond", 4, 2) == pytest.approx(
        4 * (1 + 2 + 3 + 4) / 2
    )


def test_the_safety_offset_is_ten_percent_by_default_and_configurable() -> None:
    assert DEFAULT_OFFSET_PCT == 10.0
    default = _predictor()
    raw = default.predict_raw_ms("diamond", 8, 1)
    assert default.predict_latency_ms("diamond", 8, 1) == pytest.approx(raw * 1.10)
    assert _predictor(offset_pct=25.0).predict_latency_ms("diamond", 8, 1) == pytest.approx(
        raw * 1.25
    )
    assert _predictor(offset_pct=0.0).predict_latency_ms("diamond", 8, 1) == pytest.approx(raw)


def test_calibrated_overheads_are_added_per_call() -> None:
    plain = _predictor(offset_pct=0.0).predict_raw_ms("diamond", 1, 1)
    calibrated = _predictor(
        offset_pct=0.0, calibration=Calibration(module_call_us=0.0, op_switch_us=500.0)
    )
    assert calibrated.predict_raw_ms("diamond", 1, 1) == pytest.approx(plain + 4 * 0.5)


def test_missing_profiles_and_models_are_reported() -> None:
    predictor = CombinedOperatorPredictor()
    with pytest.raises(MissingProfile, match="infless profile"):
        predictor.register("diamond", _diamond())
    with pytest.raises(MissingProfile, match="not registered"):
        predictor.predict_latency_ms("nothing", 1, 1)
    with pytest.raises(MissingProfile, match="gpu_pct=50"):
        _predictor().predict_latency_ms("diamond", 1, 1, gpu_pct=50)
    with pytest.raises(ValueError, match="batch"):
        _predictor().predict_latency_ms("diamond", 0, 1)


noisy_ms = st.floats(min_value=0.001, max_value=100.0, allow_nan=False)


twelve_ms = st.lists(noisy_ms, min_size=12, max_size=12)


@settings(max_examples=60, deadline=None)
@given(twelve_ms, twelve_ms, twelve_ms)
def test_predictions_are_monotone_whatever_the_profiles(
    first: list[float], second: list[float], cold: list[float]
) -> None:
    # the diamond reads 64 bytes per sample: from b16 to b47 its evicted share grows 0 -> 1
    predictor = CombinedOperatorPredictor(
        branch_mode="max", calibration=Calibration(llc_effective_bytes=4_000.0)
    )
    configs = [(b, c) for c in (1, 2) for b in (1, 2, 4, 8, 16, 32)]
    for kind, times in (("a", first), ("b", second), ("c", second[::-1]), ("d", first[::-1])):
        rows = _rows(kind, dict(zip(configs, times, strict=True)))
        predictor.add_profiles(replace(r, cold_ms=c) for r, c in zip(rows, cold, strict=True))
    predictor.register("diamond", replace(_diamond(), weight_bytes=1_000))
    for cpus in (1, 2, 3):
        latencies = [predictor.predict_latency_ms("diamond", b, cpus) for b in range(1, 70)]
        assert all(x <= y + 1e-9 for x, y in itertools.pairwise(latencies))
    for batch in (1, 3, 32, 50):
        by_threads = [predictor.predict_latency_ms("diamond", batch, c) for c in (1, 2, 3, 8)]
        assert all(x >= y - 1e-9 for x, y in itertools.pairwise(by_threads))


def test_breakdown_sums_to_the_prediction_in_sum_mode() -> None:
    predictor = _predictor(offset_pct=0.0)
    parts = predictor.breakdown_ms("diamond", 4, 1)
    assert sum(parts.values()) == pytest.approx(predictor.predict_raw_ms("diamond", 4, 1))
    assert set(parts) == {"overhead", "a", "b", "c", "d"}


def _cold_diamonds(calibration: Calibration, cold_factor: float) -> CombinedOperatorPredictor:
    """A predictor whose diamond operators take 1 ms per sample warm, `cold_factor`x cold."""
    predictor = CombinedOperatorPredictor(offset_pct=0.0, calibration=calibration)
    for kind in "abcd":
        rows = _rows(kind, _linear_table(1.0))
        predictor.add_profiles(replace(r, cold_ms=cold_factor * r.time_ms) for r in rows)
    return predictor


def test_models_larger_than_the_cache_use_the_cold_weight_profiles() -> None:
    predictor = _cold_diamonds(Calibration(llc_bytes=1000.0), 2.0)
    small = _diamond()
    big = replace(small, model_key="big", weight_bytes=10_000)
    predictor.register("small", small)
    predictor.register("big", big)
    assert predictor.predict_raw_ms("big", 4, 1) == pytest.approx(
        2 * predictor.predict_raw_ms("small", 4, 1)
    )


def test_the_measured_effective_cache_decides_which_models_are_cold() -> None:
    nominal = Calibration(llc_bytes=16_000.0)  # nothing measured: 3/4 of it
    assert nominal.cold_above_bytes == pytest.approx(12_000.0)
    measured = replace(nominal, llc_effective_bytes=4_000.0)
    assert measured.cold_above_bytes == pytest.approx(4_000.0)
    predictor = _cold_diamonds(measured, 3.0)
    # the diamond's four operators read 16 bytes per sample each: 128 bytes at b2
    fits = replace(_diamond(), model_key="fits", weight_bytes=1_800)  # under half of 4 kB
    evicted = replace(_diamond(), model_key="evicted", weight_bytes=5_000)  # < 3/4 of 16 kB
    predictor.register("fits", fits)
    predictor.register("evicted", evicted)
    assert predictor.predict_raw_ms("evicted", 2, 1) == pytest.approx(
        3 * predictor.predict_raw_ms("fits", 2, 1)
    )


def test_between_half_the_effective_cache_and_all_of_it_a_share_of_the_weights_is_cold() -> None:
    calibration = Calibration(llc_effective_bytes=4_000.0)
    assert calibration.evicted_share(2_000.0) == 0.0
    assert calibration.evicted_share(3_000.0) == pytest.approx(0.5)
    assert calibration.evicted_share(4_000.0) == 1.0
    assert calibration.evicted_share(9_000.0) == 1.0
    predictor = _cold_diamonds(calibration, 3.0)
    warm = replace(_diamond(), model_key="warm", weight_bytes=0)
    partly = replace(_diamond(), model_key="partly", weight_bytes=2_500 - 4 * 16)  # 2.5 kB at b1
    predictor.register("warm", warm)
    predictor.register("partly", partly)
    # a quarter of the way from 2 kB to 4 kB: warm + 1/4 of the cold extra (2x warm)
    assert predictor.predict_raw_ms("partly", 1, 1) == pytest.approx(
        1.5 * predictor.predict_raw_ms("warm", 1, 1)
    )


def test_a_larger_batch_streams_more_activations_and_finds_more_weights_evicted() -> None:
    calibration = Calibration(llc_effective_bytes=4_000.0)
    predictor = CombinedOperatorPredictor(offset_pct=0.0, calibration=calibration)
    wide = OpSignature("w", "function:torch.w", "{}", (TensorInfo((1, 250), "float32", 0),))
    assert wide.inputs[0].bytes_per_sample() == 1_000
    predictor.add_profiles(
        ProfileRow(wide.key, b, 1, 0, float(b), cold_ms=2.0 * b) for b in (1, 2, 4)
    )
    graph = OperatorGraph("g", (OpNode("w", wide, ()),), ("w",), "fx", weight_bytes=1_000)
    assert graph.activation_bytes_per_sample() == 1_000
    predictor.register("g", graph)
    assert predictor.predict_raw_ms("g", 1, 1) == pytest.approx(1.0)  # 2 kB: all warm
    assert predictor.predict_raw_ms("g", 2, 1) == pytest.approx(2.0 + 0.5 * 2.0)  # 3 kB: half
    assert predictor.predict_raw_ms("g", 4, 1) == pytest.approx(8.0)  # 5 kB: all cold


def test_table_lookups_are_predicted_from_their_cold_profiles_in_any_model() -> None:
    lookup = OpSignature(
        "embedding", "function:torch.embedding", "{}", (TensorInfo((1, 4), "int64", 0, 9),)
    )
    assert lookup.is_lookup
    assert not _sig("linear").is_lookup
    predictor = CombinedOperatorPredictor(offset_pct=0.0)
    for sig in (lookup, _sig("linear")):
        predictor.add_profiles([ProfileRow(sig.key, 1, 1, 0, 1.0, cold_ms=5.0)])
    nodes = (OpNode("ids", lookup, ()), OpNode("dense", _sig("linear"), ("ids",)))
    graph = OperatorGraph("small", nodes, ("dense",), "fx", weight_bytes=1024)
    predictor.register("small", graph)  # its weights fit the caches: warm, but the rows do not
    assert predictor.predict_raw_ms("small", 1, 1) == pytest.approx(5.0 + 1.0)
