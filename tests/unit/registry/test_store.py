"""The SQLite registry persists specs across connections (a gateway restart)."""

from __future__ import annotations

from pathlib import Path

from infless.registry.store import FunctionRegistry
from infless.types import FunctionSpec


def test_specs_survive_reopening_and_updates_replace(tmp_path: Path) -> None:
    path = tmp_path / "state" / "registry.sqlite"
    registry = FunctionRegistry(path)
    registry.put(FunctionSpec("a", "mnist", 50.0, 8, 1, 5, 1, labels={"k": "v"}))
    registry.put(FunctionSpec("b", "textcnn-69", 50.0, 8, 1, 5, 2))
    registry.put(FunctionSpec("a", "mnist", 60.0, 4, 1, 5, 3))
    registry.close()

    reopened = FunctionRegistry(path)
    specs = {s.name: s for s in reopened.all()}
    assert set(specs) == {"a", "b"}
    assert (specs["a"].slo_ms, specs["a"].max_batch, specs["a"].instances) == (60.0, 4, 3)
    assert reopened.delete("b")
    assert not reopened.delete("b")
    assert reopened.get("b") is None
    reopened.close()
