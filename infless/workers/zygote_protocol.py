"""The zygote's control-socket messages: what the gateway and the zygote say to each other.

One msgpack message per SOCK_SEQPACKET datagram (a `Fork` carries the worker's socket, and
optionally the write end of its stdout/stderr pipe, as SCM_RIGHTS ancillary data; a
`ForkTemplate` the template's control socket, then its load socket). Gateway -> fork
server (the zygote or a template): `Fork`, and to the zygote only `ForkTemplate`. Fork
server -> gateway: `ZygoteReady` (or, from the zygote, `ZygoteFailed`) once at start, then
`Forked` / `ForkFailed` per request and `ChildExited` whenever a child ends. A template
speaks the same protocol on its own control socket. Pure data: no I/O, no torch.
"""

from __future__ import annotations

import msgspec

MAX_MESSAGE_BYTES = 64 * 1024  # one control datagram, either way


class Fork(msgspec.Struct, tag="fork", frozen=True):
    request_id: int
    instance_id: str


class ForkTemplate(msgspec.Struct, tag="fork_template", frozen=True):
    request_id: int
    template_id: str


class ZygoteReady(msgspec.Struct, tag="ready", frozen=True):
    pid: int
    threads: int  # must be 1: forking a multi-threaded process copies only the caller


class ZygoteFailed(msgspec.Struct, tag="failed", frozen=True):
    error: str


class Forked(msgspec.Struct, tag="forked", frozen=True):
    request_id: int
    pid: int


class ForkFailed(msgspec.Struct, tag="fork_failed", frozen=True):
    request_id: int
    error: str


class ChildExited(msgspec.Struct, tag="exited", frozen=True):
    pid: int
    returncode: int  # negative: killed by that signal, as in subprocess


FromZygote = ZygoteReady | ZygoteFailed | Forked | ForkFailed | ChildExited
encoder = msgspec.msgpack.Encoder()
from_zygote = msgspec.msgpack.Decoder(FromZygote)
to_zygote = msgspec.msgpack.Decoder(Fork | ForkTemplate)
