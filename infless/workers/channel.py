"""Blocking frame I/O on a process's end of its socketpair (a worker's, the GPU tier holder's):
length-prefixed frames (`workers.protocol`'s header and size limit) in, one decoder's
messages out. Used by single-threaded child processes that block on their socket; the
gateway's side is asynchronous (`workers.handle`). Never imports torch.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Generic, TypeVar

from infless.workers.protocol import FRAME_HEADER, frame_length

In = TypeVar("In")
Out = TypeVar("Out")


class BlockingChannel(Generic[In, Out]):
    def __init__(
        self, sock: socket.socket, decode: Callable[[bytes], In], encode: Callable[[Out], bytes]
    ) -> None:
        self._sock = sock
        self._decode = decode
        self._encode = encode

    def _recv_exact(self, size: int) -> bytes | None:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self._sock.recv(size - len(chunks))
            if not chunk:
                return None
            chunks += chunk
        return bytes(chunks)

    def receive(self) -> In | None:
        """The next message, or None when the peer closed the socket."""
        header = self._recv_exact(FRAME_HEADER.size)
        if header is None:
            return None
        body = self._recv_exact(frame_length(header))
        return None if body is None else self._decode(body)

    def send(self, message: Out) -> None:
        self._sock.sendall(self._encode(message))
