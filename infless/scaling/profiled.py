"""Load the combined-operator predictor from what `infless profile` left in the state dir.

Gateway side and torch-free: it reads the cached operator graphs (`<state>/graphs/`) and the
operator profile database (`<state>/profiles.sqlite`); it never profiles (that imports torch
and takes minutes: run `infless profile NAMES` for it). Models without a cached graph are
not predicted; callers fall back to the instances' measured warm-up tables.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from pathlib import Path

from infless.profiler.database import ProfileDatabase
from infless.profiler.graph import OperatorGraph
from infless.profiler.prediction import default_db_path, predictor_from
from infless.profiler.predictor import CombinedOperatorPredictor

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
