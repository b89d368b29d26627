"""The GPU tier's holder process: one per server, it keeps the device copies of models.

`python -m infless.weights.holder_main --fd N`, started fresh by `gpu_holder.GpuTierClient`
(never forked from the zygote: CUDA does not survive fork). It speaks `holder_protocol` over
the inherited socket, one request at a time: `HolderStart` first, then `Open` / `Close` /
`Reconcile` / `Books` until `Stop` or EOF (the gateway is gone); either way every device
copy is freed before it exits. It runs `gpu_tier.GpuTier` (reference counts, LRU within
`memory_fraction`) over `gpu_cuda.CudaDevice` or `gpu_fake.FakeDevice`.

Imports torch for the "cuda" runtime only, and only after `HolderStart` has set
`CUDA_VISIBLE_DEVICES` to the managed GPUs' uuids (so CUDA initialises seeing exactly them,
in that order: ordinal i is `devices[i]`). The holder is not an MPS client: CUDA IPC works
between MPS and non-MPS processes (DESIGN §5a). The "fake" runtime never imports torch: it
maps the store's files itself and writes each copy as a file under the fake root, which it
empties at start (a dead holder's copies go).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infless.clock import RealClock, perf_s
from infless.weights import holder_protocol as h
from infless.weights.gpu_fake import FakeDevice, map_host
from infless.weights.gpu_tier import GpuDevice, GpuTier, GpuTierFull, plan_layout
from infless.weights.stored import StoredTensor
from infless.workers.channel import BlockingChannel

log = logging.getLogger("infless.weights.holder")


@dataclass(frozen=True, slots=True)
class Runtime:
    """The devices of one runtime and how it reads host tensors and device memory."""

    devices: Sequence[GpuDevice]
    load_host: Callable[[Sequence[StoredTensor]], Mapping[str, object]]
    memory: Callable[[], list[h.DeviceMemory]]


def fake_runtime(start: h.HolderStart) -> Runtime:
    if start.fake_root is None:
        raise ValueError("the fake runtime needs fake_root: the directory its copies go to")
    root = Path(start.fake_root)
    devices = [FakeDevice(d.index, root, start.fake_memory_bytes) for d in start.devices]
    for device in devices:
        removed = device.clear_leftovers()
        if removed:
            log.info("fake GPU %d: removed %d copies a previous holder left", device.index, removed)

    def memory() -> list[h.DeviceMemory]:
        return [h.DeviceMemory(d.index, d.free_bytes(), d.total_bytes()) for d in devices]

    return Runtime(devices, map_host, memory)


def cuda_runtime(start: h.HolderStart) -> Runtime:
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(d.uuid for d in start.devices)
    import torch

    from infless.weights.attach import attach
    from infless.weights.gpu_cuda import CudaDevice

    if not torch.cuda.is_available():
        raise RuntimeError(
            f"CUDA is not available in the holder (torch {torch.__version__}, "
            f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}): install a CUDA "
            "build of torch, or run without GPUs"
        )
    visible = torch.cuda.device_count()
    if visible != len(start.devices):
        raise RuntimeError(
            f"the holder sees {visible} CUDA devices for the {len(start.devices)} uuids it "
            f"was given ({[d.uuid for d in start.devices]}): check those uuids against "
            "nvidia-smi -L"
        )
    cuda: Any = torch.cuda  # torch.cuda.init is untyped
    cuda.init()  # fail at start, not at the first Open
    devices = [CudaDevice(d.index, ordinal) for ordinal, d in enumerate(start.devices)]

    def memory() -> list[h.DeviceMemory]:
        return [h.DeviceMemory(d.index, *d.memory_bytes()) for d in devices]

    return Runtime(devices, attach, memory)


class Holder:
    """Answers one request at a time with the tier's books."""

    def __init__(self, runtime: Runtime, memory_fraction: float) -> None:
        self._runtime = runtime
        self.tier = GpuTier(runtime.devices, memory_fraction, RealClock())

    def books_reply(self) -> h.BooksReply:
        return h.BooksReply(self.tier.books(), self._runtime.memory())

    def handle(self, message: h.ToHolder) -> h.FromHolder:
        if isinstance(message, h.Open):
            return self.open(message)
        if isinstance(message, h.Close):
            self.tier.close(message.instance_id)
        elif isinstance(message, h.Reconcile):
            self.tier.reconcile(message.running)
        return self.books_reply()

    def open(self, request: h.Open) -> h.Opened | h.OpenRefused:
        device, key = request.device_index, request.model_key
        known = sorted(d.index for d in self._runtime.devices)
        if device not in known:
            reason = f"GPU {device} is not in this holder's tier (devices: {known})"
            return h.OpenRefused(reason, self.tier.books())
        try:
            _, size_bytes = plan_layout((t.name, t.dtype, t.shape) for t in request.tensors)
        except ValueError as exc:
            return h.OpenRefused(str(exc), self.tier.books())
        if size_bytes == 0:
            reason = f"model {key} has no bytes to place on a device (no tensors, or all empty)"
            return h.OpenRefused(reason, self.tier.books())
        hit = self.tier.cached(device, key)
        started = perf_s()
        try:
            shared = self.tier.open(
                request.instance_id,
                device,
                key,
                size_bytes,
                lambda: self._runtime.load_host(request.tensors),
            )
        except GpuTierFull as exc:
            return h.OpenRefused(str(exc), self.tier.books())
        except Exception as exc:  # the upload failed (out of memory, store file gone, ...)
            traceback.print_exc(file=sys.stderr)
            failure = f"{type(exc).__name__}: {exc}"
            reason = f"model {key} could not be uploaded to GPU {device}: {failure}"
            return h.OpenRefused(reason, self.tier.books())
        upload_ms = 0.0 if hit else (perf_s() - started) * 1000.0
        return h.Opened(shared, hit, upload_ms, self.tier.books())


def serve(sock: socket.socket) -> None:
    """Hold the tier for the gateway on `sock` until `Stop` or EOF; free everything then."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the gateway owns shutdown
    channel: BlockingChannel[h.ToHolder, h.FromHolder] = BlockingChannel(
        sock, h.decode_to_holder, h.encode_frame
    )
    start = channel.receive()
    if not isinstance(start, h.HolderStart):
        return
    try:
        runtime = cuda_runtime(start) if start.runtime == "cuda" else fake_runtime(start)
        holder = Holder(runtime, start.memory_fraction)
    except Exception as exc:  # reported to the gateway, which says why the tier is down
        traceback.print_exc(file=sys.stderr)
        channel.send(h.HolderFailed(f"{type(exc).__name__}: {exc}"))
        return
    try:
        channel.send(h.HolderReady(os.getpid(), holder.tier.books(), runtime.memory()))
        while True:
            message = channel.receive()
            if message is None or isinstance(message, h.Stop):
                return
            channel.send(holder.handle(message))
    finally:
        holder.tier.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="infless GPU tier holder (started by the gateway)")
    parser.add_argument("--fd", type=int, required=True, help="inherited socket file descriptor")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="holder %(levelname)s %(message)s")
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
