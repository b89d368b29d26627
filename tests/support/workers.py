"""Talking to real workers in tests: one request, one reply, over a launched worker's socket."""

from __future__ import annotations

import asyncio
from pathlib import Path

from infless.workers import protocol as p
from infless.workers.launcher import LaunchedWorker


def maps_file(pid: int, path: str) -> bool:
    return path in Path(f"/proc/{pid}/maps").read_text()


async def exchange(worker: LaunchedWorker, message: p.ToWorker) -> p.FromWorker:
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(worker.sock, p.encode_frame(message))
    header = b""
    while len(header) < p.FRAME_HEADER.size:
        header += await loop.sock_recv(worker.sock, p.FRAME_HEADER.size - len(header))
    body = b""
    while len(body) < p.frame_length(header):
        chunk = await loop.sock_recv(worker.sock, p.frame_length(header) - len(body))
        assert chunk, "the worker closed its socket"
        body += chunk
    return p.decode_from_worker(body)
