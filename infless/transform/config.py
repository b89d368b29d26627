"""The `[transform]` config section: warm-instance transformation (Optimus) and idle workers.

An instance its function no longer wants is kept idle for `idle_keep_s`: its worker alive,
its model loaded, its cores given back. At most `idle_per_function` are kept per function,
and `max_idle` in all. Another function of the same tenant may then transform it instead of
starting a worker. Pure data plus `check_transform`; imports nothing of infless.
"""

from __future__ import annotations

import msgspec


class TransformConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    enabled: bool = True
    idle_keep_s: float = 60.0  # how long an idle worker waits to be transformed
    idle_per_function: int = 1  # idle workers kept per function
    max_idle: int = 4  # idle workers kept on this server
    describe_timeout_s: float = 60.0  # describing a package's structure (a subprocess)


def check_transform(cfg: TransformConfig) -> list[str]:
    """Every problem with the section, one sentence each."""
    problems = []
    if cfg.idle_keep_s < 0 or cfg.idle_per_function < 0 or cfg.max_idle < 0:
        problems.append("transform.idle_keep_s, idle_per_function and max_idle must be >= 0")
    if cfg.describe_timeout_s <= 0:
        problems.append("transform.describe_timeout_s must be > 0")
    return problems
