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
    # event loop (admission, batching, answers) waits less behind a batch, and the workers
    # get less of a busy machine. With cgroups, their parent group is given the weight of a
    # task at this niceness (the kernel weighs the group, not the worker, against the
    # gateway). 0 by measurement (docs/benchmarks.md, "The workers' CPU weight").
    nice: int = 0


def check_workers(cfg: WorkersConfig) -> list[str]:
    """Every problem with the section, one sentence each."""
    problems = []
    if cfg.cpus_per_instance < 1:
        problems.append(f"workers.cpus_per_instance = {cfg.cpus_per_instance}: must be >= 1")
    if not 0 <= cfg.nice <= 19:
        problems.append(f"workers.nice = {cfg.nice}: must be 0..19")
    return problems
