#!/usr/bin/env python3
"""A fake `nvidia-cuda-mps-control`, as far as infless uses the real one (tests only).

`fake_mps_control.py -d` daemonises (a double fork): the daemon writes
`$CUDA_MPS_LOG_DIRECTORY/control.log` and `$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid`,
listens on a unix socket at `$CUDA_MPS_PIPE_DIRECTORY/control`, and serves commands until
`quit` (it then removes its socket and exits). Without `-d` it is a client: each line of
stdin is a command sent to the daemon of that pipe directory and answered on stdout;
`get_server_list` prints nothing (a fake daemon starts no MPS servers) and exits 0 while a
daemon answers; with no daemon the client exits 1. `-d` where a daemon already answers
exits 1, as the real one does.

Test knobs, from the environment: `FAKE_MPS_MODE` = `serve` (the default), `silent` (the
daemon starts, logs, and never answers: a daemon that does not come up) or `fail` (`-d`
exits 1 at once); `FAKE_MPS_DELAY_S`, how long the daemon waits before it answers.

It never outlives its test: the daemon watches the process that ran `-d` (the test, or
the MpsControl in it) and exits when that one is gone, and in any case after
`FAKE_MPS_LIFETIME_S` (120 s). Standard library only: it runs as its own program.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

PIPE_DIR = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"))
LOG_DIR = Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"))
SOCKET = PIPE_DIR / "control"
PID_FILE = PIPE_DIR / "nvidia-cuda-mps-control.pid"
MODE = os.environ.get("FAKE_MPS_MODE", "serve")
DELAY_S = float(os.environ.get("FAKE_MPS_DELAY_S", "0"))
LIFETIME_S = float(os.environ.get("FAKE_MPS_LIFETIME_S", "120"))
POLL_S = 0.1  # how often the daemon looks at its watched process and deadline
ANSWER_S = 5.0


def ask(command: str) -> tuple[bool, str]:
    """One command to the daemon of PIPE_DIR: (answered ok, its text). Raises OSError when
    no daemon listens there."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(ANSWER_S)
        conn.connect(str(SOCKET))
        conn.sendall(command.encode() + b"\n")
        conn.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := conn.recv(4096):
            chunks.append(chunk)
    status, _, text = b"".join(chunks).decode().partition("\n")
    return status == "ok", text.strip()


def client() -> int:
    status = 0
    for line in sys.stdin:
        command = line.strip()
        if not command:
            continue
        try:
            ok, text = ask(command)
        except OSError:
            print("Cannot find MPS control daemon process", file=sys.stderr)
            return 1
        if text:
            print(text)
        if not ok:
            status = 1
    return status


def start_daemon() -> int:
    try:
        ask("get_server_list")
    except OSError:
        pass
    else:
        print("An instance of this daemon is already running", file=sys.stderr)
        return 1
    if MODE == "fail":
        print("fake MPS: refusing to start (FAKE_MPS_MODE=fail)", file=sys.stderr)
        return 1
    watched = os.getppid()
    if os.fork() > 0:  # the caller's process: done once the intermediate child is
        os.wait()
        return 0
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    os.chdir("/")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    try:
        serve(watched)
    finally:
        os._exit(0)


def serve(watched: int) -> None:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    with (LOG_DIR / "control.log").open("a", buffering=1) as log:

        def say(text: str) -> None:
            log.write(f"[fake {os.getpid()}] {text}\n")

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        deadline_s = time.monotonic() + LIFETIME_S
        say(f"Starting control daemon using socket {SOCKET}")
        say(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}")
        PID_FILE.write_text(f"{os.getpid()}\n")
        try:
            if MODE == "silent":
                say("fake MPS: silent mode, never answering")
                wait_while(watched, deadline_s, lambda: True)
                return
            ready_s = time.monotonic() + DELAY_S
            if wait_while(watched, deadline_s, lambda: time.monotonic() < ready_s):
                answer(watched, deadline_s, say)
        finally:
            SOCKET.unlink(missing_ok=True)
            PID_FILE.unlink(missing_ok=True)
            say("exit")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_while(watched: int, deadline_s: float, condition: Callable[[], bool]) -> bool:
    """Poll until `condition()` is false; False when the watched process or time ran out."""
    while condition():
        if not alive(watched) or time.monotonic() > deadline_s:
            return False
        time.sleep(POLL_S)
    return True


def answer(watched: int, deadline_s: float, say: Callable[[str], None]) -> None:
    SOCKET.unlink(missing_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(SOCKET))
        server.listen()
        server.settimeout(POLL_S)
        while alive(watched) and time.monotonic() < deadline_s:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(ANSWER_S)
                command = conn.makefile().readline().strip()
                say(f"command: {command}")
                if command == "get_server_list":
                    conn.sendall(b"ok\n")
                elif command == "quit":
                    conn.sendall(b"ok\n")
                    return
                else:
                    conn.sendall(f"error\nunknown command {command!r}\n".encode())
        say("the process that started me is gone, or my lifetime is over")


def main(argv: list[str]) -> int:
    if argv[1:] == ["-d"]:
        return start_daemon()
    if argv[1:]:
        print(f"usage: {argv[0]} [-d]", file=sys.stderr)
        return 2
    return client()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
