"""Gateway metrics: OpenFaaS names kept, Triton-shaped per-function series, scrape-time series
from the pool, psutil and the GPU monitor's samples and sharing (and a clean absence of
GPUs)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from infless.cluster.gpu_monitor import GpuSample
from infless.cluster.mps import GpuSharing
from infless.gateway.metrics import GatewayMetrics, failure_reason
from infless.gateway.resources import PlatformCollector


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
    gpu_uuid: str | None = None


@dataclass
class FixedSamples:
    """A GPU monitor whose latest samples are what the test says."""

    fixed: list[GpuSample]

    def samples(self) -> list[GpuSample]:
        return self.fixed


def _labels(*pairs: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(pairs))


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


def test_scrape_time_series_from_instances_and_processes() -> None:
    me = os.getpid()
    instances = [
        FakeInstance("mnist-aaaaaa", "mnist", me),
        FakeInstance("mnist-bbbbbb", "mnist", 0, state=SimpleNamespace(value="starting")),
        FakeInstance("mnist-cccccc", "mnist", 999_999_999),  # gone: skipped quietly
        FakeInstance("old-dddddd", "old", me, state=SimpleNamespace(value="dead")),
    ]
    functions = {"mnist": SimpleNamespace(router=SimpleNamespace(waiting=3))}
    collector = PlatformCollector(lambda: instances, lambda: functions)
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
    assert samples[("infless_gpus", ())] == 0  # no GPU monitor: no GPU series
    assert not any(name.startswith("infless_gpu_") for name, _ in samples)
    collector.close()


def test_gpu_series_come_from_the_monitor_samples_and_the_sharing() -> None:
    gpu_pct = SimpleNamespace(batch_size=8, cpus=1, gpu_pct=30)
    dead = SimpleNamespace(value="dead")
    instances = [
        FakeInstance("resnet-aaaaaa", "resnet", 4242, config=gpu_pct, gpu_uuid="GPU-0"),
        FakeInstance("resnet-bbbbbb", "resnet", 4343, config=gpu_pct, gpu_uuid="GPU-1"),
        FakeInstance("mnist-cccccc", "mnist", 4444),  # CPU only: no share series
        FakeInstance("resnet-dddddd", "resnet", 4545, state=dead, gpu_uuid="GPU-0"),
    ]
    held = {4242: 512 * 2**20, 1: 7, 4545: 9}  # pid 1 is not ours; 4545 is dead
    monitor = FixedSamples(
        [
            GpuSample("GPU-0", 0, 10.0, 0.37, 2**30, 16 * 2**30, None, held),
            GpuSample("GPU-1", 1, 10.0, None, None, None, 61.5, {}),
        ]
    )
    sharing = [
        GpuSharing("GPU-0", 0, "mps", "/run/mps/GPU-0/pipe", "", adopted=False),
        GpuSharing("GPU-1", 1, "time-sliced", None, "[gpu] mps = off", adopted=False),
    ]
    collector = PlatformCollector(lambda: instances, dict, monitor, lambda: sharing)
    metrics = GatewayMetrics()
    metrics.add_collector(collector)
    samples = _samples(metrics)

    gpu0, gpu1 = ("gpu_uuid", "GPU-0"), ("gpu_uuid", "GPU-1")
    assert samples[("infless_gpus", ())] == 2
    assert samples[("infless_gpu_utilization_ratio", (gpu0,))] == 0.37
    assert samples[("infless_gpu_memory_used_bytes", (gpu0,))] == 2**30
    assert samples[("infless_gpu_memory_total_bytes", (gpu0,))] == 16 * 2**30
    assert ("infless_gpu_power_watts", (gpu0,)) not in samples  # NVML could not tell
    assert samples[("infless_gpu_power_watts", (gpu1,))] == 61.5
    assert ("infless_gpu_utilization_ratio", (gpu1,)) not in samples
    assert samples[("infless_gpu_mps", (gpu0,))] == 1
    assert samples[("infless_gpu_mps", (gpu1,))] == 0
    fn = ("function_name", "resnet")
    mine, other = ("instance", "resnet-aaaaaa"), ("instance", "resnet-bbbbbb")
    assert samples[("infless_instance_gpu_memory_bytes", _labels(fn, mine, gpu0))] == 512 * 2**20
    assert sum(1 for name, _ in samples if name == "infless_instance_gpu_memory_bytes") == 1
    assert samples[("infless_instance_gpu_share_ratio", _labels(fn, mine, gpu0))] == 0.3
    assert samples[("infless_instance_gpu_share_ratio", _labels(fn, other, gpu1))] == 0.3
    assert sum(1 for name, _ in samples if name == "infless_instance_gpu_share_ratio") == 2


def test_a_monitor_without_samples_degrades_to_zero_gpus() -> None:
    collector = PlatformCollector(list, dict, FixedSamples([]))
    metrics = GatewayMetrics()
    metrics.add_collector(collector)
    samples = _samples(metrics)
    assert samples[("infless_gpus", ())] == 0
    assert not any(name.startswith("infless_gpu_") for name, _ in samples)
