"""The `[workers]` config section: how worker processes start and how they are confined.
Pure data plus `check_workers`; imports nothing of infless.
"""

from __future__ import annotations

from typing import Literal

import msgspec


class WorkersConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    launcher: Literal["subprocess", "zygote"] = "zygote"
    # With the zygote and the store: fork a stored model's instances from a per-model
    # template that built, attached and warmed it once (shared pages; see workers.templates).
    templates: bool = True
    start_timeout_s: float = 180.0
    cpus_per_instance: int = 1
    reserved_cpus: int = 0
    cgroups: bool = True
    # Workers run this much nicer than the gateway: on cores shared with it, the gateway's
    # event loop (admission, batching, answers) is never kept waiting behind a batch. With
    # cgroups, their parent group is given the same weight (the kernel weighs the group,
    # not the worker, against the gateway).
    nice: int = 10


def check_workers(cfg: WorkersConfig) -> list[str]:
    """Every problem with the section, one sentence each."""
    problems = []
    if cfg.cpus_per_instance < 1:
        problems.append(f"workers.cpus_per_instance = {cfg.cpus_per_instance}: must be >= 1")
    if not 0 <= cfg.nice <= 19:
        problems.append(f"workers.nice = {cfg.nice}: must be 0..19")
    return problems
