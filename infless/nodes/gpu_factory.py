"""What one machine's GPUs run with, built from the `[gpu]` config: the GPU starter layer
(MPS daemons, the standby pool of warm CUDA workers, the GPU weight tier's holder) around the
machine's chain of starters, and the NVML monitor behind /metrics. The gateway builds it for
its own machine (`app`). Gateway side: never imports torch.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from infless.clock import Clock
from infless.cluster.config import GpuConfig
from infless.cluster.gpu_monitor import GpuMonitor, nvml_factory_for
from infless.cluster.gpus import GpuInventory
from infless.cluster.mps import MpsControl
from infless.weights.gpu_holder import GpuTierClient, model_key_of
from infless.workers.boot import ProcessStarter
from infless.workers.gpu_starter import GpuStarter
from infless.workers.standby import StandbyPool
from infless.workers.starting import Starter


@dataclass(frozen=True, slots=True)
class GpuSide:
    """This machine's GPU services, for wiring: the starter layer, MPS and the monitor."""

    starter: GpuStarter
    mps: MpsControl
    monitor: GpuMonitor


def gpu_root(state_dir: Path) -> Path:
    """A short directory of this gateway's own for MPS pipes and the fake tier's files (a
    unix socket path under it must stay within 107 bytes, whatever the state dir's)."""
    digest = hashlib.blake2b(str(state_dir.resolve()).encode(), digest_size=5).hexdigest()
    return Path(tempfile.gettempdir()) / f"infless-gpu-{digest}"


def make_gpu_side(
    cfg: GpuConfig,
    inventory: GpuInventory,
    state_dir: Path,
    clock: Clock,
    inner: Starter,
    processes: ProcessStarter,
    *,
    tier: bool,
    start_timeout_s: float,
) -> GpuSide:
    """The GPU layer around `inner` for the devices of `inventory` (it has some): real
    CUDA workers, or the fake device runtime for a fake inventory; the tier only with
    the host tensor store (`tier`)."""
    runtime: Literal["cuda", "fake"] = "fake" if inventory.source == "fake" else "cuda"
    root = gpu_root(state_dir)
    mps = MpsControl(cfg, inventory, root, clock)
    standby = StandbyPool(
        lambda worker_id: processes.launch(worker_id, "", worker_id),
        clock,
        per_placement=cfg.standby_per_device,
        timeout_s=cfg.standby_timeout_s,
    )
    layer: list[GpuStarter] = []  # the tier reports a lost holder to the layer built below

    def tier_lost(instance_ids: frozenset[str]) -> None:
        for starter in layer:
            starter.tier_lost(instance_ids)

    holder = None
    if tier and cfg.tier:
        holder = GpuTierClient(
            runtime,
            [(d.index, d.uuid) for d in inventory.devices],
            cfg.memory_fraction,
            clock,
            fake_root=root / "tier" if runtime == "fake" else None,
            fake_memory_bytes=cfg.fake_memory_mib << 20,
            start_timeout_s=start_timeout_s,
            on_lost=tier_lost,
        )
    starter = GpuStarter(
        inner=inner,
        processes=processes,
        devices=inventory.devices,
        runtime=runtime,
        sharing=mps,
        standby=standby,
        tier=holder,
        model_key=model_key_of,
        clock=clock,
        default_pct=cfg.default_pct,
        cuda_graphs=cfg.cuda_graphs,
    )
    layer.append(starter)
    monitor = GpuMonitor(nvml_factory_for(cfg), inventory.devices, cfg.metrics_interval_s, clock)
    return GpuSide(starter, mps, monitor)
