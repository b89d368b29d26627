"""The SQLite registry persists specs across connections (a gateway restart)."""

from __future__ import annotations

from pathlib import Path

from infless.registry.store import FunctionRegistry
from infless.types import FunctionSpec


def test_specs_survive_reopening_and_updates_replace(tmp_path: Path) -> None:
    path = tmp_path / "state" / "registry.sqlite"
    registry = FunctionRegistry(path)
    registry.put(
        FunctionSpec(
            name="a",
            image="mnist",
            slo_ms=50.0,
            max_batch=8,
            min_instances=1,
            max_instances=5,
            instances=1,
            labels={"k": "v"},
        )
    )
    registry.put(
        FunctionSpec(
            name="b",
            image="textcnn-69",
            slo_ms=50.0,
            max_batch=8,
            min_instances=1,
            max_instances=5,
            instances=2,
        )
    )
    registry.put(
        FunctionSpec(
            name="a",
            image="mnist",
            slo_ms=60.0,
            max_batch=4,
            min_instances=1,
            max_instances=5,
            instances=3,
        )
    )
    registry.close()

    reopened = FunctionRegistry(path)
    specs = {s.name: s for s in reopened.all()}
    assert set(specs) == {"a", "b"}
    assert (specs["a"].slo_ms, specs["a"].max_batch, specs["a"].instances) == (60.0, 4, 3)
    assert reopened.delete("b")
    assert not reopened.delete("b")
    assert reopened.get("b") is None
    reopened.close()
