"""The holder's request handling over the fake runtime, in process (no holder process)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infless.weights import holder_protocol as h
from infless.weights.gpu_tier import FakeIpcHandle
from infless.weights.holder_main import Holder, fake_runtime
from infless.weights.stored import StoredTensor
from tests.support.gpu_tier import fake_copy_tensors, write_stored


def start(root: Path, memory_bytes: int = 8192) -> h.HolderStart:
    devices = [h.HolderDevice(2, "fake-2"), h.HolderDevice(0, "fake-0")]
    return h.HolderStart("fake", devices, 1.0, str(root), memory_bytes)


def test_open_uploads_once_then_hits_and_books_follow(tmp_path: Path) -> None:
    holder = Holder(fake_runtime(start(tmp_path / "fake")), 1.0)
    source: dict[str, np.ndarray] = {
        "w": np.arange(12, dtype=np.float32),
        "n": np.array(3, dtype=np.int64),
    }
    tensors = write_stored(tmp_path / "store", source)
    first = holder.handle(h.Open("i1", 2, "m", tensors))
    second = holder.handle(h.Open("i2", 2, "m", tensors))
    assert isinstance(first, h.Opened)
    assert isinstance(second, h.Opened)
    assert (first.hit, second.hit) == (False, True)
    assert second.upload_ms == 0.0
    assert first.shared == second.shared
    assert first.shared.device == 2
    assert fake_copy_tensors(first.shared) == {n: a.tobytes() for n, a in source.items()}
    assert second.books[0].device == 0  # books are by device index
    assert second.books[1].models[0].holders == {"i1", "i2"}
    books = holder.handle(h.Close("i1"))
    assert isinstance(books, h.BooksReply)
    assert books.books[1].models[0].holders == {"i2"}
    used = first.shared.ipc.size_bytes if isinstance(first.shared.ipc, FakeIpcHandle) else -1
    assert {m.index: m.free_bytes for m in books.memory} == {0: 8192, 2: 8192 - used}
    books = holder.handle(h.Reconcile([]))
    assert isinstance(books, h.BooksReply)
    assert books.books[1].models[0].holders == frozenset()
    assert holder.handle(h.Books()) == books


def test_open_refusals_say_why(tmp_path: Path) -> None:
    holder = Holder(fake_runtime(start(tmp_path / "fake", memory_bytes=1024)), 1.0)
    big = write_stored(tmp_path / "store", {"w": np.zeros(512, dtype=np.float32)})
    reasons = {}
    for name, request in {
        "device": h.Open("i", 7, "m", big),
        "big": h.Open("i", 0, "m", big),
        "empty": h.Open("i", 0, "e", []),
        "dtype": h.Open("i", 0, "c", [StoredTensor("z", "/x", "complex64", [1])]),
        "gone": h.Open("i", 0, "g", [StoredTensor("w", str(tmp_path / "nope"), "float32", [1])]),
    }.items():
        reply = holder.handle(request)
        assert isinstance(reply, h.OpenRefused)
        reasons[name] = reply.reason
    assert "GPU 7 is not in this holder's tier (devices: [0, 2])" in reasons["device"]
    assert "raise the GPU memory fraction" in reasons["big"]
    assert "has no bytes" in reasons["empty"]
    assert "dtype 'complex64'" in reasons["dtype"]
    assert "could not be uploaded to GPU 0: FileNotFoundError" in reasons["gone"]
    assert all(b.models == () for b in holder.tier.books())


def test_the_fake_runtime_clears_a_dead_holders_copies_and_needs_a_root(tmp_path: Path) -> None:
    first = Holder(fake_runtime(start(tmp_path / "fake")), 1.0)
    tensors = write_stored(tmp_path / "store", {"w": np.ones(4, dtype=np.float32)})
    opened = first.handle(h.Open("i", 0, "m", tensors))
    assert isinstance(opened, h.Opened)
    assert isinstance(opened.shared.ipc, FakeIpcHandle)
    left = Path(opened.shared.ipc.path)  # `first` dies without shutting down
    fake_runtime(start(tmp_path / "fake"))
    assert not left.exists()
    with pytest.raises(ValueError, match="needs fake_root"):
        fake_runtime(h.HolderStart("fake", [h.HolderDevice(0, "f")], 1.0, None, 10))
