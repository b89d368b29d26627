"""The SLO on the machine the gateway finds, with a fake clock and in-process workers: a host
that slows five times mid-run shows a fifth of the capacity and keeps the SLO below it;
requests are refused only when the instances are full, however noisy their service times;
planned instances never share a core; the first instance's batch size comes from the
service times it measured."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from pathlib import Path

from infless.cluster.cpus import CpuAllocator
from infless.control.autoscaler import Autoscaler
from infless.control.functions import FunctionFrontDoor
from infless.control.pool import WorkerPool
from infless.control.servers import LOCAL_SERVER, Server
from infless.dataplane.config import BatchingConfig
from infless.dataplane.instance import InstanceState
from infless.dataplane.request import Outcome
from infless.errors import Overloaded
from infless.scaling.config import DemandConfig, ScalingConfig
from infless.types import FunctionSpec
from tests.support.clock import FakeClock
from tests.support.frontend import Recorder
from tests.support.inprocess import InProcessModel, InProcessStarter, LatencyMs
from tests.unit.control.test_control_plane import MANIFEST, Harness

SLO_MS = 100.0
SLOW_SLO_MS = 400.0
STEP_MS = 1.0  # the fake clock moves in steps this long: a timer may fire that late
SPEC = FunctionSpec(
    name="f",
    image="m",
    slo_ms=SLO_MS,
    max_batch=16,
    min_instances=1,
    max_instances=8,
    instances=1,
)


class Host:
    """Service times `fixed + per_item × b` ms, times the host's slowness, times noise."""

    def __init__(self, fixed_ms: float = 8.0, per_item_ms: float = 1.0) -> None:
        self.fixed_ms, self.per_item_ms = fixed_ms, per_item_ms
        self.slowness = 1.0
        self.noise = itertools.cycle([1.0])

    def latency(self) -> LatencyMs:
        def latency_ms(batch_size: int, cpus: int) -> float:
            base = self.fixed_ms + self.per_item_ms * batch_size
            return base * self.slowness * next(self.noise)

        return latency_ms

    def capacity_rps(self, batch_size: int) -> float:
        return (
            batch_size * 1000.0 / ((self.fixed_ms + self.per_item_ms * batch_size) * self.slowness)
        )


def make_harness(clock: FakeClock, host: Host, cores: tuple[int, ...] = (0,)) -> Harness:
    """The control-plane harness of test_control_plane with `host`'s workers, by hand."""
    harness = Harness(clock, autoscaled=False)
    harness.starter = InProcessStarter(
        clock, lambda order: InProcessModel(latency_ms=host.latency())
    )
    harness.pool = WorkerPool(
        clock,
        [Server(LOCAL_SERVER, harness.starter, CpuAllocator(cores), len(cores))],
        BatchingConfig(),
        autoscaled=False,
    )
    harness.frontend = FunctionFrontDoor(
        functions=harness.pool.functions,
        clock=clock,
        observer=Recorder(),
        timeout_s=5.0,
        max_body_bytes=1 << 20,
    )
    return harness


def answered_in_ms(result: list[Outcome] | BaseException) -> float | None:
    if isinstance(result, BaseException):
        return None
    (outcome,) = result
    return outcome.queue_ms + outcome.service_ms


async def test_a_host_that_slows_five_times_shows_a_fifth_of_the_capacity_and_keeps_the_slo() -> (
    None
):
    clock, host = FakeClock(), Host()
    harness = make_harness(clock, host)
    # an SLO that full batches still fit five times slower: the capacity scales with speed
    harness.pool.deploy(replace(SPEC, slo_ms=SLOW_SLO_MS), Path("/nonexistent/m"), MANIFEST)
    await harness.drive(step_s=STEP_MS / 1000.0, rate_rps=100.0, seconds=4.0)
    router = harness.pool.get("f").router
    ((_, fast_rps),) = router.capacity(SLOW_SLO_MS)

    host.slowness = 5.0  # every batch now takes five times as long
    await harness.drive(
        step_s=STEP_MS / 1000.0, rate_rps=100.0, seconds=6.0
    )  # the measured service times follow
    ((_, slow_rps),) = router.capacity(SLOW_SLO_MS)
    assert math.isclose(slow_rps, fast_rps / 5.0, rel_tol=0.2), (fast_rps, slow_rps)

    # below the lower capacity (60 %): nothing refused, every answer within the SLO
    harness.calls.clear()
    refused_before = router.rejected
    await harness.drive(step_s=STEP_MS / 1000.0, rate_rps=0.6 * slow_rps, seconds=10.0)
    results = await harness.settle()
    assert router.rejected == refused_before
    latencies = [answered_in_ms(r) for r in results]
    assert None not in latencies
    assert max(v for v in latencies if v is not None) <= SLOW_SLO_MS
    await harness.stop()


async def test_noisy_service_times_are_refused_only_when_the_instance_is_full() -> None:
    clock, host = FakeClock(), Host()
    harness = make_harness(clock, host)
    harness.pool.deploy(SPEC, Path("/nonexistent/m"), MANIFEST)
    host.noise = itertools.cycle([0.6, 1.4, 1.0, 0.7, 1.3])  # serving on a shared core
    await harness.drive(step_s=STEP_MS / 1000.0, rate_rps=50.0, seconds=3.0)
    router = harness.pool.get("f").router
    ((_, capacity_rps),) = router.capacity(SLO_MS)

    harness.calls.clear()
    await harness.drive(
        step_s=STEP_MS / 1000.0, rate_rps=0.6 * capacity_rps, seconds=10.0
    )  # room to spare
    calm = await harness.settle()
    assert all(isinstance(r, list) for r in calm)  # not one refusal

    harness.calls.clear()
    await harness.drive(
        step_s=STEP_MS / 1000.0, rate_rps=2.0 * capacity_rps, seconds=5.0
    )  # twice what it serves
    flood = await harness.settle()
    refused = [r for r in flood if isinstance(r, Overloaded)]
    admitted = [v for r in flood if (v := answered_in_ms(r)) is not None]
    assert refused, "an instance asked for twice its capacity must refuse"
    assert len(refused) + len(admitted) == len(flood)  # nothing else failed
    # the admitted keep the SLO (give or take the fake clock's 1-ms steps)
    assert sorted(admitted)[int(0.99 * (len(admitted) - 1))] <= SLO_MS + STEP_MS
    await harness.stop()


async def test_planned_instances_never_share_a_core() -> None:
    clock, host = FakeClock(), Host(per_item_ms=4.0)
    harness = make_harness(clock, host, cores=(0, 1))
    harness.pool = WorkerPool(
        clock,
        [Server(LOCAL_SERVER, harness.starter, CpuAllocator((0, 1)), 2)],
        BatchingConfig(),
        autoscaled=True,
    )
    harness.frontend = FunctionFrontDoor(
        functions=harness.pool.functions,
        clock=clock,
        observer=Recorder(),
        timeout_s=5.0,
        max_body_bytes=1 << 20,
    )
    scaling = ScalingConfig(tick_s=0.5, cpu_options=(1, 2), demand=DemandConfig(long_window_s=2.0))
    harness.autoscaler = Autoscaler(harness.pool, scaling)
    harness.pool.deploy(SPEC, Path("/nonexistent/m"), MANIFEST)
    most_cores = 0
    for _ in range(16):  # far more than two cores serve: the planner wants more instances
        await harness.drive(step_s=STEP_MS / 1000.0, rate_rps=4000.0, seconds=0.5)
        harness.autoscaler.tick()
        live = [
            i
            for i in harness.pool.get("f").router.instances
            if i.state in (InstanceState.STARTING, InstanceState.READY)
        ]
        cores = [core for i in live for core in i.cpu_ids]
        assert len(cores) == len(set(cores)), f"instances share a core: {cores}"
        most_cores = max(most_cores, len(cores))
    assert most_cores == 2  # it did scale out, onto the free core
    await harness.stop()


async def test_the_first_instance_batches_as_its_measured_service_times_allow() -> None:
    chosen = {}
    for slowness in (1.0, 5.0):
        clock, host = FakeClock(), Host(fixed_ms=2.0, per_item_ms=2.0)
        host.slowness = slowness
        harness = make_harness(clock, host)
        harness.pool.deploy(SPEC, Path("/nonexistent/m"), MANIFEST)
        await harness.drive(step_s=STEP_MS / 1000.0, rate_rps=1.0, seconds=1.0)
        (instance,) = harness.pool.get("f").router.instances
        chosen[slowness] = instance.config.batch_size
        await harness.stop()
    # the largest batch within half the SLO: 16 (34 ms) on the fast host; on the slow one
    # 4 (50 ms) — 8 would take 90 ms
    assert chosen == {1.0: 16, 5.0: 4}
