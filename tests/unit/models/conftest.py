"""Fixtures for the model-zoo tests: one torch thread (the machine is shared)."""

from __future__ import annotations

from tests.support.torch_threads import one_torch_thread  # noqa: F401 - applies here
