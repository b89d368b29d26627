"""INFless Figure 11: the most RPS each policy sustains on the paper's testbed, and ablations.

The paper stress-tests OpenFaaS+, BATCH and INFless with a constant load on 8 servers (16
cores and 2 GPUs each) and reports the maximum RPS each achieves, for OSVT and the Q&A
robot; the ablations disable non-uniform batching (`infless-nobatch`), resource scheduling
(`infless-nors`) or the predictor's accuracy (`infless-x1.5`, `infless-x2`). Here the
maximum RPS is the largest constant total rate at which a fluid run (`sim.fluid`) keeps its
SLO violations (late, refused or never served) at or below `MAX_VIOLATIONS`: doubled from
`start_rps` until it fails, then bisected to `RESOLUTION`. Pure: the runs are simulations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec

from infless.sim import mixes
from infless.sim.cluster import SimFunction
from infless.sim.command import simulate_policy
from infless.sim.figures.table import Cell, Rows
from infless.sim.settings import SimConfig

if TYPE_CHECKING:
    from matplotlib.figure import Figure as PlotFigure

POLICIES = (
    "openfaas+",
    "batch",
    "batch+rs",
    "infless",
    "infless-nobatch",
    "infless-nors",
    "infless-x1.5",
    "infless-x2",
)
APPS: dict[str, Callable[[float, float], tuple[SimFunction, ...]]] = {
    "osvt": mixes.osvt,
    "qa": mixes.qa,
}
MAX_VIOLATIONS = 0.01
RESOLUTION = 0.03  # bisect until the bracket is within 3 % of its lower end


def local_cluster(duration_s: float = 20.0) -> SimConfig:
    """INFless's local cluster: 8 servers of 16 cores and 2 GPUs."""
    return SimConfig(
        servers=8,
        cpus_per_server=16,
        gpus_per_server=2,
        mode="fluid",
        duration_s=duration_s,
        step_s=0.25,
    )


def with_core_reserve(cfg: SimConfig, cores: int) -> SimConfig:
    """`cfg` with `scaling.gpu_core_reserve = cores` (cores held back for free GPU shares)."""
    scaling = msgspec.structs.replace(cfg.scaling, gpu_core_reserve=cores)
    return msgspec.structs.replace(cfg, scaling=scaling)


def sustains(app: str, rate_rps: float, cfg: SimConfig, policy: str) -> bool:
    """Whether `policy` serves `app` at a constant `rate_rps` within `MAX_VIOLATIONS`."""
    _, result = simulate_policy(APPS[app](rate_rps, cfg.duration_s), cfg, policy)
    return result.requests > 0 and result.violation_rate <= MAX_VIOLATIONS


def max_rps(app: str, cfg: SimConfig, policy: str, start_rps: float = 1000.0) -> float:
    """The largest constant rate `policy` sustains (0 when not even `start_rps` / 64)."""
    low, high = 0.0, start_rps
    while sustains(app, high, cfg, policy):
        low, high = high, 2.0 * high
    if low == 0.0:
        for _ in range(6):
            high /= 2.0
            if sustains(app, high, cfg, policy):
                low, high = high, 2.0 * high
                break
        else:
            return 0.0
    while high - low > RESOLUTION * low:
        middle = (low + high) / 2.0
        low, high = (middle, high) if sustains(app, middle, cfg, policy) else (low, middle)
    return low


def fig11(
    cfg: SimConfig | None = None,
    policies: Sequence[str] = POLICIES,
    apps: Sequence[str] = ("qa", "osvt"),
) -> Rows:
    """Rows of (app, policy, max RPS, × OpenFaaS+, drop against INFless)."""
    cfg = cfg or local_cluster()
    found = {(app, p): max_rps(app, cfg, p) for app in apps for p in policies}
    rows: list[dict[str, Cell]] = []
    for (app, policy), rate in found.items():
        openfaas = found.get((app, "openfaas+"), 0.0)
        infless = found.get((app, "infless"), 0.0)
        rows.append(
            {
                "app": app,
                "policy": policy,
                "max_rps": round(rate, 1),
                "vs_openfaas+": round(rate / openfaas, 3) if openfaas else "",
                "vs_infless": round(rate / infless, 3) if infless else "",
            }
        )
    servers = f"{cfg.servers} servers × {cfg.cpus_per_server} cores + {cfg.gpus_per_server} GPUs"
    reserve = cfg.scaling.gpu_core_reserve
    if reserve:
        servers += f", {reserve} cores kept for the GPUs"
    title = f"INFless Fig. 11: max RPS at ≤ {100 * MAX_VIOLATIONS:g} % violations, {servers}"
    name = "fig11_reserve" if reserve else "fig11"
    return Rows(name, title, tuple(rows[0]), tuple(rows), _plot)


def _plot(rows: Rows, figure: PlotFigure) -> None:
    apps = list(dict.fromkeys(str(r["app"]) for r in rows.rows))
    for k, app in enumerate(apps):
        ax = figure.add_subplot(1, len(apps), k + 1)
        labels = [str(r["policy"]) for r in rows.rows if r["app"] == app]
        ax.bar(labels, rows.values("max_rps", app=app), color="tab:blue")
        ax.set_title(app)
        ax.set_ylabel("max RPS")
        ax.tick_params(axis="x", labelrotation=45)
        ax.grid(axis="y", alpha=0.3)
