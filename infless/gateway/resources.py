"""Scrape-time Prometheus series: instances by config, pending requests, per-instance CPU and
memory (psutil, by the worker pids), and GPUs from NVML when there are any.

Everything here runs only when `/metrics` is scraped, never on the request path. NVML is
reached through an injectable module (`pynvml`, or a fake in tests); without a driver or a
GPU the GPU series report `infless_gpus 0` and nothing else. Must not import torch, and must
not change the pool: it only reads.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

import psutil
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)

INSTANCE_LABELS = ["function_name", "instance"]


class _Config(Protocol):
    @property
    def batch_size(self) -> int: ...
    @property
    def cpus(self) -> int: ...
    @property
    def gpu_pct(self) -> int: ...


class _State(Protocol):
    @property
    def value(self) -> str: ...


class InstanceView(Protocol):
    """What the collector reads of an instance (`workers.instance.Instance` fits)."""

    @property
    def instance_id(self) -> str: ...
    @property
    def function_name(self) -> str: ...
    @property
    def config(self) -> _Config: ...
    @property
    def state(self) -> _State: ...
    @property
    def pid(self) -> int: ...
    @property
    def queue_length(self) -> int: ...


class _Router(Protocol):
    @property
    def waiting(self) -> int: ...


class FunctionView(Protocol):
    @property
    def router(self) -> _Router: ...


class NvmlReader:
    """GPU readings through NVML; `available` is False (and stays so) without a driver."""

    def __init__(self, module: Any = None) -> None:
        self._module = module
        self._opened = False
        self.available = False

    def _open(self) -> None:
        self._opened = True
        module = self._module
        if module is None:
            try:
                import pynvml
            except ImportError:
                return
            module = self._module = pynvml
        try:
            module.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, OSError ...
            log.debug("NVML unavailable: %s", exc)
            return
        self.available = True

    def devices(self) -> list[tuple[str, Any]]:
        if not self._opened:
            self._open()
        if not self.available:
            return []
        nvml = self._module
        try:
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
            return [(_text(nvml.nvmlDeviceGetUUID(h)), h) for h in handles]
        except Exception as exc:
            log.debug("NVML device listing failed: %s", exc)
            return []

    def read(self, handle: Any, what: str) -> Any:
        """One NVML call by name (`nvmlDeviceGet<what>`), None when it fails."""
        try:
            return getattr(self._module, f"nvmlDeviceGet{what}")(handle)
        except Exception:
            return None

    def close(self) -> None:
        if self.available:
            with contextlib.suppress(Exception):
                self._module.nvmlShutdown()
            self.available = False


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Families:
    """One scrape's metric families, fresh each time (so gone instances disappear)."""

    def __init__(self) -> None:
        gpu = ["gpu_uuid"]
        self.instances = GaugeMetricFamily(
            "infless_instances",
            "Instances by function, configuration <batch size, cpus, gpu share> and state",
            labels=["function_name", "batch_size", "cpus", "gpu_pct", "state"],
        )
        self.pending = GaugeMetricFamily(
            "infless_inference_pending_requests",
            "Requests accepted but not yet executing (instance queues and waiting room)",
            labels=["function_name"],
        )
        self.cpu_seconds = CounterMetricFamily(
            "infless_instance_cpu_seconds",
            "CPU time (user + system) used by an instance's worker process",
            labels=INSTANCE_LABELS,
        )
        self.rss_bytes = GaugeMetricFamily(
            "infless_instance_memory_rss_bytes",
            "Resident memory of an instance's worker (shared weight pages included)",
            labels=INSTANCE_LABELS,
        )
        self.gpus = GaugeMetricFamily("infless_gpus", "GPUs visible through NVML")
        self.gpu_utilization = GaugeMetricFamily(
            "infless_gpu_utilization_ratio", "GPU busy fraction (0-1)", labels=gpu
        )
        self.gpu_memory_used = GaugeMetricFamily(
            "infless_gpu_memory_used_bytes", "GPU memory in use", labels=gpu
        )
        self.gpu_memory_total = GaugeMetricFamily(
            "infless_gpu_memory_total_bytes", "GPU memory in total", labels=gpu
        )
        self.gpu_power = GaugeMetricFamily("infless_gpu_power_watts", "GPU power draw", labels=gpu)
        self.instance_gpu_memory = GaugeMetricFamily(
            "infless_instance_gpu_memory_bytes",
            "GPU memory held by an instance's worker process",
            labels=[*INSTANCE_LABELS, "gpu_uuid"],
        )

    def all(self) -> list[Metric]:
        return list(vars(self).values())


class PlatformCollector:
    """A prometheus_client custom collector over the pool's instances and the host's GPUs."""

    def __init__(
        self,
        instances: Callable[[], Iterable[InstanceView]],
        functions: Callable[[], Mapping[str, FunctionView]],
        nvml: NvmlReader | None = None,
    ) -> None:
        self._instances = instances
        self._functions = functions
        self._nvml = nvml or NvmlReader()
        self._processes: dict[int, psutil.Process] = {}

    def describe(self) -> Iterator[Metric]:
        """Names only, so registering never touches processes or NVML."""
        yield from _Families().all()

    def collect(self) -> Iterator[Metric]:
        families = _Families()
        instances = list(self._instances())
        self._instance_series(families, instances)
        self._process_series(families, instances)
        self._gpu_series(families, instances)
        yield from families.all()

    def _instance_series(self, families: _Families, instances: list[InstanceView]) -> None:
        configs: dict[tuple[str, ...], int] = {}
        pending: dict[str, int] = {name: f.router.waiting for name, f in self._functions().items()}
        for i in instances:
            if i.state.value == "dead":
                continue
            c = i.config
            key: tuple[str, ...] = (
                i.function_name,
                str(c.batch_size),
                str(c.cpus),
                str(c.gpu_pct),
                i.state.value,
            )
            configs[key] = configs.get(key, 0) + 1
            pending[i.function_name] = pending.get(i.function_name, 0) + i.queue_length
        for key, count in sorted(configs.items()):
            families.instances.add_metric(list(key), count)
        for name, count in sorted(pending.items()):
            families.pending.add_metric([name], count)

    def _process(self, pid: int) -> psutil.Process:
        process = self._processes.get(pid)
        if process is None:
            process = self._processes[pid] = psutil.Process(pid)
        return process

    def _process_series(self, families: _Families, instances: list[InstanceView]) -> None:
        live = set()
        for i in instances:
            pid = i.pid
            if not pid or i.state.value == "dead":
                continue
            live.add(pid)
            labels = [i.function_name, i.instance_id]
            try:
                process = self._process(pid)
                with process.oneshot():
                    times = process.cpu_times()
                    rss = process.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            families.cpu_seconds.add_metric(labels, times.user + times.system)
            families.rss_bytes.add_metric(labels, rss)
        for pid in set(self._processes) - live:
            del self._processes[pid]

    def _gpu_series(self, families: _Families, instances: list[InstanceView]) -> None:
        devices = self._nvml.devices()
        families.gpus.add_metric([], len(devices))
        by_pid = {i.pid: i for i in instances if i.pid and i.state.value != "dead"}
        read = self._nvml.read
        for uuid, handle in devices:
            utilization = read(handle, "UtilizationRates")
            if utilization is not None:
                families.gpu_utilization.add_metric([uuid], utilization.gpu / 100.0)
            memory = read(handle, "MemoryInfo")
            if memory is not None:
                families.gpu_memory_used.add_metric([uuid], memory.used)
                families.gpu_memory_total.add_metric([uuid], memory.total)
            power_mw = read(handle, "PowerUsage")
            if power_mw is not None:
                families.gpu_power.add_metric([uuid], power_mw / 1000.0)
            for proc in read(handle, "ComputeRunningProcesses") or []:
                instance = by_pid.get(proc.pid)
                used = getattr(proc, "usedGpuMemory", None)
                if instance is not None and used is not None:
                    families.instance_gpu_memory.add_metric(
                        [instance.function_name, instance.instance_id, uuid], used
                    )

    def close(self) -> None:
        self._nvml.close()
