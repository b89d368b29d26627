from __future__ import annotations

import mmap
import stat
from pathlib import Path

import numpy as np
import pytest

from infless.weights.gpu_fake import TEMP_PREFIX, FakeDevice, HostTensor, map_host
from infless.weights.gpu_tier import (
    DEVICE_ALIGNMENT_BYTES,
    FakeIpcHandle,
    GpuTier,
    GpuTierFull,
    SharedModel,
)
from tests.support.clock import FakeClock
from tests.support.gpu_tier import fake_copy_tensors, write_stored


def arrays(seed: int = 0, rows: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w": rng.standard_normal((rows, 5)).astype(np.float32),
        "ids": np.array([1, -2, 3], dtype=np.int64),
        "mask": np.array([True, False, True]),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "half": np.array([1.5, -2.0], dtype=np.float16),
    }


def upload(device: FakeDevice, key: str, tensors: dict[str, np.ndarray], tmp: Path) -> SharedModel:
    host = map_host(write_stored(tmp / f"store-{key}", tensors))
    return device.export(device.upload(key, host))


def test_copy_file_holds_each_tensor_at_its_layout_offset(tmp_path: Path) -> None:
    device = FakeDevice(1, tmp_path / "fake", total_bytes=1 << 20)
    source = arrays()
    shared = upload(device, "m", source, tmp_path)
    assert isinstance(shared.ipc, FakeIpcHandle)
    path = Path(shared.ipc.path)
    assert path.parent == tmp_path / "fake" / "1"
    assert (shared.model_key, shared.device) == ("m", 1)
    assert [t.name for t in shared.tensors] == list(source)  # the order they were given
    assert all(t.offset_bytes % DEVICE_ALIGNMENT_BYTES == 0 for t in shared.tensors)
    last = shared.tensors[-1]
    assert shared.ipc.size_bytes == last.offset_bytes + source["half"].nbytes
    assert fake_copy_tensors(shared) == {n: a.tobytes() for n, a in source.items()}
    content = path.read_bytes()
    w_end = shared.tensors[0].offset_bytes + source["w"].nbytes
    assert content[w_end : shared.tensors[1].offset_bytes].strip(b"\0") == b""  # zero gaps
    assert stat.S_IMODE(path.stat().st_mode) == 0o400
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(TEMP_PREFIX)] == []
    assert shared.tensors[0].dtype == "float32"
    assert shared.tensors[0].shape == [3, 5]


def test_every_upload_is_a_new_file_and_free_unlinks_it(tmp_path: Path) -> None:
    device = FakeDevice(0, tmp_path / "fake", total_bytes=1 << 20)
    first_copy = device.upload("m", map_host(write_stored(tmp_path / "s", arrays())))
    first = device.export(first_copy)
    second = upload(device, "m", arrays(), tmp_path)
    assert isinstance(first.ipc, FakeIpcHandle)
    assert isinstance(second.ipc, FakeIpcHandle)
    assert first.ipc.path != second.ipc.path
    assert device.free_bytes() == (1 << 20) - first.ipc.size_bytes - second.ipc.size_bytes
    with Path(first.ipc.path).open("rb") as file:  # an instance that mapped it
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    device.free(first_copy)
    assert not Path(first.ipc.path).exists()
    assert mapped[: arrays()["w"].nbytes] == arrays()["w"].tobytes()  # the mapping survives
    mapped.close()
    assert device.free_bytes() == (1 << 20) - second.ipc.size_bytes


def test_clear_leftovers_removes_a_dead_holders_files_only_in_its_directory(
    tmp_path: Path,
) -> None:
    old = FakeDevice(0, tmp_path / "fake", total_bytes=1 << 20)
    left = upload(old, "m", arrays(), tmp_path)
    other = FakeDevice(1, tmp_path / "fake", total_bytes=1 << 20)
    kept = upload(other, "m", arrays(), tmp_path)
    fresh = FakeDevice(0, tmp_path / "fake", total_bytes=1 << 20)
    assert fresh.clear_leftovers() == 1
    assert isinstance(left.ipc, FakeIpcHandle)
    assert isinstance(kept.ipc, FakeIpcHandle)
    assert not Path(left.ipc.path).exists()
    assert Path(kept.ipc.path).exists()
    assert fresh.free_bytes() == 1 << 20


def test_map_host_and_upload_refuse_what_does_not_match(tmp_path: Path) -> None:
    stored = write_stored(tmp_path / "s", {"w": np.zeros(4, dtype=np.float32)})
    Path(stored[0].path).write_bytes(b"\0" * 8)
    with pytest.raises(ValueError, match=r"holds 8 bytes, float32\[4\] needs 16"):
        map_host(stored)
    device = FakeDevice(0, tmp_path / "fake", total_bytes=1024)
    with pytest.raises(TypeError, match="takes HostTensor values"):
        device.upload("m", {"w": np.zeros(4, dtype=np.float32)})
    with pytest.raises(ValueError, match=r"3 bytes given, float32\[1\] needs 4"):
        device.upload("m", {"w": HostTensor("float32", (1,), b"abc")})
    with pytest.raises(ValueError, match="positive memory size"):
        FakeDevice(0, tmp_path / "fake", total_bytes=0)
    assert list((tmp_path / "fake" / "0").iterdir()) == []


def test_tier_over_fake_devices_shares_evicts_lru_and_refuses(tmp_path: Path) -> None:
    clock = FakeClock(start=0.0)
    device = FakeDevice(0, tmp_path / "fake", total_bytes=4096)
    tier = GpuTier([device], memory_fraction=0.5, clock=clock)  # 2048 bytes for the tier
    models = {
        key: write_stored(tmp_path / key, {"w": np.full(256, i, np.float32)})
        for i, key in enumerate(["a", "b", "c"])
    }
    size = 1024  # 256 float32

    def open_model(instance: str, key: str) -> SharedModel:
        return tier.open(instance, 0, key, size, lambda: map_host(models[key]))

    a1 = open_model("i1", "a")
    assert tier.cached(0, "a")
    assert open_model("i2", "a") == a1  # a hit: the same copy
    b = open_model("i3", "b")
    with pytest.raises(GpuTierFull, match="models in use leave 0 free"):
        open_model("i4", "c")
    tier.close("i1")
    clock._now = 5.0
    tier.close("i2")  # "a" idle since 5.0; "b" still held
    c = open_model("i4", "c")
    assert isinstance(a1.ipc, FakeIpcHandle)
    assert not Path(a1.ipc.path).exists()  # evicted: its file unlinked
    assert not tier.cached(0, "a")
    assert [m.model_key for m in tier.books()[0].models] == ["b", "c"]
    assert fake_copy_tensors(c) == {"w": np.full(256, 2, np.float32).tobytes()}
    with pytest.raises(GpuTierFull, match="raise the GPU memory fraction"):
        tier.open("i5", 0, "huge", 4096, lambda: map_host(models["a"]))
    tier.shutdown()
    assert isinstance(b.ipc, FakeIpcHandle)
    assert list(Path(b.ipc.path).parent.iterdir()) == []
    assert device.free_bytes() == 4096
