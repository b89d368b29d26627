"""The model-less metadata store (SQLite) and the registration's validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from infless.errors import InvalidDeployment
from infless.modelless.profiles import Goals
from infless.registry.registration import parse_registration
from infless.registry.variants import RegisteredModel, VariantStore
from tests.unit.modelless.support import three_variants


def test_models_variants_and_apps_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "registry.sqlite"
    store = VariantStore(path)
    store.put_model(RegisteredModel("m", "textcnn-69", 50.0, 16))
    store.put_variants("m", three_variants())
    store.put_app("m", "chat", Goals(20.0, 0.99, 1.0))
    store.put_model(RegisteredModel("m", "textcnn-69", 50.0, 16, status="ready"))
    store.close()
    again = VariantStore(path)
    assert again.model("m") == RegisteredModel("m", "textcnn-69", 50.0, 16, status="ready")
    assert [v.name for v in again.variants("m")] == ["fp32", "bf16", "int8"]
    assert again.variants("m")[2].latency_ms(8, 1) == pytest.approx(5.5)
    assert again.apps("m") == {"chat": Goals(20.0, 0.99, 1.0)}
    assert again.delete_model("m")
    assert again.model("m") is None
    assert again.variants("m") == []
    assert not again.delete_model("m")


def test_put_variants_replaces_the_previous_set(tmp_path: Path) -> None:
    store = VariantStore(tmp_path / "r.sqlite")
    store.put_variants("m", three_variants())
    store.put_variants("m", three_variants()[:1])
    assert [v.name for v in store.variants("m")] == ["fp32"]


GOOD = {"model": "tc", "image": "textcnn-69", "sloMs": 50, "validation": {"generate": 32}}


def test_a_good_registration_parses() -> None:
    reg = parse_registration({**GOOD, "apps": [{"id": "chat", "minAccuracy": 0.99}]})
    assert reg.model == "tc"
    assert reg.apps[0].goals() == Goals(None, 0.99, 1.0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model": "Bad_Name"}, "lowercase"),
        ({"model": "a--b"}, "lowercase"),
        ({"sloMs": 0}, "sloMs > 0"),
        ({"variants": ["fp16"]}, "unknown"),
        ({"validation": {}}, "either generate"),
        ({"validation": {"generate": 8, "filename": "v.npz", "data": ""}}, "either generate"),
        ({"validation": {"filename": "v.csv", "data": "AA=="}}, "expected .npz"),
        ({"apps": [{"id": "x", "minAccuracy": 2}]}, r"\[0, 1\]"),
        ({"extra": 1}, "registration"),
    ],
)
def test_bad_registrations_say_what_is_wrong(change: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidDeployment, match=message):
        parse_registration({**GOOD, **change})
