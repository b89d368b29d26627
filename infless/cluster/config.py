"""The `[gpu]` config section: which GPUs instances use, MPS, warm CUDA workers, the GPU tier.
Pure data plus `check_gpu`; imports nothing of infless.
"""

from __future__ import annotations

from typing import Literal

import msgspec


class GpuConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # Use the GPUs NVML finds (false: every instance runs on CPU cores, GPUs or not).
    enabled: bool = True
    # The GPU share (percent of one device) of an instance nobody sized: a function's first
    # instance, or one scaled by hand, when its spec names no share and the server has GPUs.
    default_pct: int = 50
    # auto = one MPS control daemon per GPU (started, or adopted when one already answers),
    # each GPU worker its client at its share; where MPS cannot run, the GPU's instances
    # share it time-sliced and say so; on = refuse to start without MPS; off = time-sliced.
    mps: Literal["auto", "on", "off"] = "auto"
    mps_control: str = "nvidia-cuda-mps-control"  # the control binary (a path, or on PATH)
    # A started MPS control daemon must answer within this, and one told to quit must stop
    # answering within it (else it is ended, and its GPU shared time-sliced).
    mps_timeout_s: float = 20.0
    # Warm CUDA workers kept per GPU and share (torch imported, CUDA context created, the
    # math libraries warmed): a start takes one and gives it its model; refilled behind.
    standby_per_device: int = 1
    standby_timeout_s: float = 180.0  # a standby worker not warm by then is killed
    # The GPU weight tier (TrIMS): one device copy of each model per GPU, opened by every
    # instance through CUDA IPC, within this share of each device's memory.
    tier: bool = True
    memory_fraction: float = 0.5
    # Capture CUDA graphs for the warm-up batch sizes and replay them where they measured
    # faster than eager execution.
    cuda_graphs: bool = True
    # NVML is read this often for /metrics and /system/servers (off the request path).
    metrics_interval_s: float = 5.0
    # Tests and demos on machines without a GPU: this many fake GPUs (a fake NVML, a fake
    # device runtime that computes on the CPU, a fake tier in shared memory). Never set it
    # on a machine with real GPUs: they would be ignored.
    fake_devices: int = 0
    fake_memory_mib: int = 16384


def check_gpu(cfg: GpuConfig) -> list[str]:
    """Every problem with the section, one sentence each."""
    problems = []
    if not 1 <= cfg.default_pct <= 100:
        problems.append(f"gpu.default_pct = {cfg.default_pct}: must be 1..100 (percent)")
    if cfg.standby_per_device < 0:
        problems.append(f"gpu.standby_per_device = {cfg.standby_per_device}: must be >= 0")
    if not 0.0 < cfg.memory_fraction <= 1.0:
        problems.append(f"gpu.memory_fraction = {cfg.memory_fraction}: must be in (0, 1]")
    if cfg.fake_devices < 0 or cfg.fake_memory_mib < 1:
        problems.append("gpu.fake_devices must be >= 0 and gpu.fake_memory_mib >= 1")
    if cfg.standby_timeout_s <= 0 or cfg.metrics_interval_s <= 0:
        problems.append("gpu.standby_timeout_s and gpu.metrics_interval_s must be > 0")
    if cfg.mps_timeout_s <= 0:
        problems.append(f"gpu.mps_timeout_s = {cfg.mps_timeout_s}: must be > 0 (seconds)")
    return problems
