"""The catalogue has one writer: the control shell. Entries are frozen, only the control
shell (and the simulator's stand-in for registration) calls the catalogue's writer
methods, and only the request path's `choose` and `pin` count traffic."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from infless.modelless.catalog import ModelEntry, ModellessCatalog
from tests.unit.modelless.support import three_variants

ROOT = Path(__file__).resolve().parents[3] / "infless"
WRITERS = {"publish", "withdraw", "put_app", "observe", "apply"}
SHELL = {
    "control/modelless.py",  # registration: publish, withdraw, put_app
    "control/variant_monitor.py",  # the variants' states: observe
    "control/vertical.py",  # the planner's decisions: apply
    "sim/modelless.py",  # the simulator registers its applications: publish
}


def _receiver(node: ast.Attribute) -> str:
    return ast.unparse(node.value)


def writer_calls() -> dict[str, set[str]]:
    """Each module of `infless` that calls a catalogue writer, with the writers it calls."""
    found: dict[str, set[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            call = node.func if isinstance(node, ast.Call) else None
            if not isinstance(call, ast.Attribute) or call.attr not in WRITERS:
                continue
            if "catalog" in _receiver(call).lower():
                found.setdefault(str(path.relative_to(ROOT)), set()).add(call.attr)
    return found


def test_only_the_control_shell_writes_the_catalogue() -> None:
    found = writer_calls()
    assert set(found) <= SHELL, f"catalogue writes outside the control shell: {found}"
    # and each part of the shell writes what it owns
    assert found["control/vertical.py"] == {"apply"}
    assert found["control/variant_monitor.py"] == {"observe"}
    assert found["control/modelless.py"] == {"publish", "withdraw", "put_app"}


def test_only_the_catalogue_counts_traffic() -> None:
    counting = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            targets: list[ast.expr] = []  # what `node` writes: attributes and items
            if isinstance(node, ast.Assign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            call = node.func if isinstance(node, ast.Call) else None
            if isinstance(call, ast.Attribute) and call.attr.startswith("record_"):
                targets = [call]  # Traffic.record_served and the like
            written = [t for t in targets if isinstance(t, ast.Attribute | ast.Subscript)]
            if any("traffic" in ast.unparse(t) for t in written):
                counting.append(str(path.relative_to(ROOT)))
    assert set(counting) == {"modelless/catalog.py"}


def test_an_entry_cannot_be_edited_only_replaced() -> None:
    catalog = ModellessCatalog()
    entry = ModelEntry(model="m", slo_ms=50.0, profiles=tuple(three_variants()))
    catalog.publish(entry)
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.target = "int8"  # type: ignore[misc]  # frozen: the point of the test
    catalog.publish(dataclasses.replace(entry, target="int8"))
    new = catalog.get("m")
    assert new is not None
    assert (entry.target, new.target) == (None, "int8")
