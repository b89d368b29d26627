"""Fixtures of the examples' tests: their modules importable, one torch thread.

Puts examples/minilm (`build_package`) and its src/ (`minilm_encoder`, `minilm_handler`) on
sys.path: the package's modules are top-level, as the platform imports them from `src/`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

_MINILM = Path(__file__).resolve().parents[2] / "examples" / "minilm"

for _path in (_MINILM, _MINILM / "src"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """One torch thread: the machine is shared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
