"""The routes get narrow read-only views of the control plane, never the pool: no gateway
module imports the pool, and the context the routes take has no pool to hand out."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import infless.gateway
from infless.gateway.context import GatewayContext

GATEWAY = Path(infless.gateway.__file__).parent


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_gateway_module_imports_the_pool() -> None:
    modules = sorted(GATEWAY.rglob("*.py"))
    assert len(modules) > 20  # (the gateway's modules were found)
    importing = [str(m) for m in modules if "infless.control.pool" in _imported(m)]
    assert importing == []


def test_the_routes_context_holds_read_only_views_not_the_pool() -> None:
    fields = {f.name: f.type for f in dataclasses.fields(GatewayContext)}
    assert "pool" not in fields
    assert fields["deployed"] == "FunctionsView"
    assert fields["instances"] == "InstancesView"
    assert fields["servers"] == "ServersView"
