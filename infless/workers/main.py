"""The worker process: one instance of one function, serving batches over a socket.

Worker side (imports torch). Its life:

1. it receives `LoadModel`;
2. it sets the function's environment, mounts its secrets and enters its tenant's sandbox
   (`workers.runtime`: its own uid, no capabilities, a mount view without the gateway's
   state);
3. it builds the model: structure on the meta device, then weights, mapped from the shared
   store or read from the package;
4. it times warm-up batches and answers `Ready`;
5. it answers `RunBatch` and `Ping` until `Shutdown`, or EOF on the socket (the gateway is
   gone).

A node agent's worker is then told `ServeOn`: it serves the gateway over an authenticated
TCP connection instead (`workers.tcp`). An idle worker may be told `TransformModel`: it turns
its model into another package's (`workers.transformer`) and answers `Ready` again.

It runs one batch at a time, with as many torch threads as the instance has cores. Malloc
keeps freed memory for the next batch (`infless.profiler.allocator`); the heap the warm-up
leaves is trimmed once.

A template process (`prepare_template`) loads a model once, on one thread. Instances forked
from it take that model as is (no build, no attach) and only time their own warm-up.

A GPU worker (its first message `Standby`, or `LoadModel` with `gpu`) has a
`gpu_session.GpuSession` do the device's steps. It stands by (CUDA environment, context,
libraries) and answers `StandbyReady`; it loads onto the device; on `Unload` it goes back to
standby and awaits the next `LoadModel`. Its `Pong` reports its device memory. A CPU worker
never imports the GPU modules and never touches CUDA: the zygote it forks from must never
initialise it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from infless.clock import perf_s
from infless.profiler.allocator import keep_freed_memory
from infless.workers import protocol as p
from infless.workers.channel import BlockingChannel
from infless.workers.model import LoadedModel, build_model
from infless.workers.runtime import enter_runtime
from infless.workers.tcp import accept_gateway, exit_with

_Channel = BlockingChannel[p.ToWorker, p.FromWorker]

if TYPE_CHECKING:
    from infless.workers.gpu_session import GpuSession


def _channel(sock: socket.socket) -> _Channel:
    return BlockingChannel(sock, p.decode_to_worker, p.encode_frame)


class _Template:
    """The model a template process loaded; the instances forked from it serve it as is."""

    def __init__(self, request: p.LoadModel, model: LoadedModel) -> None:
        self.package_dir = request.package_dir
        self.stored = request.store_tensors
        self.env = request.env
        self.model = model

    def serves(self, request: p.LoadModel) -> bool:
        """Same package, stored tensors and environment: the forked instance may skip build
        and attach (a worker with secrets builds its own, after mounting them)."""
        return (
            self.stored is not None
            and request.package_dir == self.package_dir
            and request.store_tensors == self.stored
            and request.env == self.env
            and not request.secrets
        )


_template: _Template | None = None  # set in a template process, inherited by its children


def _load(request: p.LoadModel, device: GpuSession | None = None) -> tuple[LoadedModel, p.Ready]:
    """Build and attach (or take the template's model), then time the warm-up batches; on
    a GPU worker (`device`), on its device."""
    if device is not None:
        device.enter(request)  # its placement; the standby steps on a fresh start
        device.open_weights(request)  # the tier's copy, before the sandbox hides its files
    # the tenant's sandbox (and the secrets, the environment): before any package code runs
    enter_runtime(request.env, request.secrets, request.sandbox)
    import torch

    keep_freed_memory()  # each batch reuses the last one's activation pages: no page faults
    if request.nice:  # before torch starts its threads: they inherit it
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, request.nice)

    if request.cpu_ids:
        os.sched_setaffinity(0, request.cpu_ids)
    torch.set_num_threads(max(1, request.cpus))
    torch.set_flush_denormal(True)  # subnormal activations would make some models much slower
    build_started = attach_started = perf_s()
    gpu: p.GpuReport | None = None
    model: LoadedModel
    if device is not None:
        model, attach_started = device.build(request)
        warmup_started = perf_s()
        exec_ms, gpu = device.warm_up(model, request.warmup_batch_sizes, request.warmup_rounds)
    else:
        if _template is not None and _template.serves(request):
            model = _template.model  # built, attached and warmed in the template: shared pages
        else:
            model, attach_started = build_model(request)
        warmup_started = perf_s()
        exec_ms = _warm_up(model, request.warmup_batch_sizes, request.warmup_rounds)
    done = perf_s()
    breakdown = p.StartBreakdown(
        build_ms=(attach_started - build_started) * 1000.0,
        attach_ms=(warmup_started - attach_started) * 1000.0,
        warmup_ms=(done - warmup_started) * 1000.0,
    )
    return model, p.Ready(pid=os.getpid(), exec_ms=exec_ms, start=breakdown, gpu=gpu)


def _warm_up(model: LoadedModel, batch_sizes: list[int], rounds: int) -> dict[int, float]:
    """Run each batch size once (it pays the allocation), then time `rounds` runs."""
    exec_ms: dict[int, float] = {}
    for batch_size in batch_sizes:
        example = model.example_inputs(batch_size)
        model.check_outputs(model.run(example), batch_size)  # first call pays allocation
        timings = []
        for _ in range(max(1, rounds)):
            started = perf_s()
            model.run(example)
            timings.append((perf_s() - started) * 1000.0)
        exec_ms[batch_size] = float(np.median(timings))
    _return_free_memory()
    return exec_ms


def _transform(model: LoadedModel, request: p.TransformModel) -> tuple[LoadedModel, p.Ready]:
    """Transform the served model into the package's (`workers.metaops`), then warm up."""
    import torch

    from infless.workers.transformer import transform_model

    if request.cpu_ids:
        os.sched_setaffinity(0, request.cpu_ids)
    torch.set_num_threads(max(1, request.cpus))
    started = perf_s()
    transformed, metaops_ms = transform_model(model, request)
    warmup_started = perf_s()
    exec_ms = _warm_up(transformed, request.warmup_batch_sizes, request.warmup_rounds)
    breakdown = p.StartBreakdown(
        transform_ms=(warmup_started - started) * 1000.0,
        warmup_ms=(perf_s() - warmup_started) * 1000.0,
        metaops_ms=metaops_ms,
    )
    return transformed, p.Ready(pid=os.getpid(), exec_ms=exec_ms, start=breakdown)


def prepare_template(sock: socket.socket) -> bool:
    """In a template process: load the model `LoadModel` names, answer, keep it for children.

    The template runs its warm-up on one thread (OpenMP starts no pool), so the fork server
    loop that follows still forks from a single-threaded process.
    """
    global _template  # noqa: PLW0603 - set once per template process, before any fork
    channel = _channel(sock)
    request = channel.receive()
    if not isinstance(request, p.LoadModel):
        return False
    if request.store_tensors is None:
        channel.send(p.LoadFailed(error="a template serves stored tensors only"))
        return False
    try:
        model, ready = _load(msgspec.structs.replace(request, cpus=1, cpu_ids=[]))
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        channel.send(p.LoadFailed(error=f"{type(exc).__name__}: {exc}"))
        return False
    _template = _Template(request, model)
    channel.send(ready)
    return True


def _return_free_memory() -> None:
    """Give the warm-up batches' freed heap back to the OS (an idle instance stays small)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _rss_bytes() -> int:
    try:
        with Path("/proc/self/statm").open() as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _run(model: LoadedModel, message: p.RunBatch | p.RunRequests) -> p.FromWorker:
    """One batch's answer; a bad batch fails that batch, not the worker."""
    started = perf_s()
    try:
        if isinstance(message, p.RunBatch):
            outputs = model.run(message.inputs)
            return p.BatchResult(message.batch_id, outputs, (perf_s() - started) * 1000.0)
        answers = model.serve(message.requests)
        return p.RequestsResult(message.batch_id, answers, (perf_s() - started) * 1000.0)
    except Exception as exc:  # reported to the gateway as this batch's failure
        return p.BatchFailed(message.batch_id, f"{type(exc).__name__}: {exc}")


def serve(sock: socket.socket) -> None:
    """Serve one instance on `sock` until Shutdown or EOF. Never raises for a bad batch."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the gateway owns shutdown
    channel = _channel(sock)
    first = channel.receive()
    device = _device_session(first)
    if device is not None:
        model = _start_gpu(channel, device, first)
    elif isinstance(first, p.LoadModel):
        model = _answer_load(channel, partial(_load, first))
    else:
        return
    while model is not None:
        message = channel.receive()
        if message is None or isinstance(message, p.Shutdown):
            return
        if isinstance(message, p.RunBatch | p.RunRequests):
            channel.send(_run(model, message))
        elif isinstance(message, p.Ping):
            channel.send(_pong(message, device))
        elif isinstance(message, p.ServeOn):  # a node agent's worker: the gateway over TCP
            conn = accept_gateway(message, sock)
            if conn is None:
                return
            exit_with(sock)
            channel = _channel(conn)
        elif isinstance(message, p.Unload) and device is not None:
            model = None  # the session drops the rest: the device memory goes back
            channel.send(device.unload())
            model = _await_model(channel, device)
        elif isinstance(message, p.TransformModel):
            model = _answer_transform(channel, model, message, device)


def _answer_load(
    channel: _Channel, load: Callable[[], tuple[LoadedModel, p.Ready]]
) -> LoadedModel | None:
    """Load, answer `Ready`; or answer `LoadFailed` (None: the worker then exits)."""
    try:
        model, ready = load()
    except Exception as exc:  # report any load failure to the gateway, then exit
        traceback.print_exc(file=sys.stderr)  # first: the function's logs read in order
        channel.send(p.LoadFailed(error=f"{type(exc).__name__}: {exc}"))
        return None
    channel.send(ready)
    return model


def _answer_transform(
    channel: _Channel, model: LoadedModel, request: p.TransformModel, device: GpuSession | None
) -> LoadedModel | None:
    """Transform the model (answer `Ready`), or answer `LoadFailed` (None: exit)."""
    if device is not None:  # the device's model is replaced by Unload and LoadModel instead
        channel.send(p.LoadFailed(error="a GPU worker does not transform: Unload, then load"))
        return None
    previous = model  # freed after the answer: unmapping is not on the start's path
    transformed = _answer_load(channel, partial(_transform, previous, request))
    del previous
    return transformed


def _device_session(first: p.ToWorker | None) -> GpuSession | None:
    """A GPU worker's session when its first message places it on a device (a CPU worker
    never imports the GPU modules, and never touches CUDA)."""
    if not isinstance(first, p.Standby | p.LoadModel):
        return None
    from infless.workers.gpu_session import GpuSession, placement_of

    placement = placement_of(first)
    return None if placement is None else GpuSession(placement)


def _start_gpu(
    channel: _Channel, device: GpuSession, first: p.ToWorker | None
) -> LoadedModel | None:
    """Stand by (answer `StandbyReady`) and await the model, or load at once (a fresh start)."""
    if isinstance(first, p.LoadModel):
        return _answer_load(channel, partial(_load, first, device))
    try:
        ready = device.standby()
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        channel.send(p.LoadFailed(error=f"{type(exc).__name__}: {exc}"))
        return None
    channel.send(ready)
    return _await_model(channel, device)


def _await_model(channel: _Channel, device: GpuSession) -> LoadedModel | None:
    """A standby worker between models: answer pings, load the next `LoadModel` (None:
    Shutdown, EOF or a failed load — the worker exits)."""
    while True:
        message = channel.receive()
        if message is None or isinstance(message, p.Shutdown):
            return None
        if isinstance(message, p.LoadModel):
            return _answer_load(channel, partial(_load, message, device))
        if isinstance(message, p.TransformModel):  # as a failed transform does: exit
            channel.send(p.LoadFailed(error="a standby worker has no model to transform"))
            return None
        if isinstance(message, p.Ping):
            channel.send(_pong(message, device))
        elif isinstance(message, p.Unload):  # standing by already: say so again
            channel.send(device.unload())
        elif isinstance(message, p.RunBatch | p.RunRequests):
            channel.send(p.BatchFailed(message.batch_id, "a standby worker has no model"))


def _pong(ping: p.Ping, device: GpuSession | None) -> p.Pong:
    gpu_bytes = 0 if device is None else device.memory_allocated_bytes()
    return p.Pong(ping.nonce, _rss_bytes(), gpu_bytes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="infless worker (started by the gateway)")
    parser.add_argument("--fd", type=int, required=True, help="inherited socket file descriptor")
    args = parser.parse_args(argv)
    sock = socket.socket(fileno=args.fd)
    try:
        serve(sock)
    except (BrokenPipeError, ConnectionResetError):
        return 0
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
