"""Every gateway <-> worker message, as typed msgspec structs, and the frame codec.

Frames are a 4-byte big-endian length followed by one msgpack-encoded message. Tensors
travel as raw bytes with dtype and shape, never as nested lists; no pickle anywhere.
This module is shared by both sides: it must not import torch or numpy. `LoadModel`
carries the store's `weights.stored.StoredTensor` entries as they are.
"""

from __future__ import annotations

import struct

import msgspec

from infless.transform.planner import PlanStep
from infless.weights.stored import StoredTensor

FRAME_HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 1 << 30
MAX_HELLO_BYTES = 256  # a TCP peer's first frame: anything longer is not a gateway


class TensorData(msgspec.Struct, array_like=True, frozen=True):
    """A dense tensor: numpy dtype name, full shape (batch included), C-order bytes."""

    dtype: str
    shape: list[int]
    data: bytes


class LoadModel(msgspec.Struct, tag="load", frozen=True):
    """Build the model of a function package and get ready to serve.

    `store_tensors` set: attach weights from the shared store (read-only maps); otherwise
    load them from the package's safetensors file (memory-mapped: page cache shared between
    workers), or with `private_weights` copy them into the worker's own memory (the
    no-sharing baseline of bench.memory). `warmup_batch_sizes` are measured after loading
    and reported in `Ready.exec_ms`. `env` is set and `secrets` (name -> value) are mounted
    under /var/openfaas/secrets (`workers.isolation`) before the package is loaded; a worker
    that cannot mount them answers `LoadFailed` without loading it.
    """

    package_dir: str
    cpus: int
    cpu_ids: list[int] = []
    gpu_pct: int = 0
    warmup_batch_sizes: list[int] = []
    warmup_rounds: int = 3
    store_tensors: list[StoredTensor] | None = None
    private_weights: bool = False
    nice: int = 0  # the worker's scheduling niceness: > 0 yields the cores to the gateway
    env: dict[str, str] = {}
    secrets: dict[str, bytes] | None = None  # never logged: values travel only here


class TransformModel(msgspec.Struct, tag="transform", frozen=True):
    """Turn the model this (idle) worker serves into the package's, by `steps` (Optimus).

    `structure` is the destination's `ModelStructure` JSON (its operations and graph);
    `store_tensors` its stored tensors, of which the steps map those they name. The worker
    answers `Ready` (its warm-up timed as after `LoadModel`) or `LoadFailed` and exits: a
    half-transformed model is never served.
    """

    package_dir: str
    structure: str
    steps: list[PlanStep]
    store_tensors: list[StoredTensor]
    cpus: int
    cpu_ids: list[int] = []
    warmup_batch_sizes: list[int] = []
    warmup_rounds: int = 3


class StartBreakdown(msgspec.Struct, frozen=True):
    """Where an instance's start time went, in milliseconds (`transform_ms`: a transformed
    instance's meta-operators, per kind in `metaops_ms`)."""

    spawn_ms: float = 0.0
    build_ms: float = 0.0
    attach_ms: float = 0.0
    warmup_ms: float = 0.0
    transform_ms: float = 0.0
    metaops_ms: dict[str, float] = {}


class Ready(msgspec.Struct, tag="ready", frozen=True):
    pid: int
    exec_ms: dict[int, float]
    start: StartBreakdown


class LoadFailed(msgspec.Struct, tag="load_failed", frozen=True):
    error: str


class RunBatch(msgspec.Struct, tag="run", frozen=True):
    batch_id: int
    inputs: dict[str, TensorData]


class BatchResult(msgspec.Struct, tag="result", frozen=True):
    batch_id: int
    outputs: dict[str, TensorData]
    exec_ms: float


class BatchFailed(msgspec.Struct, tag="failed", frozen=True):
    batch_id: int
    error: str


class RawRequest(msgspec.Struct, array_like=True, frozen=True):
    """One request for a function with a handler: its body as it came, for `preprocess`.
    `postprocess` False: answer the model's output tensors (the Open Inference Protocol)."""

    body: bytes
    content_type: str
    postprocess: bool = True


class RunRequests(msgspec.Struct, tag="run_requests", frozen=True):
    """A batch of requests for the package's handler: preprocess each, run them as one
    batch, postprocess each."""

    batch_id: int
    requests: list[RawRequest]


class Answer(msgspec.Struct, array_like=True, frozen=True):
    """One request's answer: the handler's response (status 200), its error (the status
    and message it raised), or the model's outputs when it asked for no postprocess."""

    status: int
    body: bytes
    content_type: str
    outputs: dict[str, TensorData] | None = None


class RequestsResult(msgspec.Struct, tag="requests_result", frozen=True):
    batch_id: int
    answers: list[Answer]
    exec_ms: float


class Ping(msgspec.Struct, tag="ping", frozen=True):
    nonce: int


class Pong(msgspec.Struct, tag="pong", frozen=True):
    nonce: int
    rss_bytes: int = 0


class Shutdown(msgspec.Struct, tag="shutdown", frozen=True):
    pass


class ServeOn(msgspec.Struct, tag="serve_on", frozen=True):
    """From a node agent (`infless.nodes`), after `Ready`: serve the gateway over TCP.

    The worker listens on `host` (an ephemeral port) and answers `Listening`; it serves the
    first connection whose first frame is `Hello` with `token` (others are closed), then
    stops listening. It no longer reads the agent's socket, only watches it: the worker
    exits when its agent is gone. No connection within `accept_timeout_s`: it exits.
    """

    host: str
    token: bytes
    accept_timeout_s: float = 60.0


class Hello(msgspec.Struct, tag="hello", frozen=True):
    """The gateway's first frame on a worker's TCP connection: the agent's token for it."""

    token: bytes


class Listening(msgspec.Struct, tag="listening", frozen=True):
    port: int


ToWorker = LoadModel | TransformModel | RunBatch | RunRequests | Ping | Shutdown | ServeOn | Hello
FromWorker = Ready | LoadFailed | BatchResult | RequestsResult | BatchFailed | Pong | Listening
Message = ToWorker | FromWorker

_encoder = msgspec.msgpack.Encoder()
_to_worker_decoder = msgspec.msgpack.Decoder(ToWorker)
_from_worker_decoder = msgspec.msgpack.Decoder(FromWorker)


class FrameError(Exception):
    """A frame was too large or truncated: the peer is broken and the channel must close."""


def encode_frame(message: Message) -> bytes:
    body = _encoder.encode(message)
    return FRAME_HEADER.pack(len(body)) + body


def decode_to_worker(body: bytes | memoryview) -> ToWorker:
    message: ToWorker = _to_worker_decoder.decode(body)
    return message


def decode_from_worker(body: bytes | memoryview) -> FromWorker:
    message: FromWorker = _from_worker_decoder.decode(body)
    return message


def frame_length(header: bytes) -> int:
    (length,) = FRAME_HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {length} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
    return int(length)
