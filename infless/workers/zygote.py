"""The zygote: a pre-started process with torch imported and no model loaded, forking workers.

Gateway side, `ZygoteLauncher` (a `WorkerLauncher`; never imports torch): starts the zygote
once per server (`python -m infless.workers.zygote`); per instance, sends the worker's end of
a fresh socketpair over the control socket (SOCK_SEQPACKET + SCM_RIGHTS); the zygote forks a
child running `infless.workers.main.serve(sock)` and replies with its pid.
Zygote side, `zygote_main`: imports the preload modules (and calls `module:function` entries:
the zoo builds its architectures on `meta` once) but runs no CPU torch op and starts no
thread before forking (OPENBLAS_NUM_THREADS=1 keeps numpy's OpenBLAS pool from starting at
import; `torch.set_num_threads(1)` runs only in children). It reaps its children (SIGCHLD ->
wakeup fd -> waitpid WNOHANG), reports each exit, and dies with the gateway (PR_SET_PDEATHSIG
and EOF on the control socket). Children end on EOF of their own gateway socket.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import importlib
import logging
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from infless.workers.launcher import LaunchedWorker
from infless.workers.zygote_protocol import (
    ChildExited,
    Fork,
    Forked,
    ForkFailed,
    ZygoteFailed,
    ZygoteReady,
    encoder,
    from_zygote,
    to_zygote,
)

DEFAULT_TARGET = "infless.workers.main:serve"
_RUNTIME = ("infless.workers.main", "infless.models.loader", "infless.weights.attach")
_PRIME = "infless.models.loader:prime_builders"  # `module:function` entries are called
DEFAULT_PRELOAD = ("numpy", "torch", "safetensors", *_RUNTIME, _PRIME)
_PR_SET_PDEATHSIG = 1
_MAX_MESSAGE_BYTES = 64 * 1024
_EXIT_CODES_KEPT = 4096

log = logging.getLogger(__name__)


class ZygoteError(RuntimeError):
    """The zygote failed to start, to fork, or died; the message says which and why."""


def _thread_count() -> int:
    return sum(1 for _ in Path("/proc/self/task").iterdir())


def _resolve(entry: str, default: str = "") -> Any:
    """`module:attribute` (or `module` with a default attribute): the imported object."""
    module_name, _, attribute = entry.partition(":")
    module = importlib.import_module(module_name)
    name = attribute or default
    return getattr(module, name) if name else module


def _run_child(
    worker_fd: int, instance_id: str, target: Callable[[socket.socket], None], closing: list[int]
) -> None:
    """In the forked child: drop the zygote's descriptors and handlers, serve, exit."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in closing:
            os.close(fd)
        os.environ["INFLESS_INSTANCE_ID"] = instance_id
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(1)  # the first OpenMP touch happens here, after the fork
        with socket.socket(fileno=worker_fd) as sock:
            target(sock)
        code = 0
    except (BrokenPipeError, ConnectionResetError):
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _reap(control: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        returncode = os.waitstatus_to_exitcode(status)
        with contextlib.suppress(OSError):
            control.send(encoder.encode(ChildExited(pid, returncode)))


def _fork(
    request: Fork, fds: list[int], target: Callable[[socket.socket], None], closing: list[int]
) -> Forked | ForkFailed:
    """Fork a child serving on the one received descriptor; the zygote keeps no copy of it."""
    try:
        if len(fds) != 1:
            return ForkFailed(request.request_id, f"expected 1 descriptor, got {len(fds)}")
        try:
            pid = os.fork()
        except OSError as exc:
            return ForkFailed(request.request_id, f"fork failed: {exc}")
        if pid == 0:
            _run_child(fds[0], request.instance_id, target, closing)  # never returns
        return Forked(request.request_id, pid)
    finally:
        for fd in fds:
            os.close(fd)


def _serve_control(control: socket.socket, target: Callable[[socket.socket], None]) -> int:
    """Fork on request and report exits until the control socket reaches EOF."""
    wake_read, wake_write = socket.socketpair()
    wake_read.setblocking(False)
    wake_write.setblocking(False)
    signal.set_wakeup_fd(wake_write.fileno())
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    closing = [control.fileno(), wake_read.fileno(), wake_write.fileno(), selector.fileno()]
    control.send(encoder.encode(ZygoteReady(os.getpid(), _thread_count())))
    try:
        while True:
            for key, _ in selector.select():
                if key.fileobj is wake_read:
                    with contextlib.suppress(BlockingIOError):
                        while wake_read.recv(4096):
                            pass
                    _reap(control)
                    continue
                message, fds = b"", list[int]()
                with contextlib.suppress(ConnectionResetError):  # a reset is an EOF
                    message, fds, _, _ = socket.recv_fds(control, _MAX_MESSAGE_BYTES, 4)
                if not message:
                    return 0  # the gateway is gone: children live on their own sockets
                reply = _fork(to_zygote.decode(message), fds, target, closing)
                control.send(encoder.encode(reply))
    finally:
        signal.set_wakeup_fd(-1)  # before the wake sockets close: no write to a dead fd
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)


def zygote_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="infless zygote (started by the gateway)")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, default=0)
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--preload", default=",".join(DEFAULT_PRELOAD))
    args = parser.parse_args(argv)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if args.parent_pid and os.getppid() != args.parent_pid:
        return 1  # the gateway died before the death signal was armed
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the gateway's to handle
    control = socket.socket(fileno=args.control_fd)
    try:
        for entry in filter(None, args.preload.split(",")):
            preloaded = _resolve(entry)
            if ":" in entry:  # a `module:function` entry is called (it must start no thread)
                preloaded()
        target = _resolve(args.target, "serve")
        gc.collect()
        gc.freeze()  # children's collections skip the preloaded heap: no copy-on-write storm
    except Exception as exc:
        control.send(encoder.encode(ZygoteFailed(f"{type(exc).__name__}: {exc}")))
        return 1
    return _serve_control(control, target)


# -- gateway side ---------------------------------------------------------------------------


async def _send_with_fd(sock: socket.socket, message: bytes, fd: int) -> None:
    loop = asyncio.get_running_loop()
    while True:
        try:
            socket.send_fds(sock, [message], [fd])
        except BlockingIOError:
            writable: asyncio.Future[None] = loop.create_future()
            loop.add_writer(sock.fileno(), writable.set_result, None)
            try:
                await writable
            finally:
                loop.remove_writer(sock.fileno())
        else:
            return


class ZygoteLauncher:
    """Starts workers by forking them from one zygote; (re)starts the zygote on demand.

    `target` and `preload` exist for tests and benchmarks. `exit_code` / `wait_exit` tell how
    a child ended (the zygote is its parent). The zygote dies with the thread that starts it
    (PR_SET_PDEATHSIG): start it from the event loop's (main) thread.
    """

    def __init__(
        self,
        python: str = "",
        env: dict[str, str] | None = None,
        *,
        target: str = DEFAULT_TARGET,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        start_timeout_s: float = 120.0,
        fork_timeout_s: float = 30.0,
    ) -> None:
        self._python = python or sys.executable
        self._env = env
        self._target = target
        self._preload = tuple(preload)
        self._start_timeout_s = start_timeout_s
        self._fork_timeout_s = fork_timeout_s
        self._process: asyncio.subprocess.Process | None = None
        self._control: socket.socket | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[Forked | ForkFailed]] = {}
        self._exit_codes: dict[int, int] = {}
        self._exited = asyncio.Event()  # set (then replaced) on every reported exit
        self._next_request = 0
        self._start_lock = asyncio.Lock()
        self.ready: ZygoteReady | None = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def exit_code(self, pid: int) -> int | None:
        return self._exit_codes.get(pid)

    async def wait_exit(self, pid: int) -> int | None:
        """The child's exit code once the zygote reports it; None if the zygote is gone."""
        while pid not in self._exit_codes and self._reader is not None and not self._reader.done():
            await self._exited.wait()
        return self._exit_codes.get(pid)

    async def start(self) -> ZygoteReady:
        async with self._start_lock:
            if self.ready is not None and self._reader is not None and not self._reader.done():
                return self.ready
            await self.close()
            return await self._start()

    async def _start(self) -> ZygoteReady:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ if self._env is None else self._env)
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # no spinning on shared cores
        try:
            fd = theirs.fileno()
            self._process = await asyncio.create_subprocess_exec(
                self._python, "-m", "infless.workers.zygote", "--control-fd", str(fd),
                "--parent-pid", str(os.getpid()), "--target", self._target,
                "--preload", ",".join(self._preload),
                pass_fds=(fd,), env=env, stdin=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self._control = ours
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._start_timeout_s):
                first = from_zygote.decode(await loop.sock_recv(ours, _MAX_MESSAGE_BYTES))
        except (TimeoutError, msgspec.DecodeError) as exc:
            await self.close()
            raise ZygoteError(f"the zygote did not start: {exc!r}") from exc
        if not isinstance(first, ZygoteReady):
            await self.close()
            raise ZygoteError(f"the zygote did not start: {first}")
        if first.threads != 1:
            msg = "the zygote runs %d threads before forking (want 1): keep pools out of preloads"
            log.warning(msg, first.threads)
        self.ready = first
        self._reader = loop.create_task(self._read(ours), name="zygote-reader")
        return first

    async def _read(self, control: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            while data := await loop.sock_recv(control, _MAX_MESSAGE_BYTES):
                message = from_zygote.decode(data)
                if isinstance(message, ChildExited):
                    if len(self._exit_codes) >= _EXIT_CODES_KEPT:
                        self._exit_codes.pop(next(iter(self._exit_codes)))
                    self._exit_codes[message.pid] = message.returncode
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
                    future.set_exception(ZygoteError("the zygote exited"))
            self._pending.clear()

    def _notify_exits(self) -> None:
        self._exited.set()  # wakes every waiter; a fresh event makes the next ones block
        self._exited = asyncio.Event()

    async def launch(self, instance_id: str) -> LaunchedWorker:
        if self._reader is None or self._reader.done():
            await self.start()
        assert self._control is not None
        loop = asyncio.get_running_loop()
        self._next_request += 1
        request_id = self._next_request
        future: asyncio.Future[Forked | ForkFailed] = loop.create_future()
        self._pending[request_id] = future
        gateway_sock, worker_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        started = time.perf_counter()
        try:
            with worker_sock:  # the zygote gets its own reference in flight
                message = encoder.encode(Fork(request_id, instance_id))
                await _send_with_fd(self._control, message, worker_sock.fileno())
            async with asyncio.timeout(self._fork_timeout_s):
                reply = await future
            if isinstance(reply, ForkFailed):
                raise ZygoteError(f"the zygote could not fork {instance_id}: {reply.error}")
        except BaseException:
            self._pending.pop(request_id, None)
            gateway_sock.close()
            raise
        spawn_ms = (time.perf_counter() - started) * 1000.0
        return LaunchedWorker(reply.pid, gateway_sock, spawn_ms, None)

    async def close(self) -> None:
        """Stop the zygote (its children keep serving until their sockets close)."""
        control, self._control = self._control, None
        if control is not None:
            control.close()  # EOF: the zygote exits on its own
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        process, self._process = self._process, None
        self.ready = None
        if process is None:
            return
        try:
            async with asyncio.timeout(5.0):
                await process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            await process.wait()


if __name__ == "__main__":
    raise SystemExit(zygote_main())
