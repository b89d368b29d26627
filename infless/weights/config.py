"""The `[store]` config section: the shared tensor store's place, capacity and reclaiming.
Pure data plus `check_store`; imports nothing of infless.
"""

from __future__ import annotations

import msgspec


class StoreConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    enabled: bool = True
    root: str = ""
    capacity_bytes: int = 0
    keepalive_s: float = 600.0
    reclaim_interval_s: float = 5.0
    clear_on_shutdown: bool = True
    # Benchmark baseline (bench.memory): with enabled = false, each worker clones the
    # package's weights into private memory, as Triton/TorchServe replicas hold them.
    private_weights: bool = False

    def __post_init__(self) -> None:
        if self.enabled and self.private_weights:
            raise ValueError("store.private_weights = true needs store.enabled = false")


def check_store(cfg: StoreConfig) -> list[str]:
    """Every problem with the section, one sentence each."""
    if cfg.capacity_bytes < 0 or cfg.keepalive_s < 0:
        return ["store.capacity_bytes and store.keepalive_s must be >= 0"]
    return []
