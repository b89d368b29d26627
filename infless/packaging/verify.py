"""Checking a package the way a worker will load it, in a fresh process.

`verify_package` writes the examples to a scratch directory and runs
`python -P -m infless.workers.package_check` there. The child's PYTHONPATH holds this copy of
infless and nothing else of the caller's, so the package must stand on its own: its `src/`
and what is installed.

The child is the worker's own loading code; `workers.package_check` says what it checks.
This module only starts it and turns its one-line JSON report into `Verified` or a
`PackagingError`. Packaging is the user's side: it runs the worker's code in a child process
and never imports it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

EXAMPLES_FILE = "examples.npz"
EXPECTED_FILE = "expected.npz"
REQUEST_FILE = "request.bin"
CHILD_MODULE = "infless.workers.package_check"
INFLESS_ROOT = Path(__file__).resolve().parents[2]  # the directory that holds `infless/`


class PackagingError(ValueError):
    """A package that would not serve: the message names the step and the problem."""


@dataclass(frozen=True)
class Verified:
    batch_sizes: list[int]
    answer: str | None  # the handler's answer to the example request, as text


def verify_package(
    package_dir: Path,
    examples: Mapping[str, np.ndarray],
    expected: Mapping[str, np.ndarray] | None = None,
    example_request: tuple[bytes, str] | None = None,
    timeout_s: float = 300.0,
) -> Verified:
    """Load `package_dir` in a fresh process and run `examples` through it (see the module
    docstring); raises PackagingError naming what failed."""
    with tempfile.TemporaryDirectory(prefix="infless-verify-") as scratch:
        work = Path(scratch)
        np.savez(work / EXAMPLES_FILE, **examples)  # type: ignore[arg-type]
        if expected is not None:
            np.savez(work / EXPECTED_FILE, **expected)  # type: ignore[arg-type]
        command = [sys.executable, "-P", "-m", CHILD_MODULE, str(package_dir)]
        command += ["--examples", str(work / EXAMPLES_FILE)]
        if expected is not None:
            command += ["--expected", str(work / EXPECTED_FILE)]
        if example_request is not None:
            (work / REQUEST_FILE).write_bytes(example_request[0])
            command += ["--request", str(work / REQUEST_FILE)]
            command += ["--content-type", example_request[1]]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = str(INFLESS_ROOT)  # the child runs this infless, not an installed one
        try:
            done = subprocess.run(
                command,
                check=False,
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            raise PackagingError(
                f"verifying the package took over {timeout_s:g} s (the load or the forward "
                "never finished)"
            ) from None
    lines = done.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        report = {}
    if done.returncode != 0 or not report.get("ok"):
        message = report.get("error") or _tail(done.stderr) or f"exit code {done.returncode}"
        raise PackagingError(f"the package does not load and run as a worker would: {message}")
    return Verified(list(report["batch_sizes"]), report.get("answer"))


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
