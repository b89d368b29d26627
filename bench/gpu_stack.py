"""The GPU benchmark's starter-level pieces: this machine's GPU starter stack built as the
gateway builds it (the zygote's process starter, the host tensor store, MPS, the standby
pool, the GPU tier), instances booted through it directly, their first answers, and what the
device's memory holds. `bench.gpu` measures start times and memory with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from infless.clock import RealClock, perf_s
from infless.cluster.gpus import discover_gpus, inventory_for
from infless.config import Config, load_config, with_overrides
from infless.models.package import load_manifest
from infless.nodes.factory import make_starter
from infless.nodes.gpu_factory import GpuSide, make_gpu_side
from infless.types import InstanceConfig
from infless.weights.store import TensorStore
from infless.workers import protocol as p
from infless.workers.handle import WorkerHandle
from infless.workers.starting import Booted, BootOrder, Retiring


def stack_config(root: Path, *, fake: bool, mps: bool, tier: bool, standby: int) -> Config:
    gpu: dict[str, Any] = {
        "mps": "auto" if mps and not fake else "off",
        "tier": tier,
        "standby_per_device": standby,
    }
    if fake:
        gpu |= {"fake_devices": 1, "fake_memory_mib": 4096}
    return with_overrides(
        load_config(None),
        state={"dir": str(root / "state")},
        store={"root": str(root / "store")},
        workers={"cgroups": False},
        gpu=gpu,
    )


@dataclass
class Stack:
    side: GpuSide
    store: TensorStore
    config: Config
    cores: int

    @property
    def starter(self) -> Any:
        return self.side.starter


@contextlib.asynccontextmanager
async def gpu_stack(
    root: Path, *, fake: bool, mps: bool = True, tier: bool = True, standby: int = 1
) -> AsyncIterator[Stack]:
    """The gateway's GPU chain, on its own, with its own store and MPS daemons."""
    config = stack_config(root, fake=fake, mps=mps, tier=tier, standby=standby)
    clock = RealClock()
    store = TensorStore(root / "store", clock)
    processes = make_starter(config, store, None)
    inventory = inventory_for(config.gpu)
    if not inventory.count:
        raise RuntimeError(f"no GPU: {inventory.reason}")
    side = make_gpu_side(
        config.gpu,
        inventory,
        config.state_dir,
        clock,
        processes,
        processes,
        tier=tier,
        start_timeout_s=config.workers.start_timeout_s,
    )
    await side.starter.start()
    try:
        yield Stack(side, store, config, os.cpu_count() or 1)
    finally:
        await side.starter.close()
        store.close()


def order(
    stack: Stack,
    package_dir: Path,
    number: int,
    *,
    batch_size: int,
    gpu_pct: int,
    tenant: str = "bench",
) -> BootOrder:
    """The boot order of instance `number` of the package (one core each, round robin)."""
    sizes = tuple(2**k for k in range(int(math.log2(batch_size)) + 1))
    worker_id = f"{package_dir.name}-{number}"
    return BootOrder(
        instance_id=worker_id,
        tenant=tenant,
        package_dir=package_dir,
        config=InstanceConfig(batch_size, 1, gpu_pct),
        cpu_ids=(number % stack.cores,),
        warmup_batch_sizes=sizes,
        function=package_dir.name,
        instance=worker_id,
        gpu_index=0,
    )


def example(package_dir: Path, batch_size: int = 1) -> dict[str, p.TensorData]:
    """Zeros in the package's input signature (variable dims as 8)."""
    inputs = {}
    for spec in load_manifest(package_dir).inputs:
        shape = [batch_size, *(8 if d < 0 else d for d in spec.shape)]
        data = np.zeros(shape, dtype=spec.dtype).tobytes()
        inputs[spec.name] = p.TensorData(spec.dtype, shape, data)
    return inputs


@dataclass(frozen=True)
class FirstAnswer:
    booted: Booted
    start_ms: float  # boot: a worker, the model on the device, its warm-up
    first_ms: float  # then the first batch of one
    path: str  # where the worker came from (standby, reused, fresh)

    @property
    def total_ms(self) -> float:
        return self.start_ms + self.first_ms


async def boot_and_answer(stack: Stack, boot: BootOrder) -> FirstAnswer:
    started = perf_s()
    booted = await stack.starter.boot(boot)
    booted_at = perf_s()
    await booted.handle.run_batch(example(boot.package_dir))
    done = perf_s()
    path = str(booted.history[-1].get("path", "")) if booted.history else ""
    return FirstAnswer(booted, (booted_at - started) * 1000.0, (done - booted_at) * 1000.0, path)


async def retire(stack: Stack, boot: BootOrder, handle: WorkerHandle, *, keep: bool) -> None:
    """As the pool retires an instance: its starter keeps or stops the worker, then its
    holds are released."""
    await stack.starter.retire(Retiring(boot, handle, [], keep, 10.0))
    await stack.starter.release(boot.instance_id)


async def wait_standby(stack: Stack, gpu_pct: int, timeout_s: float = 120.0) -> None:
    """Until a fresh standby worker of this share is ready (the pool refills behind)."""
    slot = stack.starter.slots[0]
    placement = slot.placement(gpu_pct)
    deadline = perf_s() + timeout_s
    while perf_s() < deadline:
        fresh = [w for w in stack.starter.standby.describe() if w["reusedBy"] is None]
        if stack.starter.standby.count(placement) and fresh:
            return
        stack.starter.standby.want([placement])
        await asyncio.sleep(0.2)
    raise TimeoutError(f"no standby worker at {gpu_pct}% after {timeout_s} s")


def device_memory_used_bytes(fake: bool) -> int:
    """What the device's memory holds now, contexts included (NVML)."""
    if fake:
        return 0
    inventory = discover_gpus()
    return inventory.devices[0].memory_used_bytes if inventory.count else 0


async def model_memory_bytes(stack: Stack, handles: list[WorkerHandle]) -> int:
    """Model memory: the tier's device copies plus every instance's own allocations."""
    own = 0
    for handle in handles:
        own += (await handle.ping(10.0)).gpu_memory_bytes
    tier = stack.starter.tier
    copies = 0
    if tier is not None:
        copies = sum(book.used_bytes for book in await tier.refresh())
    return own + copies
