"""Configuration: one frozen struct per `config.toml` section, loaded and validated once.

Unknown keys are errors (they are usually typos); every error names the key, the value and
the file. Nothing here reads the environment: the CLI passes overrides explicitly.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

import msgspec

from infless.errors import ConfigError
from infless.scaling.config import ScalingConfig, check_scaling


class GatewayConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = 4 * 1024 * 1024
    request_timeout_s: float = 60.0


class StateConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    dir: str = "state"


class ModelsConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    repository: str = "state/models"


class WorkersConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    launcher: Literal["subprocess", "zygote"] = "zygote"
    # With the zygote and the store: fork a stored model's instances from a per-model
    # template that built, attached and warmed it once (shared pages; see workers.templates).
    templates: bool = True
    start_timeout_s: float = 180.0
    cpus_per_instance: int = 1
    reserved_cpus: int = 0
    cgroups: bool = True


class BatchingConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    dispatch: Literal["deadline", "adaptive", "eager"] = "adaptive"
    queue_capacity_batches: int = 4
    slack_ms: float = 2.0
    slack_fraction: float = 0.1
    warmup_rounds: int = 3


class StoreConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    enabled: bool = True
    root: str = ""
    capacity_bytes: int = 0
    keepalive_s: float = 600.0
    reclaim_interval_s: float = 5.0
    clear_on_shutdown: bool = True
    # Benchmark baseline (bench.memory): with enabled = false, each worker clones the
    # package's weights into private memory, as Triton/TorchServe replicas hold them.
    private_weights: bool = False

    def __post_init__(self) -> None:
        if self.enabled and self.private_weights:
            raise ValueError("store.private_weights = true needs store.enabled = false")


class ColdStartConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    policy: Literal["fixed", "hhp", "lsth"] = "lsth"
    params: dict[str, float | int] = {}
    tick_s: float = 1.0
    release_grace_s: float = 60.0
    scale_to_zero: bool = False


class AuthConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    basic_auth: bool = False  # basic auth on /system/* and /v2/repository/*
    user: str = "admin"
    password: str = ""  # empty: read password_file, or generate it on first start
    password_file: str = ""  # empty: <state.dir>/basic_auth_password
    invoke_token: str = ""  # non-empty: /function/* and /v2/models/* need this bearer token


class FunctionConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: str
    image: str
    slo_ms: float = 200.0
    max_batch: int = 8
    instances: int = 1
    cpus: int = 1
    tenant: str = "default"


class Config(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    gateway: GatewayConfig = GatewayConfig()
    state: StateConfig = StateConfig()
    models: ModelsConfig = ModelsConfig()
    workers: WorkersConfig = WorkersConfig()
    batching: BatchingConfig = BatchingConfig()
    coldstart: ColdStartConfig = ColdStartConfig()
    store: StoreConfig = StoreConfig()
    scaling: ScalingConfig = ScalingConfig()
    auth: AuthConfig = AuthConfig()
    functions: list[FunctionConfig] = []

    @property
    def state_dir(self) -> Path:
        return Path(self.state.dir)

    @property
    def model_repository(self) -> Path:
        return Path(self.models.repository)


def _auth_problems(auth: AuthConfig) -> list[str]:
    if auth.basic_auth and (not auth.user or ":" in auth.user):
        return [f"auth.user = {auth.user!r}: must be non-empty, without ':'"]
    return []


def _check(config: Config, source: str) -> Config:
    problems: list[str] = []
    if not 0 <= config.gateway.port <= 65535:
        problems.append(
            f"gateway.port = {config.gateway.port}: must be 0..65535 (0 = any free port)"
        )
    if config.gateway.max_body_bytes < 1024:
        problems.append(f"gateway.max_body_bytes = {config.gateway.max_body_bytes}: use >= 1024")
    if config.workers.cpus_per_instance < 1:
        problems.append("workers.cpus_per_instance must be >= 1")
    if config.batching.queue_capacity_batches < 1:
        problems.append("batching.queue_capacity_batches must be >= 1")
    if config.batching.slack_ms < 0 or not 0 <= config.batching.slack_fraction < 1:
        problems.append("batching.slack_ms must be >= 0 and batching.slack_fraction in [0, 1)")
    if config.store.capacity_bytes < 0 or config.store.keepalive_s < 0:
        problems.append("store.capacity_bytes and store.keepalive_s must be >= 0")
    if config.coldstart.tick_s <= 0 or config.coldstart.release_grace_s < 0:
        problems.append("coldstart.tick_s must be > 0 and coldstart.release_grace_s >= 0")
    try:
        from infless.coldstart.policies import build_policy

        build_policy(config.coldstart.policy, config.coldstart.params)
    except (ValueError, TypeError) as exc:
        problems.append(f"coldstart.params: {exc}")
    problems.extend(_auth_problems(config.auth))
    problems.extend(check_scaling(config.scaling))
    names = [f.name for f in config.functions]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        problems.append(f"[[functions]] names must be unique; repeated: {', '.join(duplicates)}")
    for fn in config.functions:
        if fn.slo_ms <= 0 or fn.max_batch < 1 or fn.instances < 0 or fn.cpus < 1:
            problems.append(
                f"[[functions]] {fn.name!r}: need slo_ms > 0, max_batch >= 1, instances >= 0, "
                "cpus >= 1"
            )
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
    return config


def parse_config(data: dict[str, Any], source: str = "<config>") -> Config:
    try:
        config = msgspec.convert(data, type=Config)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{source}: {exc}") from exc
    return _check(config, source)


def load_config(path: Path | None) -> Config:
    """Load `path` (or the defaults when None), with every value validated."""
    if path is None:
        return _check(Config(), "<defaults>")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    return parse_config(data, str(path))


def with_overrides(config: Config, **sections: dict[str, Any]) -> Config:
    """A copy of `config` with some keys of some sections replaced (CLI flags, tests)."""
    data = msgspec.to_builtins(config)
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    return parse_config(data, "<overrides>")
