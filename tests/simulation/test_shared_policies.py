"""The simulator runs the server's own policies and defines none of its own.

It imports the server's autoscaler, prewarm manager, planner, admission, batch release,
dispatcher, variant monitor and vertical-scaling shell (the import graph says so), and no
module of `infless.sim` defines a class or function named like one of their public names —
except methods that
implement a protocol by calling that very function (a simulated instance's `finish_by_s`
is `admission.finish_by_s` over its queue). The import-linter contract beside it
(pyproject.toml) keeps the gateway's shells (router, queue, instance, pool) out.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import grimp

SIM = Path(__file__).resolve().parents[2] / "infless" / "sim"
SHARED = {
    "autoscaler": "infless.control.autoscaler",
    "prewarm manager": "infless.control.prewarm",
    "planner": "infless.scaling.baselines",
    "admission": "infless.dataplane.admission",
    "batch release": "infless.dataplane.release",
    "dispatch": "infless.dataplane.dispatcher",
    "variant monitor": "infless.control.variant_monitor",
    "vertical scaling": "infless.control.vertical",
}


def _public_names(module: str) -> set[str]:
    loaded = importlib.import_module(module)
    return {
        name
        for name, value in vars(loaded).items()
        if not name.startswith("_")
        and callable(value)
        and getattr(value, "__module__", None) == module
    }


def _calls(function: ast.FunctionDef) -> set[str]:
    """The names `function` calls, as `name` or `module.name`."""
    found = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            target = node.func
            if isinstance(target, ast.Name):
                found.add(target.id)
            elif isinstance(target, ast.Attribute):
                found.add(target.attr)
    return found


def test_the_simulator_imports_each_of_the_servers_policies() -> None:
    graph = grimp.build_graph("infless")
    sim_modules = {m for m in graph.modules if m.startswith("infless.sim.")}
    imported = set().union(*(graph.find_modules_directly_imported_by(m) for m in sim_modules))
    missing = {what: module for what, module in SHARED.items() if module not in imported}
    assert not missing, f"the simulator does not use the server's {missing}"
    # the planner behind the policies by name: INFless's Algorithm 1 and the baselines
    assert graph.find_modules_directly_imported_by("infless.scaling.baselines") >= {
        "infless.scaling.planner"
    }


def test_the_simulator_defines_no_policy_of_its_own() -> None:
    policy_names = set().union(*(_public_names(m) for m in SHARED.values()))
    policy_names |= _public_names("infless.scaling.planner")
    assert {"Autoscaler", "PrewarmManager", "VariantMonitor", "RateShareDispatcher"} <= (
        policy_names
    )
    assert {"finish_by_s", "candidates", "release_at_s", "plan"} <= policy_names
    offenders = []
    for path in sorted(SIM.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if node.name not in policy_names:
                continue
            delegates = isinstance(node, ast.FunctionDef) and node.name in _calls(node)
            if not delegates:
                offenders.append(f"{path.name}: {node.name}")
    assert offenders == []
