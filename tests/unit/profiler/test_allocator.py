"""The allocator policy: applying it twice is harmless, and large blocks are then reused."""

from __future__ import annotations

import resource
import sys

import pytest

from infless.profiler.allocator import keep_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_after_the_policy_a_freed_large_block_is_reused_without_page_faults() -> None:
    import torch

    assert keep_freed_memory() is True
    assert keep_freed_memory() is True
    size = 64 << 20  # larger than glibc's largest dynamic mmap threshold (32 MiB)
    torch.ones(size // 4)  # allocated, touched and freed once
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.ones(size // 4)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < (size // 4096) // 10  # a fresh mapping would fault every 4 KiB page
