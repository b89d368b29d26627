"""INFaaS's claim, model-less against fixed variants: SLO violations, cost and accuracy.

The simulator's model-less step scenario (`sim.scenarios.modelless_step`: one application
of a small text model with fp32, bf16 and int8 variants, profiled as the variant generator
writes them — synthetic profiles, stated in that module — under a load stepping low → high
→ low), run once per seed: model-less serving (the server's variant monitor and vertical
scaling), the fp32 variant alone and the fastest alone, both replicated by the same
autoscaler. Cost is the core-seconds held at INFless §5.3's core price.
Pure: the runs are simulations.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from infless.sim.figures.table import Cell, Rows, bars
from infless.sim.results import CPU_PRICE_PER_HOUR, AppResult
from infless.sim.scenarios import modelless_step
from infless.sim.settings import SimConfig

if TYPE_CHECKING:
    from matplotlib.figure import Figure as PlotFigure


def fig_modelless(cfg: SimConfig, seeds: Sequence[int] = (1, 2, 3)) -> Rows:
    """Rows of (approach, violations, p99, accuracy, cost) averaged over `seeds`, with the
    spread of the violations."""
    runs: dict[str, list[AppResult]] = {}
    for seed in seeds:
        found = modelless_step(msgspec.structs.replace(cfg, seed=seed))
        for approach, result in found.items():
            runs.setdefault(approach, []).append(result)
    rows: list[dict[str, Cell]] = []
    for approach, results in runs.items():
        violations = [r.violation_rate for r in results]
        dollars = [r.core_seconds * CPU_PRICE_PER_HOUR / 3600 for r in results]
        rows.append(
            {
                "approach": approach,
                "violation_rate": round(statistics.fmean(violations), 4),
                "violations_min": round(min(violations), 4),
                "violations_max": round(max(violations), 4),
                "p99_ms": round(statistics.fmean(r.p99_ms for r in results), 1),
                "mean_accuracy": round(statistics.fmean(r.mean_accuracy for r in results), 4),
                "core_seconds": round(statistics.fmean(r.core_seconds for r in results), 1),
                "cost_per_request_usd": float(
                    f"{statistics.fmean(dollars) / max(1, results[0].requests):.3g}"
                ),
            }
        )
    title = f"INFaaS: model-less vs fixed variants, {len(seeds)} seeds"
    return Rows("infaas", title, tuple(rows[0]), tuple(rows), _plot)


def _plot(rows: Rows, figure: PlotFigure) -> None:
    labels = [str(r["approach"]) for r in rows.rows]
    bars(figure, 1, labels, [100 * v for v in rows.values("violation_rate")], "SLO violations (%)")
    bars(figure, 2, labels, rows.values("core_seconds"), "core-seconds held")
