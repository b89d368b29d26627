"""Turn an OpenFaaS FunctionDeployment (what faas-cli sends) into a FunctionSpec, and back.

INFless fields ride on OpenFaaS's maps: the SLO is annotation `com.infless.latency_target`
("100ms", "0.2s"), the maximum batch size label `com.infless.max.batch`, instance bounds the
`com.openfaas.scale.min/max` labels, cores per instance `requests.cpu` (or label
`com.infless.cpus`), the GPU share of an unplanned instance label `com.infless.gpu` ("30",
"30%"; "0": CPU only; absent: the server's default), the tenant label `com.infless.tenant`.
`envVars`, `secrets` and `limits.memory` are checked by `runtime_fields`. Errors name the
field, the value and the fix. Pure: no I/O, no clock (the creation time is passed in).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from infless.errors import InvalidDeployment
from infless.registry.runtime_fields import (
    check_env_vars,
    parse_memory_quantity,
    parse_secret_names,
)
from infless.types import FunctionSpec

LATENCY_ANNOTATION = "com.infless.latency_target"
MAX_BATCH_LABEL = "com.infless.max.batch"
CPUS_LABEL = "com.infless.cpus"
GPU_LABEL = "com.infless.gpu"
TENANT_LABEL = "com.infless.tenant"
SCALE_MIN_LABEL = "com.openfaas.scale.min"
SCALE_MAX_LABEL = "com.openfaas.scale.max"

DEFAULT_SLO_MS = 200.0
DEFAULT_MAX_BATCH = 8
DEFAULT_MAX_INSTANCES = 5
MAX_BATCH_LIMIT = 64
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|us)?\s*$")


def is_function_name(name: str) -> bool:
    """A DNS label: lowercase letters, digits and inner '-' (the length is the caller's)."""
    return _NAME.match(name) is not None


def parse_duration_ms(text: str, field: str) -> float:
    """'100ms', '0.2s', '250' (milliseconds) -> milliseconds."""
    match = _DURATION.match(text)
    if match is None:
        raise InvalidDeployment(f"{field} = {text!r}: expected a duration like '50ms' or '0.2s'")
    value = float(match.group(1))
    unit = match.group(2) or "ms"
    ms = value * {"ms": 1.0, "s": 1000.0, "us": 0.001}[unit]
    if not 0 < ms <= 600_000:
        raise InvalidDeployment(f"{field} = {text!r}: must be between 0 and 600 s")
    return ms


def _int_field(value: str, field: str, low: int, high: int) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise InvalidDeployment(f"{field} = {value!r}: expected an integer") from None
    if not low <= number <= high:
        raise InvalidDeployment(f"{field} = {number}: must be between {low} and {high}")
    return number


def _cpus(text: str, field: str) -> int:
    """Kubernetes CPU quantity ('2', '500m', '1.5') -> whole cores, at least 1."""
    text = str(text).strip()
    try:
        cores = float(text[:-1]) / 1000.0 if text.endswith("m") else float(text)
    except ValueError:
        raise InvalidDeployment(f"{field} = {text!r}: expected cores like '1' or '500m'") from None
    if cores <= 0:
        raise InvalidDeployment(f"{field} = {text!r}: must be positive")
    return max(1, math.ceil(cores))


def _string_map(body: Mapping[str, Any], key: str) -> dict[str, str]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidDeployment(f"{key}: expected an object of strings, got {type(value).__name__}")
    return {str(k): v if isinstance(v, str) else _stringify(v) for k, v in value.items()}


def _stringify(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_deployment(body: object, created_at: str) -> FunctionSpec:
    if not isinstance(body, dict):
        raise InvalidDeployment("the body must be a JSON object (an OpenFaaS FunctionDeployment)")
    name = body.get("service")
    if not isinstance(name, str) or not name:
        raise InvalidDeployment("service: is required (the function name)")
    if not is_function_name(name) or len(name) > 63:
        raise InvalidDeployment(
            f"service = {name!r}: must be a DNS label (lowercase letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters)"
        )
    image = body.get("image")
    if not isinstance(image, str) or not image.strip():
        raise InvalidDeployment("image: is required (a zoo model name or a package path)")
    labels = _string_map(body, "labels")
    annotations = _string_map(body, "annotations")
    env_vars = check_env_vars(_string_map(body, "envVars"))
    secrets = parse_secret_names(body.get("secrets"))
    limits = _resources(body, "limits")
    memory_limit = None
    if limits.get("memory"):
        memory_limit = parse_memory_quantity(limits["memory"], "limits.memory")
    slo_text = annotations.get(LATENCY_ANNOTATION) or labels.get(LATENCY_ANNOTATION)
    slo_ms = (
        DEFAULT_SLO_MS
        if slo_text is None
        else parse_duration_ms(slo_text, f"annotations.{LATENCY_ANNOTATION}")
    )
    max_batch = DEFAULT_MAX_BATCH
    if MAX_BATCH_LABEL in labels:
        max_batch = _int_field(
            labels[MAX_BATCH_LABEL], f"labels.{MAX_BATCH_LABEL}", 1, MAX_BATCH_LIMIT
        )
    min_instances = 1
    if SCALE_MIN_LABEL in labels:
        min_instances = _int_field(labels[SCALE_MIN_LABEL], f"labels.{SCALE_MIN_LABEL}", 0, 1000)
    max_instances = max(DEFAULT_MAX_INSTANCES, min_instances)
    if SCALE_MAX_LABEL in labels:
        max_instances = _int_field(labels[SCALE_MAX_LABEL], f"labels.{SCALE_MAX_LABEL}", 1, 1000)
    if max_instances < min_instances:
        raise InvalidDeployment(
            f"labels.{SCALE_MAX_LABEL} = {max_instances} is below "
            f"labels.{SCALE_MIN_LABEL} = {min_instances}"
        )
    cpus, gpu_pct = _resources_per_instance(body, labels)
    namespace = body.get("namespace") or "openfaas-fn"
    if not isinstance(namespace, str):
        raise InvalidDeployment("namespace: expected a string")
    env_process = body.get("envProcess") or ""
    return FunctionSpec(
        name=name,
        image=image.strip(),
        slo_ms=slo_ms,
        max_batch=max_batch,
        min_instances=min_instances,
        max_instances=max_instances,
        instances=min_instances,
        cpus_per_instance=cpus,
        namespace=namespace,
        labels=labels,
        annotations=annotations,
        env_vars=env_vars,
        env_process=str(env_process),
        created_at=created_at,
        tenant=labels.get(TENANT_LABEL, "default"),
        secrets=secrets,
        limits=limits,
        memory_limit_bytes=memory_limit,
        gpu_pct=gpu_pct,
    )


def _resources_per_instance(
    body: Mapping[str, Any], labels: Mapping[str, str]
) -> tuple[int, int | None]:
    """An instance's cores (`requests.cpu`, else label `com.infless.cpus`; 1) and GPU share
    (label `com.infless.gpu`, percent; None: the server's default)."""
    cpus = 1
    requests = _resources(body, "requests")
    if requests.get("cpu"):
        cpus = _cpus(requests["cpu"], "requests.cpu")
    if CPUS_LABEL in labels:
        cpus = _int_field(labels[CPUS_LABEL], f"labels.{CPUS_LABEL}", 1, 256)
    gpu_pct = None
    if GPU_LABEL in labels:
        share = labels[GPU_LABEL].strip().removesuffix("%")
        gpu_pct = _int_field(share, f"labels.{GPU_LABEL}", 0, 100)
    return cpus, gpu_pct


def _resources(body: Mapping[str, Any], key: str) -> dict[str, str]:
    """`requests` / `limits` (FunctionResources: `memory`, `cpu`) as strings; null means {}."""
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidDeployment(
            f'{key}: expected an object like {{"memory": "128Mi", "cpu": "1"}}, '
            f"got {type(value).__name__}"
        )
    return {str(k): _stringify(v) for k, v in value.items() if v not in (None, "")}


def spec_to_deployment(spec: FunctionSpec) -> dict[str, object]:
    """The FunctionDeployment that would recreate `spec` (used by the CLI and config)."""
    labels = dict(spec.labels)
    labels.setdefault(MAX_BATCH_LABEL, str(spec.max_batch))
    labels.setdefault(SCALE_MIN_LABEL, str(spec.min_instances))
    labels.setdefault(SCALE_MAX_LABEL, str(spec.max_instances))
    if spec.tenant != "default":
        labels.setdefault(TENANT_LABEL, spec.tenant)
    if spec.gpu_pct is not None:
        labels.setdefault(GPU_LABEL, str(spec.gpu_pct))
    annotations = dict(spec.annotations)
    annotations.setdefault(LATENCY_ANNOTATION, f"{spec.slo_ms:g}ms")
    return {
        "service": spec.name,
        "image": spec.image,
        "namespace": spec.namespace,
        "labels": labels,
        "annotations": annotations,
        "envVars": dict(spec.env_vars),
        "secrets": list(spec.secrets),
        "limits": dict(spec.limits),
        "requests": {"cpu": str(spec.cpus_per_instance)},
    }
