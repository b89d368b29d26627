"""The blocking steps of `cluster.mps`: run the MPS control program (as a client, or with
`-d` to start a daemon), read the end of a daemon's log, end what is left of a daemon.

Every call here blocks and is meant for a worker thread (`asyncio.to_thread`); each is
bounded by a timeout. A daemon's processes are found by the mark `cluster.mps` put in its
environment, so only what infless started is ever ended (by pid), never a daemon it adopted.

Shell side: subprocesses, /proc (psutil), files; bounded waits in the calling thread
(`clock.pause_s`, never on the event loop). Never imports torch.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from infless.clock import pause_s, perf_s

PROBE_S = 5.0  # one client command to the control program
END_GRACE_S = 2.0  # a daemon's process is given this to exit, then this after SIGTERM
WAIT_POLL_S = 0.02  # how often a process being ended is looked at
LOG_TAIL_LINES = 5
CONTROL_LOG = "control.log"  # the daemon's log in CUDA_MPS_LOG_DIRECTORY
START_OUTPUT = "infless-start.out"  # what `<control> -d` printed, beside it


@dataclass(frozen=True, slots=True)
class ControlCommand:
    """One command to a daemon through its control program (`echo command | program`)."""

    program: str
    env: Mapping[str, str]
    command: str  # "get_server_list", "quit", ...
    timeout_s: float


@dataclass(frozen=True, slots=True)
class ControlAnswer:
    ok: bool  # exited 0: a daemon answered on the env's pipe directory
    output: str


def base_env(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without any MPS setting of its own, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(extra)
    return env


def run_command(command: ControlCommand) -> ControlAnswer:
    """Send one command; not ok when no daemon answers, the program hangs or cannot run."""
    try:
        done = subprocess.run(
            [command.program],
            input=f"{command.command}\n",
            capture_output=True,
            text=True,
            env=dict(command.env),
            timeout=command.timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:  # run() has killed the client already
        return ControlAnswer(ok=False, output=f"no answer within {command.timeout_s:g} s")
    except OSError as exc:
        return ControlAnswer(ok=False, output=str(exc))
    return ControlAnswer(ok=done.returncode == 0, output=(done.stdout + done.stderr).strip())


def launch(program: str, env: Mapping[str, str], log_dir: Path, timeout_s: float) -> str:
    """`<program> -d`: "" once it daemonised (exited 0), else what went wrong.

    Its output goes to a file, not a pipe: a daemon that kept the pipe open would hold
    this call until its timeout.
    """
    argv = [program, "-d"]
    output = log_dir / START_OUTPUT
    try:
        with output.open("w") as sink:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=dict(env),
                timeout=timeout_s,
                start_new_session=True,  # the terminal's Ctrl-C is the gateway's, not its
                check=False,
            )
    except subprocess.TimeoutExpired:
        return f"`{' '.join(argv)}` did not return within {timeout_s:g} s"
    except OSError as exc:
        return f"`{' '.join(argv)}` could not run: {exc}"
    if done.returncode != 0:
        printed = _read(output).strip().replace("\n", " | ")
        return f"`{' '.join(argv)}` exited with {done.returncode}" + (
            f": {printed}" if printed else ""
        )
    return ""


def log_tail(log_dir: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of the daemon's log, on one line ("" when it wrote none)."""
    text = _read(log_dir / CONTROL_LOG)
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def processes_with(env_name: str, mark: str) -> list[psutil.Process]:
    """Every process (but this one) whose environment has `env_name = mark`."""
    found = []
    me = os.getpid()
    for process in psutil.process_iter():
        if process.pid == me:
            continue
        try:
            environ = process.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # gone, or another user's: not ours
        if environ.get(env_name) == mark:
            found.append(process)
    return found


def end_processes(mark: str, env_name: str, grace_s: float = END_GRACE_S) -> list[int]:
    """End every process carrying the mark: `grace_s` to exit on its own, then SIGTERM, then
    SIGKILL, each waited for (bounded). The pids found (none: nothing was left)."""
    found = processes_with(env_name, mark)
    if not found:
        return []
    alive = _wait(found, grace_s) if grace_s > 0 else found
    for signal_them in (psutil.Process.terminate, psutil.Process.kill):
        for process in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                signal_them(process)
        alive = _wait(alive, END_GRACE_S)
    return [process.pid for process in found]


def _wait(processes: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Those still running after up to `timeout_s`. A zombie has ended: the daemon is not
    our child, and its reaper (init) may take its time."""
    deadline_s = perf_s() + timeout_s
    running = processes
    while True:
        running = [p for p in running if not _ended(p)]
        if not running or perf_s() >= deadline_s:
            return running
        pause_s(WAIT_POLL_S)


def _ended(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
