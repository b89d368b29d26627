"""How worker processes come to exist: the WorkerLauncher protocol and the fresh-process launcher.

A launcher returns a live process (its pid) connected to the gateway by one end of a
socketpair, and, when asked to capture output, the read end of a pipe that is the worker's
stdout and stderr (`output`; see `workers.output`). The worker side of every launcher ends
in `infless.workers.main.serve(sock)`.
Resource confinement (affinity, cgroups) is applied by the pool by pid, after launch.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from dataclasses import dataclass
from typing import Protocol

from infless.clock import perf_s


@dataclass(frozen=True, slots=True)
class LaunchedWorker:
    pid: int
    sock: socket.socket
    spawn_ms: float
    process: asyncio.subprocess.Process | None = None  # set when the gateway is the parent
    output: int | None = None  # the read end of the worker's stdout+stderr pipe, if captured


class WorkerLauncher(Protocol):
    async def start(self) -> object:
        """Get ready to launch (e.g. start the zygote) so that the first launch is fast."""
        ...

    async def launch(self, instance_id: str, capture_output: bool = False) -> LaunchedWorker: ...

    async def close(self) -> None: ...


class SubprocessLauncher:
    """Starts each worker as a fresh `python -m infless.workers.main` (pays the torch import)."""

    def __init__(self, python: str = "", env: dict[str, str] | None = None) -> None:
        self._python = python or sys.executable
        self._env = env

    async def launch(self, instance_id: str, capture_output: bool = False) -> LaunchedWorker:
        started = perf_s()
        gateway_sock, worker_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        output, output_write = os.pipe() if capture_output else (None, None)
        try:
            worker_fd = worker_sock.fileno()
            env = dict(os.environ if self._env is None else self._env)
            env["INFLESS_INSTANCE_ID"] = instance_id
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see ZygoteLauncher
            if capture_output:
                env["PYTHONUNBUFFERED"] = "1"  # each print reaches the pipe at once
            process = await asyncio.create_subprocess_exec(
                self._python,
                "-m",
                "infless.workers.main",
                "--fd",
                str(worker_fd),
                pass_fds=(worker_fd,),
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output_write,  # None: inherit the gateway's
                stderr=output_write,
            )
        except BaseException:
            gateway_sock.close()
            if output is not None:
                os.close(output)
            raise
        finally:
            worker_sock.close()
            if output_write is not None:
                os.close(output_write)
        spawn_ms = (perf_s() - started) * 1000.0
        return LaunchedWorker(process.pid, gateway_sock, spawn_ms, process, output)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None
