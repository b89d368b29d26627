"""What the long commands report: an upload's bytes as they are read (never more often than
its step), a registration's variants generated so far as the gateway reports them, and the
generator's progress lines as the gateway reads them."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

import orjson

from infless.client.http import Reply
from infless.client.packages import CountedReader
from infless.client.register_command import wait_ready
from infless.control.modelless import progress_of
from infless.modelless.profiles import GenerationProgress


@dataclass
class Recorder:
    """A reporter that keeps what it was told."""

    phases: list[str] = field(default_factory=list)
    updates: list[tuple[float, float | None, str]] = field(default_factory=list)

    def begin(self, label: str, total: float | None = None) -> None:
        self.phases.append(label)

    def update(self, done: float, total: float | None = None, note: str = "") -> None:
        self.updates.append((done, total, note))

    def say(self, line: str) -> None:
        return None

    def close(self) -> None:
        return None


def test_an_upload_reports_the_bytes_read_once_per_step() -> None:
    reported: list[int] = []
    reader = CountedReader(io.BytesIO(b"x" * 10_000), reported.append, every_bytes=4096)
    chunks = []
    while chunk := reader.read(1000):  # http.client reads the body in blocks
        chunks.append(chunk)
    assert b"".join(chunks) == b"x" * 10_000
    assert reported == [5000, 10_000, 10_000]  # past each 4 KiB step, then the end


class Gateway:
    """Answers `GET /system/variants/tc` from a script of documents."""

    def __init__(self, documents: list[dict[str, Any]]) -> None:
        self._documents = documents

    def call(self, method: str, path: str, body: object = None, raw: bytes | None = None) -> Reply:
        assert (method, path) == ("GET", "/system/variants/tc")
        return Reply(200, {}, orjson.dumps(self._documents.pop(0)))


def test_a_waiting_register_shows_the_variants_generated_so_far() -> None:
    steps: list[dict[str, Any]] = [
        {"status": "generating", "progress": None},
        {"status": "generating", "progress": {"done": 0, "total": 3, "step": "fp32: writing"}},
        {"status": "generating", "progress": {"done": 2, "total": 3, "step": "int8: writing"}},
        {"status": "ready", "progress": None, "variants": []},
    ]
    recorder = Recorder()
    gateway = Gateway(steps)
    document = wait_ready(gateway, "tc", 60.0, recorder, poll_s=0.0)  # type: ignore[arg-type]  # a stand-in client
    assert document is not None
    assert document["status"] == "ready"
    assert recorder.phases == ["registering tc"]
    assert recorder.updates == [(0, 3, "fp32: writing"), (2, 3, "int8: writing")]


def test_the_gateway_reads_the_generators_progress_lines() -> None:
    line = b'{"progress":{"done":1,"total":6,"step":"bf16: writing and profiling"}}\n'
    expected = GenerationProgress(done=1, total=6, step="bf16: writing and profiling")
    assert progress_of(line) == expected
    assert progress_of(b'{"model":"tc","variants":[]}\n') is None  # the result
    assert progress_of(b'{"progress": broken\n') is None
