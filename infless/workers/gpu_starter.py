"""`GpuStarter`: the outermost layer of the starter chain. It runs instances that have a GPU
share on their GPU and hands every other start to the layers inside it.

A start of ⟨b, c, g > 0⟩ on device i goes in four steps:

1. the weights are published to the host store, as for any instance;
2. their device copy is opened from the GPU tier (TrIMS: one copy per model per GPU, shared
   by CUDA IPC). A tier that cannot hold it means a private copy, and the instance's
   description says so;
3. a warm CUDA worker for the device and share is taken from the standby pool (else one is
   started fresh, which takes seconds) and confined to the instance's cores;
4. the worker is told to load the model with its placement and the tier's handle.

Where the device runs an MPS daemon, the worker is its client at g %. Where it cannot
(`GpuSharing.reason`), the device is time-sliced and every placement on it is the whole
device (one standby class).

A retired GPU instance's worker unloads its model and goes back to the standby pool, its
kernels warm: the next start of that placement takes it. When the tier's holder dies, the
instances that opened its copies are killed (their device mappings are gone) and the pool
replaces them. `start` brings the sharing (MPS), the tier and the standby pool up; `close`
takes them down. Gateway side: never imports torch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import msgspec

from infless.clock import Clock, perf_s
from infless.cluster.gpus import GpuDevice
from infless.weights.gpu_tier import SharedModel
from infless.weights.stored import StoredTensor
from infless.workers import protocol as p
from infless.workers.boot import ProcessStarter
from infless.workers.handle import ProcessWorkerHandle
from infless.workers.standby import StandbyPool, StandbyWorker
from infless.workers.starting import (
    Booted,
    BootOrder,
    LayeredStarter,
    Retiring,
    Starter,
)
from infless.workers.status import GpuWorkerView, History, KeptWorkerView, WorkerView

log = logging.getLogger(__name__)

Runtime = Literal["cuda", "fake"]


class DeviceSharing(Protocol):
    """How one GPU is shared (`cluster.mps.GpuSharing`)."""

    @property
    def uuid(self) -> str: ...

    @property
    def pipe_dir(self) -> str | None: ...  # the MPS daemon's (None: time-sliced)

    @property
    def reason(self) -> str: ...

    def describe(self) -> dict[str, object]: ...


class SharingControl(Protocol):
    """Brings each GPU's sharing up and down (`cluster.mps.MpsControl`)."""

    async def start(self) -> Sequence[DeviceSharing]: ...

    async def stop(self) -> None: ...


class TierPort(Protocol):
    """The GPU weight tier as a start uses it (`weights.gpu_holder.GpuTierClient`)."""

    async def start(self) -> None: ...

    async def open(
        self, instance_id: str, device_index: int, model_key: str, tensors: list[StoredTensor]
    ) -> SharedModel: ...

    async def close(self, instance_id: str) -> None: ...

    def describe(self) -> dict[str, object]: ...

    async def stop(self) -> None: ...


@dataclass(frozen=True, slots=True)
class GpuSlot:
    """One GPU of this server as starts see it: the device and how it is shared."""

    device: GpuDevice
    runtime: Runtime
    pipe_dir: str | None  # its MPS daemon's pipe directory; None: time-sliced
    cuda_graphs: bool

    def placement(self, gpu_pct: int) -> p.GpuPlacement:
        """The placement of an instance with `gpu_pct` % here: its share under MPS; on a
        time-sliced device every share is the whole device (one class of standby worker)."""
        return p.GpuPlacement(
            runtime=self.runtime,
            uuid=self.device.uuid,
            index=self.device.index,
            gpu_pct=gpu_pct if self.pipe_dir is not None else 100,
            mps_pipe_dir=self.pipe_dir,
            cuda_graphs=self.cuda_graphs,
        )


@dataclass(slots=True)
class GpuInstance:
    """What the starter remembers of a GPU instance it started."""

    handle: ProcessWorkerHandle
    slot: GpuSlot
    placement: p.GpuPlacement
    path: str  # "standby", "reused" (a worker back from an earlier instance) or "fresh"
    weights: str  # "tier", or why they are a private copy
    ready: p.Ready


class GpuStarter(LayeredStarter):
    def __init__(
        self,
        inner: Starter,
        processes: ProcessStarter,
        devices: Sequence[GpuDevice],
        runtime: Runtime,
        sharing: SharingControl,
        standby: StandbyPool,
        tier: TierPort | None,
        model_key: Callable[[Sequence[StoredTensor]], str],
        clock: Clock,
        *,
        default_pct: int,
        cuda_graphs: bool = True,
    ) -> None:
        super().__init__(inner)
        self._processes = processes
        self._devices = tuple(devices)
        self._runtime: Runtime = runtime
        self._sharing = sharing
        self.standby = standby
        self.tier = tier
        self._model_key = model_key
        self._clock = clock
        self._default_pct = default_pct
        self._cuda_graphs = cuda_graphs
        self.slots: dict[int, GpuSlot] = {}
        self._shared: dict[str, DeviceSharing] = {}
        self._instances: dict[str, GpuInstance] = {}  # by worker id
        self.tier_error = ""

    # -- bringing the GPUs up ----------------------------------------------------------------
    async def start(self) -> None:
        await self.inner.start()
        sharing = {s.uuid: s for s in await self._sharing.start()}
        self._shared = sharing
        for device in self._devices:
            found = sharing.get(device.uuid)
            pipe_dir = None if found is None else found.pipe_dir
            self.slots[device.index] = GpuSlot(device, self._runtime, pipe_dir, self._cuda_graphs)
        if self.tier is not None:
            try:
                await self.tier.start()
            except Exception as exc:  # the tier is an optimisation: private copies instead
                log.warning("the GPU tier did not start (%s): weights are copied per instance", exc)
                self.tier_error = f"{type(exc).__name__}: {exc}"
                self.tier = None
        self.standby.want(slot.placement(self._default_pct) for slot in self.slots.values())

    # -- starting ----------------------------------------------------------------------------
    async def boot(self, order: BootOrder) -> Booted:
        if order.config.gpu_pct <= 0 or order.gpu_index is None:
            return await self.inner.boot(order)
        slot = self.slots.get(order.gpu_index)
        if slot is None:
            raise ValueError(
                f"instance {order.instance_id}: GPU {order.gpu_index} is not on this server "
                f"(GPUs: {sorted(self.slots)})"
            )
        started = perf_s()
        processes = self._processes
        secrets = processes.secrets_of(order.runtime)
        stored = await processes.publish(order)
        shared, weights = await self._open_tier(order, stored)
        placement = slot.placement(order.config.gpu_pct)
        worker, path, spawn_ms = await self._worker(order, placement)
        handle = worker.handle
        try:
            processes.adopt(order, handle, worker.worker_id)
        except BaseException:
            handle.kill()
            raise
        request = processes.load_request(order, stored, secrets, gpu=placement, gpu_weights=shared)
        ready = await processes.load(order, handle, request)
        start = msgspec.structs.replace(ready.start, spawn_ms=spawn_ms)
        self._instances[order.instance_id] = GpuInstance(
            handle=handle,
            slot=slot,
            placement=placement,
            path=path,
            weights=weights,
            ready=ready,
        )
        history: History = [
            {
                "event": "started",
                "path": path,
                "device": slot.device.uuid,
                "sharePct": order.config.gpu_pct,
                "weights": weights,
                "tookMs": round((perf_s() - started) * 1000.0, 3),
            }
        ]
        return Booted(handle, ready, start, history, gpu_uuid=slot.device.uuid)

    async def _worker(
        self, order: BootOrder, placement: p.GpuPlacement
    ) -> tuple[StandbyWorker, str, float]:
        """A warm worker for `placement`: taken from the standby pool, else started now
        (its spawn and CUDA warm-up then count as the start's spawn)."""
        processes = self._processes
        worker = self.standby.take(
            placement, order.tenant, lambda kept: processes.may_load(kept.handle, order)
        )
        if worker is not None:
            return worker, "standby" if worker.tenant is None else "reused", 0.0
        started = perf_s()
        worker = await self.standby.start(order.instance_id, placement)
        return worker, "fresh", (perf_s() - started) * 1000.0

    async def _open_tier(
        self, order: BootOrder, stored: list[StoredTensor] | None
    ) -> tuple[SharedModel | None, str]:
        """The model's device copy from the tier, or None and why the instance copies its
        weights itself."""
        if stored is None:
            return None, "private: not a stored module"
        if self.tier is None:
            return None, f"private: no GPU tier ({self.tier_error or 'off'})"
        assert order.gpu_index is not None
        # per tenant: a device mapping is writable, so tenants never share one
        key = f"{order.tenant}/{self._model_key(stored)}"
        try:
            shared = await self.tier.open(order.instance_id, order.gpu_index, key, stored)
        except Exception as exc:  # full, or its holder restarting: a private copy instead
            log.warning(
                "instance %s: GPU tier: %s; its weights are a private copy", order.instance_id, exc
            )
            return None, f"private: {exc}"
        return shared, "tier"

    # -- retiring and releasing ----------------------------------------------------------
    async def retire(self, retiring: Retiring) -> bool:
        """A GPU worker unloads its model and goes back to the standby pool (stopped when
        its placement has enough); its holds are released by `release`. Others go inside."""
        worker_id = retiring.order.instance_id
        known = self._instances.get(worker_id)
        if known is None:
            return await self.inner.retire(retiring)
        handle = known.handle
        if not (retiring.keep and handle.alive):
            await handle.stop(retiring.timeout_s)
            return False
        try:
            ready = await handle.unload(retiring.timeout_s)
        except Exception as exc:
            log.warning("GPU worker %s did not unload (%s): stopped", worker_id, exc)
            await handle.stop(retiring.timeout_s)
            return False
        standby_id = self.standby.next_id(known.placement)
        self._processes.relabel(worker_id, standby_id, "", standby_id)
        worker = StandbyWorker(
            worker_id=standby_id,
            handle=handle,
            placement=known.placement,
            ready=ready,
            since_s=self._clock.now(),
            tenant=retiring.order.tenant,
        )
        await self.standby.put(worker)
        return False  # nothing of the instance stays held: `release` frees it

    async def release(self, instance_id: str) -> None:
        self._instances.pop(instance_id, None)
        if self.tier is not None:
            try:
                await self.tier.close(instance_id)
            except Exception as exc:  # its holder is gone: nothing to close
                log.info("GPU tier close of %s: %s", instance_id, exc)
        await self.inner.release(instance_id)

    def tier_lost(self, instance_ids: frozenset[str]) -> None:
        """The tier's holder died: the device copies these instances mapped are gone, so
        their workers must not compute again — killed; the pool replaces them."""
        for instance_id in instance_ids:
            known = self._instances.get(instance_id)
            if known is not None:
                log.warning("GPU tier holder lost: instance %s restarts", instance_id)
                known.handle.kill()

    async def close(self) -> None:
        """The standby workers, the tier and the MPS daemons go; then the inner layers."""
        await self.standby.close()
        if self.tier is not None:
            await self.tier.stop()
        await self.inner.close()
        await self._sharing.stop()

    # -- reading -------------------------------------------------------------------------
    def profile_target(self) -> tuple[str, str | None] | None:
        """Where profiles of this server's GPUs are measured: the first GPU's uuid and its
        MPS daemon's pipe directory (None: time-sliced); None before `start`."""
        if not self.slots:
            return None
        slot = self.slots[min(self.slots)]
        return slot.device.uuid, slot.pipe_dir

    def describe(self, instance_id: str) -> WorkerView:
        described = self.inner.describe(instance_id)
        known = self._instances.get(instance_id)
        if known is None:
            return described
        gpu = known.ready.gpu
        view = GpuWorkerView(
            index=known.slot.device.index,
            uuid=known.slot.device.uuid,
            name=known.slot.device.name,
            share_pct=known.placement.gpu_pct,
            sharing="mps" if known.placement.mps_pipe_dir else "time-sliced",
            started_from=known.path,
            weights=known.weights,
            graph_batch_sizes=[] if gpu is None else list(gpu.graph_batch_sizes),
            memory_bytes=0 if gpu is None else gpu.memory_bytes,
        )
        return msgspec.structs.replace(described, gpu=view)

    def kept(self) -> list[KeptWorkerView]:
        return [*self.inner.kept(), *self.standby.describe()]

    def describe_server(self) -> dict[str, object]:
        """The server's GPUs: each device, how it is shared, its standby workers; the tier."""
        gpus = []
        for index, slot in sorted(self.slots.items()):
            device = slot.device
            sharing = self._shared.get(device.uuid)
            gpus.append(
                {
                    "index": index,
                    "uuid": device.uuid,
                    "name": device.name,
                    "memoryTotalBytes": device.memory_total_bytes,
                    "runtime": slot.runtime,
                    "sharing": {"mode": "time-sliced", "reason": "not started"}
                    if sharing is None
                    else sharing.describe(),
                    "standby": self.standby.count(slot.placement(self._default_pct)),
                }
            )
        return {
            "gpus": gpus,
            "gpuTier": {"state": "off", "reason": self.tier_error or "off"}
            if self.tier is None
            else self.tier.describe(),
            "standbyFailures": list(self.standby.failures),
        }
