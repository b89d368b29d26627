"""A write through one process's mapped weight changes neither the store nor another's view."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from infless.weights.attach import attach
from infless.weights.store import TensorStore
from tests.support.clock import FakeClock
from tests.unit.weights.packages import write_package

REPO_ROOT = Path(__file__).resolve().parents[2]

# Maps the weights, vandalises its own copy, reports, then re-reads a fresh map on request.
OTHER_INSTANCE = """
import json, sys
from infless.weights.attach import attach
from infless.workers.protocol import StoredTensor
stored = [StoredTensor(**t) for t in json.loads(sys.argv[1])]
state = attach(stored)
before = state["weight"].double().sum().item()
state["weight"].fill_(-7.0)
print(json.dumps({"before": before, "own": state["weight"].double().sum().item()}), flush=True)
sys.stdin.readline()
fresh = attach(stored)["weight"].double().sum().item()
print(json.dumps({"own": state["weight"].double().sum().item(), "fresh": fresh}), flush=True)
"""


@pytest.fixture
def shm_store() -> Iterator[TensorStore]:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    directory = Path(tempfile.mkdtemp(prefix="infless-test-store-", dir=base))
    store = TensorStore(directory / "store", FakeClock())
    yield store
    store.close()
    shutil.rmtree(directory, ignore_errors=True)


def test_writes_stay_private_across_processes(tmp_path: Path, shm_store: TensorStore) -> None:
    weight = np.random.default_rng(2).standard_normal((64, 64)).astype(np.float32)
    tensors = shm_store.publish(write_package(tmp_path / "m", {"weight": weight}), "t")
    stored_bytes = Path(tensors[0].path).read_bytes()
    original = float(weight.astype(np.float64).sum())
    payload = json.dumps([{f: getattr(t, f) for f in t.__struct_fields__} for t in tensors])
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER_INSTANCE, payload],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdin is not None
        assert other.stdout is not None
        mine = attach(tensors)["weight"]
        first = json.loads(other.stdout.readline())  # the other process has written by now
        assert first["before"] == pytest.approx(original)
        assert first["own"] == pytest.approx(-7.0 * weight.size)
        assert mine.double().sum().item() == pytest.approx(original)  # its write is not ours
        mine.copy_(torch.full_like(mine, 3.0))  # and ours is not theirs
        other.stdin.write("again\n")
        other.stdin.flush()
        second = json.loads(other.stdout.readline())
        assert second["own"] == pytest.approx(-7.0 * weight.size)
        assert second["fresh"] == pytest.approx(original)
        assert Path(tensors[0].path).read_bytes() == stored_bytes
        assert other.wait(timeout=60) == 0
    finally:
        if other.poll() is None:
            other.kill()
        other.wait(timeout=30)
        for stream in (other.stdin, other.stdout):
            if stream is not None:
                stream.close()
