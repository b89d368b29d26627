"""Gateway side of the GPU tier: the client of its holder process (start, requests, loss, restart).

`GpuTierClient` starts `holder_main` (through `holder_link.HolderLink`), sends it one
request at a time (`holder_protocol`) and keeps the books of its last answer. When the
holder exits unasked (it crashed or was killed) every instance that held a device copy is
reported through `on_lost` — those mappings are not safe to use any more — the books are
forgotten and the holder is restarted in the background with a bounded backoff; `open` waits
for it (up to `start_timeout_s`), `close` and `reconcile` are no-ops meanwhile.
`model_key_of` names a model's device copy by content.

Gateway side: never imports torch; time only from the injected clock (timeouts, backoff).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path, PurePath
from typing import Literal

import msgspec

from infless.clock import Clock
from infless.weights import holder_protocol as h
from infless.weights.gpu_tier import DeviceBook, GpuTierFull, SharedModel
from infless.weights.holder_link import HolderLink, TierUnavailable, within
from infless.weights.stored import StoredTensor

__all__ = ["GpuTierClient", "GpuTierFull", "TierUnavailable", "model_key_of"]

log = logging.getLogger(__name__)

HolderState = Literal["stopped", "starting", "ready", "restarting", "failed"]

RESTART_DELAYS_S = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0)  # one loss: these tries, then "failed"
STOP_TIMEOUT_S = 10.0  # a holder not gone this long after Stop is SIGKILLed


def model_key_of(tensors: Sequence[StoredTensor]) -> str:
    """A model's stable content key: its tensors' names and store keys, in order.

    The store names each file by a content hash of (dtype, shape, bytes), so two models
    with the same key have the same bytes in the same layout; a different order is a
    different layout, hence a different key.
    """
    pairs = [(t.name, PurePath(t.path).name) for t in tensors]
    return hashlib.blake2b(msgspec.msgpack.encode(pairs), digest_size=20).hexdigest()


class GpuTierClient:
    """The server's GPU tier, held by one holder process that this client starts and restarts.

    `devices` are (NVML index, uuid) pairs; `open` names a device by that index. Requests
    are serialised (one holder, one answer at a time). Not thread-safe: one event loop.
    """

    def __init__(
        self,
        runtime: Literal["cuda", "fake"],
        devices: Sequence[tuple[int, str]],
        memory_fraction: float,
        clock: Clock,
        *,
        fake_root: Path | None = None,
        fake_memory_bytes: int = 0,
        python: str = sys.executable,
        start_timeout_s: float = 120.0,
        on_lost: Callable[[frozenset[str]], None] | None = None,
    ) -> None:
        _check(runtime, devices, memory_fraction, fake_root, fake_memory_bytes, start_timeout_s)
        self._start = h.HolderStart(
            runtime,
            [h.HolderDevice(index, uuid) for index, uuid in devices],
            memory_fraction,
            None if fake_root is None else str(fake_root),
            fake_memory_bytes,
        )
        self._clock = clock
        self._python = python
        self._start_timeout_s = start_timeout_s
        self._on_lost = on_lost
        self._state: HolderState = "stopped"
        self._settled = asyncio.Event()  # set while the state is ready, failed or stopped
        self._settled.set()
        self._lock = asyncio.Lock()
        self._link: HolderLink | None = None
        self._restart_task: asyncio.Task[None] | None = None
        self._books: list[DeviceBook] = []
        self._memory: list[h.DeviceMemory] = []
        self._restarts = 0
        self._failed_tries = 0  # of the restart under way (or the last one)
        self._last_error = ""
        self._stopping = False

    # -- what the gateway reads -----------------------------------------------------------

    @property
    def state(self) -> HolderState:
        return self._state

    @property
    def pid(self) -> int | None:
        """The serving holder's pid (None unless ready)."""
        return self._link.pid if self._link is not None and self._state == "ready" else None

    def books(self) -> list[DeviceBook]:
        """The last known books: per device capacity, used bytes, models and holders."""
        return list(self._books)

    def memory(self) -> list[h.DeviceMemory]:
        """The devices' own free and total memory, as of the holder's last books."""
        return list(self._memory)

    def describe(self) -> dict[str, object]:
        memory = {m.index: m for m in self._memory}
        devices: list[dict[str, object]] = []
        for book in self._books:
            entry: dict[str, object] = {
                "index": book.device,
                "capacityBytes": book.capacity_bytes,
                "usedBytes": book.used_bytes,
                "models": [
                    {"key": m.model_key, "sizeBytes": m.size_bytes, "holders": sorted(m.holders)}
                    for m in book.models
                ],
            }
            if book.device in memory:
                entry["deviceFreeBytes"] = memory[book.device].free_bytes
                entry["deviceTotalBytes"] = memory[book.device].total_bytes
            devices.append(entry)
        return {
            "runtime": self._start.runtime,
            "pid": self.pid,
            "state": self._state,
            "restarts": self._restarts,
            "failedRestartTries": self._failed_tries,
            "lastError": self._last_error,
            "devices": devices,
        }

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Launch the holder and wait for `HolderReady`; `TierUnavailable` when it fails."""
        if self._state in ("ready", "starting", "restarting"):
            return
        self._stopping = False
        try:
            await self._launch("starting")
        except TierUnavailable:
            self._settle("failed")
            raise

    async def stop(self) -> None:
        """Stop the holder (it frees every copy), SIGKILL it if it lingers; idempotent."""
        self._stopping = True
        restart, self._restart_task = self._restart_task, None
        if restart is not None:
            restart.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await restart
        link, self._link = self._link, None
        if link is not None:
            await link.stop(STOP_TIMEOUT_S)
        self._books, self._memory = [], []
        self._settle("stopped")

    async def _launch(self, state: HolderState) -> None:
        """Start a holder and complete its handshake; `TierUnavailable` (it is gone) if not."""
        self._state = state
        self._settled.clear()
        link = await HolderLink.launch(self._python, self._clock, self._exited)
        self._link = link
        try:
            reply = await link.request(self._start, self._start_timeout_s)
        except BaseException as exc:  # cancelled by stop() included: never leave it running
            self._last_error = str(exc) or type(exc).__name__
            self._link = None
            await link.kill()
            raise
        if not isinstance(reply, h.HolderReady):
            reason = reply.reason if isinstance(reply, h.HolderFailed) else repr(reply)
            self._last_error = f"the GPU tier's holder failed to start: {reason}"
            self._link = None
            await link.kill()
            raise TierUnavailable(self._last_error)
        self._books, self._memory = reply.books, reply.memory
        self._last_error = ""
        log.info("GPU tier holder pid %d ready (%s)", link.pid, self._start.runtime)
        self._settle("ready")

    def _exited(self, link: HolderLink, code: int) -> None:
        """A holder exited. Unasked, while serving: report its instances, forget the books,
        restart it. (Stopped, or during its handshake: whoever ended it handles that.)"""
        if link is not self._link or self._stopping or self._state != "ready":
            return
        self._link = None
        lost = frozenset(hold for b in self._books for m in b.models for hold in m.holders)
        self._last_error = f"the holder pid {link.pid} exited (code {code})"
        log.error(
            "GPU tier: %s; %d instances lose their device copies", self._last_error, len(lost)
        )
        self._books, self._memory = [], []
        self._state = "restarting"
        self._settled.clear()
        if lost and self._on_lost is not None:
            try:
                self._on_lost(lost)
            except Exception:  # the restart must happen whatever the callback does
                log.exception("GPU tier: on_lost failed")
        self._restart_task = asyncio.create_task(self._restart(), name="gpu-tier-restart")

    async def _restart(self) -> None:
        self._failed_tries = 0
        for delay_s in RESTART_DELAYS_S:
            await self._clock.sleep_until(self._clock.now() + delay_s)
            try:
                await self._launch("restarting")
            except TierUnavailable as exc:
                self._failed_tries += 1
                log.error("GPU tier: restarting the holder failed: %s", exc)
                continue
            self._restarts += 1
            return
        log.error("GPU tier: the holder did not come back after %d tries", len(RESTART_DELAYS_S))
        self._settle("failed")

    def _settle(self, state: HolderState) -> None:
        self._state = state
        self._settled.set()

    # -- requests -------------------------------------------------------------------------

    async def open(
        self, instance_id: str, device_index: int, model_key: str, tensors: list[StoredTensor]
    ) -> SharedModel:
        """The model's device copy for `instance_id` (uploaded from the store on a miss).

        Raises `GpuTierFull` (it does not fit, or could not be uploaded: serve it from host
        memory) or `TierUnavailable` (no holder within `start_timeout_s`).
        """
        request = h.Open(instance_id, device_index, model_key, tensors)
        reply = await self._call(request, wait=True)
        if isinstance(reply, h.Opened):
            self._books = reply.books
            return reply.shared
        if isinstance(reply, h.OpenRefused):
            self._books = reply.books
            raise GpuTierFull(reply.reason)
        raise TierUnavailable(f"the holder answered Open with {type(reply).__name__}")

    async def close(self, instance_id: str) -> None:
        """`instance_id` released its mapping; idempotent, a no-op while the holder is down."""
        with contextlib.suppress(TierUnavailable):
            await self._call(h.Close(instance_id), wait=False)

    async def reconcile(self, running: Iterable[str]) -> None:
        """Drop the holds of every instance not in `running` (they died without closing)."""
        with contextlib.suppress(TierUnavailable):
            await self._call(h.Reconcile(sorted(running)), wait=False)

    async def refresh(self) -> list[DeviceBook]:
        """Ask the holder for its books and device memory now (`TierUnavailable` if down)."""
        await self._call(h.Books(), wait=False)
        return self.books()

    async def _call(self, message: h.ToHolder, *, wait: bool) -> h.FromHolder:
        """Send `message` to a ready holder and return its answer (books recorded).

        `wait`: a holder that is starting or restarting is waited for; otherwise
        `TierUnavailable` at once.
        """
        deadline_s = self._clock.now() + self._start_timeout_s
        while True:
            if wait:
                await self._until_ready(deadline_s)
            elif self._state != "ready":
                raise TierUnavailable(self._down_reason())
            async with self._lock:
                link = self._link
                if self._state == "ready" and link is not None:
                    reply = await link.request(message, self._start_timeout_s)
                    if isinstance(reply, h.BooksReply):
                        self._books, self._memory = reply.books, reply.memory
                    return reply
            # lost while waiting for the lock: wait for the restart (or give up)

    async def _until_ready(self, deadline_s: float) -> None:
        while self._state != "ready":
            if self._state in ("failed", "stopped"):
                raise TierUnavailable(self._down_reason())
            settled = asyncio.ensure_future(self._settled.wait())
            if not await within(self._clock, settled, deadline_s - self._clock.now()):
                raise TierUnavailable(
                    f"the GPU tier's holder is {self._state}; not ready within "
                    f"{self._start_timeout_s} s (start_timeout_s)"
                )

    def _down_reason(self) -> str:
        why = f": {self._last_error}" if self._last_error else ""
        return f"the GPU tier's holder is {self._state}{why}"


def _check(
    runtime: str,
    devices: Sequence[tuple[int, str]],
    memory_fraction: float,
    fake_root: Path | None,
    fake_memory_bytes: int,
    start_timeout_s: float,
) -> None:
    if runtime not in ("cuda", "fake"):
        raise ValueError(f"runtime = {runtime!r}: the GPU tier runs on 'cuda' or 'fake'")
    if not devices:
        raise ValueError("devices is empty: give the tier at least one (NVML index, uuid) GPU")
    if not 0.0 < memory_fraction <= 1.0:
        raise ValueError(
            f"memory_fraction = {memory_fraction}: must be in (0, 1] (gpu.memory_fraction)"
        )
    if start_timeout_s <= 0:
        raise ValueError(f"start_timeout_s = {start_timeout_s}: must be > 0 seconds")
    if runtime == "fake" and fake_root is None:
        raise ValueError(
            "fake_root is None: the fake runtime writes its device copies there; give it "
            "a directory in shared memory (e.g. under /dev/shm) that only this tier uses"
        )
    if runtime == "fake" and fake_memory_bytes <= 0:
        raise ValueError(
            f"fake_memory_bytes = {fake_memory_bytes}: a fake GPU needs a positive size "
            "(gpu.fake_memory_mib)"
        )
