"""The `[batching]` config section: how instances batch and how much they queue.

Pure data plus `check_batching`; imports nothing of infless.
"""

from __future__ import annotations

from typing import Literal

import msgspec


class BatchingConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    dispatch: Literal["slo", "deadline", "adaptive", "eager"] = "slo"
    target_utilization: float = 0.6  # "slo": the busiest a worker may run on the smallest batch
    tail_quantile: float = 0.95  # service times and overheads are budgeted at this quantile
    queue_capacity_batches: int = 4
    slack_ms: float = 2.0
    slack_fraction: float = 0.1
    warmup_rounds: int = 3


def check_batching(cfg: BatchingConfig) -> list[str]:
    """Every problem with the section, one sentence each."""
    problems: list[str] = []
    if cfg.queue_capacity_batches < 1:
        problems.append("batching.queue_capacity_batches must be >= 1")
    if cfg.slack_ms < 0 or not 0 <= cfg.slack_fraction < 1:
        problems.append("batching.slack_ms must be >= 0 and batching.slack_fraction in [0, 1)")
    if not 0 < cfg.target_utilization <= 1 or not 0.5 <= cfg.tail_quantile < 1:
        problems.append(
            f"batching.target_utilization = {cfg.target_utilization} must be in (0, 1] and "
            f"batching.tail_quantile = {cfg.tail_quantile} in [0.5, 1)"
        )
    return problems
