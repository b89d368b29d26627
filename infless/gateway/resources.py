"""Scrape-time Prometheus series: instances by config, pending requests, per-instance CPU and
memory (psutil, by the worker pids), and GPUs: the GPU monitor's latest samples, each GPU's
sharing (MPS or time-sliced) and each GPU instance's share.

Everything here runs only when `/metrics` is scraped, never on the request path, and never
calls NVML: `cluster.gpu_monitor.GpuMonitor` samples it off the event loop and this reads
its samples. Without a monitor, or a GPU, the GPU series report `infless_gpus 0` and
nothing else. Gateway side: must not import torch, and must not change the pool: it only
reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Protocol

import psutil
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from infless.cluster.gpu_monitor import GpuSample

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
    @property
    def gpu_uuid(self) -> str | None: ...  # the GPU its share is on (None: no GPU share)


class GpuSamples(Protocol):
    """The GPU monitor as the collector reads it (`cluster.gpu_monitor.GpuMonitor` fits)."""

    def samples(self) -> Sequence[GpuSample]: ...


class SharingView(Protocol):
    """One GPU's sharing (`cluster.mps.GpuSharing` fits)."""

    @property
    def uuid(self) -> str: ...
    @property
    def mode(self) -> str: ...  # "mps" or "time-sliced"


class _Router(Protocol):
    @property
    def waiting(self) -> int: ...


class FunctionView(Protocol):
    @property
    def router(self) -> _Router: ...


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
        self.gpu_mps = GaugeMetricFamily(
            "infless_gpu_mps",
            "1 where the GPU's instances share it under MPS, 0 where time-sliced",
            labels=gpu,
        )
        self.instance_gpu_share = GaugeMetricFamily(
            "infless_instance_gpu_share_ratio",
            "An instance's share of its GPU (g / 100: its MPS active thread percentage)",
            labels=[*INSTANCE_LABELS, "gpu_uuid"],
        )

    def all(self) -> list[Metric]:
        return list(vars(self).values())


class PlatformCollector:
    """A prometheus_client custom collector over the pool's instances and the host's GPUs.

    `gpus` is the GPU monitor (None: no GPU series but `infless_gpus 0`), `sharing` gives
    each GPU's sharing mode (`cluster.mps.MpsControl.all`).
    """

    def __init__(
        self,
        instances: Callable[[], Iterable[InstanceView]],
        functions: Callable[[], Mapping[str, FunctionView]],
        gpus: GpuSamples | None = None,
        sharing: Callable[[], Iterable[SharingView]] = tuple,
    ) -> None:
        self._instances = instances
        self._functions = functions
        self._gpus = gpus
        self._sharing = sharing
        self._processes: dict[int, psutil.Process] = {}

    def describe(self) -> Iterator[Metric]:
        """Names only, so registering never touches processes or GPUs."""
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
        samples = [] if self._gpus is None else list(self._gpus.samples())
        families.gpus.add_metric([], len(samples))
        live = [i for i in instances if i.state.value != "dead"]
        by_pid = {i.pid: i for i in live if i.pid}
        for sample in samples:
            uuid = [sample.uuid]
            if sample.utilization_ratio is not None:
                families.gpu_utilization.add_metric(uuid, sample.utilization_ratio)
            if sample.memory_used_bytes is not None:
                families.gpu_memory_used.add_metric(uuid, sample.memory_used_bytes)
            if sample.memory_total_bytes is not None:
                families.gpu_memory_total.add_metric(uuid, sample.memory_total_bytes)
            if sample.power_watts is not None:
                families.gpu_power.add_metric(uuid, sample.power_watts)
            for pid, used_bytes in sorted(sample.process_memory_bytes.items()):
                instance = by_pid.get(pid)
                if instance is not None:  # other processes on the GPU are not ours to report
                    labels = [instance.function_name, instance.instance_id, sample.uuid]
                    families.instance_gpu_memory.add_metric(labels, used_bytes)
        for share in self._sharing():
            families.gpu_mps.add_metric([share.uuid], 1 if share.mode == "mps" else 0)
        for i in live:
            if i.gpu_uuid is not None and i.config.gpu_pct > 0:
                labels = [i.function_name, i.instance_id, i.gpu_uuid]
                families.instance_gpu_share.add_metric(labels, i.config.gpu_pct / 100.0)

    def close(self) -> None:
        """Forget the worker processes it watched (the GPU monitor is stopped by its owner)."""
        self._processes.clear()
