"""Shared pieces of the benchmarks: start a gateway subprocess, drive it closed-loop, percentiles.

Everything targets 127.0.0.1 and is bounded in requests and seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import psutil

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCH_MODELS = REPO_ROOT / "state" / "bench-models"


@dataclass
class RunStats:
    requests: int
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float
    gateway_cpu_s: float = 0.0

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def gateway_cpu_us_per_request(self) -> float:
        return self.gateway_cpu_s / max(1, self.requests) * 1e6


def percentile_ms(latencies_s: list[float], q: float) -> float:
    return float(np.percentile(np.array(latencies_s) * 1000.0, q)) if latencies_s else 0.0


@dataclass
class Gateway:
    url: str
    process: subprocess.Popen[str]

    def cpu_seconds(self) -> float:
        times = psutil.Process(self.process.pid).cpu_times()
        return float(times.user + times.system)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            return json.loads(response.read())

    def wait_ready(self, function: str, count: int = 1, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ready = [
                i
                for i in self.get("/system/instances")
                if i["function"] == function and i["state"] == "ready"
            ]
            if len(ready) >= count:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{function} not ready after {timeout_s} s")


def build_models(*names: str) -> None:
    """Build (or find already built) the zoo packages a benchmark deploys."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "infless.cli",
            "models",
            "build",
            *names,
            "--repository",
            str(BENCH_MODELS),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )


@contextlib.contextmanager
def gateway(
    workdir: Path,
    functions_toml: str,
    extra_toml: str = "",
    log_level: str = "WARNING",
    gateway_toml: str = "",
) -> Iterator[Gateway]:
    """`infless serve` on 127.0.0.1, any port; `gateway_toml`: more keys of `[gateway]`."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "config.toml"
    config.write_text(
        f'[gateway]\nhost = "127.0.0.1"\nport = 0\n{gateway_toml}\n'
        f'[state]\ndir = "{workdir / "state"}"\n'
        f'[models]\nrepository = "{BENCH_MODELS}"\n{extra_toml}\n{functions_toml}',
        encoding="utf-8",
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "infless.cli",
            "serve",
            "--config",
            str(config),
            "--log-level",
            log_level,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        match = re.search(r"(http://[0-9.]+:[0-9]+)", process.stdout.readline())
        if match is None:
            raise RuntimeError("gateway did not start")
        yield Gateway(match.group(1), process)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def closed_loop(
    url: str,
    body: bytes,
    concurrency: int,
    duration_s: float,
    max_requests: int = 200_000,
    content_type: str = "application/json",
) -> tuple[list[float], int, float]:
    """`concurrency` clients each sending back-to-back for `duration_s`; (latencies, errors, s)."""
    latencies: list[float] = []
    errors = 0
    sent = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    headers = {"Content-Type": content_type}
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        stop_at = started + duration_s

        async def client() -> None:
            nonlocal errors, sent
            while time.perf_counter() < stop_at and sent < max_requests:
                sent += 1
                t0 = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    if response.status == 200:
                        latencies.append(time.perf_counter() - t0)
                    else:
                        errors += 1

        await asyncio.gather(*(client() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return latencies, errors, elapsed


def drive(
    gw: Gateway,
    function: str,
    body: bytes,
    concurrency: int,
    duration_s: float,
    content_type: str = "application/json",
) -> RunStats:
    cpu_before = gw.cpu_seconds()
    url = f"{gw.url}/function/{function}"
    latencies, errors, elapsed = asyncio.run(
        closed_loop(url, body, concurrency, duration_s, content_type=content_type)
    )
    cpu = gw.cpu_seconds() - cpu_before
    return RunStats(
        len(latencies),
        errors,
        elapsed,
        percentile_ms(latencies, 50),
        percentile_ms(latencies, 99),
        cpu,
    )
