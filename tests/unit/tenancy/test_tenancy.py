"""Tenants' ids and admission: the `[isolation]` section's checks, the next free id, the
registry's allocation across restarts, and which parts a host's facts enforce."""

from __future__ import annotations

from pathlib import Path

import pytest

from infless.registry.tenants import TenantRegistry
from infless.tenancy.config import IsolationConfig, UidRange, check_isolation, parse_uid_range
from infless.tenancy.ids import RangeExhausted, next_free_id
from infless.tenancy.status import Facts, assess, tenant_refusal

GOOD_PROBE = Facts(0, "", probe_runtime_readable=True, probe_hidden=True, probe_read_only=True)


def test_a_uid_range_is_first_dash_last_above_system_accounts() -> None:
    assert parse_uid_range("200000-299999") == UidRange(200000, 299999)
    for text in ("200000", "a-b", "500-2000", "3000-2000"):
        with pytest.raises(ValueError, match=r"isolation\.uid_range"):
            parse_uid_range(text)


def test_check_isolation_names_each_bad_key() -> None:
    cfg = IsolationConfig(uid_range="5-6", pids_max=4, scratch_bytes=10, hide_paths=["rel"])
    problems = check_isolation(cfg)
    assert len(problems) == 4
    for key in ("uid_range", "pids_max", "scratch_bytes", "hide_paths"):
        assert any(f"isolation.{key}" in p for p in problems)
    assert check_isolation(IsolationConfig()) == []


def test_the_next_free_id_skips_held_ids_and_host_accounts() -> None:
    ids = UidRange(2000, 2004)
    assert next_free_id(ids, set()) == 2000
    assert next_free_id(ids, {2000, 2001}, lambda uid: uid == 2002) == 2003
    with pytest.raises(RangeExhausted, match="widen the range"):
        next_free_id(ids, {2000, 2001, 2002, 2003, 2004})


def test_a_tenant_keeps_its_ids_across_restarts_and_never_shares_one(tmp_path: Path) -> None:
    path = tmp_path / "registry.sqlite"
    ids = UidRange(3_999_000_000, 3_999_000_009)  # no host account lives up there
    registry = TenantRegistry(path, ids)
    alice, bob = registry.identity("alice"), registry.identity("bob")
    assert (alice.uid, alice.gid) == (ids.first, ids.first)
    assert bob.uid == ids.first + 1
    registry.close()
    again = TenantRegistry(path, ids)
    assert again.identity("bob") == bob
    assert again.identity("carol").uid == ids.first + 2
    assert [t.tenant for t in again.all()] == ["alice", "bob", "carol"]
    again.close()


def test_a_host_that_passes_the_probe_and_has_cgroups_enforces_everything() -> None:
    status = assess("auto", GOOD_PROBE)
    assert status.complete
    assert "uid" in status.enforced
    assert "pids_limit" in status.enforced
    assert tenant_refusal(status, False, {"alice"}, "mallory") is None


def test_a_gateway_that_is_not_root_is_inactive_and_refuses_a_second_tenant() -> None:
    status = assess("auto", Facts(euid=1000))
    assert not status.active
    assert "not root" in status.missing[0]
    refusal = tenant_refusal(status, False, {"alice"}, "mallory")
    assert refusal is not None
    assert "'alice'" in refusal
    assert "isolation.allow_shared_tenants" in refusal
    assert tenant_refusal(status, False, {"alice"}, "alice") is None  # the same tenant
    assert tenant_refusal(status, True, {"alice"}, "mallory") is None  # allowed by config


def test_missing_cgroups_keep_sandboxes_active_but_incomplete() -> None:
    facts = Facts(0, "", True, True, True, pids_unavailable="no pids hierarchy")
    status = assess("auto", facts)
    assert status.active
    assert not status.complete
    assert status.missing == ("pids limits cannot be enforced: no pids hierarchy",)


def test_off_is_never_active() -> None:
    status = assess("off", GOOD_PROBE)
    assert not status.active
    assert 'isolation.enabled = "off"' in status.missing[0]
