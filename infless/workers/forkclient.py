"""The gateway's end of one fork server's control socket (the zygote's or a template's).

`ForkServerClient` waits for the server's `ZygoteReady`, then sends `Fork` (and, to the zygote,
`ForkTemplate`) requests with their descriptors, matches replies to requests, and keeps the
exit codes the server reports. With `records`, every child it forks is recorded (a PID
file, `workers.records`) until the server reports its exit. Gateway side: never imports
torch.
"""

from __future__ import annotations

import asyncio
import os
import socket

import msgspec

from infless.clock import perf_s
from infless.workers.launcher import LaunchedWorker
from infless.workers.records import RunRecords
from infless.workers.zygote_protocol import (
    MAX_MESSAGE_BYTES,
    ChildExited,
    Fork,
    Forked,
    ForkFailed,
    ForkTemplate,
    ZygoteFailed,
    ZygoteReady,
    encoder,
    from_zygote,
)

_EXIT_CODES_KEPT = 4096


class ZygoteError(RuntimeError):
    """A fork server failed to start, to fork, or died; the message says which and why."""


async def _send_with_fds(sock: socket.socket, message: bytes, fds: list[int]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        try:
            socket.send_fds(sock, [message], fds)
        except BlockingIOError:
            writable: asyncio.Future[None] = loop.create_future()
            loop.add_writer(sock.fileno(), writable.set_result, None)
            try:
                await writable
            finally:
                loop.remove_writer(sock.fileno())
        else:
            return


class ForkServerClient:
    """Requests forks from one fork server over `control` (non-blocking, owned from now on)."""

    def __init__(
        self,
        control: socket.socket,
        name: str,
        fork_timeout_s: float = 30.0,
        records: RunRecords | None = None,
    ) -> None:
        control.setblocking(False)
        self._records = records
        self._control = control
        self.name = name
        self._fork_timeout_s = fork_timeout_s
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[Forked | ForkFailed]] = {}
        self._exit_codes: dict[int, int] = {}
        self._exited = asyncio.Event()  # set (then replaced) on every reported exit
        self._next_request = 0
        self.ready: ZygoteReady | None = None

    @property
    def alive(self) -> bool:
        return self._reader is not None and not self._reader.done()

    async def handshake(self, timeout_s: float) -> ZygoteReady:
        """The server's first message; then replies and exits are read in the background."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):
                data = await loop.sock_recv(self._control, MAX_MESSAGE_BYTES)
            first = from_zygote.decode(data)
        except (TimeoutError, OSError, msgspec.DecodeError) as exc:
            raise ZygoteError(f"the {self.name} did not start: {exc!r}") from exc
        if isinstance(first, ZygoteFailed):
            raise ZygoteError(f"the {self.name} did not start: {first.error}")
        if not isinstance(first, ZygoteReady):
            raise ZygoteError(f"the {self.name} did not start: unexpected {first}")
        self.ready = first
        self._reader = loop.create_task(self._read(), name=f"{self.name}-reader")
        return first

    def exit_code(self, pid: int) -> int | None:
        return self._exit_codes.get(pid)

    async def wait_exit(self, pid: int) -> int | None:
        """The child's exit code once the server reports it; None if the server is gone."""
        while pid not in self._exit_codes and self.alive:
            await self._exited.wait()
        return self._exit_codes.get(pid)

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while data := await loop.sock_recv(self._control, MAX_MESSAGE_BYTES):
                message = from_zygote.decode(data)
                if isinstance(message, ChildExited):
                    if len(self._exit_codes) >= _EXIT_CODES_KEPT:
                        self._exit_codes.pop(next(iter(self._exit_codes)))
                    self._exit_codes[message.pid] = message.returncode
                    if self._records is not None:
                        self._records.discard(message.pid)
                    self._notify_exits()
                elif isinstance(message, Forked | ForkFailed):
                    future = self._pending.pop(message.request_id, None)
                    if future is not None and not future.done():
                        future.set_result(message)
        except (OSError, msgspec.DecodeError):
            pass
        finally:
            self._notify_exits()
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ZygoteError(f"the {self.name} exited"))
            self._pending.clear()

    def _notify_exits(self) -> None:
        self._exited.set()  # wakes every waiter; a fresh event makes the next ones block
        self._exited = asyncio.Event()

    async def request(self, message: Fork | ForkTemplate, fds: list[int]) -> int:
        """Send one fork request with `fds` (the server gets its own copies); the child's pid."""
        if not self.alive:
            raise ZygoteError(f"the {self.name} is not running")
        future: asyncio.Future[Forked | ForkFailed] = asyncio.get_running_loop().create_future()
        self._pending[message.request_id] = future
        try:
            await _send_with_fds(self._control, encoder.encode(message), fds)
            async with asyncio.timeout(self._fork_timeout_s):
                reply = await future
        except BaseException:
            self._pending.pop(message.request_id, None)
            raise
        if isinstance(reply, ForkFailed):
            raise ZygoteError(f"the {self.name} could not fork: {reply.error}")
        if self._records is not None:
            if isinstance(message, ForkTemplate):
                self._records.add(reply.pid, "template", message.template_id)
            else:
                self._records.add(reply.pid, "worker", message.instance_id)
        return reply.pid

    def next_request_id(self) -> int:
        self._next_request += 1
        return self._next_request

    async def launch(self, instance_id: str, capture_output: bool = False) -> LaunchedWorker:
        """Fork a worker for `instance_id`, connected to the gateway by a fresh socketpair;
        with `capture_output`, its stdout and stderr go to a fresh pipe whose read end comes
        back as `output` (the write end travels with the socket, SCM_RIGHTS)."""
        gateway_sock, worker_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        output, output_write = os.pipe() if capture_output else (None, None)
        started = perf_s()
        try:
            with worker_sock:  # the server gets its own references in flight
                fds = [worker_sock.fileno()]
                if output_write is not None:
                    fds.append(output_write)
                fork = Fork(self.next_request_id(), instance_id)
                pid = await self.request(fork, fds)
        except BaseException:
            gateway_sock.close()
            if output is not None:
                os.close(output)
            raise
        finally:
            if output_write is not None:
                os.close(output_write)
        spawn_ms = (perf_s() - started) * 1000.0
        return LaunchedWorker(pid, gateway_sock, spawn_ms, None, output)

    async def close(self) -> None:
        """EOF to the server (it exits; its children keep serving on their own sockets)."""
        self._control.close()
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            try:
                await reader
            except asyncio.CancelledError:
                if (task := asyncio.current_task()) is not None and task.cancelling():
                    raise
