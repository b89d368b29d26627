from __future__ import annotations

from collections.abc import Mapping

import msgspec
import pytest

from infless.weights.gpu_tier import (
    CudaIpcHandle,
    DeviceBook,
    GpuModel,
    GpuTier,
    GpuTierFull,
    SharedModel,
    closed,
    decide_open,
    evicted,
    opened,
    plan_layout,
)
from tests.support.clock import FakeClock


def book(*models: GpuModel, capacity: int = 1000) -> DeviceBook:
    return DeviceBook(0, capacity, models)


def model(key: str, size: int, holders: set[str] | None = None, used: float = 0.0) -> GpuModel:
    return GpuModel(key, size, frozenset(holders or set()), used)


def test_layout_aligns_every_tensor() -> None:
    layout, total = plan_layout(
        [("a", "float32", [3]), ("b", "int64", [2, 2]), ("c", "bool", [])], alignment_bytes=256
    )
    assert [t.offset_bytes for t in layout] == [0, 256, 512]
    assert total == 513
    with pytest.raises(ValueError, match="dtype 'complex64'"):
        plan_layout([("z", "complex64", [1])])


def test_hit_needs_no_space() -> None:
    decision = decide_open(book(model("m", 900), capacity=900), "m", 900)
    assert decision.hit
    assert decision.admit


def test_miss_with_room_evicts_nothing() -> None:
    decision = decide_open(book(model("a", 400, {"i"})), "b", 600)
    assert (decision.hit, decision.admit, decision.evict) == (False, True, ())


def test_miss_evicts_unreferenced_lru_first_and_only_as_needed() -> None:
    current = book(
        model("held", 300, {"i"}, used=0.0),
        model("old", 200, used=1.0),
        model("older", 200, used=0.5),
        model("new", 200, used=5.0),
    )
    decision = decide_open(current, "x", 400)  # 100 free: needs 300 more -> two LRU evictions
    assert decision.admit
    assert decision.evict == ("older", "old")


def test_referenced_models_are_never_evicted() -> None:
    current = book(model("a", 600, {"i"}), model("b", 300, {"j"}))
    decision = decide_open(current, "x", 200)
    assert not decision.admit
    assert decision.evict == ()
    assert "models in use leave 100 free" in decision.reason
    too_big = decide_open(book(), "huge", 1001)
    assert not too_big.admit
    assert "raise the GPU memory fraction" in too_big.reason


def test_refcounts_follow_open_and_close() -> None:
    current = opened(book(), "m", 100, "i1", now=1.0)
    current = opened(current, "m", 100, "i2", now=2.0)
    entry = current.get("m")
    assert entry is not None
    assert entry.holders == {"i1", "i2"}
    current = closed(current, ["i1"], now=3.0)
    entry = current.get("m")
    assert entry is not None
    assert entry.holders == {"i2"}
    with pytest.raises(ValueError, match="still held"):
        evicted(current, ["m"])
    current = closed(current, ["i2"], now=4.0)
    assert evicted(current, ["m"]).models == ()


class FakeDevice:
    def __init__(self, index: int, total_bytes: int) -> None:
        self._index = index
        self._total = total_bytes
        self.uploads: list[str] = []
        self.freed: list[str] = []
        self.live: dict[str, Mapping[str, object]] = {}

    @property
    def index(self) -> int:
        return self._index

    def total_bytes(self) -> int:
        return self._total

    def upload(self, model_key: str, tensors: Mapping[str, object]) -> object:
        self.uploads.append(model_key)
        self.live[model_key] = tensors
        return model_key

    def export(self, copy: object) -> SharedModel:
        key = str(copy)
        layout, _ = plan_layout((name, "float32", [1]) for name in self.live[key])
        handle = CudaIpcHandle(
            device=self._index,
            handle=key.encode(),
            storage_size_bytes=4,
            storage_offset_bytes=0,
            ref_counter_handle=b"rc",
            ref_counter_offset=0,
            event_handle=None,
            event_sync_required=False,
        )
        return SharedModel(key, self._index, handle, layout)

    def free(self, copy: object) -> None:
        self.freed.append(str(copy))
        del self.live[str(copy)]


def test_tier_shares_one_copy_and_evicts_within_the_fraction() -> None:
    clock = FakeClock(start=0.0)
    device = FakeDevice(0, total_bytes=2000)
    tier = GpuTier([device], memory_fraction=0.5, clock=clock)  # 1000 bytes for the tier
    loads: list[str] = []

    def loader(name: str) -> Mapping[str, object]:
        loads.append(name)
        return {"w": name}

    first = tier.open("i1", 0, "resnet", 600, lambda: loader("resnet"))
    second = tier.open("i2", 0, "resnet", 600, lambda: loader("resnet"))
    assert first == second
    assert device.uploads == ["resnet"]
    assert loads == ["resnet"]
    with pytest.raises(GpuTierFull, match="models in use leave 400 free"):
        tier.open("i3", 0, "bert", 500, lambda: loader("bert"))
    tier.close("i1")
    tier.close("i2")
    clock._now = 10.0
    tier.open("i3", 0, "bert", 500, lambda: loader("bert"))  # resnet evicted to make room
    assert device.freed == ["resnet"]
    assert [m.model_key for m in tier.books()[0].models] == ["bert"]
    assert tier.books()[0].capacity_bytes == 1000


def test_reconcile_drops_dead_holders_then_allows_eviction() -> None:
    clock = FakeClock(start=0.0)
    device = FakeDevice(0, total_bytes=1000)
    tier = GpuTier([device], memory_fraction=1.0, clock=clock)
    tier.open("dead", 0, "a", 800, lambda: {"w": 1})
    tier.open("alive", 0, "b", 200, lambda: {"w": 2})
    with pytest.raises(GpuTierFull):
        tier.open("new", 0, "c", 700, lambda: {"w": 3})
    tier.reconcile(["alive", "new"])
    tier.open("new", 0, "c", 700, lambda: {"w": 3})
    assert device.freed == ["a"]
    tier.shutdown()
    assert sorted(device.freed) == ["a", "b", "c"]
    assert device.live == {}


def test_tier_validates_configuration() -> None:
    with pytest.raises(ValueError, match="memory_fraction"):
        GpuTier([FakeDevice(0, 1)], memory_fraction=1.5, clock=FakeClock())
    tier = GpuTier([FakeDevice(0, 100)], memory_fraction=0.5, clock=FakeClock())
    with pytest.raises(KeyError, match="no GPU 3"):
        tier.open("i", 3, "m", 1, dict)


def test_shared_model_travels_as_msgpack() -> None:
    handle = CudaIpcHandle(
        device=1,
        handle=b"\x00\x01",
        storage_size_bytes=1024,
        storage_offset_bytes=256,
        ref_counter_handle=b"ref",
        ref_counter_offset=8,
        event_handle=b"ev",
        event_sync_required=True,
    )
    layout, _ = plan_layout([("w", "float16", [4, 4])])
    shared = SharedModel("bert", 1, handle, layout)
    wire = msgspec.msgpack.encode(shared)
    assert msgspec.msgpack.decode(wire, type=SharedModel) == shared


class UnexportableDevice(FakeDevice):
    def export(self, copy: object) -> SharedModel:
        raise RuntimeError("no IPC on this device")


def test_a_copy_that_cannot_be_exported_is_freed_and_not_booked() -> None:
    device = UnexportableDevice(0, total_bytes=1000)
    tier = GpuTier([device], memory_fraction=1.0, clock=FakeClock())
    with pytest.raises(RuntimeError, match="no IPC"):
        tier.open("i", 0, "m", 100, lambda: {"w": 1})
    assert device.freed == ["m"]
    assert not tier.cached(0, "m")
    assert tier.books()[0].models == ()
