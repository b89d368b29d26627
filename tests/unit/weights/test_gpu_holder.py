from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from infless.weights.gpu_holder import GpuTierClient, TierUnavailable, model_key_of
from infless.weights.holder_link import within
from infless.weights.stored import StoredTensor
from tests.support.clock import FakeClock

A = StoredTensor("a.weight", "/store/t1/" + "1" * 40, "float32", [2])
B = StoredTensor("a.bias", "/store/t1/" + "2" * 40, "float32", [2])


def test_model_key_is_stable_and_names_content_and_order() -> None:
    key = model_key_of([A, B])
    assert key == model_key_of([A, B])
    assert len(key) == 40
    assert int(key, 16) >= 0
    # the same content in another tenant's directory is the same model
    elsewhere = [
        StoredTensor(t.name, "/other/t2/" + Path(t.path).name, t.dtype, t.shape) for t in (A, B)
    ]
    assert model_key_of(elsewhere) == key
    assert model_key_of([B, A]) != key  # another order is another layout
    renamed = StoredTensor("a.weight2", A.path, A.dtype, A.shape)
    assert model_key_of([renamed, B]) != key
    changed = StoredTensor(A.name, "/store/t1/" + "3" * 40, A.dtype, A.shape)
    assert model_key_of([changed, B]) != key
    assert model_key_of([A]) != key
    # names and keys cannot run into each other
    assert model_key_of([StoredTensor("ab", "/s/c", "float32", [1])]) != model_key_of(
        [StoredTensor("a", "/s/bc", "float32", [1])]
    )


def test_client_refuses_a_bad_configuration_naming_the_field(tmp_path: Path) -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match="runtime = 'rocm'"):
        GpuTierClient("rocm", [(0, "u")], 0.5, clock)  # type: ignore[arg-type]  # the point
    with pytest.raises(ValueError, match="devices is empty"):
        GpuTierClient("cuda", [], 0.5, clock)
    with pytest.raises(ValueError, match=r"memory_fraction = 1.5: must be in \(0, 1\]"):
        GpuTierClient("cuda", [(0, "u")], 1.5, clock)
    with pytest.raises(ValueError, match="fake_root is None"):
        GpuTierClient("fake", [(0, "u")], 0.5, clock, fake_memory_bytes=1)
    with pytest.raises(ValueError, match="fake_memory_bytes = 0"):
        GpuTierClient("fake", [(0, "u")], 0.5, clock, fake_root=tmp_path)
    with pytest.raises(ValueError, match="start_timeout_s = 0"):
        GpuTierClient("cuda", [(0, "u")], 0.5, clock, start_timeout_s=0)


async def test_a_client_never_started_is_stopped_and_refuses_requests(tmp_path: Path) -> None:
    client = GpuTierClient(
        "fake", [(0, "fake-0")], 0.5, FakeClock(), fake_root=tmp_path, fake_memory_bytes=1024
    )
    assert client.describe() == {
        "runtime": "fake",
        "pid": None,
        "state": "stopped",
        "restarts": 0,
        "failedRestartTries": 0,
        "lastError": "",
        "devices": [],
    }
    assert client.books() == []
    with pytest.raises(TierUnavailable, match="holder is stopped"):
        await client.open("i", 0, model_key_of([A]), [A])
    with pytest.raises(TierUnavailable, match="holder is stopped"):
        await client.refresh()
    await client.close("i")  # no-ops while down
    await client.reconcile(["i"])
    await client.stop()
    assert client.state == "stopped"


async def test_within_waits_on_the_clock_and_cancels_what_ran_late() -> None:
    clock = FakeClock()
    answered: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    waiting = asyncio.create_task(within(clock, answered, 5.0))
    await asyncio.sleep(0)  # its deadline is set from now
    await clock.advance(4.0)
    answered.set_result("books")
    assert await waiting
    never = asyncio.create_task(asyncio.Event().wait())
    late = asyncio.create_task(within(clock, never, 5.0))
    await asyncio.sleep(0)
    await clock.advance(5.0)
    assert not await late
    await asyncio.sleep(0)
    assert never.cancelled()
