"""Load the predictors `infless profile` made possible from what it left in the state dir.

Gateway side and torch-free: it reads the cached operator graphs (`<state>/graphs/`) and the
profile database (`<state>/profiles.sqlite`: operator profiles, and whole models measured on
GPUs); it never profiles (that imports torch and takes minutes: run `infless profile NAMES`,
or `infless profile --gpu NAMES`, for it). Models without a cached graph are not predicted
on CPUs; callers fall back to the instances' measured warm-up tables. With GPUs, every share
goes to the GPU profiles of this server's devices (`GpuProfilePredictor`), which say what
is missing when a model was not profiled there.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from infless.profiler.database import GpuLatencyRow, ProfileDatabase
from infless.profiler.graph import OperatorGraph
from infless.profiler.prediction import default_db_path, predictor_from
from infless.profiler.predictor import CombinedOperatorPredictor
from infless.scaling.gpu_profiles import GpuProfilePredictor
from infless.scaling.predictors import LatencyPredictor

log = logging.getLogger(__name__)


def cached_graph(state_dir: Path, model_key: str) -> OperatorGraph | None:
    """The newest cached graph of `model_key` (`<key>-<16 hex>.json`) in this infless's graph
    format, if any (graphs an older infless cached are left for `infless profile` to redo)."""
    pattern = re.compile(rf"^{re.escape(model_key)}-[0-9a-f]{{16}}\.json$")
    directory = state_dir / "graphs"
    if not directory.is_dir():
        return None
    found = sorted(
        (p for p in directory.iterdir() if pattern.match(p.name)), key=lambda p: p.stat().st_mtime
    )
    for path in reversed(found):
        try:
            return OperatorGraph.from_json(path.read_text(encoding="utf-8"))
        except ValueError:
            log.info("%s: not a graph of this infless's format; skipped", path)
    return None


def load_profiled_predictor(
    state_dir: Path, model_keys: Iterable[str]
) -> CombinedOperatorPredictor | None:
    """A predictor for the profiled models among `model_keys`, or None when there is none."""
    db_path = default_db_path(state_dir)
    if not db_path.is_file():
        return None
    try:
        graphs = [g for key in sorted(set(model_keys)) if (g := cached_graph(state_dir, key))]
        if not graphs:
            return None
        return predictor_from(ProfileDatabase(db_path), graphs)
    except Exception:  # a stale or foreign profile database must not stop autoscaling
        log.exception("ignoring the operator profiles in %s", state_dir)
        return None


def gpu_profile_rows(
    state_dir: Path, model_keys: Iterable[str], device_names: Sequence[str]
) -> list[GpuLatencyRow]:
    """The GPU profiles of `model_keys` on devices named `device_names` (none: no database)."""
    db_path = default_db_path(state_dir)
    if not db_path.is_file() or not device_names:
        return []
    try:
        with ProfileDatabase(db_path) as db:
            return db.gpu_latency(device_names, sorted(set(model_keys)))
    except Exception:  # a stale or foreign profile database must not stop autoscaling
        log.exception("ignoring the GPU profiles in %s", state_dir)
        return []


def load_planning_predictor(
    state_dir: Path, model_keys: Iterable[str], device_names: Sequence[str]
) -> LatencyPredictor | None:
    """The predictor for configurations no instance measured: on a server with GPUs (named
    as NVML names them) the GPU profiles for g > 0 in front of the operator profiles for
    g = 0; without GPUs the operator profiles alone (None when there are none)."""
    keys = sorted(set(model_keys))
    cpu = load_profiled_predictor(state_dir, keys)
    if not device_names:
        return cpu
    return GpuProfilePredictor(gpu_profile_rows(state_dir, keys, device_names), device_names, cpu)
