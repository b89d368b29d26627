"""Zygote preload module for bench.startup: importing it runs `gc.freeze()` in the zygote.

Not used by the platform. Listed last in `ZygoteLauncher(preload=...)`, it moves every
object the zygote's imports created (torch, numpy, the runtime) into the collector's
permanent generation before any fork, so a forked worker's first full collection neither
traverses them nor dirties their pages (copy-on-write). bench.startup measures this variant
next to the shipped zygote, to size the fix (`gc.freeze()` before `os.fork()` in
`infless.workers.zygote`).
"""

from __future__ import annotations

import gc

gc.freeze()
