"""The zygote launcher with real processes: forked children serve on the passed socket."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psutil
import pytest

from infless.workers import protocol as p
from infless.workers.launcher import LaunchedWorker
from infless.workers.zygote import ZygoteLauncher

REPO_ROOT = Path(__file__).resolve().parents[2]
STAND_IN = "tests.integration.test_zygote:echo_serve"


def echo_serve(sock: socket.socket) -> None:
    """Stand-in worker target: report who we are, then echo until EOF ("exit N" exits)."""
    info = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "instance": os.environ.get("INFLESS_INSTANCE_ID"),
        "sock_fd": sock.fileno(),
        "fds": sorted(int(fd.name) for fd in Path("/proc/self/fd").iterdir()),
    }
    sock.sendall(json.dumps(info).encode() + b"\n")
    while data := sock.recv(4096):
        if data.startswith(b"exit "):
            raise SystemExit(int(data.split()[1]))
        sock.sendall(data)


def zygote_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


@pytest.fixture
def child_pids() -> Iterator[list[int]]:
    """Pids of zygote children; teardown checks that none outlives the test."""
    pids: list[int] = []
    yield pids
    alive = []
    for pid in pids:
        try:
            alive.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    _, survivors = psutil.wait_procs(alive, timeout=10)
    for survivor in survivors:
        survivor.kill()
    assert survivors == []


@pytest.fixture
async def launcher() -> AsyncIterator[ZygoteLauncher]:
    zygote = ZygoteLauncher(env=zygote_env(), target=STAND_IN, preload=())
    yield zygote
    zygote_pid = zygote.pid
    await zygote.close()
    assert zygote_pid is None or not psutil.pid_exists(zygote_pid)


async def read_line(worker: LaunchedWorker) -> dict[str, object]:
    loop = asyncio.get_running_loop()
    worker.sock.setblocking(False)
    data = b""
    while not data.endswith(b"\n"):
        chunk = await loop.sock_recv(worker.sock, 4096)
        assert chunk, "the worker closed its socket"
        data += chunk
    result: dict[str, object] = json.loads(data)
    return result


async def test_forked_children_serve_on_the_passed_socket(
    launcher: ZygoteLauncher, child_pids: list[int]
) -> None:
    ready = await launcher.start()
    workers = [await launcher.launch(f"fn-{i}") for i in range(3)]
    child_pids.extend(w.pid for w in workers)
    loop = asyncio.get_running_loop()
    for i, worker in enumerate(workers):
        info = await read_line(worker)
        assert worker.process is None
        assert worker.spawn_ms > 0
        assert info["pid"] == worker.pid
        assert info["ppid"] == ready.pid == launcher.pid
        assert info["instance"] == f"fn-{i}"
        fds = info["fds"]
        assert isinstance(fds, list)
        stray = set(fds) - {0, 1, 2, info["sock_fd"]}
        assert len(stray) <= 1  # only the descriptor listdir itself opened
        await loop.sock_sendall(worker.sock, b"hello\n")
        assert await loop.sock_recv(worker.sock, 4096) == b"hello\n"
    await loop.sock_sendall(workers[0].sock, b"exit 3")
    assert await launcher.wait_exit(workers[0].pid) == 3
    os.kill(workers[1].pid, signal.SIGKILL)
    assert await launcher.wait_exit(workers[1].pid) == -signal.SIGKILL
    assert await loop.sock_recv(workers[1].sock, 4096) == b""  # the gateway sees EOF
    workers[2].sock.close()  # EOF: the child's serve returns and it exits
    assert await launcher.wait_exit(workers[2].pid) == 0
    for worker in workers:
        worker.sock.close()


async def test_the_zygote_restarts_after_dying(
    launcher: ZygoteLauncher, child_pids: list[int]
) -> None:
    first = await launcher.start()
    os.kill(first.pid, signal.SIGKILL)
    assert await launcher.wait_exit(12345678) is None  # the reader noticed the death
    worker = await launcher.launch("after-restart")
    child_pids.append(worker.pid)
    assert launcher.pid != first.pid
    assert (await read_line(worker))["ppid"] == launcher.pid
    worker.sock.close()
    assert await launcher.wait_exit(worker.pid) == 0


GATEWAY = """
import asyncio, sys
from infless.workers.zygote import ZygoteLauncher

async def main() -> None:
    launcher = ZygoteLauncher(target=sys.argv[1], preload=())
    ready = await launcher.start()
    worker = await launcher.launch("orphan")
    print(ready.pid, worker.pid, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_zygote_and_children_die_with_the_gateway(child_pids: list[int]) -> None:
    gateway = subprocess.Popen(
        [sys.executable, "-c", GATEWAY, STAND_IN],
        env=zygote_env(),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert gateway.stdout is not None
        zygote_pid, worker_pid = map(int, gateway.stdout.readline().split())
        child_pids.extend([zygote_pid, worker_pid])
        gateway.kill()
        gateway.wait(timeout=30)
        # PR_SET_PDEATHSIG kills the zygote; the worker sees EOF on its gateway socket.
        gone, alive = psutil.wait_procs(
            [psutil.Process(zygote_pid), psutil.Process(worker_pid)], timeout=10
        )
        assert alive == []
        assert len(gone) == 2
    except psutil.NoSuchProcess:
        pass  # already gone before we looked: that is the point
    finally:
        if gateway.poll() is None:
            gateway.kill()
        gateway.wait(timeout=30)
        if gateway.stdout is not None:
            gateway.stdout.close()


async def test_real_zygote_is_single_threaded_and_runs_the_worker(
    child_pids: list[int], tmp_path: Path
) -> None:
    launcher = ZygoteLauncher(env=zygote_env())  # default preload (torch) and target (serve)
    try:
        ready = await launcher.start()
        assert ready.threads == 1
        worker = await launcher.launch("real")
        child_pids.append(worker.pid)
        assert psutil.Process(ready.pid).num_threads() == 1  # still, after a fork
        loop = asyncio.get_running_loop()
        worker.sock.setblocking(False)
        request = p.LoadModel(package_dir=str(tmp_path / "no-such-package"), cpus=1)
        await loop.sock_sendall(worker.sock, p.encode_frame(request))
        header = await loop.sock_recv(worker.sock, p.FRAME_HEADER.size)
        body = b""
        length = p.frame_length(header)
        while len(body) < length:
            body += await loop.sock_recv(worker.sock, length - len(body))
        reply = p.decode_from_worker(body)
        assert isinstance(reply, p.LoadFailed)
        assert await launcher.wait_exit(worker.pid) == 0
        worker.sock.close()
    finally:
        await launcher.close()
