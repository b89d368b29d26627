"""Value types shared across packages: tensor signatures, instance configs, function specs.

Pure data, no behaviour beyond validation helpers; never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# numpy dtype names accepted in signatures and on the wire.
SUPPORTED_DTYPES: frozenset[str] = frozenset(
    {"float32", "float16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"}
)


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One named tensor of a signature; `shape` excludes the batch dimension.

    A dimension of -1 means "any length" (variable-length inputs).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]

    def describe(self) -> str:
        dims = ", ".join("*" if d < 0 else str(d) for d in self.shape)
        return f"{self.name}: {self.dtype}[{dims}]"


@dataclass(frozen=True, slots=True)
class InstanceConfig:
    """The INFless per-instance configuration <batch size b, cpu cores c, gpu share g>."""

    batch_size: int
    cpus: int
    gpu_pct: int = 0


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    """A deployed function: a model endpoint with a latency SLO.

    `image` names a zoo model or a function package path. Labels and annotations are the
    OpenFaaS maps, kept verbatim (string to string) so faas-cli round-trips them; so are
    `limits` (`memory_limit_bytes` is `limits.memory` in bytes). `secrets` are names only.
    """

    name: str
    image: str
    slo_ms: float
    max_batch: int
    min_instances: int
    max_instances: int
    instances: int
    cpus_per_instance: int = 1
    namespace: str = "openfaas-fn"
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    env_vars: dict[str, str] = field(default_factory=dict)
    env_process: str = ""
    created_at: str = ""
    tenant: str = "default"
    secrets: tuple[str, ...] = ()
    limits: dict[str, str] = field(default_factory=dict)
    memory_limit_bytes: int | None = None
    # The GPU share (percent of one device) of the instances nobody sized (the first one,
    # or those scaled by hand) on a server with GPUs: None = the server's default
    # (`[gpu] default_pct`), 0 = CPU only. The planner sizes its own instances.
    gpu_pct: int | None = None

    @property
    def runtime(self) -> WorkerRuntime:
        return WorkerRuntime(dict(self.env_vars), self.secrets, self.memory_limit_bytes)


@dataclass(frozen=True, slots=True)
class WorkerRuntime:
    """What a function's workers get besides the model: environment variables (set before
    the package loads), the secrets mounted at /var/openfaas/secrets (names; the values stay
    in the secret store until a worker starts) and a memory limit in bytes (None: none)."""

    env: dict[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()
    memory_limit_bytes: int | None = None
