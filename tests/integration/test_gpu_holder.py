"""The GPU tier's holder as a real process over the fake runtime: sharing, eviction, refusal,
loss (SIGKILL) and restart, stop; models published into a real tensor store on tmpfs."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import numpy as np
import pytest

from infless.clock import RealClock
from infless.weights.gpu_holder import GpuTierClient, GpuTierFull, TierUnavailable, model_key_of
from infless.weights.gpu_tier import FakeIpcHandle, SharedModel
from infless.weights.store import TensorStore
from infless.weights.stored import StoredTensor
from tests.support.clock import FakeClock
from tests.support.gateway import REPO_ROOT
from tests.support.gpu_tier import fake_copy_tensors, stored_bytes
from tests.unit.weights.packages import write_package

TIER_BYTES = 16384  # half of the fake device: memory_fraction 0.5
Publish = Callable[[str, dict[str, np.ndarray]], list[StoredTensor]]


def model(seed: int, rows: int = 24) -> dict[str, np.ndarray]:
    """A small model: 6,408 bytes on the device at 24 rows (three fit the tier, not four)."""
    rng = np.random.default_rng(seed)
    return {
        "layer.weight": rng.standard_normal((rows, 64)).astype(np.float32),
        "layer.bias": rng.standard_normal(64).astype(np.float32),
        "steps": np.array(seed, dtype=np.int64),
    }


@pytest.fixture
def holder_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))  # the holder imports this checkout


@pytest.fixture
def fake_root(store: TensorStore) -> Path:
    return store.root.parent / "gpu-fake"  # removed with the store's directory


@pytest.fixture
def publish(store: TensorStore, tmp_path: Path) -> Publish:
    def publish_model(name: str, arrays: dict[str, np.ndarray]) -> list[StoredTensor]:
        return store.publish(write_package(tmp_path / name, arrays), "tenant")

    return publish_model


def make_client(
    fake_root: Path,
    on_lost: Callable[[frozenset[str]], None] | None = None,
    clock: FakeClock | None = None,
) -> GpuTierClient:
    return GpuTierClient(
        "fake",
        [(0, "fake-0")],
        0.5,
        RealClock() if clock is None else clock,
        fake_root=fake_root,
        fake_memory_bytes=2 * TIER_BYTES,
        start_timeout_s=30.0,
        on_lost=on_lost,
    )


async def until(condition: Callable[[], bool], what: str) -> None:
    """Poll for what a real process does in its own time (bounded)."""
    for _ in range(1500):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"still waiting for {what}")


@pytest.fixture
async def client(holder_env: None, fake_root: Path) -> AsyncIterator[GpuTierClient]:
    tier = make_client(fake_root)
    await tier.start()
    yield tier
    await tier.stop()


def copy_path(shared: SharedModel) -> Path:
    assert isinstance(shared.ipc, FakeIpcHandle)
    return Path(shared.ipc.path)


def copies(fake_root: Path) -> list[Path]:
    return sorted((fake_root / "0").iterdir())


def block(directory: Path) -> None:
    """A file where the directory was: nothing can be created under it."""
    shutil.rmtree(directory)
    directory.write_text("not a directory")


def unblock(directory: Path) -> None:
    directory.unlink()


def maps_torch(pid: int) -> bool:
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_opens_share_one_copy_evict_idle_models_and_refuse_what_cannot_fit(
    client: GpuTierClient,
    publish: Publish,
    fake_root: Path,
) -> None:
    a, b, c = publish("a", model(1)), publish("b", model(2)), publish("c", model(3))
    first = await client.open("i1", 0, model_key_of(a), a)
    assert client.pid is not None
    assert not maps_torch(client.pid)  # the fake runtime never imports torch (nor CUDA)
    assert fake_copy_tensors(first) == stored_bytes(a)  # the store's bytes at the layout's offsets
    assert copies(fake_root) == [copy_path(first)]
    second = await client.open("i2", 0, model_key_of(a), a)
    assert second == first
    assert copies(fake_root) == [copy_path(first)]  # a hit: no new file
    held = await client.open("i3", 0, model_key_of(b), b)
    await client.close("i1")
    await client.close("i2")
    await client.close("i2")  # idempotent
    third = await client.open("i4", 0, model_key_of(c), c)
    assert not copy_path(first).exists()  # the idle model was evicted
    assert copies(fake_root) == sorted([copy_path(held), copy_path(third)])
    book = client.books()[0]
    assert {m.model_key: m.holders for m in book.models} == {
        model_key_of(b): {"i3"},
        model_key_of(c): {"i4"},
    }
    huge = publish("huge", model(4, rows=80))
    with pytest.raises(GpuTierFull, match="raise the GPU memory fraction"):
        await client.open("i5", 0, model_key_of(huge), huge)
    more = publish("d", model(5, rows=32))
    with pytest.raises(GpuTierFull, match="models in use leave 3568 free on device 0"):
        await client.open("i5", 0, model_key_of(more), more)
    assert copies(fake_root) == sorted([copy_path(held), copy_path(third)])  # nothing evicted
    device = client.describe()["devices"]
    assert isinstance(device, list)
    assert device[0]["capacityBytes"] == TIER_BYTES
    assert [m["holders"] for m in device[0]["models"]] == [["i3"], ["i4"]]


async def test_a_killed_holder_is_reported_replaced_and_leaves_nothing_behind(
    holder_env: None,
    publish: Publish,
    fake_root: Path,
) -> None:
    lost: list[frozenset[str]] = []
    reported = asyncio.Event()

    def on_lost(ids: frozenset[str]) -> None:
        lost.append(ids)
        reported.set()

    client = make_client(fake_root, on_lost)
    await client.start()
    try:
        a, b = publish("a", model(1)), publish("b", model(2))
        await client.open("i1", 0, model_key_of(a), a)
        await client.open("i2", 0, model_key_of(a), a)
        await client.open("i3", 0, model_key_of(b), b)
        await client.close("i3")  # "b" stays cached, held by nobody
        dead_pid = client.describe()["pid"]
        assert isinstance(dead_pid, int)
        os.kill(dead_pid, signal.SIGKILL)
        await asyncio.wait_for(reported.wait(), timeout=30.0)
        assert lost == [frozenset({"i1", "i2"})]
        shared = await client.open("i4", 0, model_key_of(b), b)  # waits for the new holder
        assert not alive(dead_pid)
        assert client.describe()["restarts"] == 1
        assert client.describe()["failedRestartTries"] == 0
        new_pid = client.describe()["pid"]
        assert isinstance(new_pid, int)
        assert new_pid != dead_pid
        assert copies(fake_root) == [copy_path(shared)]  # the dead holder's copies are gone
        assert fake_copy_tensors(shared) == stored_bytes(b)
        await client.close("i1")  # an instance of the dead holder: nothing to do
        assert {m.model_key: m.holders for m in client.books()[0].models} == {
            model_key_of(b): {"i4"}
        }
    finally:
        await client.stop()
    assert not alive(new_pid)
    assert copies(fake_root) == []
    assert client.describe()["state"] == "stopped"
    await client.stop()  # idempotent
    assert lost == [frozenset({"i1", "i2"})]  # stopping is not a loss


async def test_a_holder_that_cannot_start_says_why(holder_env: None, fake_root: Path) -> None:
    # this machine has no GPU: the CUDA runtime's holder reports it and exits
    client = GpuTierClient(
        "cuda",
        [(0, "GPU-00000000-0000-0000-0000-000000000000")],
        0.5,
        RealClock(),
        start_timeout_s=60.0,
    )
    with pytest.raises(TierUnavailable, match="CUDA is not available in the holder"):
        await client.start()
    assert client.describe()["state"] == "failed"
    assert client.describe()["pid"] is None
    with pytest.raises(TierUnavailable, match="holder is failed: the GPU tier's holder failed"):
        await client.open("i", 0, "k", [])
    await client.stop()
    assert client.describe()["state"] == "stopped"


async def test_a_holder_that_stops_answering_is_killed_and_replaced(
    holder_env: None, publish: Publish, fake_root: Path
) -> None:
    clock = FakeClock()
    lost: list[frozenset[str]] = []
    client = make_client(fake_root, lost.append, clock)
    await client.start()
    try:
        a = publish("a", model(1))
        await client.open("i1", 0, model_key_of(a), a)
        hung_pid = client.pid
        assert hung_pid is not None
        os.kill(hung_pid, signal.SIGSTOP)
        asking = asyncio.create_task(client.refresh())
        await until(lambda: clock.sleeper_count > 0, "the request's deadline")
        await clock.advance(30.0)  # start_timeout_s: the holder's answer is overdue
        with pytest.raises(TierUnavailable, match=r"did not answer Books within 30\.0 s"):
            await asking
        await until(lambda: client.pid not in (None, hung_pid), "the replacement holder")
        assert lost == [frozenset({"i1"})]
        assert not alive(hung_pid)
        await client.open("i2", 0, model_key_of(a), a)
    finally:
        await client.stop()


async def test_restarts_are_bounded_and_an_explicit_start_recovers(
    holder_env: None, publish: Publish, fake_root: Path
) -> None:
    clock = FakeClock()
    client = make_client(fake_root, clock=clock)
    await client.start()
    try:
        pid = client.pid
        assert pid is not None
        block(fake_root)  # every new holder fails to start
        os.kill(pid, signal.SIGKILL)
        for tries in range(1, 7):  # each failed try waits longer on the clock for the next

            def tried(n: int = tries) -> bool:
                return client.describe()["failedRestartTries"] == n

            await until(tried, f"restart try {tries}")
            await clock.advance(16.0)
        await until(lambda: client.state == "failed", "the restarts to give up")
        assert client.describe()["restarts"] == 0
        assert "NotADirectoryError" in str(client.describe()["lastError"])
        a = publish("a", model(1))
        with pytest.raises(TierUnavailable, match="holder is failed"):
            await client.open("i1", 0, model_key_of(a), a)
        unblock(fake_root)
        await client.start()
        assert client.state == "ready"
        await client.open("i1", 0, model_key_of(a), a)
    finally:
        await client.stop()
