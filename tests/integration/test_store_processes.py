"""The tensor store under real processes on tmpfs: concurrent first loads, SIGKILL, restart."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from infless.weights.package_index import index_weights
from infless.weights.store import TensorStore
from infless.weights.store_layout import LOCK_FILE, TEMP_PREFIX
from tests.support.clock import FakeClock
from tests.unit.weights.packages import write_package

REPO_ROOT = Path(__file__).resolve().parents[2]

PUBLISHER = """
import json, sys
from pathlib import Path
from infless.clock import RealClock
from infless.weights.store import TensorStore
store = TensorStore(Path(sys.argv[1]), RealClock())
sys.stdin.readline()  # start together
outcome = store.publish_with_stats(Path(sys.argv[2]), "tenant")
print(json.dumps({"copied": outcome.copied_bytes, "mapped": outcome.mapped_bytes}), flush=True)
"""

STUCK_PUBLISHER = """
import os, sys, time
from pathlib import Path
from infless.clock import RealClock
from infless.weights import store as store_module

def half_then_hang(src, dst, offset, size):
    os.write(dst, os.pread(src, size // 2, offset))
    print("writing", flush=True)
    time.sleep(600)

store_module.copy_range = half_then_hang
store_module.TensorStore(Path(sys.argv[1]), RealClock()).publish(Path(sys.argv[2]), "tenant")
"""

HOLDER = """
import json, sys, time
from infless.weights.attach import attach
from infless.workers.protocol import StoredTensor
state = attach([StoredTensor(**t) for t in json.loads(sys.argv[1])])
print(float(sum(t.double().sum() for t in state.values())), flush=True)
time.sleep(600)
"""


@pytest.fixture
def shm_root() -> Iterator[Path]:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    directory = Path(tempfile.mkdtemp(prefix="infless-test-store-", dir=base))
    yield directory / "store"
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
    assert all(p.returncode is not None for p in started)


def spawn(processes: list[subprocess.Popen[str]], script: str, *args: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    processes.append(process)
    return process


def model(tmp_path: Path, tensors: int = 24, floats: int = 64 * 1024) -> Path:
    rng = np.random.default_rng(11)
    weights = {f"layer{i}": rng.standard_normal(floats).astype(np.float32) for i in range(tensors)}
    return write_package(tmp_path / "model", weights)


def on_disk(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != LOCK_FILE)


def test_concurrent_first_loads_write_one_copy(
    tmp_path: Path, shm_root: Path, processes: list[subprocess.Popen[str]]
) -> None:
    package = model(tmp_path)
    index = index_weights(package / "weights.safetensors")
    loaders = [spawn(processes, PUBLISHER, str(shm_root), str(package)) for _ in range(4)]
    for loader in loaders:
        assert loader.stdin is not None
        loader.stdin.write("go\n")
        loader.stdin.flush()
    results = []
    for loader in loaders:
        assert loader.stdout is not None
        results.append(json.loads(loader.stdout.readline()))
        assert loader.wait(timeout=60) == 0
    assert sum(r["copied"] for r in results) == index.unique_bytes  # each tensor written once
    assert all(r["copied"] + r["mapped"] == index.unique_bytes for r in results)
    files = on_disk(shm_root)
    assert [f.name for f in files] == sorted(t.key for t in index.tensors)
    raw = (package / "weights.safetensors").read_bytes()
    for tensor in index.tensors:
        expected = raw[tensor.offset_bytes : tensor.offset_bytes + tensor.size_bytes]
        assert (shm_root / "tenant" / tensor.key).read_bytes() == expected


def test_a_publisher_killed_mid_write_leaves_the_store_consistent(
    tmp_path: Path, shm_root: Path, processes: list[subprocess.Popen[str]]
) -> None:
    package = model(tmp_path, tensors=4)
    stuck = spawn(processes, STUCK_PUBLISHER, str(shm_root), str(package))
    assert stuck.stdout is not None
    assert stuck.stdout.readline().strip() == "writing"
    stuck.send_signal(signal.SIGKILL)
    stuck.wait(timeout=30)
    leftovers = on_disk(shm_root)
    assert len(leftovers) == 1
    assert leftovers[0].name.startswith(TEMP_PREFIX)  # never a partial file under a key
    restarted = TensorStore(shm_root, FakeClock())
    try:
        assert restarted.adopt_or_clean().removed_temp_files == 1  # its lock died with it
        outcome = restarted.publish_with_stats(package, "tenant")
        assert outcome.copied_files == 4
        assert len(on_disk(shm_root)) == 4
    finally:
        restarted.close()


def test_sigkill_of_a_holder_leaks_nothing_and_frees_nothing_in_use(
    tmp_path: Path, shm_root: Path, processes: list[subprocess.Popen[str]]
) -> None:
    rng = np.random.default_rng(5)
    shared = rng.standard_normal(4096).astype(np.float32)
    own = rng.standard_normal(4096).astype(np.float32)
    victim_model = write_package(tmp_path / "victim", {"shared": shared, "own": own})
    survivor_model = write_package(tmp_path / "survivor", {"shared": shared})
    clock = FakeClock(start=0.0)
    store = TensorStore(shm_root, clock, keepalive_s=30.0)
    try:
        victim_tensors = store.publish(victim_model, "tenant", holder="victim")
        survivor_tensors = store.publish(survivor_model, "tenant", holder="survivor")
        payload = json.dumps(
            [{f: getattr(t, f) for f in t.__struct_fields__} for t in victim_tensors]
        )
        victim = spawn(processes, HOLDER, payload)
        survivor = spawn(
            processes,
            HOLDER,
            json.dumps([{f: getattr(t, f) for f in t.__struct_fields__} for t in survivor_tensors]),
        )
        assert victim.stdout is not None
        assert survivor.stdout is not None
        expected = float(shared.astype(np.float64).sum() + own.astype(np.float64).sum())
        assert float(victim.stdout.readline()) == pytest.approx(expected)
        assert survivor.stdout.readline()
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=30) == -signal.SIGKILL
        # The pool no longer lists the victim; it never called release().
        assert store.reclaim(["survivor"], now=10.0) == []  # keep-alive starts now
        freed = store.reclaim(["survivor"], now=40.0)
        own_key = next(Path(t.path).name for t in victim_tensors if t.name == "own")
        assert [e.key for e in freed] == [own_key]
        assert {Path(t.path) for t in survivor_tensors} == set(on_disk(shm_root))
        assert {e.key for e in store.entries()} == {p.name for p in on_disk(shm_root)}
        assert Path(survivor_tensors[0].path).read_bytes() == shared.tobytes()
    finally:
        store.close()


def test_gateway_side_modules_never_import_torch_or_numpy() -> None:
    modules = "infless.weights.store infless.weights.reclaimer infless.weights.gpu_tier"
    script = (
        f"import sys\nfor m in '{modules} infless.workers.zygote'.split(): __import__(m)\n"
        "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
