"""Torch-free prediction from what `infless profile` stored: the profile database's path and
a combined-operator predictor built from it and cached operator graphs.

The gateway's autoscaler reads profiles through here (`scaling.profiled`); profiling itself,
which imports torch, is `service`'s and `profiling`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Literal

from infless.profiler.database import ProfileDatabase
from infless.profiler.graph import OperatorGraph
from infless.profiler.predictor import Calibration, CombinedOperatorPredictor
from infless.profiler.speed import SpeedIndex, typical_index
from infless.profiler.structure import BranchMode

DEFAULT_STATE_DIR = Path("state")
DEFAULT_DB_NAME = "profiles.sqlite"


def default_db_path(state_dir: Path = DEFAULT_STATE_DIR) -> Path:
    return state_dir / DEFAULT_DB_NAME


def predictor_from(
    db: ProfileDatabase,
    graphs: Iterable[OperatorGraph],
    *,
    offset_pct: float | None = None,
    branch_mode: BranchMode = "sum",
    statistic: Literal["typical", "min"] = "typical",
    speed: Literal["typical", "as-measured"] = "typical",
    speed_now: SpeedIndex | None = None,
) -> CombinedOperatorPredictor:
    """A predictor with `graphs` registered, from the profiles `db` holds.

    `statistic` picks which stored figure an operator costs: the typical time (the mean of
    the fastest half of the repetitions, the default) or the fastest repetition. `speed`
    "typical" rescales every row from the speed index stored with it to the database's
    median index, and predicts for `speed_now` when given (`service.measure_speed_now`);
    "as-measured" takes the stored times as they are (no speed correction at all).
    """
    graphs = list(graphs)
    predictor = CombinedOperatorPredictor(calibration=Calibration.of(db.calibration()))
    if speed == "typical":
        predictor.profile_speed = typical_index(db.speed_points())
        predictor.speed_now = speed_now
    predictor.branch_mode = branch_mode
    if offset_pct is not None:
        predictor.offset_pct = offset_pct
    keys = [k for g in graphs for k in g.signatures()]
    rows = [row for found in db.rows_for(keys).values() for row in found]
    if statistic == "min":
        rows = [replace(row, time_ms=row.min_ms) for row in rows]
    predictor.add_profiles(rows)
    for graph in graphs:
        predictor.register(graph.model_key, graph)
    return predictor
