"""A worker's runtime before its package loads: the function's environment, secrets, sandbox.

`enter_runtime` runs in the worker after the fork and before any model code. It composes
the two mechanisms below it: `workers.isolation` (secrets on a private tmpfs) and
`workers.sandbox` (the tenant's namespaces, mount view and uid). Both of those import
nothing of each other's callers, so the worker's modules form no import cycle.
Both sides: os only, never torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from infless.workers.isolation import mount_secrets

if TYPE_CHECKING:
    from infless.workers.protocol import Sandbox


def enter_runtime(
    env: Mapping[str, str], secrets: Mapping[str, bytes] | None, sandbox: Sandbox | None = None
) -> None:
    """The function's environment and secrets, then its tenant's sandbox.

    With a sandbox, the sandbox mounts the secrets itself, for the tenant's uid.
    """
    if sandbox is not None:
        from infless.workers.sandbox import enter_sandbox

        os.environ["HOME"] = "/tmp"  # noqa: S108 - the sandbox's scratch; the real home is veiled
        enter_sandbox(sandbox, secrets)
    elif secrets:
        mount_secrets(secrets)
    os.environ.update(env)
