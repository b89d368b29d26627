"""Every gateway <-> GPU-tier holder message, as typed msgspec structs, and their frame codec.

Frames are the worker protocol's (`workers.protocol`: a 4-byte big-endian length, then one
msgpack message, the same size limit); no pickle. Shared by both sides: it must not import
torch. The gateway (`gpu_holder.GpuTierClient`) sends one request at a time and reads its one
answer; the holder (`holder_main`) answers every request but `Stop`:

    HolderStart -> HolderReady | HolderFailed     (the first message, exactly once)
    Open        -> Opened | OpenRefused
    Close, Reconcile, Books -> BooksReply
    Stop        -> (the holder frees every copy and exits)

Every answer carries the books, so the gateway's view never lags the holder's.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from infless.weights.gpu_tier import DeviceBook, SharedModel
from infless.weights.stored import StoredTensor
from infless.workers.protocol import FRAME_HEADER, MAX_FRAME_BYTES, FrameError, frame_length

__all__ = [
    "FRAME_HEADER",
    "MAX_FRAME_BYTES",
    "Books",
    "BooksReply",
    "Close",
    "DeviceMemory",
    "FrameError",
    "FromHolder",
    "HolderDevice",
    "HolderFailed",
    "HolderReady",
    "HolderStart",
    "Open",
    "OpenRefused",
    "Opened",
    "Reconcile",
    "Stop",
    "ToHolder",
    "decode_from_holder",
    "decode_to_holder",
    "encode_frame",
    "frame_length",
]


class HolderDevice(msgspec.Struct, array_like=True, frozen=True):
    """A GPU the holder manages: its NVML index (how the gateway names it) and its UUID."""

    index: int
    uuid: str


class HolderStart(msgspec.Struct, tag="start", frozen=True):
    """The holder's first message. `runtime` "cuda": the holder makes only `devices` visible
    (`CUDA_VISIBLE_DEVICES` = their uuids, in this order) before CUDA initialises, so device
    ordinal i in the holder is `devices[i]`. "fake": one `FakeDevice` per entry under
    `fake_root`, each of `fake_memory_bytes`."""

    runtime: Literal["cuda", "fake"]
    devices: list[HolderDevice]
    memory_fraction: float
    fake_root: str | None = None
    fake_memory_bytes: int = 0


class DeviceMemory(msgspec.Struct, array_like=True, frozen=True):
    """What the device itself reports (CUDA: `mem_get_info`; fake: its size minus its files)."""

    index: int
    free_bytes: int
    total_bytes: int


class HolderReady(msgspec.Struct, tag="ready", frozen=True):
    pid: int
    books: list[DeviceBook]
    memory: list[DeviceMemory] = []


class HolderFailed(msgspec.Struct, tag="failed", frozen=True):
    """The holder could not start (no CUDA, devices missing, ...); it exits after this."""

    reason: str


class Open(msgspec.Struct, tag="open", frozen=True):
    """`instance_id` holds `model_key` on the GPU with NVML index `device_index`; on a miss
    the holder maps `tensors` from the host store and uploads them in this order."""

    instance_id: str
    device_index: int
    model_key: str
    tensors: list[StoredTensor]


class Opened(msgspec.Struct, tag="opened", frozen=True):
    shared: SharedModel
    hit: bool  # the model was on the device already
    upload_ms: float  # host map and device upload (0 on a hit)
    books: list[DeviceBook] = []


class OpenRefused(msgspec.Struct, tag="refused", frozen=True):
    """The model cannot have a device copy (does not fit, or the upload failed): why."""

    reason: str
    books: list[DeviceBook] = []


class Close(msgspec.Struct, tag="close", frozen=True):
    """The instance released its mapping (it exited or unloaded): it holds nothing now."""

    instance_id: str


class Reconcile(msgspec.Struct, tag="reconcile", frozen=True):
    """Only `running` instances hold anything; the others' holds are dropped."""

    running: list[str]


class Books(msgspec.Struct, tag="books", frozen=True):
    pass


class BooksReply(msgspec.Struct, tag="books_reply", frozen=True):
    books: list[DeviceBook]
    memory: list[DeviceMemory] = []


class Stop(msgspec.Struct, tag="stop", frozen=True):
    pass


ToHolder = HolderStart | Open | Close | Reconcile | Books | Stop
FromHolder = HolderReady | HolderFailed | Opened | OpenRefused | BooksReply

_encoder = msgspec.msgpack.Encoder()
_to_holder_decoder = msgspec.msgpack.Decoder(ToHolder)
_from_holder_decoder = msgspec.msgpack.Decoder(FromHolder)


def encode_frame(message: ToHolder | FromHolder) -> bytes:
    body = _encoder.encode(message)
    return FRAME_HEADER.pack(len(body)) + body


def decode_to_holder(body: bytes | memoryview) -> ToHolder:
    message: ToHolder = _to_holder_decoder.decode(body)
    return message


def decode_from_holder(body: bytes | memoryview) -> FromHolder:
    message: FromHolder = _from_holder_decoder.decode(body)
    return message
