"""Equation 1 of INFless: the request-rate range [r_low, r_up] one instance can take, and its
batch timeout, from its batch size b, its execution time t_exec and the function's SLO.

    r_up  = ⌊1 / t_exec⌋ · b            (batches per second the worker can run, × b)
    r_low = ⌈1 / (t_slo − t_exec)⌉ · b  (slowest rate that still fills a batch in time)
    timeout = t_slo − t_exec            (how long the oldest request of a batch may wait)

with t in seconds; feasible when t_exec ≤ t_slo / 2 for b > 1 (t_exec ≤ t_slo for b = 1,
which never waits for a batch) and r_low ≤ r_up. Three roundings are offered:

- "paper": as printed (floor / ceil of the per-batch rate, then × b). The paper's example,
  SLO 200 ms, t_exec 50 ms, b = 4, gives [28, 80] RPS.
- "reference": INFless's Go estimator, `int(1000 / t_exec · b)` and `int(1000 / (SLO −
  t_exec) · b)`, timeout `int(SLO − t_exec)` ms. resnet-50, SLO 300, b 4, t 112.5 gives
  r_up 35, r_low 21, timeout 187 ms.
- "exact": no rounding (b / t_exec and b / (t_slo − t_exec)).

For b = 1 the lower bound is 1 RPS in every rounding (the reference code's choice: such an
instance needs no batch to fill, only some traffic) and the timeout is 0.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infless.dataplane.policy import feasible as slo_feasible
from infless.scaling.config import Rounding

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Bounds:
    """One instance configuration's rate range and batch timeout under one SLO."""

    batch_size: int
    exec_ms: float
    slo_ms: float
    r_low_rps: float
    r_up_rps: float
    batch_timeout_ms: float

    @property
    def feasible(self) -> bool:
        """Meets the SLO budget, can serve at least some rate, and r_low ≤ r_up."""
        return (
            slo_feasible(self.batch_size, self.exec_ms, self.slo_ms)
            and self.r_up_rps > 0
            and self.r_low_rps <= self.r_up_rps
        )

    @property
    def span_rps(self) -> float:
        return self.r_up_rps - self.r_low_rps


def exec_budget_ms(batch_size: int, slo_ms: float) -> float:
    """The largest t_exec AvailableConfig accepts: the SLO for b = 1, half of it for b > 1."""
    return slo_ms if batch_size == 1 else slo_ms / 2.0


def rate_bounds(
    batch_size: int, exec_ms: float, slo_ms: float, rounding: Rounding = "paper"
) -> Bounds:
    """Equation 1 for one configuration (see the module docstring for the roundings).

    An infeasible configuration still gets numbers (r_low may be infinite); check `.feasible`.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size = {batch_size}: must be >= 1")
    if exec_ms <= 0 or slo_ms <= 0:
        raise ValueError(f"exec_ms = {exec_ms}, slo_ms = {slo_ms}: both must be > 0")
    b = batch_size
    batches_per_s = 1000.0 / exec_ms
    slack_ms = slo_ms - exec_ms
    if rounding == "paper":
        r_up = float(math.floor(batches_per_s + _EPS) * b)
    elif rounding == "reference":
        r_up = float(int(batches_per_s * b + _EPS))
    else:
        r_up = batches_per_s * b
    if b == 1:
        return Bounds(b, exec_ms, slo_ms, min(1.0, r_up), r_up, 0.0)
    if slack_ms <= 0:
        return Bounds(b, exec_ms, slo_ms, math.inf, r_up, 0.0)
    fills_per_s = 1000.0 / slack_ms
    timeout_ms = slack_ms
    if rounding == "paper":
        r_low = float(math.ceil(fills_per_s - _EPS) * b)
    elif rounding == "reference":
        r_low = float(int(fills_per_s * b + _EPS))
        timeout_ms = float(int(slack_ms + _EPS))
    else:
        r_low = fills_per_s * b
    return Bounds(b, exec_ms, slo_ms, r_low, r_up, timeout_ms)
