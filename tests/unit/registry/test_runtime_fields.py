"""envVars, secrets and limits.memory of a deployment: parsed, checked, persisted, round-tripped."""

from __future__ import annotations

from pathlib import Path

import pytest

from infless.client.deploy_command import stack_to_deployments
from infless.errors import InvalidDeployment
from infless.registry.deployment import parse_deployment, spec_to_deployment
from infless.registry.runtime_fields import (
    MAX_ENV_BYTES,
    check_env_vars,
    parse_memory_quantity,
    parse_secret_names,
    reserved_env_reason,
)
from infless.registry.store import FunctionRegistry
from infless.types import WorkerRuntime

NOW = "2026-01-01T00:00:00Z"


def _deploy(**fields: object) -> dict[str, object]:
    return {"service": "fn", "image": "mnist", **fields}


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("128Mi", 128 * 2**20),
        ("1Gi", 2**30),
        ("0.5Gi", 2**29),
        ("500M", 500 * 10**6),
        ("1G", 10**9),
        ("20000k", 20_000_000),
        ("5e8", 5 * 10**8),
        ("268435456", 2**28),
        (" 64Mi ", 64 * 2**20),
        ("100.1Mi", 104_962_458),  # a fraction of a byte rounds up
    ],
)
def test_memory_quantities_are_kubernetes_quantities_in_bytes(text: str, size: int) -> None:
    assert parse_memory_quantity(text, "limits.memory") == size


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("128MB", "Kubernetes quantity"),
        ("128mi", "Kubernetes quantity"),
        ("1K", "Kubernetes quantity"),  # Kubernetes spells it k
        ("lots", "Kubernetes quantity"),
        ("-1Gi", "Kubernetes quantity"),
        ("500m", "Kubernetes quantity"),  # millibytes: not a memory size
        ("8Mi", "at least 16Mi"),
        ("1e30", "larger than any machine"),
    ],
)
def test_bad_memory_quantities_name_the_field_and_value(text: str, why: str) -> None:
    with pytest.raises(InvalidDeployment) as info:
        parse_memory_quantity(text, "limits.memory")
    message = str(info.value)
    assert message.startswith(f"limits.memory = {text!r}: ")
    assert why in message


@pytest.mark.parametrize(
    "name",
    [
        "PATH",
        "path",
        "PYTHONPATH",
        "PYTHONHOME",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "OMP_NUM_THREADS",
        "KMP_AFFINITY",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MALLOC_ARENA_MAX",
        "GLIBC_TUNABLES",
        "INFLESS_INSTANCE_ID",
        "infless_anything",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_MPS_PIPE_DIRECTORY",
    ],
)
def test_names_a_worker_depends_on_are_refused(name: str) -> None:
    assert reserved_env_reason(name) is not None
    with pytest.raises(InvalidDeployment) as info:
        parse_deployment(_deploy(envVars={"MODEL": "x", name: "/tmp"}), NOW)
    assert str(info.value).startswith(f"envVars.{name}: may not be set: ")


@pytest.mark.parametrize("name", ["", "1ABC", "A-B", "A B", "A=B"])
def test_malformed_env_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidDeployment, match="letters, digits and '_'"):
        check_env_vars({name: "x"})


def test_ordinary_env_vars_pass_and_size_and_nul_are_bounded() -> None:
    env = {"MODEL_NAME": "resnet", "write_debug": "true", "HOME": "/root", "_X": ""}
    assert check_env_vars(env) == env
    with pytest.raises(InvalidDeployment, match=r"envVars\.KEY: the value contains a NUL"):
        check_env_vars({"KEY": "a\0b"})
    with pytest.raises(InvalidDeployment, match=f"at most {MAX_ENV_BYTES}"):
        check_env_vars({"BIG": "x" * MAX_ENV_BYTES})


def test_secret_names_are_kubernetes_names_and_collapse_duplicates() -> None:
    assert parse_secret_names(None) == ()
    assert parse_secret_names(["db-password", "api.key", "db-password"]) == (
        "db-password",
        "api.key",
    )
    for bad, why in [
        ("Secret", "lowercase"),
        ("-x", "lowercase"),
        ("a/b", "lowercase"),
        ("..", "lowercase"),
        ("", "non-empty"),
        (7, "non-empty"),
    ]:
        with pytest.raises(InvalidDeployment) as info:
            parse_secret_names(["ok", bad])
        assert str(info.value).startswith(f"secrets[1] = {bad!r}: ")
        assert why in str(info.value)
    with pytest.raises(InvalidDeployment, match="secrets: expected a list"):
        parse_secret_names("db-password")
    with pytest.raises(InvalidDeployment, match="at most 64"):
        parse_secret_names([f"s{i}" for i in range(65)])


def test_a_deployment_carries_its_runtime_and_round_trips(tmp_path: Path) -> None:
    spec = parse_deployment(
        _deploy(
            envVars={"GREETING": "hi"},
            secrets=["db-password"],
            limits={"memory": "128Mi", "cpu": None},
            requests={"memory": "64Mi", "cpu": "2"},
        ),
        NOW,
    )
    assert spec.runtime == WorkerRuntime({"GREETING": "hi"}, ("db-password",), 128 * 2**20)
    assert spec.limits == {"memory": "128Mi"}
    assert spec.cpus_per_instance == 2
    again = parse_deployment(spec_to_deployment(spec), NOW)
    assert again.runtime == spec.runtime

    registry = FunctionRegistry(tmp_path / "registry.sqlite")
    registry.put(spec)
    assert registry.get("fn") == spec  # the tuple of secret names survives JSON
    registry.close()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"limits": {"memory": "lots"}}, "limits.memory = 'lots'"),
        ({"limits": "128Mi"}, "limits: expected an object"),
        ({"requests": ["1"]}, "requests: expected an object"),
        ({"secrets": "db"}, "secrets: expected a list"),
    ],
)
def test_bad_runtime_fields_name_the_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidDeployment) as info:
        parse_deployment(_deploy(**fields), NOW)
    assert field in str(info.value)


def test_a_stack_file_passes_environment_secrets_and_limits() -> None:
    stack = {
        "functions": {
            "fn": {
                "image": "mnist",
                "environment": {"DEBUG": True, "RETRIES": 3},
                "secrets": ["db-password"],
                "limits": {"memory": "256Mi"},
            }
        }
    }
    (deployment,) = stack_to_deployments(stack)
    assert deployment["envVars"] == {"DEBUG": "true", "RETRIES": "3"}
    assert deployment["secrets"] == ["db-password"]
    assert deployment["limits"] == {"memory": "256Mi"}
    spec = parse_deployment(deployment, NOW)
    assert spec.runtime == WorkerRuntime(
        {"DEBUG": "true", "RETRIES": "3"}, ("db-password",), 256 * 2**20
    )
