"""TrIMS's GPU tier: one device copy of a model per GPU, shared with instances over CUDA IPC.

Torch-free. The bookkeeping is a pure core: which models sit on which device, which
instances hold them (reference counts), and which unreferenced models to evict. Eviction
goes least recently used first, so that the tier stays within a configured fraction of each
device's memory (TrIMS §IV-A: a model with a non-zero reference count is never evicted;
models with none stay cached until space is needed).

`GpuTier` is the imperative shell, run by the holder process that owns the device copies.
It acts through the small `GpuDevice` interface (`gpu_cuda.CudaDevice` for real, a fake in
tests). What an instance receives is a `SharedModel`: one IPC handle for a model-sized
device buffer, plus each tensor's place in it (model-granularity sharing, TrIMS §V-B: one
handle per model keeps the IPC overhead at one open per instance). The CPU path (store +
attach) never needs this module.

Where it runs: `holder_main` (one holder process per server) runs `GpuTier` over
`gpu_cuda.CudaDevice` (real GPUs) or `gpu_fake.FakeDevice` (`[gpu] fake_devices`: a file in
shared memory per device copy); the gateway reaches it through `gpu_holder.GpuTierClient`,
and a GPU instance opens the `SharedModel` it is given (`gpu_cuda.open_shared` on CUDA).
Pure core and shell alike: no I/O of its own, time only from the injected clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import msgspec

from infless.clock import Clock
from infless.weights.package_index import ELEMENT_BYTES

DEVICE_ALIGNMENT_BYTES = 256  # cudaMalloc's alignment; every tensor starts on such a boundary


class SharedTensorLayout(msgspec.Struct, array_like=True, frozen=True):
    name: str
    dtype: str
    shape: list[int]
    offset_bytes: int


class CudaIpcHandle(msgspec.Struct, array_like=True, frozen=True, tag="cuda"):
    """What `UntypedStorage._share_cuda_()` returns, as wire-ready fields."""

    device: int
    handle: bytes
    storage_size_bytes: int
    storage_offset_bytes: int
    ref_counter_handle: bytes
    ref_counter_offset: int
    event_handle: bytes | None
    event_sync_required: bool


class FakeIpcHandle(msgspec.Struct, array_like=True, frozen=True, tag="fake"):
    """A fake device's copy (`[gpu] fake_devices`, machines without a GPU): one file in
    shared memory that the holder wrote and instances map read-only."""

    path: str
    size_bytes: int


class SharedModel(msgspec.Struct, frozen=True):
    """A model's device copy as an instance opens it: one IPC handle, many tensor views."""

    model_key: str
    device: int
    ipc: CudaIpcHandle | FakeIpcHandle
    tensors: list[SharedTensorLayout]


def plan_layout(
    specs: Iterable[tuple[str, str, Sequence[int]]],
    alignment_bytes: int = DEVICE_ALIGNMENT_BYTES,
) -> tuple[list[SharedTensorLayout], int]:
    """Place (name, dtype, shape) tensors in one buffer: their layouts and its size in bytes."""
    layout: list[SharedTensorLayout] = []
    cursor = 0
    for name, dtype, shape in specs:
        if dtype not in ELEMENT_BYTES:
            raise ValueError(f"tensor {name!r} has dtype {dtype!r}, which the GPU tier lacks")
        cursor = -(-cursor // alignment_bytes) * alignment_bytes
        layout.append(SharedTensorLayout(name, dtype, list(shape), cursor))
        cursor += math.prod(shape) * ELEMENT_BYTES[dtype]
    return layout, cursor


# -- the pure core ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuModel:
    model_key: str
    size_bytes: int
    holders: frozenset[str]
    last_used_s: float


@dataclass(frozen=True, slots=True)
class DeviceBook:
    """One device's share of the tier: its capacity and the models it holds."""

    device: int
    capacity_bytes: int
    models: tuple[GpuModel, ...] = ()

    @property
    def used_bytes(self) -> int:
        return sum(m.size_bytes for m in self.models)

    def get(self, model_key: str) -> GpuModel | None:
        return next((m for m in self.models if m.model_key == model_key), None)


@dataclass(frozen=True, slots=True)
class OpenDecision:
    hit: bool  # the model is already on the device
    admit: bool  # False: it cannot fit even after evicting every unreferenced model
    evict: tuple[str, ...] = ()
    reason: str = ""


def decide_open(book: DeviceBook, model_key: str, size_bytes: int) -> OpenDecision:
    """Hit, or admit after evicting unreferenced models LRU-first, or refuse (with why)."""
    if book.get(model_key) is not None:
        return OpenDecision(hit=True, admit=True)
    if size_bytes > book.capacity_bytes:
        return OpenDecision(
            hit=False,
            admit=False,
            reason=f"model {model_key} needs {size_bytes} bytes; device {book.device}'s tier "
            f"holds at most {book.capacity_bytes} (raise the GPU memory fraction)",
        )
    free_bytes = book.capacity_bytes - book.used_bytes
    evict: list[str] = []
    idle = sorted(
        (m for m in book.models if not m.holders), key=lambda m: (m.last_used_s, m.model_key)
    )
    for model in idle:
        if free_bytes >= size_bytes:
            break
        evict.append(model.model_key)
        free_bytes += model.size_bytes
    if free_bytes < size_bytes:
        return OpenDecision(
            hit=False,
            admit=False,
            reason=f"model {model_key} needs {size_bytes} bytes; models in use leave "
            f"{free_bytes} free on device {book.device}",
        )
    return OpenDecision(hit=False, admit=True, evict=tuple(evict))


def opened(
    book: DeviceBook, model_key: str, size_bytes: int, instance_id: str, now: float
) -> DeviceBook:
    """`instance_id` holds `model_key` (added to the book if new)."""
    current = book.get(model_key)
    if current is None:
        model = GpuModel(model_key, size_bytes, frozenset({instance_id}), now)
        return replace(book, models=(*book.models, model))
    model = replace(current, holders=current.holders | {instance_id}, last_used_s=now)
    return replace(book, models=tuple(model if m is current else m for m in book.models))


def closed(book: DeviceBook, instance_ids: Iterable[str], now: float) -> DeviceBook:
    """These instances hold nothing any more; models they released were last used `now`."""
    gone = frozenset(instance_ids)
    models = tuple(
        replace(m, holders=m.holders - gone, last_used_s=now) if m.holders & gone else m
        for m in book.models
    )
    return replace(book, models=models)


def evicted(book: DeviceBook, model_keys: Iterable[str]) -> DeviceBook:
    keys = frozenset(model_keys)
    held = [m.model_key for m in book.models if m.model_key in keys and m.holders]
    if held:
        raise ValueError(f"cannot evict models still held by instances: {held}")
    return replace(book, models=tuple(m for m in book.models if m.model_key not in keys))


# -- the shell ------------------------------------------------------------------------------


class GpuTierFull(Exception):
    """The model does not fit this device's tier: serve it from host memory instead."""


class GpuDevice(Protocol):
    """The CUDA calls the tier makes; `upload` returns an opaque device copy.

    `export` is called once per copy (every instance opening it gets that `SharedModel`);
    `free` only once no instance holds the copy by the tier's books, so a device may drop
    whatever it kept for the instances' sake (CUDA IPC's reference counter).
    """

    @property
    def index(self) -> int: ...

    def total_bytes(self) -> int: ...

    def upload(self, model_key: str, tensors: Mapping[str, object]) -> object: ...

    def export(self, copy: object) -> SharedModel: ...

    def free(self, copy: object) -> None: ...


class GpuTier:
    """The holder's device copies and their books. Not thread-safe: one loop owns it."""

    def __init__(self, devices: Sequence[GpuDevice], memory_fraction: float, clock: Clock) -> None:
        if not 0.0 < memory_fraction <= 1.0:
            raise ValueError(
                f"memory_fraction must be in (0, 1], got {memory_fraction}: it is the share "
                "of each GPU's memory the tier may fill"
            )
        self._clock = clock
        self._devices = {d.index: d for d in devices}
        self._books = {
            d.index: DeviceBook(d.index, int(d.total_bytes() * memory_fraction)) for d in devices
        }
        self._copies: dict[tuple[int, str], tuple[object, SharedModel]] = {}

    def books(self) -> list[DeviceBook]:
        return [self._books[i] for i in sorted(self._books)]

    def cached(self, device: int, model_key: str) -> bool:
        """Whether `model_key` already has a device copy on `device` (an open would hit)."""
        book = self._books.get(device)
        return book is not None and book.get(model_key) is not None

    def open(
        self,
        instance_id: str,
        device: int,
        model_key: str,
        size_bytes: int,
        load_host: Callable[[], Mapping[str, object]],
    ) -> SharedModel:
        """The model's device copy for `instance_id`, uploading it (from `load_host()`) on a miss.

        Raises `GpuTierFull` when it cannot fit; nothing is evicted then.
        """
        if device not in self._books:
            raise KeyError(f"no GPU {device} in this tier (devices: {sorted(self._books)})")
        book = self._books[device]
        decision = decide_open(book, model_key, size_bytes)
        if not decision.admit:
            raise GpuTierFull(decision.reason)
        for key in decision.evict:
            copy, _ = self._copies.pop((device, key))
            self._devices[device].free(copy)
        book = evicted(book, decision.evict)
        self._books[device] = book
        if not decision.hit:
            copy = self._devices[device].upload(model_key, load_host())
            try:
                shared = self._devices[device].export(copy)
            except BaseException:
                self._devices[device].free(copy)  # never keep a copy nobody can open
                raise
            self._copies[(device, model_key)] = (copy, shared)
        self._books[device] = opened(book, model_key, size_bytes, instance_id, self._clock.now())
        return self._copies[(device, model_key)][1]

    def close(self, instance_id: str) -> None:
        """The instance released its models (they stay cached until space is needed)."""
        now = self._clock.now()
        self._books = {i: closed(b, [instance_id], now) for i, b in self._books.items()}

    def reconcile(self, running: Iterable[str]) -> None:
        """Drop holds of instances that are not running (they died without closing)."""
        alive = frozenset(running)
        now = self._clock.now()
        for index, book in self._books.items():
            dead = {h for m in book.models for h in m.holders} - alive
            if dead:
                self._books[index] = closed(book, dead, now)

    def shutdown(self) -> None:
        """Free every device copy (the holder is exiting)."""
        for (device, _), (copy, _) in list(self._copies.items()):
            self._devices[device].free(copy)
        self._copies.clear()
        self._books = {i: replace(b, models=()) for i, b in self._books.items()}
