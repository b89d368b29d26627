"""Fault-injection fixtures: the zoo packages the cases deploy, built once per machine."""

from __future__ import annotations

import pytest

from tests.support.gateway import build_test_models


@pytest.fixture(scope="session", autouse=True)
def built_models() -> None:
    build_test_models(["mnist"])
