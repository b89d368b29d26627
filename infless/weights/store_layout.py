"""The tensor store's names on disk: its root, tenant directories, lock and temp files.

Owns the naming rules only. It must not open, lock or write a file: the store does that.
Gateway side: never imports torch or numpy.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

TEMP_PREFIX = ".tmp-"  # a tensor being written: `.tmp-<key>-<pid>-<thread>`
LOCK_FILE = ".lock"  # one per tenant directory; a store made every directory holding one
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def default_root() -> Path:
    """The store's default root: tmpfs, one per user (configure another root in config)."""
    return Path("/dev/shm") / f"infless-store-{os.getuid()}"  # noqa: S108 - a dedicated subdir
