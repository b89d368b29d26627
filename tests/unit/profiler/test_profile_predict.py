"""A small real profile + predict of tiny MLPs (relative behaviour only, no wall-clock bounds)."""

from __future__ import annotations

import itertools
from pathlib import Path

from torch import nn

from infless.profiler.database import ProfileDatabase
from infless.profiler.extract import extract_graph
from infless.profiler.operators import ProfilePlan
from infless.profiler.service import build_predictor
from infless.types import TensorSpec

PLAN = ProfilePlan(batches=(1, 4, 16), threads=(1,), budget_s=0.01, min_reps=3, max_reps=5)


def _mlp(width: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(32, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 4)
    )


def test_profile_then_predict_a_tiny_mlp(tmp_path: Path) -> None:
    spec = (TensorSpec("x", "float32", (32,)),)
    narrow = extract_graph(_mlp(8), spec, model_key="narrow")
    wide = extract_graph(_mlp(1024), spec, model_key="wide")
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        # operators missing from the database are profiled on demand
        predictor = build_predictor(db, [narrow, wide], plan=PLAN, offset_pct=10.0)
        ops, _rows = db.counts()
        assert ops == len({**narrow.signatures(), **wide.signatures()})
    assert predictor.models() == ["narrow", "wide"]
    for model in ("narrow", "wide"):
        by_batch = [predictor.predict_latency_ms(model, b, 1) for b in (1, 2, 4, 8, 16, 32)]
        assert all(x <= y for x, y in itertools.pairwise(by_batch))
        assert predictor.predict_latency_ms(model, 4, 2) <= predictor.predict_latency_ms(
            model, 4, 1
        )
    # a 1024-wide MLP does ~1000x the arithmetic of an 8-wide one
    assert predictor.predict_raw_ms("wide", 16, 1) > predictor.predict_raw_ms("narrow", 16, 1)
    # the second time, everything is in the database: no profiling plan needed
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        again = build_predictor(db, [wide], offset_pct=0.0)
    assert again.predict_raw_ms("wide", 16, 1) > 0.0
