"""The registry's SQLite file under faults (`registry.database`): a damaged file is refused
at open with the recovery in the message, never read as empty; a lock held elsewhere fails
a start after its wait and a write at once, changing nothing; a sound file leaves a
restore point at open and at close, a damaged one never replaces it."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from infless.errors import RegistryUnavailable, StateError
from infless.registry import database
from infless.registry.store import FunctionRegistry
from infless.types import FunctionSpec


def _spec(name: str, instances: int = 1) -> FunctionSpec:
    return FunctionSpec(
        name=name,
        image="mnist",
        slo_ms=50.0,
        max_batch=4,
        min_instances=1,
        max_instances=5,
        instances=instances,
    )


@contextmanager
def _held(path: Path) -> Iterator[None]:
    """Another connection holding the write lock (as `BEGIN EXCLUSIVE` elsewhere would)."""
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN EXCLUSIVE")
        yield
        other.execute("ROLLBACK")


def test_a_file_of_garbage_is_refused_with_its_recovery(tmp_path: Path) -> None:
    path = tmp_path / "registry.sqlite"
    path.write_bytes(os.urandom(8192))
    with pytest.raises(StateError) as refused:
        FunctionRegistry(path)
    message = str(refused.value)
    assert str(path) in message
    assert "damaged" in message
    assert f"{path}.bak" in message
    assert database.RECOVERY_DOC in message
    assert path.read_bytes() != b"", "the damaged file is left for the operator"


def test_a_damaged_page_inside_a_sound_header_is_found_at_open(tmp_path: Path) -> None:
    path = tmp_path / "registry.sqlite"
    registry = FunctionRegistry(path, backup=False)
    for index in range(60):  # several pages of specs
        registry.put(_spec(f"f{index}-" + "x" * 40))
    registry.close()
    with path.open("r+b") as file:
        file.seek(4096 * 2)
        file.write(os.urandom(4096))
    with pytest.raises(StateError, match="damaged"):
        FunctionRegistry(path)


def test_a_lock_held_elsewhere_fails_the_start_after_its_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database, "STARTUP_BUSY_S", 0.0)  # no wait in a unit test
    path = tmp_path / "registry.sqlite"
    FunctionRegistry(path).close()
    with _held(path), pytest.raises(StateError) as refused:
        FunctionRegistry(path)
    assert "locked by another process" in str(refused.value)
    assert f"fuser -v {path}" in str(refused.value)


def test_a_lock_held_elsewhere_fails_a_write_at_once_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database, "RUNTIME_BUSY_MS", 0)  # no wait in a unit test
    path = tmp_path / "registry.sqlite"
    registry = FunctionRegistry(path)
    registry.put(_spec("kept", instances=1))
    with _held(path):
        with pytest.raises(RegistryUnavailable) as refused:
            registry.put(_spec("kept", instances=3))
        with pytest.raises(RegistryUnavailable):
            registry.delete("kept")
        assert registry.get("kept") == _spec("kept", instances=1), "reads go on"
    error = refused.value
    assert (error.status, error.code, error.retry_after_s) == (503, "registry_unavailable", 1.0)
    assert "'kept' was not recorded" in error.message
    assert "nothing changed" in error.message
    registry.put(_spec("kept", instances=3))  # the lock gone, the same write succeeds
    assert registry.get("kept") == _spec("kept", instances=3)
    registry.close()


def test_a_restore_point_is_kept_at_open_and_at_close(tmp_path: Path) -> None:
    path = tmp_path / "registry.sqlite"
    registry = FunctionRegistry(path)
    assert registry.backup == database.backup_path(path)
    registry.put(_spec("later"))
    registry.close()
    restored = FunctionRegistry(database.backup_path(path), backup=False)
    assert [s.name for s in restored.all()] == ["later"], "the copy made at close"
    restored.close()


def test_a_damaged_file_never_replaces_the_restore_point(tmp_path: Path) -> None:
    path = tmp_path / "registry.sqlite"
    registry = FunctionRegistry(path)
    registry.put(_spec("good"))
    registry.close()
    good = database.backup_path(path).read_bytes()
    path.write_bytes(os.urandom(8192))
    with pytest.raises(StateError):
        FunctionRegistry(path)
    assert database.backup_path(path).read_bytes() == good
