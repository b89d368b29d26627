"""This server's profiled meta-operator costs, read from the profile database.

`load_costs(state_dir)`: the `metaop_costs` rows `infless.transform.profile` wrote, over the
defaults of `transform.costs` (which stand in for any type never profiled). Gateway side:
never imports torch; reads the database only.
"""

from __future__ import annotations

from pathlib import Path

from infless.profiler.database import ProfileDatabase
from infless.profiler.prediction import default_db_path
from infless.transform.costs import META_OPS, LinearCost, MetaOp, MetaOpCosts


def load_costs(state_dir: Path) -> MetaOpCosts:
    path = default_db_path(state_dir)
    if not path.exists():
        return MetaOpCosts.default()
    with ProfileDatabase(path) as db:
        rows = db.metaop_costs()
    measured: dict[tuple[MetaOp, str], LinearCost] = {}
    for meta_op, kind, fixed, per_item, per_mib in rows:
        for known in META_OPS:
            if meta_op == known:
                measured[(known, kind)] = LinearCost(fixed, per_item, per_mib)
    if not measured:
        return MetaOpCosts.default()
    return MetaOpCosts.default().merged(measured, f"profiled ({len(measured)} entries)")
