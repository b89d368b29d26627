from __future__ import annotations

import msgspec
import pytest

from infless.weights import holder_protocol as h
from infless.weights.gpu_tier import (
    CudaIpcHandle,
    DeviceBook,
    FakeIpcHandle,
    GpuModel,
    SharedModel,
    plan_layout,
)
from infless.weights.stored import StoredTensor

LAYOUT, _ = plan_layout([("w", "float32", [2, 2]), ("b", "bfloat16", [3])])
HELD = GpuModel("k", 1024, frozenset({"i1", "i2"}), 12.5)
BOOKS = [DeviceBook(0, 4096, (HELD,)), DeviceBook(1, 10)]
CUDA = CudaIpcHandle(
    device=0,
    handle=b"\x01" * 64,
    storage_size_bytes=1024,
    storage_offset_bytes=512,
    ref_counter_handle=b"/torch_1_2",
    ref_counter_offset=3,
    event_handle=b"\x00" * 64,
    event_sync_required=True,
)

TO_HOLDER: list[h.ToHolder] = [
    h.HolderStart("cuda", [h.HolderDevice(3, "GPU-abc"), h.HolderDevice(0, "GPU-def")], 0.5),
    h.HolderStart("fake", [h.HolderDevice(0, "fake-0")], 1.0, "/dev/shm/x", 1 << 20),
    h.Open("i1", 3, "k", [StoredTensor("w", "/s/t/abc", "float32", [2, 2])]),
    h.Close("i1"),
    h.Reconcile(["i1", "i2"]),
    h.Books(),
    h.Stop(),
]
FROM_HOLDER: list[h.FromHolder] = [
    h.HolderReady(42, BOOKS, [h.DeviceMemory(0, 100, 200)]),
    h.HolderFailed("no CUDA"),
    h.Opened(SharedModel("k", 3, CUDA, LAYOUT), hit=False, upload_ms=2.5, books=BOOKS),
    h.Opened(SharedModel("k", 0, FakeIpcHandle("/dev/shm/x/0/k", 1024), LAYOUT), True, 0.0),
    h.OpenRefused("does not fit", BOOKS),
    h.BooksReply(BOOKS, [h.DeviceMemory(1, 5, 10)]),
]


@pytest.mark.parametrize("message", TO_HOLDER, ids=lambda m: type(m).__name__)
def test_requests_round_trip_as_frames(message: h.ToHolder) -> None:
    frame = h.encode_frame(message)
    assert h.frame_length(frame[: h.FRAME_HEADER.size]) == len(frame) - h.FRAME_HEADER.size
    assert h.decode_to_holder(frame[h.FRAME_HEADER.size :]) == message


@pytest.mark.parametrize("message", FROM_HOLDER, ids=lambda m: type(m).__name__)
def test_answers_round_trip_as_frames(message: h.FromHolder) -> None:
    frame = h.encode_frame(message)
    decoded = h.decode_from_holder(frame[h.FRAME_HEADER.size :])
    assert decoded == message


def test_books_keep_holders_and_the_ipc_handle_keeps_its_kind() -> None:
    reply = h.decode_from_holder(h.encode_frame(FROM_HOLDER[2])[h.FRAME_HEADER.size :])
    assert isinstance(reply, h.Opened)
    assert isinstance(reply.shared.ipc, CudaIpcHandle)
    assert reply.books[0].models[0].holders == {"i1", "i2"}
    assert reply.books[0].used_bytes == 1024


def test_a_message_of_the_other_direction_is_refused() -> None:
    body = h.encode_frame(h.Books())[h.FRAME_HEADER.size :]
    with pytest.raises(msgspec.ValidationError):
        h.decode_from_holder(body)
    with pytest.raises(h.FrameError, match="exceeds"):
        h.frame_length(h.FRAME_HEADER.pack(h.MAX_FRAME_BYTES + 1))
