"""Tetris's DTS against INFless at scale: memory per served request, total memory, cores and
SLO violations on one workload (Tetris Fig. 13's DTS bar, issue 32 item 5).

Four approaches on the same mix of functions, servers and seeds:

- `infless`: Algorithm 1, placement by Equation 10 alone (no store affinity);
- `infless+affinity`: the servers report the store's affinity (`SimConfig.store_affinity`)
  and Equation 10 weighs it (`scaling.affinity_weight`, `AFFINITY_WEIGHT`);
- `dts`: the DTS policy (`scaling.dts`) at the default alpha, with the store's affinity;
- `dts alpha=0`: the same with cores free, as Tetris shipped.

Each runs with the autoscaler's feedback (the server's default) and without it: the feedback
adds capacity on a high p99 or refusals, and on a cluster it fills, who holds the cores
when a burst comes decides most violations.

Memory is sampled at every tick with the store's sharing counted (`sim.usage`). "Per served
request" is MiB held per 100 requests answered each second. Pure: the runs are simulations.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from infless.sim import mixes
from infless.sim.command import servers, simulate_policy, truth_and_planner
from infless.sim.figures.table import Cell, Rows, bars
from infless.sim.results import SimResult
from infless.sim.settings import SimConfig

if TYPE_CHECKING:
    from matplotlib.figure import Figure as PlotFigure

AFFINITY_WEIGHT = 2.0  # 0.5 (the server's default) moves no placement on these models


@dataclass(frozen=True, slots=True)
class Approach:
    """One bar: a policy, whether the servers report the store's affinity, and its knobs."""

    name: str
    policy: str
    store_affinity: bool
    affinity_weight: float = 0.0
    dts_alpha_mib_per_core: float | None = None  # None: the config's default

    def configure(self, cfg: SimConfig, seed: int, feedback: bool = True) -> SimConfig:
        """`cfg` with this approach's knobs, `seed`, and the autoscaler's feedback on or off."""
        scaling = msgspec.structs.replace(
            cfg.scaling,
            affinity_weight=self.affinity_weight,
            feedback=msgspec.structs.replace(cfg.scaling.feedback, enabled=feedback),
        )
        if self.dts_alpha_mib_per_core is not None:
            alpha = self.dts_alpha_mib_per_core
            scaling = msgspec.structs.replace(scaling, dts_alpha_mib_per_core=alpha)
        return msgspec.structs.replace(
            cfg, scaling=scaling, store_affinity=self.store_affinity, seed=seed
        )


APPROACHES = (
    Approach("infless", "infless", store_affinity=False),
    Approach("infless+affinity", "infless", store_affinity=True, affinity_weight=AFFINITY_WEIGHT),
    Approach("dts", "dts", store_affinity=True),
    Approach("dts alpha=0", "dts", store_affinity=True, dts_alpha_mib_per_core=0.0),
)


def _row(approach: Approach, feedback: bool, results: Sequence[SimResult]) -> dict[str, Cell]:
    """One approach's means over its seeds, with the violations' range."""

    def mean(values: Sequence[float]) -> float:
        return statistics.fmean(values) if values else 0.0

    memory = [r.usage.memory_mean_mib for r in results]
    per_100 = [100 * r.usage.memory_mean_mib / r.served_rps for r in results if r.served_rps > 0]
    violations = [r.violation_rate for r in results]
    return {
        "approach": approach.name,
        "feedback": "on" if feedback else "off",
        "mib_per_100_rps": round(mean(per_100), 2),
        "memory_mean_mib": round(mean(memory), 0),
        "memory_peak_mib": round(mean([r.usage.memory_peak_mib for r in results]), 0),
        "cores_mean": round(mean([r.mean_cores for r in results]), 1),
        "cores_per_100_rps": round(mean([r.cores_per_100_rps for r in results]), 3),
        "gpus_mean": round(mean([r.usage.gpu_seconds / r.duration_s for r in results]), 2),
        "violation_rate": round(mean(violations), 4),
        "violations_min": round(min(violations), 4),
        "violations_max": round(max(violations), 4),
        "served_rps": round(mean([r.served_rps for r in results]), 0),
    }


def compare(
    cfg: SimConfig,
    models: Sequence[str],
    instances: int,
    functions: int = 40,
    seeds: Sequence[int] = (1,),
    feedback: Sequence[bool] = (True, False),
    approaches: Sequence[Approach] = APPROACHES,
) -> Rows:
    """Rows of each approach's memory, cores and violations on the mix of `functions`
    functions of `models` sized for about `instances` INFless instances at its peaks, with
    the autoscaler's feedback (`scaling.feedback`: measured p99 and refusals add capacity)
    on and off."""
    mix = mixes.sized(
        mixes.scale_mix(functions, 1000.0, cfg.duration_s, mixes.SHAPES, models),
        instances,
        servers(cfg),
        truth_and_planner(cfg)[1],
        cfg.scaling,
    )
    rows: list[dict[str, Cell]] = []
    for enabled in feedback:
        for approach in approaches:
            results = [
                simulate_policy(mix, approach.configure(cfg, seed, enabled), approach.policy)[1]
                for seed in seeds
            ]
            rows.append(_row(approach, enabled, results))
    title = f"Tetris DTS vs INFless: memory and cores per served request, {cfg.servers} servers"
    return Rows("dts", title, tuple(rows[0]), tuple(rows), _plot)


def _plot(rows: Rows, figure: PlotFigure) -> None:
    labels = [f"{r['approach']}, fb {r['feedback']}" for r in rows.rows]
    memory = rows.values("mib_per_100_rps")
    bars(figure, 1, labels, memory, "MiB held per 100 RPS", columns=3)
    bars(figure, 2, labels, rows.values("cores_per_100_rps"), "cores per 100 RPS", columns=3)
    violations = [100 * v for v in rows.values("violation_rate")]
    bars(figure, 3, labels, violations, "SLO violations (%)", columns=3)
    for ax in figure.axes:  # eight long labels: steeper and smaller than `bars` sets them
        ax.tick_params(axis="x", labelrotation=70, labelsize=8)
