"""INFless Table 4 (CPUs and GPUs per 100 RPS, cost per request) and Figure 15(a) (SLO
violations per load shape), from whole runs of the scale mix under each policy.

Table 4: the 40-function mix (`sim.mixes.scale_mix`, every load shape) sized for
`instances` INFless instances at its peaks, run under each policy in the fluid mode; the
resources held over the run per 100 answered RPS and the dollars per answered request at
§5.3's prices (`sim.results.SimResult.cost_per_request`). Figure 15(a): the same mix with
one load shape at a time, each policy's violation rate (late, refused or never served).
Pure: the runs are simulations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from infless.sim import mixes
from infless.sim.cluster import SimFunction
from infless.sim.command import servers, simulate_policy, truth_and_planner
from infless.sim.figures.table import Cell, Rows, bars
from infless.sim.results import SimResult
from infless.sim.settings import SimConfig

if TYPE_CHECKING:
    from matplotlib.figure import Figure as PlotFigure

POLICIES = ("openfaas+", "batch", "batch+rs", "infless")
FIG15_SHAPES: tuple[mixes.Shape, ...] = ("sporadic", "periodic", "bursty")


def _mix(
    cfg: SimConfig,
    models: Sequence[str],
    instances: int,
    shapes: Sequence[mixes.Shape],
    functions: int,
) -> tuple[SimFunction, ...]:
    base = mixes.scale_mix(functions, 1000.0, cfg.duration_s, shapes, models)
    _, planner = truth_and_planner(cfg)
    return mixes.sized(base, instances, servers(cfg), planner, cfg.scaling)


def table4(
    cfg: SimConfig,
    models: Sequence[str],
    instances: int,
    functions: int = 40,
    policies: Sequence[str] = POLICIES,
) -> Rows:
    """Rows of (policy, CPUs and GPUs per 100 RPS, cost per request, violations)."""
    mix = _mix(cfg, models, instances, mixes.SHAPES, functions)
    rows: list[dict[str, Cell]] = []
    for policy in policies:
        _, result = simulate_policy(mix, cfg, policy)
        rows.append(_cost_row(policy, result))
    title = (
        f"INFless Table 4: {cfg.servers} servers × {cfg.cpus_per_server} cores + "
        f"{cfg.gpus_per_server} GPUs, {functions} functions, ~{instances} instances at peak"
    )
    return Rows("table4", title, tuple(rows[0]), tuple(rows), _plot_cost)


def _cost_row(policy: str, result: SimResult) -> dict[str, Cell]:
    return {
        "policy": policy,
        "cpus_per_100_rps": round(result.cores_per_100_rps, 3),
        "gpus_per_100_rps": round(result.gpus_per_100_rps, 4),
        "cost_per_request_usd": float(f"{result.cost_per_request():.3g}"),
        "served_rps": round(result.served_rps, 1),
        "violation_rate": round(result.violation_rate, 4),
        "peak_instances": result.peak_instances,
    }


def _plot_cost(rows: Rows, figure: PlotFigure) -> None:
    labels = [str(r["policy"]) for r in rows.rows]
    bars(figure, 1, labels, rows.values("cpus_per_100_rps"), "CPUs per 100 RPS")
    bars(
        figure,
        2,
        labels,
        [1e6 * v for v in rows.values("cost_per_request_usd")],
        "cost per request (micro-dollars)",
    )


def fig15(
    cfg: SimConfig,
    models: Sequence[str],
    instances: int,
    functions: int = 40,
    policies: Sequence[str] = POLICIES,
    shapes: Sequence[mixes.Shape] = FIG15_SHAPES,
) -> Rows:
    """Rows of (shape, policy, violation rate, its misses by kind, CPUs per 100 RPS)."""
    rows: list[dict[str, Cell]] = []
    for shape in shapes:
        mix = _mix(cfg, models, instances, (shape,), functions)
        for policy in policies:
            _, result = simulate_policy(mix, cfg, policy)
            rows.append(
                {
                    "shape": shape,
                    "policy": policy,
                    "violation_rate": round(result.violation_rate, 4),
                    "late": result.late,
                    "rejected": result.rejected,
                    "unserved": result.unserved,
                    "cpus_per_100_rps": round(result.cores_per_100_rps, 3),
                }
            )
    title = f"INFless Fig. 15(a): SLO violations per load shape, {cfg.servers} servers"
    return Rows("fig15", title, tuple(rows[0]), tuple(rows), _plot_violations)


def _plot_violations(rows: Rows, figure: PlotFigure) -> None:
    ax = figure.add_subplot(1, 1, 1)
    shapes = list(dict.fromkeys(str(r["shape"]) for r in rows.rows))
    policies = list(dict.fromkeys(str(r["policy"]) for r in rows.rows))
    width = 0.8 / len(policies)
    for k, policy in enumerate(policies):
        xs = [i + k * width for i in range(len(shapes))]
        ys = [100 * v for v in (rows.values("violation_rate", policy=policy))]
        ax.bar(xs, ys, width, label=policy)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(shapes))], shapes)
    ax.set_ylabel("SLO violations (%)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
