"""`SimConfig`: one simulation run's settings — the simulated world (servers, duration,
start time, seed, per-request or fluid mode) and, embedded, the server's own config
sections (`[batching]`, `[scaling]`, `[coldstart]`, `[modelless]`) with the server's
defaults, so a simulated policy runs with exactly the knobs `infless serve` would give it.

A TOML file for `infless simulate --config` holds `[sim]` (the world) and any of those
sections, as `config.toml` spells them. `check_sim` lists every problem as a sentence
naming the key, the value and the fix. Pure: no I/O beyond `load_sim_config`'s read.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

import msgspec

from infless.coldstart.config import ColdStartConfig, check_coldstart
from infless.dataplane.config import BatchingConfig, check_batching
from infless.modelless.config import ModellessConfig, check_modelless
from infless.scaling.config import ScalingConfig, check_scaling

Mode = Literal["request", "fluid"]


class SimConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    servers: int = 4
    cpus_per_server: int = 16
    gpus_per_server: int = 0
    # heterogeneous servers: (cores, GPUs) per server, cycled (empty: every server alike)
    server_shapes: tuple[tuple[int, int], ...] = ()
    duration_s: float = 60.0
    cold_start_s: float = 1.0  # from a start to its instance serving
    exec_jitter: float = 0.0  # each batch's time × U(1 − j, 1 + j) ("request" mode)
    seed: int = 1
    prewarm: bool = True  # plan for the t = 0 rates at t = 0, those instances ready at once
    # "request": one event per request and batch (latencies, tails); "fluid": arrivals as
    # counts per `step_s`, instances as rates (decisions at scale: `sim.fluid`)
    mode: Mode = "request"
    step_s: float = 0.1  # "fluid": the step arrivals are counted and served in
    # servers report an affinity of 1 for the functions whose model's tensors their store
    # holds (`ServerView.affinity`, weighed by `scaling.affinity_weight`); off: none
    store_affinity: bool = False
    # the server's own sections, with the server's defaults
    batching: BatchingConfig = BatchingConfig()
    scaling: ScalingConfig = ScalingConfig()
    coldstart: ColdStartConfig = ColdStartConfig()
    modelless: ModellessConfig = ModellessConfig()


def server_shape(cfg: SimConfig, k: int) -> tuple[int, int]:
    """(cores, GPUs) of server `k`."""
    shapes = cfg.server_shapes
    return shapes[k % len(shapes)] if shapes else (cfg.cpus_per_server, cfg.gpus_per_server)


def with_sections(
    cfg: SimConfig,
    scaling: ScalingConfig | None = None,
    modelless: ModellessConfig | None = None,
) -> SimConfig:
    """`cfg` with the sections given in place of its own (None: kept)."""
    if scaling is not None:
        cfg = msgspec.structs.replace(cfg, scaling=scaling)
    if modelless is not None:
        cfg = msgspec.structs.replace(cfg, modelless=modelless)
    return cfg


def check_sim(cfg: SimConfig) -> list[str]:
    """Every problem with `cfg` (the world's keys under `sim.`), one sentence each."""
    problems: list[str] = []
    if cfg.servers < 1 or cfg.cpus_per_server < 1 or cfg.gpus_per_server < 0:
        problems.append(
            f"sim.servers = {cfg.servers}, sim.cpus_per_server = {cfg.cpus_per_server}, "
            f"sim.gpus_per_server = {cfg.gpus_per_server}: need servers and cores >= 1, "
            "GPUs >= 0"
        )
    if any(cores < 1 or gpus < 0 for cores, gpus in cfg.server_shapes):
        problems.append(
            f"sim.server_shapes = {list(cfg.server_shapes)}: each is (cores >= 1, GPUs >= 0)"
        )
    if cfg.duration_s <= 0 or cfg.cold_start_s < 0:
        problems.append(
            f"sim.duration_s = {cfg.duration_s}, sim.cold_start_s = {cfg.cold_start_s}: the "
            "duration must be > 0 and the start time >= 0"
        )
    if not 0 <= cfg.exec_jitter < 1:
        problems.append(f"sim.exec_jitter = {cfg.exec_jitter}: must be in [0, 1) (e.g. 0.05)")
    if not 0 < cfg.step_s <= cfg.scaling.tick_s:
        problems.append(
            f"sim.step_s = {cfg.step_s}: must be > 0 and <= scaling.tick_s "
            f"({cfg.scaling.tick_s}), e.g. 0.1"
        )
    problems.extend(check_batching(cfg.batching))
    problems.extend(check_scaling(cfg.scaling))
    problems.extend(check_coldstart(cfg.coldstart))
    problems.extend(check_modelless(cfg.modelless))
    return problems


class _File(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A simulation's TOML file: `[sim]` and the server's sections beside it."""

    sim: dict[str, object] = {}
    batching: BatchingConfig = BatchingConfig()
    scaling: ScalingConfig = ScalingConfig()
    coldstart: ColdStartConfig = ColdStartConfig()
    modelless: ModellessConfig = ModellessConfig()


def load_sim_config(path: Path) -> SimConfig:
    """Read `path` (see the module docstring); ValueError naming every problem."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        parsed = msgspec.convert(data, _File)
        cfg = msgspec.convert(
            {
                **parsed.sim,
                "batching": parsed.batching,
                "scaling": parsed.scaling,
                "coldstart": parsed.coldstart,
                "modelless": parsed.modelless,
            },
            SimConfig,
            from_attributes=True,
        )
    except (tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    problems = check_sim(cfg)
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    return cfg
