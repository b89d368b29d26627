"""The gateway's side of the sandboxes: what a tenant's worker is told to enter, which
packages a sandboxed worker can see, and whether a second tenant is admitted."""

from __future__ import annotations

import os
from pathlib import Path

from infless.registry.tenants import TenantIdentity
from infless.tenancy.config import IsolationConfig
from infless.tenancy.sandboxes import TenantSandboxes
from infless.tenancy.status import Facts, assess

COMPLETE = Facts(0, "", probe_runtime_readable=True, probe_hidden=True, probe_read_only=True)
IDS = {"alice": 200000, "mallory": 200001}


def _sandboxes(tmp_path: Path, facts: Facts | None = COMPLETE) -> TenantSandboxes:
    def identity(tenant: str) -> TenantIdentity:
        return TenantIdentity(tenant, IDS[tenant], IDS[tenant])

    cfg = IsolationConfig(hide_paths=["/etc/infless"])
    sandboxes = TenantSandboxes(cfg, identity, [tmp_path / "state"], tmp_path / "store")
    if facts is not None:
        sandboxes.status = assess("auto", facts)
    return sandboxes


def test_a_worker_keeps_its_tenants_packages_and_store_directory_only(tmp_path: Path) -> None:
    sandboxes = _sandboxes(tmp_path)
    sandboxes.deployed(tmp_path / "state" / "models" / "a1", "alice")
    sandboxes.deployed(tmp_path / "state" / "models" / "m1", "mallory")
    sandbox = sandboxes.sandbox_for("alice", tmp_path / "state" / "models" / "a2")
    assert sandbox is not None
    assert (sandbox.uid, sandbox.gid) == (200000, 200000)
    assert sandbox.hide == [str(tmp_path / "state"), "/etc/infless"]  # + the root, by `app`
    assert sandbox.keep == [
        str(tmp_path / "state" / "models" / "a2"),
        str(tmp_path / "state" / "models" / "a1"),
        str(tmp_path / "store" / "alice"),
    ]
    assert sandbox.scratch == ["/tmp", "/var/tmp", "/dev/shm"]
    assert not sandbox.host_network
    assert sandboxes.gid("mallory") == 200001


def test_gpu_workers_keep_the_hosts_shared_memory_and_network(tmp_path: Path) -> None:
    sandbox = _sandboxes(tmp_path).sandbox_for("alice", tmp_path / "pkg", gpu=True)
    assert sandbox is not None
    assert sandbox.shared == ["/dev/shm"]
    assert "/dev/shm" not in sandbox.scratch
    assert sandbox.host_network


def test_a_sandboxed_worker_sees_only_the_packages_of_its_view(tmp_path: Path) -> None:
    sandboxes = _sandboxes(tmp_path)
    sandbox = sandboxes.sandbox_for("alice", tmp_path / "a1")
    assert sandbox is not None
    pid = os.getpid()  # any live process
    sandboxes.record(pid, sandbox)
    assert sandboxes.sandboxed(pid)
    assert sandboxes.sees(pid, tmp_path / "a1")
    assert not sandboxes.sees(pid, tmp_path / "a2")  # deployed after it entered
    sandboxes.forget(pid)
    assert sandboxes.sees(pid, tmp_path / "a2")  # no sandbox: it sees what the gateway sees


def test_without_an_examined_host_nothing_is_sandboxed(tmp_path: Path) -> None:
    sandboxes = _sandboxes(tmp_path, facts=None)
    assert sandboxes.sandbox_for("alice", tmp_path / "a1") is None
    assert sandboxes.limits() is None
    assert sandboxes.gid("alice") is None


def test_a_second_tenant_is_refused_only_where_tenants_cannot_be_kept_apart(
    tmp_path: Path,
) -> None:
    assert _sandboxes(tmp_path).refusal("mallory", {"alice"}) is None
    incomplete = _sandboxes(tmp_path, Facts(0, "", True, True, True, pids_unavailable="no"))
    refusal = incomplete.refusal("mallory", {"alice"})
    assert refusal is not None
    assert "pids limits cannot be enforced" in refusal
    info = incomplete.describe()
    assert info["active"] is True
    assert info["complete"] is False
    assert info["pidsMax"] == 256
