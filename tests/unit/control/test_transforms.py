"""The gateway's transformation service with a fake starter: which way a start goes, the
fallback when a transformation fails, tenant isolation, and idle workers' expiry."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from infless.control.structures import StructureCache, structure_key
from infless.control.transforms import IdleWorker, TransformService
from infless.transform.config import TransformConfig
from infless.transform.costs import MetaOpCosts
from infless.transform.idle import IdleEntry
from infless.transform.structure import ModelStructure, Op, OpTensor
from infless.types import InstanceConfig
from infless.workers import protocol as p
from infless.workers.boot import Booted, BootOrder
from infless.workers.handle import WorkerStartFailed
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

    async def stop(self, timeout_s: float) -> None:
        self.stopped = True
        self.alive = False


@dataclass
class FakeStarter:
    fail_transform: bool = False
    transformed: list[str] = field(default_factory=list)
    booted: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)

    def normal_path(self, order: BootOrder) -> Any:
        from infless.transform.choice import StartPath

        return StartPath.ZYGOTE

    def transformable(self, order: BootOrder) -> bool:
        return True

    def parked(self, worker_id: str) -> None:
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
def setup(tmp_path: Path) -> tuple[TransformService, FakeStarter, Path, Path, FakeClock]:
    cache = StructureCache(tmp_path / "structures", 5.0)
    source = _package(tmp_path, "src", tuple(_conv(f"c{i}", 64) for i in range(40)), cache)
    dest = _package(tmp_path, "dst", tuple(_conv(f"c{i}", 64) for i in range(41)), cache)
    starter, clock = FakeStarter(), FakeClock()
    service = TransformService(
        TransformConfig(idle_keep_s=30.0), cast(Any, clock), cast(Any, starter), cache,
        MetaOpCosts.default(), cast(Any, FakeStore()),
    )  # fmt: skip
    return service, starter, source, dest, clock


def _order(package_dir: Path, tenant: str = "t") -> BootOrder:
    return BootOrder("new-1", tenant, package_dir, InstanceConfig(1, 1), (0,), (1,))


def _idle(service: TransformService, source: Path, tenant: str = "t") -> list[str]:
    gone: list[str] = []
    entry = IdleEntry("old-1", "src-fn", tenant, service.clock.now())
    worker = IdleWorker(entry, cast(Any, FakeHandle(5)), source, "old-1", [{"event": "idle"}])
    service.park(worker, gone.append)
    return gone


async def test_a_cheaper_transformation_is_taken_and_recorded(setup: Any) -> None:
    service, starter, source, dest, _ = setup
    _idle(service, source)
    booted, history = await service.start(_order(dest))
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
    booted, history = await service.start(_order(dest))
    assert starter.booted == ["new-1"]
    assert history[-1]["event"] == "started"
    assert history[-1]["path"] == "zygote"
    assert booted.ready.pid == 8


async def test_another_tenants_idle_worker_is_never_taken(setup: Any) -> None:
    service, starter, source, dest, _ = setup
    _idle(service, source, tenant="other")
    await service.start(_order(dest, tenant="t"))
    assert starter.transformed == []
    assert starter.booted == ["new-1"]
    assert list(service.idle) == ["old-1"]


async def test_without_a_known_structure_the_start_is_normal(setup: Any, tmp_path: Path) -> None:
    service, starter, source, _, _ = setup
    _idle(service, source)
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "manifest.json").write_text("{}")
    _, history = await service.start(_order(unknown))
    assert starter.booted == ["new-1"]
    assert history == [{"event": "started", "path": None, "tookMs": 40.0}]
    await service.structures.close()


async def test_an_idle_worker_untaken_for_idle_keep_s_is_stopped(setup: Any) -> None:
    service, _, source, _, clock = setup
    gone = _idle(service, source)
    handle = service.idle["old-1"].handle
    await clock.advance(29.0)
    assert gone == []
    await clock.advance(1.0)
    assert gone == ["old-1"]
    assert handle.stopped
    assert service.idle == {}
