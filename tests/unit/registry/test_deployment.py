"""FunctionDeployment parsing: INFless fields from labels/annotations, precise errors."""

from __future__ import annotations

import pytest

from infless.errors import InvalidDeployment
from infless.registry.deployment import parse_deployment, parse_duration_ms, spec_to_deployment

NOW = "2026-01-01T00:00:00Z"


def test_full_deployment_maps_infless_fields() -> None:
    spec = parse_deployment(
        {
            "service": "resnet-50",
            "image": "resnet-50",
            "annotations": {"com.infless.latency_target": "100ms"},
            "labels": {
                "com.infless.max.batch": "16",
                "com.openfaas.scale.min": "2",
                "com.openfaas.scale.max": "6",
                "com.infless.tenant": "acme",
                "flag": True,
            },
            "requests": {"cpu": "1500m"},
            "envVars": {"MODEL_NAME": "resnet-50"},
        },
        NOW,
    )
    assert spec.slo_ms == 100.0
    assert spec.max_batch == 16
    assert (spec.min_instances, spec.max_instances, spec.instances) == (2, 6, 2)
    assert spec.cpus_per_instance == 2
    assert spec.tenant == "acme"
    assert spec.labels["flag"] == "true"
    assert spec.created_at == NOW


def test_defaults_for_a_minimal_deployment() -> None:
    spec = parse_deployment({"service": "mnist", "image": "mnist"}, NOW)
    assert (spec.slo_ms, spec.max_batch, spec.instances, spec.cpus_per_instance) == (
        200.0,
        8,
        1,
        1,
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"image": "mnist"}, "service"),
        ({"service": "Bad_Name", "image": "mnist"}, "service"),
        ({"service": "ok"}, "image"),
        ({"service": "ok", "image": "m", "labels": {"com.infless.max.batch": "x"}}, "max.batch"),
        ({"service": "ok", "image": "m", "labels": {"com.infless.max.batch": "0"}}, "max.batch"),
        (
            {"service": "ok", "image": "m", "annotations": {"com.infless.latency_target": "fast"}},
            "latency_target",
        ),
        (
            {
                "service": "ok",
                "image": "m",
                "labels": {"com.openfaas.scale.min": "3", "com.openfaas.scale.max": "2"},
            },
            "scale.max",
        ),
        ({"service": "ok", "image": "m", "labels": ["a"]}, "labels"),
        ({"service": "ok", "image": "m", "requests": {"cpu": "lots"}}, "requests.cpu"),
    ],
)
def test_invalid_deployments_name_the_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidDeployment) as info:
        parse_deployment(body, NOW)
    assert field in str(info.value)


def test_non_object_body() -> None:
    with pytest.raises(InvalidDeployment, match="JSON object"):
        parse_deployment([1], NOW)


@pytest.mark.parametrize(("text", "ms"), [("100ms", 100.0), ("0.2s", 200.0), ("50", 50.0)])
def test_durations(text: str, ms: float) -> None:
    assert parse_duration_ms(text, "f") == ms


def test_spec_round_trips_through_a_deployment() -> None:
    spec = parse_deployment(
        {
            "service": "a",
            "image": "mnist",
            "labels": {"com.infless.max.batch": "4"},
            "annotations": {"com.infless.latency_target": "75ms"},
        },
        NOW,
    )
    again = parse_deployment(spec_to_deployment(spec), NOW)
    assert (again.slo_ms, again.max_batch, again.min_instances) == (75.0, 4, 1)


@pytest.mark.parametrize(("label", "share"), [("30", 30), ("30%", 30), (" 100 ", 100), ("0", 0)])
def test_the_gpu_share_label(label: str, share: int) -> None:
    body = {"service": "a", "image": "resnet-50", "labels": {"com.infless.gpu": label}}
    spec = parse_deployment(body, NOW)
    assert spec.gpu_pct == share
    assert parse_deployment(spec_to_deployment(spec), NOW).gpu_pct == share
    assert parse_deployment({"service": "a", "image": "m"}, NOW).gpu_pct is None  # default


@pytest.mark.parametrize("label", ["101", "-5", "half"])
def test_a_bad_gpu_share_names_the_label(label: str) -> None:
    body = {"service": "a", "image": "m", "labels": {"com.infless.gpu": label}}
    with pytest.raises(InvalidDeployment, match=r"com\.infless\.gpu"):
        parse_deployment(body, NOW)
