"""Fixtures of the examples' tests: their modules importable, one torch thread.

Puts examples/minilm (`build_package`) and its src/ (`minilm_encoder`, `minilm_handler`) on
sys.path: the package's modules are top-level, as the platform imports them from `src/`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.torch_threads import one_torch_thread  # noqa: F401 - applies here

_MINILM = Path(__file__).resolve().parents[2] / "examples" / "minilm"

for _path in (_MINILM, _MINILM / "src"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
