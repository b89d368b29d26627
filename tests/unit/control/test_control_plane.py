"""The real control plane without processes: the autoscaler plans through the scaling port,
the pool reconciles desired state into instances, the frontend, router and batch queues
serve, and in-process workers take `latency(b, c)` on a fake clock. A load step makes it
scale out with non-uniform instances and back in; a manual scale takes the function away
from the autoscaler; a release to zero and a request bring it back; stopping (the drain)
answers what instances queued and fails what waits for a start, saying why."""

from __future__ import annotations

import asyncio
import multiprocessing
from dataclasses import replace
from pathlib import Path

import msgspec
import numpy as np
import psutil

from infless.cluster.cpus import CpuAllocator
from infless.coldstart.policies import build_policy
from infless.control import desired
from infless.control.autoscaler import Autoscaler
from infless.control.desired import Owner
from infless.control.functions import FunctionFrontDoor
from infless.control.pool import WorkerPool
from infless.control.prewarm import PrewarmManager
from infless.control.servers import LOCAL_SERVER, Server
from infless.dataplane.config import BatchingConfig
from infless.dataplane.instance import InstanceState
from infless.dataplane.request import Array, Outcome
from infless.errors import WorkerUnavailable
from infless.scaling.config import DemandConfig, ScalingConfig
from infless.scaling.memory import ModelMemory
from infless.scaling.view import Prewarm, ReleaseToZero, ScalingPlan, StartInstance
from infless.types import FunctionSpec, InstanceConfig
from tests.support.clock import FakeClock
from tests.support.doubling import DOUBLING_MANIFEST
from tests.support.frontend import Recorder
from tests.support.inprocess import InProcessModel, InProcessStarter

SLO_MS = 100.0
MANIFEST = DOUBLING_MANIFEST
SPEC = FunctionSpec(
    name="f",
    image="m",
    slo_ms=SLO_MS,
    max_batch=16,
    min_instances=1,
    max_instances=8,
    instances=1,
)


def latency_ms(batch_size: int, cpus: int) -> float:
    """Batching amortises, cores help sub-linearly: 1 core serves ~450 rps at b = 16."""
    return float((4.0 + 2.0 * batch_size) / cpus**0.7)


class Harness:
    def __init__(
        self, clock: FakeClock, autoscaled: bool = True, scaling: ScalingConfig | None = None
    ) -> None:
        self.clock = clock
        self.starter = InProcessStarter(
            clock, lambda order: InProcessModel(latency_ms=latency_ms), start_s=0.05
        )
        scaling = scaling or ScalingConfig(
            tick_s=0.5,
            cpu_options=(1, 2),
            demand=DemandConfig(long_window_s=4.0, decay_tau_s=2.0),
        )
        self.pool = WorkerPool(
            clock,
            [Server(LOCAL_SERVER, self.starter, CpuAllocator((0, 1, 2, 3)), 8)],
            BatchingConfig(),
            autoscaled=autoscaled,
        )
        self.autoscaler = Autoscaler(self.pool, scaling)
        self.recorder = Recorder()
        self.frontend = FunctionFrontDoor(
            functions=self.pool.functions,
            clock=clock,
            observer=self.recorder,
            timeout_s=5.0,
            max_body_bytes=1 << 20,
        )
        self.calls: list[asyncio.Task[list[Outcome]]] = []
        self.most_instances = 0
        self.configs_seen: set[tuple[int, int]] = set()
        self.next_tick_s: float | None = None

    def request(self, value: float) -> None:
        call = self.frontend.open("f")
        self.frontend.bind(call, None)
        sample: dict[str, Array] = {"x": np.array([value, value], dtype=np.float32)}
        self.calls.append(asyncio.ensure_future(self.frontend.run(call, [sample])))

    def ready(self) -> list[tuple[int, int]]:
        function = self.pool.get("f")
        return [
            (i.config.batch_size, i.config.cpus)
            for i in function.router.instances
            if i.state is InstanceState.READY
        ]

    async def drive(self, rate_rps: float, seconds: float, step_s: float = 0.005) -> None:
        """Open-loop arrivals at `rate_rps`; the autoscaler ticks every 0.5 s of fake time."""
        owed = 0.0
        if self.next_tick_s is None:
            self.next_tick_s = self.clock.now() + 0.5
        for _ in range(round(seconds / step_s)):
            owed += rate_rps * step_s
            while owed >= 1.0:
                self.request(float(len(self.calls)))
                owed -= 1.0
            await self.clock.advance(step_s)
            if self.clock.now() >= self.next_tick_s:  # on the same beat across calls
                self.autoscaler.tick()
                self.next_tick_s += 0.5
            ready = self.ready()
            self.most_instances = max(self.most_instances, len(ready))
            self.configs_seen.update(ready)

    async def settle(self, limit_s: float = 5.0) -> list[list[Outcome] | BaseException]:
        """Advance fake time until every call is answered; their results, in order."""
        deadline_s = self.clock.now() + limit_s
        while not all(c.done() for c in self.calls) and self.clock.now() < deadline_s:
            await self.clock.advance(0.005)
        return await asyncio.gather(*self.calls, return_exceptions=True)

    async def stop(self) -> None:
        await self.settle()
        await self.pool.stop()

    async def stop_now(self) -> None:
        """Stop the pool with calls in flight (the drain), moving fake time until it ends."""
        stopping = asyncio.ensure_future(self.pool.stop())
        while not stopping.done():
            await self.clock.advance(0.005)
        await stopping


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


async def test_a_load_step_scales_out_non_uniformly_and_back_without_processes() -> None:
    children_before = _children()
    clock = FakeClock()
    harness = Harness(clock)
    harness.pool.deploy(SPEC, Path("/nonexistent/m"), MANIFEST)
    await harness.drive(rate_rps=20.0, seconds=3.0)
    assert len(harness.ready()) == 1  # the first, uniform instance carries the low rate

    await harness.drive(rate_rps=1200.0, seconds=8.0)
    at_peak = harness.ready()
    assert harness.most_instances >= 3, harness.configs_seen
    # non-uniform: instances of one function with different <b, c>
    assert len(harness.configs_seen) >= 2, harness.configs_seen

    await harness.drive(rate_rps=20.0, seconds=20.0)
    after = harness.ready()
    assert len(after) < len(at_peak)
    assert len(after) <= 2, after

    outcomes = await harness.settle()
    answered = [o for o in outcomes if isinstance(o, list)]
    # nothing lost: every request was answered (the doubling model) or refused as overloaded
    for result in answered:
        (outcome,) = result
        assert outcome.outputs["y"][0] == outcome.outputs["y"][1]
    assert len(answered) >= 0.95 * len(outcomes)
    assert harness.starter.boots >= 3
    assert _children() == children_before
    assert not multiprocessing.active_children()
    await harness.stop()


async def test_the_dts_policy_plans_through_the_same_port_with_the_package_weights() -> None:
    clock = FakeClock()
    scaling = ScalingConfig(
        policy="dts",
        tick_s=0.5,
        cpu_options=(1, 2),
        demand=DemandConfig(long_window_s=4.0, decay_tau_s=2.0),
    )
    harness = Harness(clock, scaling=scaling)
    manifest = msgspec.structs.replace(MANIFEST, weights_bytes=8 << 20)
    harness.pool.deploy(SPEC, Path("/nonexistent/m"), manifest)
    (state,) = harness.pool.snapshot().functions
    assert state.view.memory == ModelMemory(weight_bytes=8 << 20, activation_bytes_per_sample=0)

    await harness.drive(rate_rps=1200.0, seconds=8.0)
    assert harness.most_instances >= 3, harness.configs_seen
    outcomes = await harness.settle()
    answered = [o for o in outcomes if isinstance(o, list)]
    for result in answered:
        (outcome,) = result
        assert outcome.outputs["y"][0] == outcome.outputs["y"][1]
    assert len(answered) >= 0.95 * len(outcomes)
    await harness.stop()


async def test_a_manual_scale_takes_the_function_from_the_autoscaler() -> None:
    clock = FakeClock()
    harness = Harness(clock)
    harness.pool.deploy(SPEC, Path("/nonexistent/m"), MANIFEST)
    await harness.drive(rate_rps=10.0, seconds=1.0)
    harness.pool.change("f", lambda state, mint: desired.scaled(state, mint, count=3))
    await harness.drive(rate_rps=10.0, seconds=3.0)  # the autoscaler would keep one
    function = harness.pool.get("f")
    assert function.desired.owner is Owner.MANUAL
    assert len(harness.ready()) == 3
    await harness.stop()


async def test_released_to_zero_then_a_request_wakes_it_back_to_its_owner() -> None:
    clock = FakeClock()
    harness = Harness(clock)
    harness.pool.deploy(SPEC, Path("/nonexistent/m"), MANIFEST)
    await harness.drive(rate_rps=10.0, seconds=1.0)
    harness.pool.apply(ScalingPlan((ReleaseToZero("f", idle_s=60.0),)))
    await clock.advance(0.1)
    function = harness.pool.get("f")
    released = function.desired
    assert released.owner is Owner.COLDSTART
    assert harness.ready() == []
    harness.request(1.0)  # nothing runs: the request waits and wakes the function
    await clock.advance(0.01)
    assert function.desired is not released
    assert function.desired.owner is Owner.AUTOSCALER
    *_, result = await harness.settle()
    assert isinstance(result, list)
    assert result[0].cold_start_ms > 0
    harness.pool.apply(ScalingPlan((Prewarm("f", lead_s=0.0),)))  # already awake: no change
    assert function.desired.count == 1
    await harness.stop()


async def test_the_snapshot_counts_every_wanted_instance_against_cores_and_gpus() -> None:
    clock = FakeClock()
    starter = InProcessStarter(clock)
    server = Server(LOCAL_SERVER, starter, CpuAllocator((0, 1)), 4, (100, 100))
    pool = WorkerPool(clock, [server], BatchingConfig(), autoscaled=True)
    pool.deploy(SPEC, Path("/nonexistent/m"), MANIFEST)  # one uniform instance, 1 core
    gpu_start = StartInstance(
        function="f",
        config=InstanceConfig(4, 2, gpu_pct=30),
        server_id="local",
        gpu_index=1,
        exec_ms=5.0,
        r_low_rps=10.0,
        r_up_rps=200.0,
        batch_timeout_ms=0.0,
        efficiency=1.0,
    )
    pool.apply(ScalingPlan((gpu_start,)))
    (view,) = pool.snapshot().servers
    assert (view.cpus, view.free_cpus) == (4, 1)
    assert (view.gpu_pct, view.free_gpu_pct) == ((100, 100), (100, 70))
    (state,) = pool.snapshot().functions
    assert [i.state.value for i in state.view.instances] == ["starting", "starting"]
    await clock.advance(0.01)
    assert [i.state.value for i in pool.snapshot().functions[0].view.instances] == [
        "ready",
        "ready",
    ]
    await pool.stop()


async def test_the_prewarm_manager_releases_an_idle_function_through_the_port() -> None:
    clock = FakeClock()
    harness = Harness(clock)
    spec = replace(SPEC, labels={"com.openfaas.scale.zero": "true"})
    harness.pool.deploy(spec, Path("/nonexistent/m"), MANIFEST)
    manager = PrewarmManager(
        harness.pool, build_policy("fixed", {"keepalive_s": 2.0}), 0.0, scale_to_zero_default=False
    )
    harness.request(1.0)
    await harness.settle()
    assert manager.tick().actions == ()  # just used: kept for its keep-alive window
    await clock.advance(2.5)
    (action,) = manager.tick().actions
    assert isinstance(action, ReleaseToZero)
    await clock.advance(0.1)
    assert harness.ready() == []
    assert harness.pool.get("f").desired.owner is Owner.COLDSTART
    assert manager.tick().actions == ()  # released once, not again
    await harness.stop()


async def test_stopping_answers_what_an_instance_queued() -> None:
    """The drain (SIGTERM): a request queued at a ready instance is answered."""
    clock = FakeClock()
    harness = Harness(clock)
    harness.pool.deploy(SPEC, Path("/nonexistent/m"), MANIFEST)
    for _ in range(100):
        await clock.advance(0.01)
    assert len(harness.ready()) == 1
    harness.request(1.0)
    await asyncio.sleep(0)
    await harness.stop_now()
    (answered,) = await asyncio.gather(*harness.calls, return_exceptions=True)
    assert isinstance(answered, list)
    assert answered[0].outputs["y"].tolist() == [2.0, 2.0]


async def test_stopping_fails_a_request_waiting_for_a_start_naming_the_shutdown() -> None:
    clock = FakeClock()
    harness = Harness(clock)
    harness.pool.deploy(SPEC, Path("/nonexistent/m"), MANIFEST)
    harness.request(1.0)  # the first instance is still starting
    await asyncio.sleep(0)
    await harness.stop_now()
    (refused,) = await asyncio.gather(*harness.calls, return_exceptions=True)
    assert isinstance(refused, WorkerUnavailable)
    assert "the gateway is shutting down" in str(refused)
