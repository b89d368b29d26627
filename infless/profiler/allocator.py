"""One C-allocator policy for every process that times models or operators: keep freed memory.

glibc's malloc serves large blocks (a batch's activations: ~100 MB for resnet-50 at batch 32)
with fresh mmap()s and returns them on free(), so every forward pays a page fault per 4 KiB
of every large tensor (1.16 million faults, 4.1 s of a 1.9 s forward on one thread for
resnet-50 at batch 32 on this machine). Whether it does depends on the process's history
(the dynamic mmap threshold, the heap's top), so the same model measured at the start or
the end of a long run differed by 2x at large batches while no machine kernel moved.
`keep_freed_memory` fixes the policy: no mmap()ed blocks and no trimming, so freed memory
is reused (measured: resnet-50 at batch 32, one thread, 0 faults and 1.86 s from the second
forward on). Not understood yet: a lone 64 MiB tensor allocated and freed in a loop still
faults on every page under this policy. Profiling and bench.predictor call
it at start, and so does every worker before it loads its model (measured in a zygote-forked
resnet-50 worker on one thread: 1.7-1.8 s -> 0.9-1.1 s at batch 16, 4.1-4.8 s -> 1.9-2.1 s at
batch 32), so profiles, measurements and serving share one state. The price: a worker keeps
the heap of its largest batch between batches (the one trim after its warm-up aside).

I/O shell (ctypes into libc); a no-op returning False where mallopt is unavailable.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
NEVER_TRIM = 2**31 - 1  # bytes of free heap top kept before giving any back (int max)


def keep_freed_memory() -> bool:
    """Make this process's malloc keep and reuse freed memory (True: applied)."""
    try:  # the symbols already loaded: find_library would run ldconfig (~5 ms per start)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, NEVER_TRIM))
