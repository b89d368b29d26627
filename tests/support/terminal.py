"""Run a command with its stderr on a pseudo-terminal, as in a shell: what a progress bar
draws shows up there, while stdout is captured as a script would."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import struct
import subprocess
import termios
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class OnTerminal:
    returncode: int
    stdout: str
    terminal: str  # everything written to the terminal (escape sequences included)


def _drain(fd: int, into: bytearray) -> None:
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other side closed
            return
        if not chunk:
            return
        into.extend(chunk)


def run_on_terminal(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout_s: float = 300.0
) -> OnTerminal:
    """Run `argv` with stderr on a 120-column terminal and stdout piped."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    shown = bytearray()
    reader = threading.Thread(target=_drain, args=(leader, shown), daemon=True)
    reader.start()
    environment = {**(env or os.environ), "TERM": "xterm-256color", "COLUMNS": "120"}
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=environment, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=follower, text=True, timeout=timeout_s, check=False,
        )  # fmt: skip
    finally:
        os.close(follower)
        reader.join(timeout=10)
        with contextlib.suppress(OSError):
            os.close(leader)
    return OnTerminal(done.returncode, done.stdout, shown.decode(errors="replace"))
