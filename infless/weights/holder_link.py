"""One GPU-tier holder process as the gateway sees it: launched fresh on a socketpair, asked one
request at a time with a deadline, and its exit noticed at once (EOF on its socket).

Gateway side: never imports torch; time only from the injected clock. No policy here: what
an exit means (instances lost, a restart with backoff) is `gpu_holder.GpuTierClient`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from infless.clock import Clock
from infless.weights import holder_protocol as h

log = logging.getLogger(__name__)

T = TypeVar("T")
# the holder is an MPS client only if its environment makes it one: it never should
_NOT_INHERITED = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")


class TierUnavailable(Exception):
    """The holder is down, restarting or failed to start; the message says why."""


async def within(clock: Clock, future: asyncio.Future[T], timeout_s: float) -> bool:
    """Whether `future` completed within `timeout_s` on `clock` (a task still running then
    is cancelled)."""
    if future.done():
        return True
    timer = asyncio.ensure_future(clock.sleep_until(clock.now() + timeout_s))
    try:
        waiters: set[asyncio.Future[Any]] = {future, timer}
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
        if isinstance(future, asyncio.Task) and not future.done():
            future.cancel()
    return future.done() and not future.cancelled()


class HolderLink:
    """A running `holder_main` process and its socket. `on_exit(link, code)` runs once, when
    the process is gone and reaped, whoever ended it."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        clock: Clock,
        on_exit: Callable[[HolderLink, int], None],
    ) -> None:
        self.pid = process.pid
        self.exit_code: int | None = None
        self._process = process
        self._writer = writer
        self._clock = clock
        self._on_exit = on_exit
        self._reply: asyncio.Future[h.FromHolder] | None = None
        self._reader_task = asyncio.create_task(
            self._read_loop(reader), name=f"gpu-tier-holder-{process.pid}"
        )

    @classmethod
    async def launch(
        cls, python: str, clock: Clock, on_exit: Callable[[HolderLink, int], None]
    ) -> HolderLink:
        """`python -m infless.weights.holder_main` on one end of a new socketpair."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            process = await asyncio.create_subprocess_exec(
                python,
                "-m",
                "infless.weights.holder_main",
                "--fd",
                str(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                env=_holder_env(),
                stdin=asyncio.subprocess.DEVNULL,
            )
        except OSError as exc:
            ours.close()
            raise TierUnavailable(f"cannot start the GPU tier's holder ({python}): {exc}") from exc
        finally:
            theirs.close()
        reader, writer = await asyncio.open_unix_connection(sock=ours, limit=h.MAX_FRAME_BYTES)
        return cls(process, reader, writer, clock, on_exit)

    async def request(self, message: h.ToHolder, timeout_s: float) -> h.FromHolder:
        """Send one request and await its one answer; a holder silent for `timeout_s` is
        killed. `TierUnavailable` when there is no answer."""
        if self.exit_code is not None or self._reader_task.done():
            raise TierUnavailable(f"the GPU tier's holder pid {self.pid} has exited")
        future: asyncio.Future[h.FromHolder] = asyncio.get_running_loop().create_future()
        self._reply = future
        try:
            self._writer.write(h.encode_frame(message))
            await self._writer.drain()
        except (ConnectionError, RuntimeError) as exc:
            self._reply = None
            reason = f"the GPU tier's holder pid {self.pid} is gone: {exc}"
            raise TierUnavailable(reason) from exc
        if not await within(self._clock, future, timeout_s):
            self._reply = None
            what = type(message).__name__
            log.error("GPU tier holder pid %d did not answer %s: killing it", self.pid, what)
            self._kill()
            raise TierUnavailable(
                f"the GPU tier's holder pid {self.pid} did not answer {what} within "
                f"{timeout_s} s (start_timeout_s); it was killed"
            )
        return future.result()

    async def stop(self, timeout_s: float) -> None:
        """Ask the holder to free everything and exit; SIGKILL it after `timeout_s`."""
        if self._process.returncode is None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                self._writer.write(h.encode_frame(h.Stop()))
            exited = asyncio.ensure_future(self._process.wait())
            if not await within(self._clock, exited, timeout_s):
                log.warning("GPU tier holder pid %d ignored Stop: killing it", self.pid)
                self._kill()
        await self._finished()

    async def kill(self) -> None:
        """SIGKILL the holder and wait until it is reaped."""
        self._kill()
        await self._finished()

    def _kill(self) -> None:
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()

    async def _finished(self) -> None:
        if self._reader_task is not asyncio.current_task():
            await asyncio.shield(self._reader_task)

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                header = await reader.readexactly(h.FRAME_HEADER.size)
                body = await reader.readexactly(h.frame_length(header))
                future, self._reply = self._reply, None
                if future is not None and not future.done():
                    future.set_result(h.decode_from_holder(body))
        except (
            asyncio.IncompleteReadError,
            ConnectionError,
            OSError,
            h.FrameError,
            msgspec.DecodeError,
        ):
            pass  # EOF, or a peer that broke the protocol: either way it is done
        future, self._reply = self._reply, None
        if future is not None and not future.done():
            future.set_exception(TierUnavailable(f"the GPU tier's holder pid {self.pid} exited"))
        self._writer.close()
        self._kill()
        self.exit_code = await self._process.wait()
        try:
            self._on_exit(self, self.exit_code)
        except Exception:  # the link is done whatever its owner's callback does
            log.exception("GPU tier: handling the exit of holder pid %d failed", self.pid)


def _holder_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
