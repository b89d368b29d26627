"""INFless Figure 17: scheduling overhead vs instances, and the fragments each policy leaves.

For each instance count the 40-function scale mix (`sim.mixes.scale_mix`) is sized so that
INFless's planner starts about that many instances for its peaks on empty servers; the
plan is timed (`sim.overhead.schedule_once`: the policy the autoscaler calls, best of its
repetitions, wall clock) and its fragment ratio read. At the largest count every policy
plans the same loads, for panel (b). Pure apart from the timing `schedule_once` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from infless.scaling.config import ScalingConfig
from infless.scaling.predictors import LatencyPredictor
from infless.scaling.view import ServerView
from infless.sim import mixes
from infless.sim.figures.table import Cell, Rows
from infless.sim.overhead import schedule_once

POLICIES = ("infless", "batch+rs", "batch", "openfaas+")
GOAL_US_PER_INSTANCE = 100.0  # issue 32: ≤ 0.1 ms per instance
GOAL_TOTAL_S = 0.25  # ... and ≤ 0.25 s for 10,000 instances
GOAL_FRAGMENT = 0.15  # INFless: "a resource fragment ratio as low as 15 %"

if TYPE_CHECKING:
    from matplotlib.figure import Figure as PlotFigure


def fig17(
    servers: Sequence[ServerView],
    predictor: LatencyPredictor,
    scaling: ScalingConfig,
    models: Sequence[str],
    counts: Sequence[int] = (1000, 2500, 5000, 10000),
    functions: int = 40,
    policies: Sequence[str] = POLICIES,
    repeats: int = 3,
) -> Rows:
    """Rows of (policy, instances, seconds, us per instance, fragments): INFless at every
    count, and every policy at the last."""
    base = mixes.scale_mix(functions, 1000.0, 60.0, ("constant",), models)
    rows: list[dict[str, Cell]] = []
    for k, count in enumerate(counts):
        mix = mixes.sized(base, count, servers, predictor, scaling)
        last = k == len(counts) - 1
        for policy in policies if last else ("infless",):
            found = schedule_once(mix, servers, predictor, scaling, policy, repeats)
            rows.append(
                {
                    "target": count,
                    "policy": policy,
                    "instances": found.instances,
                    "total_s": round(found.seconds, 4),
                    "us_per_instance": round(found.us_per_instance, 2),
                    "cpu_fragment": round(found.cpu_fragment, 4),
                    "gpu_fragment": round(found.gpu_fragment, 4),
                    "active_servers": found.active_servers,
                    "unmet_rps": round(found.unmet_rps, 1),
                }
            )
    return Rows(
        "fig17",
        f"INFless Fig. 17 on {len(servers)} simulated servers, {functions} functions",
        tuple(rows[0]),
        tuple(rows),
        _plot,
    )


def _plot(rows: Rows, figure: PlotFigure) -> None:
    ax = figure.add_subplot(1, 2, 1)
    instances = rows.values("instances", policy="infless")
    ax.plot(instances, rows.values("total_s", policy="infless"), marker="o", label="total (s)")
    ax.axhline(GOAL_TOTAL_S, color="grey", linestyle=":", label="goal: 0.25 s")
    ax.set_xlabel("instances planned at once (INFless)")
    ax.set_ylabel("scheduling time (s)")
    twin = ax.twinx()
    per_us = rows.values("us_per_instance", policy="infless")
    twin.plot(instances, per_us, marker="s", color="tab:orange", label="per instance (us)")
    twin.set_ylabel("per instance (us)")
    twin.set_ylim(0, max([*per_us, GOAL_US_PER_INSTANCE]) * 1.2)
    ax.legend(loc="upper left")
    twin.legend(loc="lower right")
    ax.set_title("(a) scheduling overhead")
    last = max(int(r["target"]) for r in rows.rows)
    labels = [str(r["policy"]) for r in rows.rows if r["target"] == last]
    panel = figure.add_subplot(1, 2, 2)
    xs = list(range(len(labels)))
    for shift, column in ((-0.2, "cpu_fragment"), (0.2, "gpu_fragment")):
        panel.bar([x + shift for x in xs], rows.values(column, target=last), 0.4, label=column)
    panel.set_xticks(xs, labels)
    panel.axhline(GOAL_FRAGMENT, color="grey", linestyle=":", label="goal: 15 %")
    panel.set_ylabel("fragment ratio on the servers used")
    panel.legend()
    panel.set_title(f"(b) fragments at {last} instances (INFless's loads)")
