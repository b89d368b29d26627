"""The GPU monitor: NVML sampled every `[gpu] metrics_interval_s`, off the event loop, for
`/metrics` and `/system/servers`.

`GpuMonitor` keeps the latest `GpuSample` of each device of the inventory: utilisation
(0-1), device memory used and total, power, and the device memory each process holds (by
pid; MPS clients included). A scrape reads `samples()` and never waits on NVML; NVML is
opened once, read in a worker thread (`asyncio.to_thread`, or the `offload` a test gives),
and shut down at `stop()`. A reading NVML cannot give ("Not Supported", a VM that hides
power) is None and the rest of the sample stands; no NVML at all is no samples.

Shell side: NVML (hardware I/O) in a thread, time through the injected `Clock`; never
imports torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from infless.clock import Clock
from infless.cluster.config import GpuConfig
from infless.cluster.fake_gpus import FakeNvml
from infless.cluster.gpus import GpuDevice, NvmlApi, load_nvml

log = logging.getLogger(__name__)

T = TypeVar("T")
NvmlFactory = Callable[[], NvmlApi | None]


class Offload(Protocol):
    """Runs a blocking call away from the event loop (`asyncio.to_thread`; tests: inline)."""

    def __call__(self, call: Callable[[], T], /) -> Awaitable[T]: ...


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One device's readings at `sampled_at_s` (the monitor's clock); None: NVML can't tell."""

    uuid: str
    index: int
    sampled_at_s: float
    utilization_ratio: float | None = None  # busy fraction over NVML's last period, 0-1
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_watts: float | None = None
    # device memory by pid, for every process NVML lists on the device (compute and MPS
    # clients); a process whose usage NVML withholds is absent
    process_memory_bytes: Mapping[int, int] = field(default_factory=dict)


def nvml_factory_for(cfg: GpuConfig) -> NvmlFactory:
    """What the monitor opens for this `[gpu]` section: the fake NVML of `fake_devices`, or
    pynvml (None when nvidia-ml-py is not installed)."""
    if cfg.fake_devices > 0:
        count, memory_mib = cfg.fake_devices, cfg.fake_memory_mib
        return lambda: FakeNvml(count, memory_mib)
    return load_nvml


def sample_device(
    api: NvmlApi, error_type: type[BaseException], handle: Any, device: GpuDevice, now_s: float
) -> GpuSample:
    """Every reading of one device; each that NVML refuses is left None (or absent)."""

    def read(call: Callable[[Any], T]) -> T | None:
        try:
            return call(handle)
        except error_type as exc:
            log.debug("GPU %s: %s failed: %s", device.uuid, call.__name__, exc)
            return None

    utilization = read(api.nvmlDeviceGetUtilizationRates)
    memory = read(api.nvmlDeviceGetMemoryInfo)
    power_mw = read(api.nvmlDeviceGetPowerUsage)
    return GpuSample(
        uuid=device.uuid,
        index=device.index,
        sampled_at_s=now_s,
        utilization_ratio=None if utilization is None else utilization.gpu / 100.0,
        memory_used_bytes=None if memory is None else int(memory.used),
        memory_total_bytes=None if memory is None else int(memory.total),
        power_watts=None if power_mw is None else power_mw / 1000.0,
        process_memory_bytes=_process_memory(
            [read(api.nvmlDeviceGetComputeRunningProcesses), _mps_processes(api, read)]
        ),
    )


def _mps_processes(api: NvmlApi, read: Callable[[Callable[[Any], Any]], Any]) -> Any:
    # older pynvml builds lack the call: no MPS clients listed, nothing else lost
    call = getattr(api, "nvmlDeviceGetMPSComputeRunningProcesses", None)
    return None if call is None else read(call)


def _process_memory(lists: Sequence[Sequence[Any] | None]) -> dict[int, int]:
    by_pid: dict[int, int] = {}
    for processes in lists:
        for process in processes or ():
            used = getattr(process, "usedGpuMemory", None)
            if used is not None:
                pid = int(process.pid)
                by_pid[pid] = max(by_pid.get(pid, 0), int(used))
    return by_pid


class GpuMonitor:
    """Samples the inventory's devices every `interval_s` from `start()` until `stop()`."""

    def __init__(
        self,
        nvml_factory: NvmlFactory,
        devices: Sequence[GpuDevice],
        interval_s: float,
        clock: Clock,
        offload: Offload | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(
                f"gpu.metrics_interval_s = {interval_s}: the GPU monitor needs an interval > 0"
            )
        self._factory = nvml_factory
        self._devices = tuple(devices)
        self._interval_s = interval_s
        self._clock = clock
        self._offload: Offload = offload or asyncio.to_thread
        self._api: NvmlApi | None = None
        self._handles: dict[str, Any] = {}
        self._open_failed = False  # said once, not every interval
        self._nvml_lock = threading.Lock()  # a round still running when stop() closes NVML
        self._latest: dict[str, GpuSample] = {}
        self._task: asyncio.Task[None] | None = None

    def samples(self) -> list[GpuSample]:
        """The latest sample of each device that has one, in the inventory's order."""
        return [self._latest[d.uuid] for d in self._devices if d.uuid in self._latest]

    def start(self) -> None:
        if not self._devices or (self._task is not None and not self._task.done()):
            return
        self._task = asyncio.get_running_loop().create_task(self._run(), name="gpu-monitor")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._offload(self._close)

    async def refresh(self) -> list[GpuSample]:
        """One sampling round now, off the event loop; its samples become the latest."""
        fresh = await self._offload(self._sample_all)
        self._latest.update((s.uuid, s) for s in fresh)
        return fresh

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:  # a failed round must not end sampling for good
                log.exception("GPU monitor: sampling failed; the next round runs as usual")
            await self._clock.sleep_until(self._clock.now() + self._interval_s)

    def _sample_all(self) -> list[GpuSample]:
        with self._nvml_lock:
            api = self._open()
            if api is None:
                return []
            error_type: type[BaseException] = getattr(api, "NVMLError", OSError)
            now_s = self._clock.now()
            return [
                sample_device(api, error_type, self._handles[d.uuid], d, now_s)
                for d in self._devices
                if d.uuid in self._handles
            ]

    def _open(self) -> NvmlApi | None:
        if self._api is not None:
            return self._api
        api = self._factory()
        if api is None:
            self._say_once("nvidia-ml-py (pynvml) is not installed")
            return None
        error_type: type[BaseException] = getattr(api, "NVMLError", OSError)
        try:
            api.nvmlInit()
        except (error_type, OSError) as exc:
            self._say_once(f"NVML is not available: {exc}")
            return None
        self._handles = self._find_handles(api, error_type)
        self._api = api
        return api

    def _find_handles(self, api: NvmlApi, error_type: type[BaseException]) -> dict[str, Any]:
        handles = {}
        for device in self._devices:
            try:
                handle = api.nvmlDeviceGetHandleByIndex(device.index)
                uuid = api.nvmlDeviceGetUUID(handle)
            except error_type as exc:
                log.warning("GPU monitor: GPU %d (%s): %s", device.index, device.uuid, exc)
                continue
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            if uuid != device.uuid:  # the inventory is stale: never report one GPU as another
                log.warning(
                    "GPU monitor: NVML index %d is now %s, not %s: not sampled",
                    device.index,
                    uuid,
                    device.uuid,
                )
                continue
            handles[device.uuid] = handle
        return handles

    def _say_once(self, reason: str) -> None:
        if not self._open_failed:
            log.warning("GPU monitor: no GPU readings: %s", reason)
            self._open_failed = True

    def _close(self) -> None:
        with self._nvml_lock:
            api, self._api = self._api, None
            self._handles = {}
            if api is not None:
                error_type: type[BaseException] = getattr(api, "NVMLError", OSError)
                with contextlib.suppress(error_type, OSError):
                    api.nvmlShutdown()
