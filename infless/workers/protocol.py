"""Every gateway <-> worker message, as typed msgspec structs, and the frame codec.

Frames are a 4-byte big-endian length followed by one msgpack-encoded message. Tensors
travel as raw bytes with dtype and shape, never as nested lists; no pickle anywhere.

This module is shared by both sides: it must not import torch, numpy or any policy. Some
messages carry plain records of lower layers as they are: the store's
`weights.stored.StoredTensor`, the GPU tier's `SharedModel` (`weights.gpu_tier`) and a
transformation plan's `transform.records.PlanStep`. The contract "The wire protocol is plain
records" in pyproject.toml holds it to that.
"""

from __future__ import annotations

import struct
from typing import Literal

import msgspec

from infless.transform.records import PlanStep
from infless.weights.gpu_tier import SharedModel
from infless.weights.stored import StoredTensor

FRAME_HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 1 << 30
MAX_HELLO_BYTES = 256  # a TCP peer's first frame: anything longer is not a gateway


class TensorData(msgspec.Struct, array_like=True, frozen=True):
    """A dense tensor: numpy dtype name, full shape (batch included), C-order bytes."""

    dtype: str
    shape: list[int]
    data: bytes


class GpuPlacement(msgspec.Struct, frozen=True):
    """Where and how a GPU worker computes (`Standby`, `LoadModel.gpu`).

    The worker sets its CUDA environment from this before CUDA is initialised in it (it was
    forked from a zygote that never initialised CUDA, or started fresh). Only `uuid` is
    visible (`CUDA_VISIBLE_DEVICES`), so the worker computes on `cuda:0`. Under MPS it is
    the client of the device's daemon (`CUDA_MPS_PIPE_DIRECTORY = mps_pipe_dir`) with
    `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = gpu_pct`; `mps_pipe_dir` None means time-sliced.
    `runtime` "fake" means no CUDA at all: the fake device of `[gpu] fake_devices`, which
    computes on the CPU through the same code path (machines without a GPU).
    """

    runtime: Literal["cuda", "fake"]
    uuid: str
    index: int  # the device's NVML index (reports only)
    gpu_pct: int
    mps_pipe_dir: str | None = None
    cuda_graphs: bool = True  # capture graphs for the warm-up batch sizes where faster


class Standby(msgspec.Struct, tag="standby", frozen=True):
    """The first message to a warm CUDA worker: become a client of the placement's device,
    create the CUDA context, warm the math libraries, answer `StandbyReady`, then wait for
    `LoadModel` (with the same placement)."""

    placement: GpuPlacement


class StandbyReady(msgspec.Struct, tag="standby_ready", frozen=True):
    pid: int
    device_name: str
    init_ms: float  # context creation and library warm-up (0 when it came back from Unload)
    memory_bytes: int = 0  # device memory this process's allocator holds


class Unload(msgspec.Struct, tag="unload", frozen=True):
    """To a GPU worker no longer wanted as an instance: drop the model (its weights were the
    tier's: nothing is freed on the device but its own buffers) and be a standby worker
    again; it answers `StandbyReady`."""


class GpuReport(msgspec.Struct, frozen=True):
    """What a GPU instance reports with `Ready`: its device, which warm-up batch sizes it
    replays as CUDA graphs, and the device memory its own allocator holds (the weights
    opened from the tier are the holder's, not counted)."""

    device_name: str
    graph_batch_sizes: list[int] = []
    memory_bytes: int = 0
    weights_from_tier: bool = False


class Sandbox(msgspec.Struct, frozen=True):
    """How a worker is confined before its package's code runs (`workers.sandbox`).

    - its tenant's unprivileged `uid`/`gid`;
    - a mount namespace where `hide` (the gateway's state, the store's root, the model
      repository) does not exist, except `keep` (its tenant's packages and store
      directory), bound back read-only;
    - one writable tmpfs of `scratch_bytes` on the `scratch` directories;
    - every other mount read-only, except the host's `shared` directories (a GPU worker's
      /dev/shm);
    - an empty network namespace, unless `host_network`.
    """

    uid: int
    gid: int
    hide: list[str] = []
    keep: list[str] = []
    scratch: list[str] = []
    scratch_bytes: int = 64 << 20
    shared: list[str] = []
    host_network: bool = False


class LoadModel(msgspec.Struct, tag="load", frozen=True):
    """Build the model of a function package and get ready to serve.

    `store_tensors` set: attach weights from the shared store (read-only maps); otherwise
    load them from the package's safetensors file (memory-mapped: page cache shared between
    workers), or with `private_weights` copy them into the worker's own memory (the
    no-sharing baseline of bench.memory). `warmup_batch_sizes` are measured after loading
    and reported in `Ready.exec_ms`. `env` is set and `secrets` (name -> value) are mounted
    under /var/openfaas/secrets (`workers.isolation`) before the package is loaded, and the
    worker enters its `sandbox`; a worker that cannot do either answers `LoadFailed`
    without loading it.
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
    # A GPU instance: where it computes (a standby worker was told the same placement),
    # and its weights as the GPU tier's device copy (None: copied from `store_tensors` or
    # the package to the device, privately)
    gpu: GpuPlacement | None = None
    gpu_weights: SharedModel | None = None
    # the tenant's sandbox, entered before the package loads (None: the gateway's own uid)
    sandbox: Sandbox | None = None


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
    gpu: GpuReport | None = None


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
    gpu_memory_bytes: int = 0  # a GPU worker's own device allocations


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


ToWorker = (
    LoadModel
    | TransformModel
    | RunBatch
    | RunRequests
    | Ping
    | Shutdown
    | ServeOn
    | Hello
    | Standby
    | Unload
)
FromWorker = (
    Ready
    | LoadFailed
    | BatchResult
    | RequestsResult
    | BatchFailed
    | Pong
    | Listening
    | StandbyReady
)
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
