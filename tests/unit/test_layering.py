"""The layering rules hold, and a wrong import breaks them.

The rules are import-linter contracts in pyproject.toml (scripts/test.sh runs `lint-imports`
on the tree); here a copy of the tree with wrong imports planted must break exactly the
contracts they violate. Config sections stay leaves, and the gateway process, started the
way `infless serve` starts it, has no torch in it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = str(Path(sys.executable).parent / "lint-imports")

GATEWAY_MODULES = [
    "infless.app",
    "infless.cli",
    "infless.serve_command",
    "infless.models.resolver",
    "infless.weights.store",
    "infless.workers.zygote",
    "infless.workers.templates",
    "infless.workers.forkclient",
    "infless.workers.forkserver",
    "infless.control.prewarm",
    "infless.control.autoscaler",
    "infless.control.pool",
    "infless.sim.engine",
    "infless.nodes.backend",
    "infless.nodes.remote",
    "infless.nodes.agent",
]

# planted line -> the contract it must break
PLANTED = {
    "infless/gateway/invoke.py": (
        "import torch  # planted",
        "The gateway process never imports torch",
    ),
    "infless/scaling/planner.py": (
        "import infless.control.pool  # planted",
        "Policies and their shells never import HTTP, workers or the pool",
    ),
    "infless/nodes/remote.py": (
        "import ray  # planted",
        "Ray stays behind the cluster backend: only infless.nodes.ray_backend imports it",
    ),
    "infless/dataplane/router.py": (
        "import infless.control.desired  # planted",
        "The data plane never reaches up into control, policies or HTTP",
    ),
    "infless/types.py": (
        "import infless.models.package  # planted",
        "Core types, errors and the clock depend on nothing above them",
    ),
    "infless/packaging/source.py": (
        "import infless.gateway.errors  # planted",
        "Packaging is the user's side: no gateway, control, data plane or HTTP",
    ),
    "infless/sim/engine.py": (
        "import infless.dataplane.queue  # planted",
        "The simulator runs the server's policies, never its shells or workers",
    ),
    "loadgen/client.py": (
        "import infless.errors  # planted",
        "The load generator is HTTP-only: nothing of infless, no torch",
    ),
    "infless/app.py": (
        "import infless.offline  # planted",
        "The running server never imports the offline tools",
    ),
    "infless/workers/transformer.py": (
        "import infless.transform.choice  # planted",
        "Workers execute transformation plans, never make them",
    ),
    "infless/workers/protocol.py": (
        "import infless.transform.planner  # planted",
        "The wire protocol is plain records: no numpy, torch or policy",
    ),
    "infless/packaging/verify.py": (
        "import infless.workers.model  # planted",
        "Packaging and models sit beneath the workers, never above",
    ),
    "infless/workers/transforms.py": (
        "import infless.workers.model  # planted",
        "No import cycles in workers, transform, packaging or models",
    ),
}


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LINT_IMPORTS, "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _broken(output: str) -> set[str]:
    return {line.removesuffix(" BROKEN") for line in output.splitlines() if line.endswith("BROKEN")}


def test_planted_wrong_imports_break_exactly_their_contracts(tmp_path: Path) -> None:
    copy = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__")
    for package in ("infless", "loadgen"):
        shutil.copytree(REPO / package, copy / package, ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", copy / "pyproject.toml")

    clean = _lint(copy)
    assert clean.returncode == 0, clean.stdout[-3000:]
    assert _broken(clean.stdout) == set()

    for relative, (line, _) in PLANTED.items():
        path = copy / relative
        path.write_text(path.read_text() + f"\n{line}\n")
    planted = _lint(copy)
    assert planted.returncode != 0
    assert _broken(planted.stdout) == {contract for _, contract in PLANTED.values()}


def test_config_sections_are_leaves() -> None:
    """`infless.config` aggregates the packages' `config` modules and nothing else; those
    import nothing of infless but errors and types."""
    graph = grimp.build_graph("infless")
    base = {"infless.errors", "infless.types"}
    sections = {m for m in graph.modules if m.endswith(".config") and m != "infless.config"}
    assert {"infless.scaling.config", "infless.coldstart.config"} <= sections
    assert graph.find_modules_directly_imported_by("infless.config") <= sections | base
    for section in sections:
        imported = graph.find_modules_directly_imported_by(section)
        assert imported <= base, (section, imported)


def test_gateway_side_modules_do_not_import_torch_or_ray() -> None:
    """Neither is imported by the gateway's modules, nor by building a gateway without a
    cluster (Ray only comes with `--cluster`)."""
    code = (
        "import importlib, sys\n"
        f"for name in {GATEWAY_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "from infless.app import create_app\n"
        "from infless.config import Config, with_overrides\n"
        "import tempfile\n"
        "state = tempfile.mkdtemp()\n"
        "create_app(with_overrides(Config(), state={'dir': state}, store={'enabled': False}))\n"
        "print('torch' in sys.modules, 'ray' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False False"
