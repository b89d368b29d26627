"""The `[modelless]` config section: INFaaS's thresholds, delays and cost weights.

Defaults are the reference code's (`stanford-mast/INFaaS`: `src/worker/query_executor.cc`
for the state thresholds, `src/worker/autoscaler.cc` for the scaling knobs), for CPU
variants. One frozen struct plus `check_modelless`. Pure: no I/O.
"""

from __future__ import annotations

import msgspec


class StateThresholds(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """When a running variant is Overloaded or Interfered, and when it recovers.

    Overloaded: its mean service time is over `latency_factor` x its profiled time while it
    serves over `qps_factor` of its profiled throughput, or its queue holds more than
    `queue_factor` seconds of its profiled throughput, or it refused requests (429: the
    admission control found it at capacity). Interfered: the latency condition alone, at a
    lower load. Either recovers only when the queue is under the bound, nothing was refused
    and the mean service time is under `recover_factor` x the profile (the hysteresis).
    """

    latency_factor: float = 2.5
    qps_factor: float = 0.5
    recover_factor: float = 1.5
    # one replica on CPU: the reference's own, wider values
    single_latency_factor: float = 4.0
    single_qps_factor: float = 1.0
    single_recover_factor: float = 1.1
    queue_factor: float = 0.8
    idle_decay: float = 15.0  # a window with no completion divides the latency by this (CPU)


class ModellessConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    monitor_s: float = 1.0  # how often the variants' states are updated
    states: StateThresholds = StateThresholds()
    slack: float = 0.1  # headroom kept over the load (a share of it), constraint (1)
    load_weight_per_s: float = 0.2  # lambda: weight of a new instance's load time (1/s)
    scale_down_ticks: int = 10  # consecutive ticks wanting a cheaper variant before moving
    downgrade_headroom: float = 0.5  # a downgrade's variant must carry the load plus this share
    # a variant is chosen for its accuracy only while its predicted p99 here (batch 1 at
    # its capacity factor, stretched by the host's measured tail) is within this share of
    # the SLO (the stretch is measured at the running variant's load; a slower one queues
    # more, hence the margin)
    tail_share: float = 0.7
    settle_s: float = 15.0  # a move waits this long at most for its variant to serve
    capacity_min_batches: int = 5  # batches a window needs to measure a variant's capacity
    capacity_recovery: float = 0.5  # per window unmeasured, share of the gap to the host
    # keep the cheapest variant meeting the goals warm beside the target (one instance at
    # least), and send it the queries the target cannot admit in time (`vertical`)
    overflow: bool = True
    # a query stays on the variant selection picked while that one would serve it within
    # this share of the SLO, else it spills over to another running variant that would
    # (typically the overflow variant); wherever it goes, it is held to the SLO where that
    # variant can meet it (not admitted past it on a budget grown from a quiet p99)
    spill_share: float = 0.7


def check_modelless(cfg: ModellessConfig) -> list[str]:
    problems: list[str] = []
    s = cfg.states
    factors = (s.latency_factor, s.recover_factor, s.single_latency_factor, s.single_recover_factor)
    if min(factors) < 1.0:
        problems.append("[modelless.states]: latency and recover factors must be >= 1")
    if s.recover_factor > s.latency_factor or s.single_recover_factor > s.single_latency_factor:
        problems.append(
            "[modelless.states]: recover_factor must not exceed latency_factor (no hysteresis)"
        )
    if s.idle_decay < 1.0 or s.queue_factor <= 0 or min(s.qps_factor, s.single_qps_factor) <= 0:
        problems.append("[modelless.states]: idle_decay >= 1, queue_factor and qps factors > 0")
    if cfg.monitor_s <= 0 or cfg.slack < 0 or cfg.load_weight_per_s < 0:
        problems.append("[modelless]: monitor_s > 0, slack >= 0, load_weight_per_s >= 0")
    if cfg.scale_down_ticks < 0 or cfg.settle_s <= 0:
        problems.append("[modelless]: scale_down_ticks >= 0, settle_s > 0")
    if cfg.downgrade_headroom < 0:
        problems.append("[modelless]: downgrade_headroom >= 0")
    if not 0.0 < cfg.tail_share <= 1.0:
        problems.append(
            f"[modelless]: tail_share must be in (0, 1] (got {cfg.tail_share}); 0.7 keeps "
            "30 % of the SLO as headroom"
        )
    if not 0.0 < cfg.spill_share <= 1.0:
        problems.append(f"[modelless]: spill_share must be in (0, 1] (got {cfg.spill_share})")
    if cfg.capacity_min_batches < 1 or not 0.0 <= cfg.capacity_recovery <= 1.0:
        problems.append("[modelless]: capacity_min_batches >= 1, capacity_recovery in [0, 1]")
    return problems
