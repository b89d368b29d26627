"""Issue 32, item 5: under which conditions non-uniform scaling (INFless) beats uniform
batching (BATCH), and where the advantage vanishes.

One base case — the Q&A models on 16 servers of 16 cores, a constant load INFless needs
about 100 instances for — and one change at a time: many small functions instead of three
large ones, low rates, heterogeneous servers, GPUs, bursty and sporadic loads. Each case runs
both policies on the same arrivals in the fluid mode; the advantage is BATCH's cost per
answered request (CPUs and GPUs at INFless §5.3's prices) over INFless's, with both
violation rates beside it (an advantage bought with violations is none).
Pure: the runs are simulations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from infless.sim import mixes
from infless.sim.cluster import SimFunction
from infless.sim.command import simulate_policy
from infless.sim.figures.table import Cell, Rows
from infless.sim.settings import SimConfig

if TYPE_CHECKING:
    from matplotlib.figure import Figure as PlotFigure


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    functions: int  # 3: the Q&A robot; more: the scale mix over the same models
    total_rps: float
    shape: mixes.Shape = "constant"
    server_shapes: tuple[tuple[int, int], ...] = ()  # (cores, GPUs), cycled
    gpus_per_server: int = 0
    gpu_core_reserve: int = 0  # cores kept for free GPU shares (`scaling.gpu_core_reserve`)


BASE_RPS = 40_000.0
CASES = (
    Case("base: 3 functions, constant, 16-core servers", 3, BASE_RPS),
    Case("low rate: 3 functions at 1/20 the load", 3, BASE_RPS / 20),
    Case("40 functions, same total", 40, BASE_RPS),
    Case("40 functions at 1/20 the load", 40, BASE_RPS / 20),
    Case(
        "heterogeneous servers (16, 12, 6, 4 cores)",
        3,
        BASE_RPS,
        server_shapes=((16, 0), (12, 0), (6, 0), (4, 0)),
    ),
    Case("2 GPUs per server", 3, BASE_RPS, gpus_per_server=2),
    Case(
        "2 GPUs per server, 2 cores kept for them",
        3,
        BASE_RPS,
        gpus_per_server=2,
        gpu_core_reserve=2,
    ),
    Case("bursty load", 3, BASE_RPS, "bursty"),
    Case("sporadic load", 3, BASE_RPS, "sporadic"),
)


def case_mix(case: Case, models: Sequence[str], duration_s: float) -> tuple[SimFunction, ...]:
    if case.functions == 3:
        return mixes.qa(case.total_rps, duration_s, case.shape)
    return mixes.scale_mix(case.functions, case.total_rps, duration_s, (case.shape,), models)


def advantage(
    models: Sequence[str],
    cfg: SimConfig | None = None,
    cases: Sequence[Case] = CASES,
) -> Rows:
    """Rows of (case, cost and violations under BATCH and INFless, BATCH / INFless cost)."""
    base = cfg or SimConfig(servers=16, mode="fluid", duration_s=30.0, step_s=0.25)
    rows: list[dict[str, Cell]] = []
    for case in cases:
        scaling = msgspec.structs.replace(base.scaling, gpu_core_reserve=case.gpu_core_reserve)
        run_cfg = msgspec.structs.replace(
            base,
            server_shapes=case.server_shapes,
            gpus_per_server=case.gpus_per_server,
            scaling=scaling,
        )
        mix = case_mix(case, models, run_cfg.duration_s)
        found = {p: simulate_policy(mix, run_cfg, p)[1] for p in ("batch", "infless")}
        batch, infless = found["batch"], found["infless"]
        ratio = batch.cost_per_request() / infless.cost_per_request()
        rows.append(
            {
                "case": case.name,
                "batch_cpus_per_100_rps": round(batch.cores_per_100_rps, 3),
                "infless_cpus_per_100_rps": round(infless.cores_per_100_rps, 3),
                "batch_violations": round(batch.violation_rate, 4),
                "infless_violations": round(infless.violation_rate, 4),
                "batch_over_infless_cost": round(ratio, 3),
            }
        )
    title = f"Where INFless beats BATCH: cost per request, {base.servers} servers"
    return Rows("conditions", title, tuple(rows[0]), tuple(rows), _plot)


def _plot(rows: Rows, figure: PlotFigure) -> None:
    ax = figure.add_subplot(1, 1, 1)
    names = [str(r["case"]) for r in rows.rows]
    ax.barh(names, rows.values("batch_over_infless_cost"), color="tab:blue")
    ax.axvline(1.0, color="grey", linestyle=":")
    ax.invert_yaxis()
    ax.set_xlabel("BATCH's cost per request / INFless's (> 1: INFless wins)")
    ax.grid(axis="x", alpha=0.3)
