"""Configuration: `config.toml` loaded and validated once into one frozen `Config`.

Each package owns its section (a leaf `config` module: the struct and a `check_*` that
lists problems as sentences); this module only aggregates them with the sections of its
own (state, models, functions) and loads the file. It imports nothing but those leaf
modules and `errors` (the layering contracts in pyproject.toml hold it to that).
Unknown keys are errors (they are usually typos); every error names the key, the value and
the file. Nothing here reads the environment: the CLI passes overrides explicitly.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import msgspec

from infless.cluster.config import GpuConfig, check_gpu
from infless.coldstart.config import ColdStartConfig, check_coldstart
from infless.dataplane.config import BatchingConfig, check_batching
from infless.errors import ConfigError
from infless.gateway.config import AuthConfig, GatewayConfig, UiConfig, check_gateway, check_ui
from infless.modelless.config import ModellessConfig, check_modelless
from infless.nodes.config import ClusterConfig, check_cluster
from infless.scaling.config import ScalingConfig, check_scaling
from infless.tenancy.config import IsolationConfig, check_isolation
from infless.transform.config import TransformConfig, check_transform
from infless.weights.config import StoreConfig, check_store
from infless.workers.config import WorkersConfig, check_workers


class StateConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    dir: str = "state"


class ModelsConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    repository: str = "state/models"


class FunctionConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: str
    image: str
    slo_ms: float = 200.0
    max_batch: int = 8
    instances: int = 1
    cpus: int = 1
    tenant: str = "default"
    gpu_pct: int | None = None  # GPU share of its unplanned instances (None: [gpu] default)


class Config(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    gateway: GatewayConfig = GatewayConfig()
    state: StateConfig = StateConfig()
    models: ModelsConfig = ModelsConfig()
    workers: WorkersConfig = WorkersConfig()
    batching: BatchingConfig = BatchingConfig()
    coldstart: ColdStartConfig = ColdStartConfig()
    store: StoreConfig = StoreConfig()
    scaling: ScalingConfig = ScalingConfig()
    modelless: ModellessConfig = ModellessConfig()
    transform: TransformConfig = TransformConfig()
    cluster: ClusterConfig = ClusterConfig()
    gpu: GpuConfig = GpuConfig()
    auth: AuthConfig = AuthConfig()
    ui: UiConfig = UiConfig()
    isolation: IsolationConfig = IsolationConfig()
    functions: list[FunctionConfig] = []

    @property
    def state_dir(self) -> Path:
        return Path(self.state.dir)

    @property
    def model_repository(self) -> Path:
        return Path(self.models.repository)


def _check(config: Config, source: str) -> Config:
    problems = [
        *check_gateway(config.gateway, config.auth),
        *check_workers(config.workers),
        *check_batching(config.batching),
        *check_store(config.store),
        *check_coldstart(config.coldstart),
        *check_scaling(config.scaling),
        *check_modelless(config.modelless),
        *check_transform(config.transform),
        *check_cluster(config.cluster),
        *check_gpu(config.gpu),
        *check_ui(config.ui),
        *check_isolation(config.isolation),
    ]
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
        if fn.gpu_pct is not None and not 0 <= fn.gpu_pct <= 100:
            problems.append(f"[[functions]] {fn.name!r}: gpu_pct = {fn.gpu_pct}: must be 0..100")
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
