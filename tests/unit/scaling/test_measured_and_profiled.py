"""The autoscaler's predictor: measured warm-up tables first, operator profiles for the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from infless.profiler.database import ProfileDatabase, ProfileRow
from infless.profiler.graph import OperatorGraph, OpNode, OpSignature, TensorInfo
from infless.scaling.measured import MeasuredPredictor
from infless.scaling.profiled import cached_graph, load_profiled_predictor


class FixedPredictor:
    def __init__(self, known: str, value_ms: float) -> None:
        self.known, self.value_ms = known, value_ms

    def predict_latency_ms(
        self, model_key: str, batch_size: int, cpus: int, gpu_pct: int = 0
    ) -> float:
        if model_key != self.known:
            raise LookupError(model_key)
        return self.value_ms


def test_measured_tables_interpolate_and_beat_the_fallback() -> None:
    predictor = MeasuredPredictor(FixedPredictor("m", 99.0))
    predictor.observe("m", 1, {1: 2.0, 2: 3.0, 4: 5.0, 8: 9.0})
    assert predictor.predict_latency_ms("m", 4, 1) == 5.0
    assert predictor.predict_latency_ms("m", 3, 1) == pytest.approx(4.0)
    assert predictor.predict_latency_ms("m", 16, 1) == pytest.approx(17.0)  # last slope
    assert predictor.predict_latency_ms("m", 4, 2) == 99.0  # not measured: the profiles say


def test_without_profiles_an_unmeasured_core_count_is_conservative() -> None:
    predictor = MeasuredPredictor(FixedPredictor("other", 1.0))
    predictor.observe("m", 2, {1: 4.0})
    assert predictor.predict_latency_ms("m", 1, 4) == 4.0  # no speed-up assumed
    assert predictor.predict_latency_ms("m", 1, 1) == 8.0  # proportionally slower
    with pytest.raises(LookupError):
        predictor.predict_latency_ms("unknown", 1, 1)


def _signature() -> OpSignature:
    return OpSignature("linear", "function:torch.relu", "{}", (TensorInfo((1, 4), "float32", 0),))


def test_profiles_and_cached_graphs_in_a_state_dir_become_predictions(tmp_path: Path) -> None:
    assert load_profiled_predictor(tmp_path, ["tiny"]) is None  # nothing profiled yet
    signature = _signature()
    graph = OperatorGraph("tiny", (OpNode("a", signature, ()),), ("a",), "fx")
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "tiny-0123456789abcdef.json").write_text(graph.to_json())
    (tmp_path / "graphs" / "tiny-extra-0123456789abcdef.json").write_text("not this one")
    database = ProfileDatabase(tmp_path / "profiles.sqlite")
    database.add_profiles(
        signature,
        [ProfileRow(signature.key, b, c, 0, 1.0 * b / c) for b in (1, 2, 4) for c in (1, 2)],
    )
    assert cached_graph(tmp_path, "tiny") is not None
    # an older infless's graph, cached later, is skipped rather than failing the predictor
    (tmp_path / "graphs" / "tiny-fedcba9876543210.json").write_text('{"format": 0}')
    assert cached_graph(tmp_path, "tiny") == graph
    predictor = load_profiled_predictor(tmp_path, ["tiny", "unprofiled"])
    assert predictor is not None
    one = predictor.predict_latency_ms("tiny", 1, 1)
    assert predictor.predict_latency_ms("tiny", 4, 1) > one
    assert predictor.predict_latency_ms("tiny", 4, 2) < predictor.predict_latency_ms("tiny", 4, 1)
