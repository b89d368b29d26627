"""Gateway-side handle of one worker process: frames in and out, futures per batch.

Owns the socket to the worker (a socketpair; TCP for a node agent's worker, `connect_tcp`)
and a reader task. A worker whose socket reaches EOF (it
exited, crashed or was SIGKILLed) is detected at once: every pending call fails with
`WorkerDied` and the `on_death` callback runs. Never imports torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import socket
from collections.abc import Callable
from typing import Protocol

from infless.workers import protocol as p
from infless.workers.launcher import LaunchedWorker


class WorkerDied(Exception):
    """The worker process is gone; calls in flight did not complete."""


class WorkerStartFailed(Exception):
    """The worker could not load its model (the message says why)."""


class BatchError(Exception):
    """The worker ran the batch and the model raised; the worker is still alive."""


class WorkerHandle(Protocol):
    pid: int

    @property
    def alive(self) -> bool: ...

    async def load(self, request: p.LoadModel, timeout_s: float) -> p.Ready: ...

    async def run_batch(self, inputs: dict[str, p.TensorData]) -> p.BatchResult: ...

    async def run_requests(self, requests: list[p.RawRequest]) -> p.RequestsResult: ...

    async def ping(self, timeout_s: float) -> p.Pong: ...

    async def stop(self, timeout_s: float) -> None: ...

    def rebind_death(self, on_death: Callable[[], None]) -> None:
        """Whom to tell when the worker dies from now on (a kept worker serves someone
        else, or no one)."""
        ...


class ProcessWorkerHandle:
    """A real worker process reached through its socket."""

    def __init__(
        self,
        launched: LaunchedWorker,
        on_death: Callable[[ProcessWorkerHandle], None] | None = None,
    ) -> None:
        self.pid = launched.pid
        self.spawn_ms = launched.spawn_ms
        self._launched = launched
        self._on_death = on_death
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[p.FromWorker]] = {}
        self._load_future: asyncio.Future[p.FromWorker] | None = None
        self._batch_ids = itertools.count(1)
        self._alive = True
        self.exit_code: int | None = None

    @property
    def alive(self) -> bool:
        return self._alive

    async def _connect(self) -> None:
        if self._writer is None:
            sock = self._launched.sock
            opener = (
                asyncio.open_unix_connection
                if sock.family == socket.AF_UNIX
                else asyncio.open_connection
            )
            self._reader, self._writer = await opener(sock=sock, limit=p.MAX_FRAME_BYTES)
            self._reader_task = asyncio.create_task(self._read_loop(), name=f"worker-{self.pid}")

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                header = await self._reader.readexactly(p.FRAME_HEADER.size)
                body = await self._reader.readexactly(p.frame_length(header))
                self._deliver(p.decode_from_worker(body))
        except (asyncio.IncompleteReadError, ConnectionError, p.FrameError, OSError):
            pass
        finally:
            await self._mark_dead()

    def _deliver(self, message: p.FromWorker) -> None:
        if isinstance(message, p.BatchResult | p.RequestsResult | p.BatchFailed):
            future = self._pending.pop(message.batch_id, None)
        elif isinstance(message, p.Pong):
            future = self._pending.pop(-message.nonce, None)
        else:
            future, self._load_future = self._load_future, None
        if future is not None and not future.done():
            future.set_result(message)

    async def _mark_dead(self) -> None:
        if not self._alive:
            return
        self._alive = False
        error = WorkerDied(f"worker pid {self.pid} exited")
        futures = list(self._pending.values())
        if self._load_future is not None:
            futures.append(self._load_future)
        self._pending.clear()
        self._load_future = None
        for future in futures:
            if not future.done():
                future.set_exception(error)
        if self._writer is not None:
            self._writer.close()
        if self._launched.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.exit_code = await self._launched.process.wait()
        if self._on_death is not None:
            self._on_death(self)

    def _send(self, message: p.ToWorker) -> None:
        if not self._alive or self._writer is None:
            raise WorkerDied(f"worker pid {self.pid} is not running")
        self._writer.write(p.encode_frame(message))

    async def load(self, request: p.LoadModel, timeout_s: float) -> p.Ready:
        await self._connect()
        return await self._until_ready(request, timeout_s)

    async def attach(self) -> None:
        """Start reading a worker that is already loaded (a TCP-attached one: its agent
        loaded it, see `RemoteWorkerHandle`)."""
        await self._connect()

    async def serve_on(self, request: p.ServeOn, timeout_s: float) -> p.Listening:
        """Have the (loaded) worker listen for the gateway over TCP; its port."""
        reply = await self._control(request, timeout_s, "listening")
        if not isinstance(reply, p.Listening):
            self.kill()
            raise WorkerStartFailed(f"worker pid {self.pid} answered {type(reply).__name__}")
        return reply

    async def standby(self, request: p.Standby, timeout_s: float) -> p.StandbyReady:
        """Have a fresh worker become a warm CUDA worker on its device (context created,
        libraries warmed); `WorkerStartFailed` when it could not (it then exits)."""
        await self._connect()
        return await self._until_standby(request, timeout_s)

    async def unload(self, timeout_s: float) -> p.StandbyReady:
        """Have a GPU worker drop its model and be a warm standby worker again."""
        return await self._until_standby(p.Unload(), timeout_s)

    async def _until_standby(
        self, request: p.Standby | p.Unload, timeout_s: float
    ) -> p.StandbyReady:
        reply = await self._control(request, timeout_s, "warm")
        if isinstance(reply, p.LoadFailed):
            raise WorkerStartFailed(reply.error)
        if not isinstance(reply, p.StandbyReady):
            self.kill()
            raise WorkerStartFailed(f"worker pid {self.pid} answered {type(reply).__name__}")
        return reply

    async def transform(self, request: p.TransformModel, timeout_s: float) -> p.Ready:
        """Have the (idle) worker transform its model; `WorkerStartFailed` when it could
        not (it then exits: the caller must not serve it again)."""
        return await self._until_ready(request, timeout_s)

    def rebind_death(self, on_death: Callable[[], None]) -> None:
        """Whom to tell when the worker dies (a transformed worker serves someone else)."""
        self._on_death = lambda _: on_death()

    async def _until_ready(
        self, request: p.LoadModel | p.TransformModel, timeout_s: float
    ) -> p.Ready:
        reply = await self._control(request, timeout_s, "ready")
        if isinstance(reply, p.LoadFailed):
            raise WorkerStartFailed(reply.error)
        assert isinstance(reply, p.Ready)
        return reply

    async def _control(self, request: p.ToWorker, timeout_s: float, what: str) -> p.FromWorker:
        """Send a load, transform or listen request and await the worker's one answer."""
        self._load_future = asyncio.get_running_loop().create_future()
        future = self._load_future
        self._send(request)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError as exc:
            self.kill()
            raise WorkerStartFailed(
                f"worker pid {self.pid} not {what} after {timeout_s:.0f} s"
            ) from exc
        except WorkerDied as exc:
            raise WorkerStartFailed(f"worker pid {self.pid} exited, not {what} yet") from exc

    async def run_batch(self, inputs: dict[str, p.TensorData]) -> p.BatchResult:
        reply = await self._exchange(lambda batch_id: p.RunBatch(batch_id, inputs))
        assert isinstance(reply, p.BatchResult)
        return reply

    async def run_requests(self, requests: list[p.RawRequest]) -> p.RequestsResult:
        reply = await self._exchange(lambda batch_id: p.RunRequests(batch_id, requests))
        assert isinstance(reply, p.RequestsResult)
        return reply

    async def _exchange(self, message: Callable[[int], p.ToWorker]) -> p.FromWorker:
        """Send one batch (the message made with its id) and await its reply; a failed batch
        raises BatchError, a worker gone WorkerDied."""
        batch_id = next(self._batch_ids)
        future: asyncio.Future[p.FromWorker] = asyncio.get_running_loop().create_future()
        self._pending[batch_id] = future
        try:
            self._send(message(batch_id))
        except WorkerDied:
            self._pending.pop(batch_id, None)
            raise
        reply = await future
        if isinstance(reply, p.BatchFailed):
            raise BatchError(reply.error)
        return reply

    async def ping(self, timeout_s: float) -> p.Pong:
        nonce = next(self._batch_ids)
        future: asyncio.Future[p.FromWorker] = asyncio.get_running_loop().create_future()
        self._pending[-nonce] = future
        self._send(p.Ping(nonce))
        reply = await asyncio.wait_for(future, timeout_s)
        assert isinstance(reply, p.Pong)
        return reply

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    async def stop(self, timeout_s: float) -> None:
        """Ask the worker to exit; SIGKILL it if it has not after `timeout_s`."""
        if self._alive and self._writer is not None:
            with contextlib.suppress(WorkerDied, ConnectionError):
                self._send(p.Shutdown())
        elif self._writer is None:
            self._launched.sock.close()
        if self._reader_task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._reader_task), timeout_s)
            except TimeoutError:
                self.kill()
                await self._reader_task
        else:
            self.kill()
            await self._mark_dead()


class RemoteWorkerHandle(ProcessWorkerHandle):
    """A worker on another node (or another agent), reached over the TCP connection its
    agent handed out; `pid` is on that node, so killing it is the agent's (`kill_remote`)."""

    def __init__(
        self,
        launched: LaunchedWorker,
        kill_remote: Callable[[], None],
        on_death: Callable[[ProcessWorkerHandle], None] | None = None,
    ) -> None:
        super().__init__(launched, on_death)
        self._kill_remote = kill_remote

    def kill(self) -> None:
        self._kill_remote()


async def connect_tcp(host: str, port: int, token: bytes, timeout_s: float) -> socket.socket:
    """Connect to a node agent's worker and say `Hello` with the token its agent gave; the
    worker closes the connection on a wrong token (the first read then sees EOF)."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        await asyncio.wait_for(loop.sock_connect(sock, (host, port)), timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await loop.sock_sendall(sock, p.encode_frame(p.Hello(token)))
    except BaseException:
        sock.close()
        raise
    return sock
