"""Helpers of the fault-injection suite (`tests/faults/`) and of its long version
(`bench/faults.py`): the sections that give a gateway its own tensor store, a slow model's
package, load that records every answer it gets, a small tmpfs to fill, and what the
kernel says about a process (its descriptors, whether it still runs).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from infless.models.package import (
    MANIFEST_FILE,
    WEIGHTS_FILE,
    PackageManifest,
    TensorSignature,
    encode_manifest,
)

SLOW_MODEL_SOURCE = Path(__file__).with_name("slow_model.py")
MNIST = {"name": "mnist", "image": "mnist", "slo_ms": 1000, "max_batch": 4}
MNIST_BODY = json.dumps({"inputs": [[[0.5] * 28] * 28]}).encode()


def own_store(tmp_path: Path, **store: object) -> dict[str, dict[str, Any]]:
    """Config sections giving the gateway a store under `tmp_path` (the test sees its
    files; nothing is shared with other gateways)."""
    return {"store": {"root": str(tmp_path / "store"), **store}}


def slow_package(directory: Path) -> Path:
    """A package of `slow_model:build` at `directory` (input and output `[delay_ms, tag]`),
    its module in the package's `src/` (what a worker imports from, in its sandbox too)."""
    (directory / "src").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SLOW_MODEL_SOURCE, directory / "src" / "slow_model.py")
    manifest = PackageManifest(
        name=directory.name,
        architecture="slow_model:build",
        inputs=[TensorSignature("x", "float32", [2])],
        outputs=[TensorSignature("y", "float32", [2])],
    )
    (directory / MANIFEST_FILE).write_bytes(encode_manifest(manifest))
    save_file({"scale": np.ones(1, dtype=np.float32)}, str(directory / WEIGHTS_FILE))
    return directory


def slow_body(delay_ms: float, tag: int) -> bytes:
    return json.dumps({"inputs": [delay_ms, tag]}).encode()


def slow_tag(body: bytes) -> int:
    """The tag a slow model's answer carries."""
    return int(json.loads(body)["outputs"][1])


@dataclass(frozen=True, slots=True)
class Reply:
    """One request's fate: its status and body, or the connection error it met."""

    index: int
    status: int = 0
    body: bytes = b""
    error: str = ""

    @property
    def code(self) -> str | None:
        """The JSON error code, when the body is a JSON error."""
        with contextlib.suppress(ValueError, TypeError, KeyError):
            return str(json.loads(self.body)["code"])
        return None


def post(url: str, path: str, body: bytes, index: int = 0, timeout_s: float = 60.0) -> Reply:
    """One POST on a fresh connection (so that a gateway's restart is seen as such)."""
    host, _, port = url.removeprefix("http://").partition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return Reply(index, response.status, response.read())
    except (OSError, http.client.HTTPException) as exc:
        return Reply(index, error=f"{type(exc).__name__}: {exc}")
    finally:
        connection.close()


@dataclass
class Load:
    """`threads` clients, each sending `body(index)` to `path` one after the other until
    stopped; every reply recorded in order of completion."""

    url: str
    path: str
    body: Callable[[int], bytes]
    threads: int = 4
    replies: list[Reply] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)
    _next: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> Load:
        for _ in range(self.threads):
            worker = threading.Thread(target=self._run, daemon=True)
            worker.start()
            self._workers.append(worker)
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                index, self._next = self._next, self._next + 1
            reply = post(self.url, self.path, self.body(index), index)
            with self._lock:
                self.replies.append(reply)
            if reply.error:
                self._stop.wait(0.05)  # no gateway listens: do not spin

    def count(self) -> int:
        with self._lock:
            return len(self.replies)

    def answered(self) -> int:
        """Replies that came over HTTP (whatever their status)."""
        with self._lock:
            return sum(1 for reply in self.replies if not reply.error)

    def wait_answered(self, count: int, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.answered() < count:
            assert time.monotonic() < deadline, f"fewer than {count} answers in {timeout_s} s"
            time.sleep(0.01)

    def stop(self) -> list[Reply]:
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout=120)
        return list(self.replies)


_HOLD_LOCK = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def registry_locked(path: Path) -> Iterator[int]:
    """Another process holding `BEGIN EXCLUSIVE` on the SQLite file `path`; yields its pid."""
    with subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "locked"
            yield holder.pid
        finally:
            holder.kill()


def registry_rows(path: Path) -> dict[str, dict[str, Any]]:
    """The functions a registry file holds, read by a connection of our own."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT name, spec FROM functions").fetchall()
    return {name: json.loads(spec) for name, spec in rows}


def open_fds(pid: int) -> int:
    return sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())


def running(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in {"Z", "X"}


@contextlib.contextmanager
def small_tmpfs(mount_point: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of `size_bytes` at `mount_point` (root only), unmounted afterwards."""
    mount_point.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(mount_point)],
        check=True,
        capture_output=True,
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False, capture_output=True)


def fill(directory: Path) -> None:
    """Write into `directory` until its file system has no block left."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk_bytes in (1 << 20, 1 << 16, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk_bytes)
    finally:
        os.close(fd)
