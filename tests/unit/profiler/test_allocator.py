"""The allocator policy applies on glibc Linux, and applying it again is harmless."""

from __future__ import annotations

import sys

import pytest

from infless.profiler.allocator import keep_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_the_policy_applies_and_can_be_applied_again() -> None:
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True
