"""The gateway process never imports torch: its modules must stay torch-free."""

from __future__ import annotations

import subprocess
import sys

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
]


def test_gateway_side_modules_do_not_import_torch() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {GATEWAY_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"
