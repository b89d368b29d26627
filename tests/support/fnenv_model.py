"""A tiny model for the worker-runtime integration tests: copied, never imported by tests.

`tests.support.fnenv.probe_package` copies this file as `fnenv_model.py` into the package's
`src/` (and the gateway's working directory) and writes a package whose architecture is
`fnenv_model:probe`. The model prints at import and on every batch (stdout and stderr),
warns at import, and reports what its worker was given: output `y = [the env value, 1 if
the secret file is readable else 0, the secret's byte sum]`. A first input element > 0 asks
it to allocate that many MiB first (the memory-limit test).
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import torch
from torch import nn

SECRETS_DIR = Path("/var/openfaas/secrets")

print(f"fnenv_model imported in pid {os.getpid()}", flush=True)
warnings.warn("fnenv_model warns at import", UserWarning, stacklevel=1)


class Probe(nn.Module):
    def __init__(self, env_name: str = "", secret: str = "") -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.env_value = float(os.environ.get(env_name, "-1")) if env_name else -1.0
        path = SECRETS_DIR / secret if secret else None
        self.secret = path.read_bytes() if path is not None and path.is_file() else None
        if secret:
            seen = "absent" if self.secret is None else f"{len(self.secret)} bytes"
            print(f"secret {secret}: {seen}", flush=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        print(f"forward batch of {x.shape[0]}", flush=True)
        print("forward says hello on stderr", file=sys.stderr, flush=True)
        hog_mib = int(x[0, 0].item())
        if hog_mib > 0:
            hog = torch.ones(hog_mib * 2**18)  # float32: every page written
            print(f"allocated {hog_mib} MiB: {float(hog.sum())}", flush=True)
        present = 0.0 if self.secret is None else 1.0
        checksum = -1.0 if self.secret is None else float(sum(self.secret))
        row = torch.tensor([self.env_value, present, checksum], dtype=torch.float32)
        out: torch.Tensor = row.expand(x.shape[0], 3) * self.scale
        return out


def probe(env_name: str = "", secret: str = "") -> nn.Module:
    return Probe(env_name, secret)
