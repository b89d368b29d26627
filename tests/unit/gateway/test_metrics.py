"""Gateway metrics: OpenFaaS names kept, Triton-shaped per-function series, scrape-time series
from the pool, psutil and a fake NVML (and a clean absence of GPUs)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from infless.gateway.metrics import GatewayMetrics, failure_reason
from infless.gateway.resources import NvmlReader, PlatformCollector


def _samples(metrics: GatewayMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.render().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@dataclass
class FakeInstance:
    instance_id: str
    function_name: str
    pid: int
    state: Any = field(default_factory=lambda: SimpleNamespace(value="ready"))
    config: Any = field(default_factory=lambda: SimpleNamespace(batch_size=4, cpus=1, gpu_pct=0))
    queue_length: int = 2


class FakeNvml:
    """The pynvml calls the collector makes, for one GPU running one of our workers."""

    class NVMLError(Exception):
        pass

    def __init__(self, worker_pid: int, fail_init: bool = False) -> None:
        self.worker_pid = worker_pid
        self.fail_init = fail_init
        self.shutdown = False

    def nvmlInit(self) -> None:  # noqa: N802 (pynvml's names)
        if self.fail_init:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:  # noqa: N802
        return f"gpu{index}"

    def nvmlDeviceGetUUID(self, handle: str) -> bytes:  # noqa: N802
        return b"GPU-fake-0"

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Any:  # noqa: N802
        return SimpleNamespace(gpu=37, memory=10)

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Any:  # noqa: N802
        return SimpleNamespace(total=16 * 2**30, used=2**30, free=15 * 2**30)

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:  # noqa: N802
        raise self.NVMLError("Not Supported")

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[Any]:  # noqa: N802
        return [
            SimpleNamespace(pid=self.worker_pid, usedGpuMemory=512 * 2**20),
            SimpleNamespace(pid=1, usedGpuMemory=7),  # not ours: not reported
        ]


def test_request_outcomes_feed_openfaas_and_triton_shaped_series() -> None:
    metrics = GatewayMetrics()
    metrics.request_started("mnist")
    metrics.request_done("mnist", 200, 0.02)
    metrics.request_done("mnist", 200, 0.03)
    metrics.request_done("mnist", 429, 0.001)
    metrics.request_done("mnist", 400, 0.001)
    for _ in range(3):
        metrics.served("mnist", 4, queue_ms=5.0, exec_ms=10.0, cold=False)
    metrics.served("mnist", 1, queue_ms=900.0, exec_ms=3.0, cold=True, cold_start_ms=850.0)
    samples = _samples(metrics)
    fn = (("function_name", "mnist"),)
    assert samples[("gateway_function_invocation_total", (("code", "200"), *fn))] == 2
    assert samples[("gateway_functions_seconds_count", (("code", "429"), *fn))] == 1
    assert samples[("gateway_function_invocation_started", fn)] == 1
    assert samples[("infless_inference_request_success_total", fn)] == 2
    rejected = (("function_name", "mnist"), ("reason", "REJECTED"))
    assert samples[("infless_inference_request_failure_total", rejected)] == 1
    other = (("function_name", "mnist"), ("reason", "OTHER"))
    assert samples[("infless_inference_request_failure_total", other)] == 1
    assert samples[("infless_inference_count_total", fn)] == 4
    assert samples[("infless_batch_size_count", fn)] == 4
    assert samples[("infless_batch_size_sum", fn)] == 13
    assert samples[("infless_queue_seconds_sum", fn)] == 0.915
    assert samples[("infless_cold_starts_total", fn)] == 1
    assert samples[("infless_cold_start_seconds_sum", fn)] == 0.85


def test_failure_reasons_follow_triton() -> None:
    assert [failure_reason(c) for c in (400, 404, 429, 499, 500, 503, 504)] == [
        "OTHER",
        "OTHER",
        "REJECTED",
        "CANCELED",
        "BACKEND",
        "BACKEND",
        "CANCELED",
    ]


def test_scrape_time_series_from_instances_processes_and_a_fake_gpu() -> None:
    me = os.getpid()
    instances = [
        FakeInstance("mnist-aaaaaa", "mnist", me),
        FakeInstance("mnist-bbbbbb", "mnist", 0, state=SimpleNamespace(value="starting")),
        FakeInstance("mnist-cccccc", "mnist", 999_999_999),  # gone: skipped quietly
        FakeInstance("old-dddddd", "old", me, state=SimpleNamespace(value="dead")),
    ]
    functions = {"mnist": SimpleNamespace(router=SimpleNamespace(waiting=3))}
    nvml = FakeNvml(worker_pid=me)
    collector = PlatformCollector(lambda: instances, lambda: functions, NvmlReader(nvml))
    metrics = GatewayMetrics()
    metrics.add_collector(collector)
    samples = _samples(metrics)

    def config(state: str, count: int) -> None:
        labels = (
            ("batch_size", "4"),
            ("cpus", "1"),
            ("function_name", "mnist"),
            ("gpu_pct", "0"),
            ("state", state),
        )
        assert samples[("infless_instances", labels)] == count

    config("ready", 2)
    config("starting", 1)
    assert not any(
        name == "infless_instances" and ("function_name", "old") in labels
        for name, labels in samples
    )
    assert (
        samples[("infless_inference_pending_requests", (("function_name", "mnist"),))] == 3 + 2 * 3
    )
    mine = (("function_name", "mnist"), ("instance", "mnist-aaaaaa"))
    assert samples[("infless_instance_cpu_seconds_total", mine)] > 0
    assert samples[("infless_instance_memory_rss_bytes", mine)] > 1_000_000
    assert (
        "infless_instance_memory_rss_bytes",
        (("function_name", "mnist"), ("instance", "mnist-cccccc")),
    ) not in samples
    gpu = (("gpu_uuid", "GPU-fake-0"),)
    assert samples[("infless_gpus", ())] == 1
    assert samples[("infless_gpu_utilization_ratio", gpu)] == 0.37
    assert samples[("infless_gpu_memory_total_bytes", gpu)] == 16 * 2**30
    assert ("infless_gpu_power_watts", gpu) not in samples  # not supported: left out
    held = tuple(sorted((*mine, ("gpu_uuid", "GPU-fake-0"))))
    assert samples[("infless_instance_gpu_memory_bytes", held)] == 512 * 2**20
    assert sum(1 for name, _ in samples if name == "infless_instance_gpu_memory_bytes") == 1
    collector.close()
    assert nvml.shutdown


def test_no_nvml_degrades_to_zero_gpus() -> None:
    collector = PlatformCollector(list, dict, NvmlReader(FakeNvml(0, fail_init=True)))
    metrics = GatewayMetrics()
    metrics.add_collector(collector)
    samples = _samples(metrics)
    assert samples[("infless_gpus", ())] == 0
    assert not any(name.startswith("infless_gpu_") for name, _ in samples)
    real = PlatformCollector(list, dict)  # the real pynvml on this GPU-less machine
    families = {family.name: family for family in real.collect()}
    assert families["infless_gpus"].samples[0].value in (0, 1, 2, 4, 8)
    real.close()
