"""The fork-server loop shared by the zygote and the per-model templates (process side).

A fork server owns one control socket (SOCK_SEQPACKET, one msgpack message per datagram; see
`zygote_protocol`). It announces itself with `ZygoteReady`. Then it forks on request and
reports every child's exit, until the control socket reaches EOF. It takes two requests:

- `Fork`, with the worker's socket and the write end of its output pipe. The child makes that
  pipe its stdout and stderr and serves one instance (`targets.serve(sock)`).
- `ForkTemplate`, with a control socket and a load socket (zygote only). The child becomes a
  template. It loads one model single-threaded (`targets.prepare_template(load_sock)`, which
  answers `Ready` or `LoadFailed` on the load socket), freezes its heap, and runs this same
  loop on its own control socket. Instances forked from it share the model's built module,
  attached weights and warm-up state copy-on-write, instead of building their own.

Children are reaped via SIGCHLD, a wakeup fd and waitpid(WNOHANG). A server never holds a copy
of a descriptor it handed to a child. Forking is only safe while the server runs one thread:
`ZygoteReady.threads` tells the gateway.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import selectors
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infless.workers.zygote_protocol import (
    MAX_MESSAGE_BYTES,
    ChildExited,
    Fork,
    Forked,
    ForkFailed,
    ForkTemplate,
    ZygoteReady,
    encoder,
    to_zygote,
)


@dataclass(frozen=True, slots=True)
class ForkTargets:
    """What forked children run: an instance (`serve`) or a template's model load."""

    serve: Callable[[socket.socket], None]
    prepare_template: Callable[[socket.socket], bool] | None = None  # None: no templates


def thread_count() -> int:
    return sum(1 for _ in Path("/proc/self/task").iterdir())


def _enter_child(closing: list[int], environ: dict[str, str]) -> None:
    """In a fresh child: drop the server's descriptors and handlers; one torch thread."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in closing:
        os.close(fd)
    os.environ.update(environ)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)  # the first OpenMP touch happens here, after the fork


def _redirect_output(fd: int) -> None:
    """In a fresh child: `fd` (a pipe the gateway reads) becomes stdout and stderr."""
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):  # each print reaches the pipe at once
            stream.reconfigure(line_buffering=True)


def _exit_child(body: Callable[[], int]) -> None:
    """Run a child's body and leave with its code, never returning into the server loop."""
    code = 1
    try:
        code = body()
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


def _instance_body(worker_fd: int, targets: ForkTargets) -> Callable[[], int]:
    def body() -> int:
        with socket.socket(fileno=worker_fd) as sock:
            targets.serve(sock)
        return 0

    return body


def _template_body(control_fd: int, load_fd: int, targets: ForkTargets) -> Callable[[], int]:
    def body() -> int:
        assert targets.prepare_template is not None
        with socket.socket(fileno=load_fd) as load_sock:
            loaded = targets.prepare_template(load_sock)
        if not loaded:
            os.close(control_fd)
            return 1
        gc.collect()
        gc.freeze()  # the model's objects join the shared, never-collected generation
        with socket.socket(fileno=control_fd) as control:
            return serve_control(control, ForkTargets(targets.serve))

    return body


def _fork(
    request: Fork | ForkTemplate, fds: list[int], targets: ForkTargets, closing: list[int]
) -> Forked | ForkFailed:
    """Fork a child for `request`; the server keeps no copy of the received descriptors."""
    try:
        wanted = (1, 2) if isinstance(request, Fork) else (2,)
        if len(fds) not in wanted:
            return ForkFailed(request.request_id, f"expected {wanted} descriptors, got {len(fds)}")
        if isinstance(request, ForkTemplate) and targets.prepare_template is None:
            return ForkFailed(request.request_id, "this fork server does not start templates")
        for stream in (sys.stdout, sys.stderr):  # no buffered text copied into the child
            with contextlib.suppress(Exception):
                stream.flush()
        try:
            pid = os.fork()
        except OSError as exc:
            return ForkFailed(request.request_id, f"fork failed: {exc}")
        if pid == 0:
            if isinstance(request, Fork):
                _enter_child(closing, {"INFLESS_INSTANCE_ID": request.instance_id})
                if len(fds) == 2:
                    _redirect_output(fds[1])
                _exit_child(_instance_body(fds[0], targets))
            else:
                _enter_child(closing, {"INFLESS_TEMPLATE_ID": request.template_id})
                _exit_child(_template_body(fds[0], fds[1], targets))
        return Forked(request.request_id, pid)
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):  # a child closes only its own copies
                os.close(fd)


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


def serve_control(control: socket.socket, targets: ForkTargets) -> int:
    """Announce readiness, then fork on request and report exits until EOF on `control`."""
    wake_read, wake_write = socket.socketpair()
    wake_read.setblocking(False)
    wake_write.setblocking(False)
    signal.set_wakeup_fd(wake_write.fileno())
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    closing = [control.fileno(), wake_read.fileno(), wake_write.fileno(), selector.fileno()]
    control.send(encoder.encode(ZygoteReady(os.getpid(), thread_count())))
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
                    message, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE_BYTES, 4)
                if not message:
                    for fd in fds:
                        os.close(fd)
                    return 0  # the gateway is gone: children live on their own sockets
                reply = _fork(to_zygote.decode(message), fds, targets, closing)
                control.send(encoder.encode(reply))
    finally:
        signal.set_wakeup_fd(-1)  # before the wake sockets close: no write to a dead fd
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        selector.close()
        wake_read.close()
        wake_write.close()
