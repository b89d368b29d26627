"""The zygote: a pre-started process with torch imported and no model loaded, forking workers.

Gateway side: `ZygoteLauncher`, a `WorkerLauncher` that never imports torch. It starts the
zygote once per server (`python -m infless.workers.zygote`). For each instance it sends the
worker's end of a fresh socketpair, and the write end of its output pipe, over the control
socket (SOCK_SEQPACKET + SCM_RIGHTS). The zygote forks a child that runs
`infless.workers.main.serve(sock)` and replies with its pid. It also forks per-model
templates on request (`fork_template`; see `infless.workers.templates`).

Zygote side: `zygote_main` imports the preload modules. It calls the `module:function`
entries too: the zoo builds its architectures on `meta` once. It runs no CPU torch op and
starts no thread before forking: OPENBLAS_NUM_THREADS=1 keeps numpy's OpenBLAS pool from
starting at import, and `torch.set_num_threads(1)` runs only in children. Then it runs the
fork-server loop (`infless.workers.forkserver`). It dies with the gateway (PR_SET_PDEATHSIG,
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
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any

from infless.workers.forkclient import ForkServerClient, ZygoteError
from infless.workers.forkserver import ForkTargets, serve_control
from infless.workers.launcher import LaunchedWorker
from infless.workers.records import RunRecords
from infless.workers.zygote_protocol import ForkTemplate, ZygoteFailed, ZygoteReady, encoder

__all__ = ["DEFAULT_PRELOAD", "ZygoteError", "ZygoteLauncher", "zygote_main"]

DEFAULT_TARGET = "infless.workers.main:serve"
DEFAULT_TEMPLATE_PREPARE = "infless.workers.main:prepare_template"
_RUNTIME = (
    "infless.workers.main",
    "infless.models.loader",
    "infless.weights.attach",
    "infless.workers.transformer",  # an idle worker may be told to transform its model
)
_PRIME = "infless.models.loader:prime_builders"  # `module:function` entries are called
DEFAULT_PRELOAD = ("numpy", "torch", "safetensors", *_RUNTIME, _PRIME)
_PR_SET_PDEATHSIG = 1

log = logging.getLogger(__name__)


def _resolve(entry: str, default: str = "") -> Any:
    """`module:attribute` (or `module` with a default attribute): the imported object."""
    module_name, _, attribute = entry.partition(":")
    module = importlib.import_module(module_name)
    name = attribute or default
    return getattr(module, name) if name else module


def zygote_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="infless zygote (started by the gateway)")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, default=0)
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--template-prepare", default=DEFAULT_TEMPLATE_PREPARE)
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
        targets = ForkTargets(
            serve=_resolve(args.target, "serve"),
            prepare_template=_resolve(args.template_prepare) if args.template_prepare else None,
        )
        gc.collect()
        gc.freeze()  # children's collections skip the preloaded heap: no copy-on-write storm
    except Exception as exc:
        control.send(encoder.encode(ZygoteFailed(f"{type(exc).__name__}: {exc}")))
        return 1
    return serve_control(control, targets)


# -- gateway side ---------------------------------------------------------------------------


class ZygoteLauncher:
    """Starts workers by forking them from one zygote; (re)starts the zygote on demand.

    `target`, `template_prepare` and `preload` exist for tests and benchmarks. `exit_code` /
    `wait_exit` tell how a child ended (the zygote is its parent). The zygote dies with the
    thread that starts it (PR_SET_PDEATHSIG): start it from the event loop's (main) thread.
    """

    def __init__(
        self,
        python: str = "",
        env: dict[str, str] | None = None,
        *,
        target: str = DEFAULT_TARGET,
        template_prepare: str = DEFAULT_TEMPLATE_PREPARE,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        start_timeout_s: float = 120.0,
        fork_timeout_s: float = 30.0,
        records: RunRecords | None = None,
    ) -> None:
        self._python = python or sys.executable
        self.records = records  # PID files of the zygote and all it forks (workers.records)
        self._env = env
        self._target = target
        self._template_prepare = template_prepare
        self._preload = tuple(preload)
        self._start_timeout_s = start_timeout_s
        self._fork_timeout_s = fork_timeout_s
        self._process: asyncio.subprocess.Process | None = None
        self._client: ForkServerClient | None = None
        self._start_lock = asyncio.Lock()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def exit_code(self, pid: int) -> int | None:
        return None if self._client is None else self._client.exit_code(pid)

    async def wait_exit(self, pid: int) -> int | None:
        """The child's exit code once the zygote reports it; None if the zygote is gone."""
        return None if self._client is None else await self._client.wait_exit(pid)

    async def start(self) -> ZygoteReady:
        async with self._start_lock:
            if self._client is not None and self._client.alive and self._client.ready:
                return self._client.ready
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
                self._python,
                "-m",
                "infless.workers.zygote",
                "--control-fd",
                str(fd),
                "--parent-pid",
                str(os.getpid()),
                "--target",
                self._target,
                "--template-prepare",
                self._template_prepare,
                "--preload",
                ",".join(self._preload),
                pass_fds=(fd,),
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        if self.records is not None:
            self.records.add(self._process.pid, "zygote", "zygote")
        self._client = ForkServerClient(ours, "zygote", self._fork_timeout_s, self.records)
        try:
            ready = await self._client.handshake(self._start_timeout_s)
        except BaseException:
            await self.close()
            raise
        if ready.threads != 1:
            msg = "the zygote runs %d threads before forking (want 1): keep pools out of preloads"
            log.warning(msg, ready.threads)
        return ready

    async def _running(self) -> ForkServerClient:
        if self._client is None or not self._client.alive:
            await self.start()
        assert self._client is not None
        return self._client

    async def launch(self, instance_id: str, capture_output: bool = False) -> LaunchedWorker:
        return await (await self._running()).launch(instance_id, capture_output)

    async def fork_template(self, template_id: str, control_fd: int, load_fd: int) -> int:
        """Fork a template on its control (SEQPACKET) and load (stream) sockets; its pid."""
        client = await self._running()
        request = ForkTemplate(client.next_request_id(), template_id)
        return await client.request(request, [control_fd, load_fd])

    async def close(self) -> None:
        """Stop the zygote (its children keep serving until their sockets close)."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()  # EOF: the zygote exits on its own
        process, self._process = self._process, None
        if process is None:
            return
        try:
            async with asyncio.timeout(5.0):
                await process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            await process.wait()
        if self.records is not None:
            self.records.discard(process.pid)


if __name__ == "__main__":
    raise SystemExit(zygote_main())
