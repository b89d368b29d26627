"""MPS, owned by the platform (DESIGN §5a): one MPS control daemon per GPU, started or
adopted at startup and stopped at shutdown, and each GPU's sharing mode as the result.

For each device of the inventory `MpsControl.start()` decides how its instances share it:
under MPS (each GPU worker a client of the device's daemon at its share,
`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`), or time-sliced, with the precise reason (`[gpu] mps
= off`, MIG, no control program, fake devices, a daemon that never answered). A device's
daemon has its own pipe and log directories, `<root>/mps/<uuid>/pipe` and `.../log`; it is
started as `<mps_control> -d` with `CUDA_VISIBLE_DEVICES=<uuid>`, and it is ready when
`get_server_list` sent to `<mps_control>` on that pipe directory exits 0. A daemon that
already answers there is adopted: used, never stopped. `stop()` sends `quit` to the daemons
this object started and waits until they stop answering; whatever is left of them (the
daemon and its MPS servers carry a mark in their environment, `INFLESS_MPS_DAEMON`) is
ended by pid, so no daemon outlives `stop()` or a failed `start()`. `mps = "on"` makes a
device that cannot run MPS an error (`MpsUnavailable`) instead of a time-sliced GPU.

Shell side: runs the control program (subprocesses, in threads off the event loop), reads
its log; time through the injected `Clock`. Never imports torch.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from infless.clock import Clock
from infless.cluster import mps_process as proc
from infless.cluster.config import GpuConfig
from infless.cluster.gpus import GpuDevice, GpuInventory

log = logging.getLogger(__name__)

DEFAULT_CONTROL = GpuConfig().mps_control  # the NVIDIA driver's program
MARK_ENV = "INFLESS_MPS_DAEMON"
SOCKET_PATH_MAX_BYTES = 107  # a unix socket path, less its NUL (sun_path is 108 bytes)
LONGEST_PIPE_ENTRY = "control_privileged"  # the longest socket name the daemon creates there
POLL_FIRST_S = 0.02  # readiness polls back off from this ...
POLL_MAX_S = 0.5  # ... to this


@dataclass(frozen=True, slots=True)
class GpuSharing:
    """How the instances of one GPU share it."""

    uuid: str
    index: int
    mode: Literal["mps", "time-sliced"]
    pipe_dir: str | None  # the daemon's pipe directory (clients set CUDA_MPS_PIPE_DIRECTORY)
    reason: str  # why time-sliced ("" under MPS), or what was adopted
    adopted: bool  # a daemon already answered on that pipe directory: not ours to stop

    def describe(self) -> dict[str, object]:
        """For `/system/servers` (camelCase)."""
        return {
            "uuid": self.uuid,
            "index": self.index,
            "mode": self.mode,
            "pipeDir": self.pipe_dir,
            "reason": self.reason,
            "adopted": self.adopted,
        }


class MpsUnavailable(Exception):
    """`[gpu] mps = "on"` and a GPU cannot run MPS (each such GPU and why, in the text)."""


def daemon_dirs(root: Path, uuid: str) -> tuple[Path, Path]:
    """The pipe and log directories of the daemon of GPU `uuid`."""
    base = root / "mps" / uuid
    return base / "pipe", base / "log"


def daemon_env(uuid: str, pipe_dir: Path, log_dir: Path) -> dict[str, str]:
    """What the daemon of GPU `uuid` (and any client of it) needs besides the environment."""
    return {
        "CUDA_VISIBLE_DEVICES": uuid,
        "CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir),
        "CUDA_MPS_LOG_DIRECTORY": str(log_dir),
    }


def resolve_control(program: str) -> str | None:
    """The control program's path: `program` as a path, or found on PATH; None if neither."""
    return shutil.which(program)


def time_sliced_reason(
    cfg: GpuConfig, fake: bool, device: GpuDevice, control: str | None, pipe_dir: Path
) -> str:
    """Why `device` is shared time-sliced before any daemon is tried; "" if MPS may run.

    `control` is the resolved control program (None: not found). Pure.
    """
    return (
        _config_reason(cfg, fake)
        or _device_reason(device)
        or _control_reason(cfg.mps_control, control)
        or _pipe_reason(pipe_dir)
    )


def _config_reason(cfg: GpuConfig, fake: bool) -> str:
    if cfg.mps == "off":
        return "[gpu] mps = off"
    if fake and Path(cfg.mps_control).name == DEFAULT_CONTROL:
        return (
            "fake devices: no MPS daemon (point [gpu] mps_control at a program that acts "
            "as one to try MPS on them)"
        )
    return ""


def _device_reason(device: GpuDevice) -> str:
    gpu = f"GPU {device.index} ({device.uuid})"
    if device.mig_enabled:
        return (
            f"MIG is enabled on {gpu}: MPS here needs the whole device "
            f"(`nvidia-smi -i {device.index} -mig 0` turns MIG off)"
        )
    if device.compute_mode == "prohibited":
        return (
            f"{gpu} is in the prohibited compute mode: no process may compute on it "
            f"(`nvidia-smi -i {device.index} -c DEFAULT`)"
        )
    return ""


def _control_reason(configured: str, control: str | None) -> str:
    if control is not None:
        return ""
    if os.sep in configured:
        return (
            f"[gpu] mps_control = {configured!r} is not an executable file: set it to the "
            "MPS control program's path"
        )
    return (
        f"[gpu] mps_control = {configured!r} is not on PATH: install the NVIDIA driver's "
        "MPS tools, or set mps_control to the program's full path"
    )


def _pipe_reason(pipe_dir: Path) -> str:
    longest = len(os.fsencode(pipe_dir / LONGEST_PIPE_ENTRY))
    if longest > SOCKET_PATH_MAX_BYTES:
        return (
            f"the MPS pipe directory {pipe_dir} is too long for the daemon's unix sockets "
            f"({longest} > {SOCKET_PATH_MAX_BYTES} bytes): give MPS a shorter root directory"
        )
    return ""


def _with_compute_mode(device: GpuDevice, reason: str) -> str:
    if device.compute_mode == "exclusive-process":  # time-slicing is not even possible there
        return (
            f"{reason}; GPU {device.index} is in the exclusive-process compute mode, so only "
            "one process at a time can use it without MPS"
        )
    return reason


@dataclass(frozen=True, slots=True)
class _Daemon:
    """A daemon this object started: how to reach it, and the mark its processes carry."""

    device: GpuDevice
    pipe_dir: Path
    log_dir: Path
    client_env: Mapping[str, str]
    mark: str  # in the environment of the daemon and its servers: how they are found


class MpsControl:
    """The MPS daemons of one server's GPUs: `start()` them, ask each GPU's `sharing()`,
    `stop()` the ones it started."""

    def __init__(self, cfg: GpuConfig, inventory: GpuInventory, root: Path, clock: Clock) -> None:
        self._cfg = cfg
        self._inventory = inventory
        self._root = root
        self._clock = clock
        self._control = resolve_control(cfg.mps_control)
        self._shares: dict[str, GpuSharing] = {}
        self._started: dict[str, _Daemon] = {}  # by uuid: what stop() must end

    async def start(self) -> list[GpuSharing]:
        """Each GPU's sharing: its daemon adopted, or started and answering, else time-sliced
        with the reason. With `mps = "on"` any GPU without MPS raises `MpsUnavailable`, and
        the daemons started meanwhile are stopped first."""
        if self._shares:
            return self.all()
        try:
            # every device runs to its end, so none is left starting behind a failed one
            outcomes = await asyncio.gather(
                *map(self._start_device, self._inventory.devices), return_exceptions=True
            )
        except BaseException:  # cancelled: end what came up so far
            await self.stop()
            raise
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        if failed:
            await self.stop()
            raise failed[0]
        shares = [o for o in outcomes if isinstance(o, GpuSharing)]
        if self._cfg.mps == "on":
            missing = [s for s in shares if s.mode != "mps"]
            if missing:
                await self.stop()
                raise MpsUnavailable(
                    "[gpu] mps = on, but "
                    + "; ".join(
                        f"GPU {s.index} ({s.uuid}) cannot run MPS: {s.reason}" for s in missing
                    )
                    + '. Fix that, or set [gpu] mps = "auto" to share such GPUs time-sliced'
                )
        self._shares = {s.uuid: s for s in shares}
        for share in shares:
            why = f" ({share.reason})" if share.reason else ""
            log.info("GPU %d (%s): %s%s", share.index, share.uuid, share.mode, why)
        return shares

    def sharing(self, uuid: str) -> GpuSharing:
        share = self._shares.get(uuid)
        if share is None:
            known = ", ".join(self._shares) or "none: MpsControl.start() has not run"
            raise LookupError(f"GPU uuid {uuid!r} has no sharing mode here (known: {known})")
        return share

    def all(self) -> list[GpuSharing]:
        """Every GPU's sharing, in the inventory's order."""
        return [self._shares[d.uuid] for d in self._inventory.devices if d.uuid in self._shares]

    async def stop(self) -> None:
        """`quit` to each daemon this object started (never an adopted one), then wait until
        it stops answering (bounded); what is left of it is ended. Idempotent."""
        daemons, self._started = list(self._started.values()), {}
        await asyncio.gather(*map(self._stop_daemon, daemons))

    # -- one device

    async def _start_device(self, device: GpuDevice) -> GpuSharing:
        pipe_dir, log_dir = daemon_dirs(self._root, device.uuid)
        fake = self._inventory.source == "fake"
        reason = time_sliced_reason(self._cfg, fake, device, self._control, pipe_dir)
        if reason or self._control is None:
            return self._time_sliced(device, reason)
        client_env = proc.base_env(daemon_env(device.uuid, pipe_dir, log_dir))
        try:
            pipe_dir.mkdir(parents=True, exist_ok=True)
            log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return self._time_sliced(device, f"cannot make the MPS directories: {exc}")
        if await self._answers(client_env):
            return GpuSharing(
                device.uuid,
                device.index,
                "mps",
                str(pipe_dir),
                f"adopted: an MPS control daemon already answered on {pipe_dir}; infless "
                "will not stop it",
                adopted=True,
            )
        daemon = _Daemon(device, pipe_dir, log_dir, client_env, secrets.token_hex(8))
        self._started[device.uuid] = daemon  # from here on, stop() ends whatever came up
        failure = await self._launch(daemon)
        launched = not failure
        if launched and not await self._until_ready(daemon):
            failure = (
                f"the MPS control daemon did not answer on {pipe_dir} within "
                f"{self._cfg.mps_timeout_s:g} s (gpu.mps_timeout_s)"
            )
        if failure:
            self._started.pop(device.uuid, None)
            # `-d` failed: whatever answers there now is not ours to quit
            await self._stop_daemon(daemon, send_quit=launched)
            tail = await asyncio.to_thread(proc.log_tail, log_dir)
            return self._time_sliced(
                device, f"{failure}; its log ends: {tail}" if tail else failure
            )
        return GpuSharing(device.uuid, device.index, "mps", str(pipe_dir), "", adopted=False)

    def _time_sliced(self, device: GpuDevice, reason: str) -> GpuSharing:
        reason = _with_compute_mode(device, reason)
        return GpuSharing(device.uuid, device.index, "time-sliced", None, reason, adopted=False)

    async def _launch(self, daemon: _Daemon) -> str:
        """`<control> -d` for this daemon; "" when it daemonised, else what went wrong."""
        assert self._control is not None
        env = {**daemon.client_env, MARK_ENV: daemon.mark}
        return await asyncio.to_thread(
            proc.launch, self._control, env, daemon.log_dir, self._cfg.mps_timeout_s
        )

    async def _answers(self, env: Mapping[str, str], timeout_s: float = proc.PROBE_S) -> bool:
        assert self._control is not None
        command = proc.ControlCommand(self._control, env, "get_server_list", timeout_s)
        return (await asyncio.to_thread(proc.run_command, command)).ok

    async def _until_ready(self, daemon: _Daemon) -> bool:
        return await self._poll(daemon, want_answer=True)

    async def _poll(self, daemon: _Daemon, *, want_answer: bool) -> bool:
        """Until the daemon answers (or, `want_answer` False, stops answering), with backoff,
        for at most `mps_timeout_s`; whether it came to that."""
        deadline_s = self._clock.now() + self._cfg.mps_timeout_s
        delay_s = POLL_FIRST_S
        while True:
            left_s = deadline_s - self._clock.now()
            probe_s = max(POLL_MAX_S, min(proc.PROBE_S, left_s))
            if await self._answers(daemon.client_env, probe_s) == want_answer:
                return True
            if self._clock.now() >= deadline_s:
                return False
            await self._clock.sleep_until(min(self._clock.now() + delay_s, deadline_s))
            delay_s = min(delay_s * 2, POLL_MAX_S)

    async def _stop_daemon(self, daemon: _Daemon, *, send_quit: bool = True) -> None:
        assert self._control is not None
        quit_command = proc.ControlCommand(self._control, daemon.client_env, "quit", proc.PROBE_S)
        told = send_quit and (await asyncio.to_thread(proc.run_command, quit_command)).ok
        if told and not await self._poll(daemon, want_answer=False):
            log.warning(
                "GPU %s: the MPS daemon still answers %g s after quit; ending it",
                daemon.device.uuid,
                self._cfg.mps_timeout_s,
            )
        # a daemon told to quit exits after its last answer (its servers may linger): give
        # it a grace; one that never heard quit gets none. Then end what is left.
        grace_s = proc.END_GRACE_S if told else 0.0
        ended = await asyncio.to_thread(proc.end_processes, daemon.mark, MARK_ENV, grace_s)
        if ended:
            log.info("GPU %s: ended MPS processes %s", daemon.device.uuid, ended)
