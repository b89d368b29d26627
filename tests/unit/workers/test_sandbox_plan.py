"""A sandboxed worker's mount plan (pure) and the check that its privileges are gone."""

from __future__ import annotations

from pathlib import Path

from infless.workers.mountview import MountOp, plan_view
from infless.workers.privileges import check_dropped, status_fields

DROPPED = """Name:\tpython
Uid:\t200000\t200000\t200000\t200000
Gid:\t200000\t200000\t200000\t200000
Groups:\t
NoNewPrivs:\t1
CapInh:\t0000000000000000
CapPrm:\t0000000000000000
CapEff:\t0000000000000000
CapBnd:\t0000000000000000
CapAmb:\t0000000000000000
"""


def test_kept_directories_come_back_under_their_veil_shallow_first() -> None:
    plan = plan_view(
        hide=[Path("/srv/state"), Path("/srv/store")],
        keep=[Path("/srv/store/alice"), Path("/srv/state/models/pkg")],
        scratch=[Path("/tmp")],
    )
    assert plan == [
        MountOp("scratch", Path("/tmp")),
        MountOp("veil", Path("/srv/state")),
        MountOp("veil", Path("/srv/store")),
        MountOp("keep", Path("/srv/store/alice")),
        MountOp("keep", Path("/srv/state/models/pkg")),
    ]


def test_mounts_that_change_nothing_are_left_out() -> None:
    plan = plan_view(
        hide=[Path("/srv/state"), Path("/srv/state/secrets")],  # a veil under a veil
        keep=[Path("/opt/venv")],  # in plain sight
        scratch=[Path("/tmp")],
        runtime=[Path("/home/ops/.pyenv/lib")],
        blocked=lambda path: Path("/home/ops") if path.is_relative_to("/home/ops") else None,
    )
    assert plan == [
        MountOp("scratch", Path("/tmp")),
        MountOp("veil", Path("/home/ops")),  # the tenant cannot traverse it: veiled, runtime kept
        MountOp("veil", Path("/srv/state")),
        MountOp("keep", Path("/home/ops/.pyenv/lib")),
    ]


def test_a_fully_dropped_worker_passes_the_check() -> None:
    assert check_dropped(status_fields(DROPPED), 200000, 200000) == []


def test_any_capability_a_root_uid_or_a_missing_no_new_privs_is_reported() -> None:
    status = status_fields(DROPPED)
    status["CapBnd"] = "000001ffffffffff"
    status["Uid"] = "200000 0 200000 200000"
    status["NoNewPrivs"] = "0"
    problems = check_dropped(status, 200000, 200000)
    assert len(problems) == 3
    assert problems[0].startswith("CapBnd")
