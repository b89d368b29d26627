"""infless: a native serverless inference platform (INFless, Tetris, TrIMS on one machine).

`infless.package(model, example_inputs, name=..., out=...)` makes a function package from a
PyTorch model (`infless.packaging.package`); it is imported on first use, so `import
infless` stays torch-free.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "package":
        # by name, on first use: the gateway imports `infless` and must never import torch
        return importlib.import_module("infless.packaging.package").package
    raise AttributeError(f"module 'infless' has no attribute {name!r}")
