"""The transforming layer of the starter chain over a fake inner starter: which way a start
goes, the fallback when a transformation fails, tenant isolation, which retired workers are
kept idle, and idle workers' expiry and death."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import pytest

from infless.control.structures import StructureCache, structure_key
from infless.control.transforms import IdleWorker, TransformingStarter
from infless.transform.config import TransformConfig
from infless.transform.costs import MetaOpCosts
from infless.transform.idle import IdleEntry
from infless.transform.structure import ModelStructure, Op, OpTensor
from infless.types import InstanceConfig
from infless.workers import protocol as p
from infless.workers.handle import WorkerHandle, WorkerStartFailed
from infless.workers.starting import Booted, BootOrder, Retiring, StarterDefaults
from tests.support.clock import FakeClock

CONV = "torch.nn.modules.conv.Conv2d"


def _conv(target: str, channels: int) -> Op:
    props = {"in_channels": channels, "out_channels": channels, "kernel_size": [3, 3]}
    return Op(target, CONV, props, (OpTensor("weight", (channels, channels, 3, 3), "float32"),))


@dataclass
class FakeHandle:
    pid: int
    alive: bool = True
    stopped: bool = False
    on_death: Any = None

    async def stop(self, timeout_s: float) -> None:
        self.stopped = True
        self.alive = False

    def rebind_death(self, on_death: Any) -> None:
        self.on_death = on_death

    def die(self) -> None:
        self.alive = False
        self.on_death()


@dataclass
class FakeStarter(StarterDefaults):
    fail_transform: bool = False
    sandboxed: bool = False
    transformed: list[str] = field(default_factory=list)
    booted: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)

    def normal_path(self, order: BootOrder) -> Any:
        from infless.transform.records import StartPath

        return StartPath.ZYGOTE

    def transformable(self, order: BootOrder) -> bool:
        return True

    def parked(self, worker_id: str) -> None:
        pass

    def may_load(self, handle: WorkerHandle, order: BootOrder) -> bool:
        return not self.sandboxed  # a sandboxed worker sees no package deployed after it

    async def stop_kept(self, worker_id: str, handle: WorkerHandle, timeout_s: float) -> None:
        await handle.stop(timeout_s)

    async def release(self, instance_id: str) -> None:
        self.released.append(instance_id)

    def deployed(self, package_dir: Path, tenant: str, plain_module: bool) -> None:
        pass

    def holder_ids(self) -> list[str]:
        return []

    async def close(self) -> None:
        pass

    async def transform(self, order: BootOrder, donor_id: str, *_: object) -> Booted:
        if self.fail_transform:
            raise WorkerStartFailed("a meta-operator raised")
        self.transformed.append(donor_id)
        start = p.StartBreakdown(transform_ms=4.0, metaops_ms={"replace": 1.0})
        return Booted(cast(Any, FakeHandle(7)), p.Ready(7, {1: 2.0}, start), start)

    async def boot(self, order: BootOrder) -> Booted:
        self.booted.append(order.instance_id)
        start = p.StartBreakdown(spawn_ms=20.0, build_ms=10.0, attach_ms=10.0)
        return Booted(cast(Any, FakeHandle(8)), p.Ready(8, {1: 2.0}, start), start)


class FakeStore:
    def known_index(self, package_dir: Path) -> None:
        return None

    def similarity(self, package_dir: Path, tenant: str, *, known_only: bool = False) -> float:
        return 0.0


def _package(root: Path, name: str, ops: tuple[Op, ...], cache: StructureCache) -> Path:
    directory = root / name
    directory.mkdir()
    (directory / "manifest.json").write_text(f'{{"name": "{name}"}}')
    key = structure_key(directory)
    assert key is not None
    nodes = tuple({"name": f"n{i}"} for i in range(len(ops) + 2))
    cache._save(key, ModelStructure(name, ops, nodes))
    return directory


@pytest.fixture
def setup(tmp_path: Path) -> tuple[TransformingStarter, FakeStarter, Path, Path, FakeClock]:
    cache = StructureCache(tmp_path / "structures", 5.0)
    source = _package(tmp_path, "src", tuple(_conv(f"c{i}", 64) for i in range(40)), cache)
    dest = _package(tmp_path, "dst", tuple(_conv(f"c{i}", 64) for i in range(41)), cache)
    starter, clock = FakeStarter(), FakeClock()
    service = TransformingStarter(
        cast(Any, starter), TransformConfig(idle_keep_s=30.0), cast(Any, clock), cache,
        MetaOpCosts.default(), cast(Any, FakeStore()),
    )  # fmt: skip
    return service, starter, source, dest, clock


def _order(package_dir: Path, tenant: str = "t") -> BootOrder:
    return BootOrder("new-1", tenant, package_dir, InstanceConfig(1, 1), (0,), (1,))


def _idle(service: TransformingStarter, source: Path, tenant: str = "t") -> None:
    entry = IdleEntry("old-1", "src-fn", tenant, service.clock.now())
    worker = IdleWorker(entry, cast(Any, FakeHandle(5)), source, "old-1", [{"event": "idle"}])
    service.park(worker)


async def test_a_cheaper_transformation_is_taken_and_recorded(setup: Any) -> None:
    service, starter, source, dest, _ = setup
    _idle(service, source)
    booted = await service.boot(_order(dest))
    history = booted.history
    assert starter.transformed == ["old-1"]
    assert starter.booted == []
    assert booted.start.transform_ms == 4.0
    assert history[0] == {"event": "idle"}  # the worker's past comes along
    event = history[-1]
    assert event["event"] == "transformed"
    assert event["from"] == "src-fn"
    assert event["plan"]["steps"]["add"] == 1
    assert service.idle == {}


async def test_a_failed_transformation_falls_back_to_a_normal_start(setup: Any) -> None:
    service, starter, source, dest, _ = setup
    starter.fail_transform = True
    _idle(service, source)
    booted = await service.boot(_order(dest))
    history = booted.history
    assert starter.booted == ["new-1"]
    assert history[-1]["event"] == "started"
    assert history[-1]["path"] == "zygote"
    assert booted.ready.pid == 8


async def test_another_tenants_idle_worker_is_never_taken(setup: Any) -> None:
    service, starter, source, dest, _ = setup
    _idle(service, source, tenant="other")
    await service.boot(_order(dest, tenant="t"))
    assert starter.transformed == []
    assert starter.booted == ["new-1"]
    assert list(service.idle) == ["old-1"]


async def test_a_sandboxed_idle_worker_that_cannot_see_the_package_is_never_taken(
    setup: Any,
) -> None:
    service, starter, source, dest, _ = setup
    starter.sandboxed = True  # its mount view holds no package deployed after it started
    _idle(service, source)
    await service.boot(_order(dest))
    assert starter.transformed == []
    assert starter.booted == ["new-1"]
    assert list(service.idle) == ["old-1"]


async def test_without_a_known_structure_the_start_is_normal(setup: Any, tmp_path: Path) -> None:
    service, starter, source, _, _ = setup
    _idle(service, source)
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "manifest.json").write_text("{}")
    booted = await service.boot(_order(unknown))
    assert starter.booted == ["new-1"]
    assert booted.history == [{"event": "started", "path": None, "tookMs": 40.0}]
    await service.structures.close()


async def test_an_idle_worker_untaken_for_idle_keep_s_is_stopped(setup: Any) -> None:
    service, starter, source, _, clock = setup
    _idle(service, source)
    handle = service.idle["old-1"].handle
    await clock.advance(29.0)
    assert starter.released == []
    await clock.advance(1.0)
    assert starter.released == ["old-1"]  # its store holds go with it
    assert handle.stopped
    assert service.idle == {}


async def test_an_idle_worker_that_dies_gives_its_holds_back(setup: Any) -> None:
    service, starter, source, _, _ = setup
    _idle(service, source)
    service.idle["old-1"].handle.die()
    await service.close()
    assert service.idle == {}
    assert starter.released == ["old-1"]


def _retiring(order: BootOrder, *, keep: bool = True) -> tuple[Retiring, FakeHandle]:
    handle = FakeHandle(9)
    retiring = Retiring(order, cast(Any, handle), [{"event": "started"}], keep=keep, timeout_s=1.0)
    return retiring, handle


async def test_a_retired_plain_module_worker_is_kept_idle_with_its_history(setup: Any) -> None:
    service, _, source, _, _ = setup
    order = replace(_order(source), function="src-fn", instance="src-fn-1")
    retiring, handle = _retiring(order)
    assert await service.retire(retiring)
    assert not handle.stopped
    kept = service.idle["new-1"]
    assert kept.entry.function == "src-fn"
    assert [e["event"] for e in kept.history] == ["started", "idle"]
    assert service.holder_ids() == ["new-1"]  # its store holds stay with it
    assert [w.worker_id for w in service.kept()] == ["src-fn-1"]


@pytest.mark.parametrize(
    "order_change",
    [
        {"plain_module": False},  # a variant (a transform applied after loading)
        {"shared_weights": False},  # a program package: no stored weights
        {"config": InstanceConfig(1, 1, 30)},  # a GPU instance: the GPU layer's
    ],
)
async def test_workers_that_cannot_be_transformed_are_stopped(
    setup: Any, order_change: dict[str, Any]
) -> None:
    service, _, source, _, _ = setup
    order = replace(_order(source), function="src-fn", **order_change)
    retiring, handle = _retiring(order)
    service.transformer.transformable = lambda o: o.plain_module and o.shared_weights
    assert not await service.retire(retiring)
    assert handle.stopped
    assert service.idle == {}


async def test_nothing_is_kept_when_the_pool_says_so(setup: Any) -> None:
    service, _, source, _, _ = setup
    retiring, handle = _retiring(replace(_order(source), function="src-fn"), keep=False)
    assert not await service.retire(retiring)
    assert handle.stopped
