"""Worker output pumps: lines from a real pipe, tagged, bounded, ended by the writer's exit."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable

from infless.workers.output import OutputPumps


async def _wait(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            if condition():
                return
            await asyncio.sleep(0.01)


async def test_lines_arrive_tagged_split_and_cut_and_the_pump_ends_at_eof() -> None:
    lines: list[tuple[str, str, str]] = []
    pumps = OutputPumps(lambda f, i, t: lines.append((f, i, t)), max_line_bytes=16)
    read, write = os.pipe()
    await pumps.start(read, "fn", "fn-abc123")
    assert len(pumps) == 1
    os.write(write, b"first\nsec")
    await _wait(lambda: len(lines) == 1)
    os.write(write, b"ond\r\n\n   \n")  # a line in two writes; CRLF; blank lines skipped
    os.write(write, b"x" * 40 + b"\n")  # longer than the bound: cut, the rest dropped
    os.write(write, "caf\u00e9 \xff".encode("latin-1") + b"\nno newline")
    os.close(write)
    await _wait(lambda: len(pumps) == 0)
    assert lines == [
        ("fn", "fn-abc123", "first"),
        ("fn", "fn-abc123", "second"),
        ("fn", "fn-abc123", "x" * 16 + " [line cut at 16 bytes]"),
        ("fn", "fn-abc123", "caf\ufffd \ufffd"),  # undecodable bytes are replaced
        ("fn", "fn-abc123", "no newline"),
    ]


async def test_a_child_process_output_ends_with_its_exit_and_close_stops_the_rest() -> None:
    lines: list[str] = []
    pumps = OutputPumps(lambda f, i, t: lines.append(t))
    read, write = os.pipe()
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)",
        stdout=write, stderr=write,
    )  # fmt: skip
    os.close(write)
    await pumps.start(read, "fn", "fn-000001")
    assert await child.wait() == 0
    await _wait(lambda: len(pumps) == 0)
    assert sorted(lines) == ["err", "out"]

    stuck, writer = os.pipe()  # a writer that never closes: close() gives up after the grace
    await pumps.start(stuck, "fn", "fn-000002")
    await pumps.close(grace_s=0.05)
    assert len(pumps) == 0
    os.close(writer)


async def test_a_failing_sink_does_not_end_the_pump() -> None:
    seen: list[str] = []

    def sink(function: str, instance: str, text: str) -> None:
        seen.append(text)
        if text == "boom":
            raise RuntimeError("sink broke")

    pumps = OutputPumps(sink)
    read, write = os.pipe()
    await pumps.start(read, "fn", "fn-000003")
    os.write(write, b"boom\nafter\n")
    os.close(write)
    await _wait(lambda: len(pumps) == 0)
    assert seen == ["boom", "after"]


async def test_a_relabelled_pump_tags_later_lines_with_the_new_instance() -> None:
    """A transformed worker's output joins the logs of the function it now serves."""
    lines: list[tuple[str, str, str]] = []
    pumps = OutputPumps(lambda f, i, t: lines.append((f, i, t)))
    read, write = os.pipe()
    label = await pumps.start(read, "resnet-34", "resnet-34-a")
    os.write(write, b"before\n")
    await _wait(lambda: len(lines) == 1)
    label.function, label.instance = "resnet-50", "resnet-50-b"
    os.write(write, b"after\n")
    os.close(write)
    await _wait(lambda: len(pumps) == 0)
    assert lines == [("resnet-34", "resnet-34-a", "before"), ("resnet-50", "resnet-50-b", "after")]
