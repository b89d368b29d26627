"""Latency feedback: what a function measures corrects what the planner predicts.

The planner sizes capacity from predicted (or warm-up) service times. On a small machine the
gateway, the client and other instances share the cores, so a function can miss its SLO
while the prediction says one instance suffices. Each function therefore carries a pressure
factor that multiplies its demand.

- It grows by `step` on every tick whose measured p99 is above `p99_high` × SLO, or that
  refused requests for lack of capacity, while the server has a core no instance runs on.
  Idle cores are used before the SLO is missed. With every core taken it does not grow:
  more instances would only slow each other down, and the data plane's admission sheds the
  excess instead.
- It decays back towards 1 (× `decay` per tick) while the p99 is below `p99_low` × SLO
  with no refusal.
- Between the two it holds.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping

from infless.scaling.config import FeedbackConfig
from infless.scaling.demand import Demand


def next_pressure(
    factor: float,
    p99_ms: float | None,
    slo_ms: float,
    refused: int,
    cfg: FeedbackConfig,
    idle_cores: int | None = None,
) -> float:
    """The function's demand factor after one tick of measurements (`idle_cores`: the
    server's cores with no instance; None when not known, as in the simulator)."""
    if not cfg.enabled:
        return 1.0
    if refused > 0 or (p99_ms is not None and p99_ms > cfg.p99_high * slo_ms):
        if idle_cores == 0:
            return factor
        return min(cfg.max_factor, factor + cfg.step)
    if p99_ms is None or p99_ms < cfg.p99_low * slo_ms:
        return max(1.0, factor * cfg.decay)
    return factor


def pressed(demand: Demand, factors: Mapping[str, float]) -> Demand:
    """The demand the planner plans for: each function's rate times its factor."""
    if all(f == 1.0 for f in factors.values()):
        return demand
    rates = {name: rate * factors.get(name, 1.0) for name, rate in demand.rates_rps.items()}
    return Demand(rates)
