"""What the gateway and a node agent say to each other, as typed msgspec structs.

The agent's calls travel as msgpack bytes (over Ray's actor calls, or directly in tests):
a start order, its reply with the worker's TCP endpoint and token, and the node's report.
Requests never travel here: they go gateway → worker over TCP (`workers.protocol`).
Pure data: no I/O.
"""

from __future__ import annotations

import msgspec

from infless.workers.protocol import Ready


class StartOrder(msgspec.Struct, frozen=True, kw_only=True):
    """One instance to start: the gateway's `BootOrder` minus what stays on the gateway
    (its death callback), with the package named by digest (shipped to the node first)."""

    instance_id: str
    tenant: str
    package: str  # sha256:<hex>, see `put_package`
    batch_size: int
    cpus: int
    gpu_pct: int = 0
    cpu_ids: list[int]
    warmup_batch_sizes: list[int]
    shared_weights: bool = True
    function: str = ""
    instance: str = ""
    env: dict[str, str] = {}
    memory_limit_bytes: int | None = None


class Started(msgspec.Struct, frozen=True, kw_only=True):
    """A worker loaded and listening: connect to host:port and say `Hello` with `token`."""

    host: str
    port: int
    token: bytes
    ready: Ready
    spawn_ms: float


class NodeReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a node has and runs: its cores, memory and GPUs, its workers, and its store
    (what it adopted when its agent last started)."""

    node: str
    host: str
    cpu_ids: list[int]
    memory_bytes: int
    gpu_pct: list[int]
    workers: list[str]
    store_tensors: int
    store_bytes: int
    adopted_tensors: int
    packages: int
    agent_pid: int
    agent_starts: int = 1  # how many times an agent started on this node (restarts + 1)
    similarity: dict[str, float] = {}  # "tenant/sha256:…" -> Tetris θ of the node's store
    store_tenant_bytes: dict[str, int] = {}  # what its store holds, per tenant


_encoder = msgspec.msgpack.Encoder()


def encode(message: StartOrder | Started | NodeReport) -> bytes:
    return _encoder.encode(message)


def decode_order(data: bytes) -> StartOrder:
    return msgspec.msgpack.decode(data, type=StartOrder)


def decode_started(data: bytes) -> Started:
    return msgspec.msgpack.decode(data, type=Started)


def decode_report(data: bytes) -> NodeReport:
    return msgspec.msgpack.decode(data, type=NodeReport)
