from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from infless.weights import package_index
from infless.weights.package_index import PackageIndex
from infless.weights.reclaimer import store_usage
from infless.weights.store import StoreError, TensorStore
from infless.weights.store_layout import LOCK_FILE, TEMP_PREFIX
from infless.weights.stored import StoredTensor
from tests.support.clock import FakeClock
from tests.unit.weights.packages import backbone, variant, write_package


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=0.0)


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[TensorStore]:
    tensor_store = TensorStore(tmp_path / "store", clock, capacity_bytes=None, keepalive_s=60.0)
    yield tensor_store
    tensor_store.close()


def stored_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != LOCK_FILE)


def test_first_publish_copies_and_later_ones_map(tmp_path: Path, store: TensorStore) -> None:
    package = write_package(tmp_path / "m", backbone())
    first = store.publish_with_stats(package, "t")
    second = store.publish_with_stats(package, "t")
    assert first.copied_bytes == sum(a.nbytes for a in backbone().values())
    assert first.copied_files == 3
    assert first.mapped_bytes == 0
    assert second.copied_bytes == 0
    assert second.mapped_bytes == first.copied_bytes
    assert first.tensors == second.tensors
    files = stored_files(store.root)
    assert len(files) == 3
    for tensor in first.tensors:
        expected = backbone()[tensor.name]
        assert Path(tensor.path).read_bytes() == expected.tobytes()
        assert tensor.dtype == str(expected.dtype)
        assert tensor.shape == list(expected.shape)


def test_second_publish_reuses_the_cached_index(
    tmp_path: Path, store: TensorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = write_package(tmp_path / "m", backbone())
    calls: list[Path] = []
    real = package_index.index_weights

    def counting(path: Path) -> PackageIndex:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(package_index, "index_weights", counting)
    store.publish(package, "t")
    store.publish(package, "t")
    store.shared_bytes_for(package, "t")
    assert len(calls) == 1
    write_package(tmp_path / "m", backbone(seed=5))  # rewritten: the index must follow
    store.publish(package, "t")
    assert len(calls) == 2


def test_shared_backbone_is_stored_once_across_functions(
    tmp_path: Path, store: TensorStore
) -> None:
    packages = [write_package(tmp_path / f"v{i}", variant(0, i)) for i in range(4)]
    outcomes = [store.publish_with_stats(p, "t") for p in packages]
    backbone_bytes = sum(a.nbytes for a in backbone().values())
    head_bytes = variant(0, 0)["head.weight"].nbytes
    assert outcomes[0].copied_bytes == backbone_bytes + head_bytes
    for outcome in outcomes[1:]:
        assert outcome.copied_bytes == head_bytes
        assert outcome.mapped_bytes == backbone_bytes
    assert store.resident_bytes() == backbone_bytes + 4 * head_bytes
    assert len(stored_files(store.root)) == 3 + 4


def test_similarity_is_the_share_already_stored(tmp_path: Path, store: TensorStore) -> None:
    first = write_package(tmp_path / "a", variant(0, 1))
    second = write_package(tmp_path / "b", variant(0, 2))
    assert store.shared_bytes_for(second, "t") == 0
    store.publish(first, "t")
    backbone_bytes = sum(a.nbytes for a in backbone().values())
    assert store.shared_bytes_for(second, "t") == backbone_bytes
    total = backbone_bytes + variant(0, 2)["head.weight"].nbytes
    assert store.similarity(second, "t") == pytest.approx(backbone_bytes / total)
    assert store.similarity(first, "t") == 1.0
    assert store.shared_bytes_for(second, "other") == 0


def test_tenants_get_separate_directories_even_for_identical_content(
    tmp_path: Path, store: TensorStore
) -> None:
    package = write_package(tmp_path / "m", backbone())
    alice = store.publish(package, "alice")
    bob = store.publish(package, "bob")
    assert all(Path(t.path).parent == store.root / "alice" for t in alice)
    assert all(Path(t.path).parent == store.root / "bob" for t in bob)
    assert [Path(t.path).name for t in alice] == [Path(t.path).name for t in bob]
    assert store.resident_bytes("alice") == store.resident_bytes("bob")
    assert store.resident_bytes() == 2 * store.resident_bytes("alice")
    with pytest.raises(StoreError, match="not a tensor of tenant 'bob'"):
        store.acquire("i1", "bob", alice)
    usage = store_usage(store.entries())  # what /system/servers and the live board show
    assert usage["tenantBytes"] == {
        "alice": store.resident_bytes("alice"),
        "bob": store.resident_bytes("bob"),
    }
    assert usage["bytes"] == store.resident_bytes()
    assert usage["tensors"] == len(alice) + len(bob)


def test_store_files_and_directories_are_private(tmp_path: Path, store: TensorStore) -> None:
    tensors = store.publish(write_package(tmp_path / "m", backbone()), "alice")
    assert stat.S_IMODE((store.root / "alice").stat().st_mode) == 0o700
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
    for tensor in tensors:
        assert stat.S_IMODE(Path(tensor.path).stat().st_mode) == 0o400


def test_invalid_tenant_names_cannot_escape_the_root(tmp_path: Path, store: TensorStore) -> None:
    package = write_package(tmp_path / "m", backbone())
    for tenant in ["..", "../x", "a/b", "", ".hidden"]:
        with pytest.raises(StoreError, match="not a valid store name"):
            store.publish(package, tenant)


def test_acquire_release_and_holders(tmp_path: Path, store: TensorStore) -> None:
    tensors = store.publish(write_package(tmp_path / "m", backbone()), "t")
    key = Path(tensors[0].path).name
    store.acquire("i1", "t", tensors)
    store.acquire("i2", "t", tensors[:1])
    assert store.holders("t", key) == {"i1", "i2"}
    assert len(store.held_by("i1")) == 3
    store.release("i1")
    store.release("i1")  # idempotent
    assert store.holders("t", key) == {"i2"}
    assert store.live_set() == {("t", key)}


def test_publish_with_holder_holds_atomically(tmp_path: Path, store: TensorStore) -> None:
    tensors = store.publish(write_package(tmp_path / "m", backbone()), "t", holder="i1")
    assert store.held_by("i1") == {("t", Path(t.path).name) for t in tensors}
    with pytest.raises(StoreError, match="already holds tensors of tenant 't'"):
        store.publish(write_package(tmp_path / "m", backbone()), "u", holder="i1")


def test_keepalive_window_is_honoured(tmp_path: Path, store: TensorStore, clock: FakeClock) -> None:
    tensors = store.publish(write_package(tmp_path / "m", backbone()), "t", holder="i1")
    assert store.reclaim(["i1"], now=clock.now() + 1e6) == []  # held: never freed
    clock._now = 100.0
    store.release("i1")  # keep-alive starts now
    assert store.reclaim([], now=159.0) == []
    assert all(Path(t.path).exists() for t in tensors)
    freed = store.reclaim([], now=160.0)
    assert len(freed) == 3
    assert stored_files(store.root) == []
    assert store.resident_bytes() == 0
    with pytest.raises(StoreError, match="no longer stored"):
        store.acquire("i2", "t", tensors)


def test_capacity_bound_frees_lru_and_spares_live(tmp_path: Path, clock: FakeClock) -> None:
    tensor_store = TensorStore(tmp_path / "s", clock, capacity_bytes=0, keepalive_s=1e9)
    try:
        old = tensor_store.publish(write_package(tmp_path / "a", variant(0, 1)), "t")
        clock._now = 10.0
        live = tensor_store.publish(write_package(tmp_path / "b", variant(9, 2)), "t", holder="i")
        freed = tensor_store.reclaim(["i"], now=11.0)
        live_paths = {Path(t.path) for t in live}
        assert {e.key for e in freed} == {Path(t.path).name for t in old} - {
            p.name for p in live_paths
        }
        assert live_paths == set(stored_files(tensor_store.root))
        # the counter tensor is identical in both models: live, so it survives
        assert [Path(t.path).exists() for t in old].count(True) == 1
    finally:
        tensor_store.close()


def test_lru_order_follows_last_use(tmp_path: Path, clock: FakeClock) -> None:
    a = write_package(tmp_path / "a", {"w": np.zeros(100, dtype=np.float32)})
    b = write_package(tmp_path / "b", {"w": np.ones(100, dtype=np.float32)})
    tensor_store = TensorStore(tmp_path / "s", clock, capacity_bytes=400, keepalive_s=1e9)
    try:
        first = tensor_store.publish(a, "t")
        clock._now = 1.0
        tensor_store.publish(b, "t")
        clock._now = 2.0
        tensor_store.publish(a, "t")  # a is now the most recently used
        freed = tensor_store.reclaim([], now=3.0)
        assert [e.key for e in freed] != [Path(first[0].path).name]
        assert Path(first[0].path).exists()
        assert tensor_store.resident_bytes() == 400
    finally:
        tensor_store.close()


def test_dead_instances_lose_their_holds(tmp_path: Path, store: TensorStore) -> None:
    package = write_package(tmp_path / "m", backbone())
    store.publish(package, "t", holder="crashed")
    tensors = store.publish(package, "t", holder="alive")
    assert store.reclaim(["alive"], now=1e6) == []  # shared with a running instance
    assert store.held_by("crashed") == frozenset()
    assert store.holders("t", Path(tensors[0].path).name) == {"alive"}
    assert store.reclaim([], now=2e6) == []  # "alive" just stopped: keep-alive starts
    assert len(store.reclaim([], now=2e6 + 60.0)) == 3


def test_concurrent_threads_publish_one_copy(tmp_path: Path, store: TensorStore) -> None:
    package = write_package(tmp_path / "m", backbone(size=4096))
    barrier = threading.Barrier(6)
    copied: list[int] = []
    errors: list[BaseException] = []

    def publish() -> None:
        try:
            barrier.wait()
            copied.append(store.publish_with_stats(package, "t").copied_bytes)
        except BaseException as exc:  # collected and re-raised by the test
            errors.append(exc)

    threads = [threading.Thread(target=publish) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(copied) == sum(a.nbytes for a in backbone(size=4096).values())
    assert len(stored_files(store.root)) == 3


def test_adopt_or_clean_after_restart(tmp_path: Path, clock: FakeClock) -> None:
    root = tmp_path / "s"
    before = TensorStore(root, clock, keepalive_s=30.0)
    tensors = before.publish(write_package(tmp_path / "m", backbone()), "t", holder="i")
    before.close()
    key = Path(tensors[0].path).name
    stale = root / "t" / f"{TEMP_PREFIX}{key}-999-1"
    stale.write_bytes(b"partial")
    (root / "t" / "README").write_text("not ours")
    foreign = root / "foreign"
    foreign.mkdir(mode=0o755)
    (foreign / ("a" * 40)).write_bytes(b"someone else's")
    clock._now = 500.0
    after = TensorStore(root, clock, keepalive_s=30.0)
    try:
        report = after.adopt_or_clean()
        assert report.adopted_files == 3
        assert report.adopted_bytes == sum(a.nbytes for a in backbone().values())
        assert report.removed_temp_files == 1
        assert report.ignored == (str(foreign), str(root / "t" / "README"))
        assert stat.S_IMODE(foreign.stat().st_mode) == 0o755  # untouched
        assert not stale.exists()
        assert after.shared_bytes_for(tmp_path / "m", "t") == report.adopted_bytes
        assert after.reclaim([], now=529.0) == []  # adopted: cached for the keep-alive window
        assert len(after.reclaim([], now=530.0)) == 3
        assert stored_files(root) == [foreign / ("a" * 40), root / "t" / "README"]
    finally:
        after.close()


def test_adopt_on_an_empty_root(tmp_path: Path, clock: FakeClock) -> None:
    report = TensorStore(tmp_path / "missing", clock).adopt_or_clean()
    assert report.adopted_files == 0


def test_a_damaged_file_is_rewritten(tmp_path: Path, store: TensorStore) -> None:
    package = write_package(tmp_path / "m", backbone())
    tensors = store.publish(package, "t")
    victim = Path(tensors[0].path)
    victim.unlink()
    victim.write_bytes(b"short")
    outcome = store.publish_with_stats(package, "t")
    assert outcome.copied_files == 1
    assert victim.read_bytes() == backbone()[tensors[0].name].tobytes()


def test_acquire_checks_paths(tmp_path: Path, store: TensorStore) -> None:
    store.publish(write_package(tmp_path / "m", backbone()), "t")
    bogus = StoredTensor("w", str(store.root / "t" / "not-a-key"), "float32", [1])
    with pytest.raises(StoreError, match="not a tensor of tenant"):
        store.acquire("i", "t", [bogus])


def test_tenant_groups_make_directories_group_readable(tmp_path: Path, clock: FakeClock) -> None:
    gid = os.getgid()  # a group we may always chown to
    tensor_store = TensorStore(tmp_path / "s", clock, tenant_gid={"alice": gid})
    try:
        tensors = tensor_store.publish(write_package(tmp_path / "m", backbone()), "alice")
        tensor_store.publish(write_package(tmp_path / "m", backbone()), "bob")
        assert stat.S_IMODE(tensor_store.root.stat().st_mode) == 0o711  # traverse, not list
        assert stat.S_IMODE((tensor_store.root / "alice").stat().st_mode) == 0o750
        assert (tensor_store.root / "alice").stat().st_gid == gid
        assert stat.S_IMODE((tensor_store.root / "bob").stat().st_mode) == 0o700
        for tensor in tensors:
            assert stat.S_IMODE(Path(tensor.path).stat().st_mode) == 0o440
    finally:
        tensor_store.close()
