"""Hostile packages against a real gateway that keeps tenants apart with the kernel.

A victim tenant (`alice`: a function with a secret, its tensors in the store) and a hostile
one (`mallory`: a package whose handler attacks on request and answers what it managed;
`tests/fixtures/hostile/attacks.py`) share one gateway. Every attempt — reading alice's
tensors, secrets or the registry, writing into the store, signalling or ptracing alice's
worker or the gateway, reaching the gateway's HTTP port, a fork bomb, unbounded memory,
filling the disk — fails with the errno the sandbox gives it, or is contained by its
cgroups; after each one the gateway and alice keep serving. Skipped where this host cannot
separate tenants (`/system/info` says why)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from infless.workers.isolation import SECRETS_DIR as SECRETS_MOUNT
from infless.workers.privileges import status_fields
from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.hostile import tinynet_package

MIB = 1 << 20
PIDS_MAX = 64
MEMORY_MIB = 384
SCRATCH_MIB = 8
SECRET = "alice-key"
PROCFS = Path("/proc")  # the kernel's process filesystem
SECRET_VALUE = "alice's database password"
FEATURES = {"features": [0.1, 0.2, 0.3, 0.4]}


@dataclass
class Tenants:
    gw: GatewayProcess
    root: Path
    store: Path
    alice_pid: int
    mallory_pid: int

    def attack(self, function: str = "mallory", **body: object) -> Any:
        status, _, payload = self.gw.request("POST", f"/function/{function}", body)
        assert status == 200, payload
        return json.loads(payload)

    def assert_still_serving(self) -> None:
        """The gateway answers, and alice's worker is the same one, answering."""
        assert self.gw.request("GET", "/healthz")[0] == 200
        status, _, payload = self.gw.request("POST", "/function/alice", FEATURES)
        assert status == 200, payload
        assert json.loads(payload)["label"] in ("setosa", "versicolor", "virginica")
        [alice] = self.gw.instances("alice")
        assert alice["pid"] == self.alice_pid

    def alice_tensor(self) -> Path:
        return next(p for p in (self.store / "alice").iterdir() if not p.name.startswith("."))


def _deploy(gw: GatewayProcess, name: str, package: Path, tenant: str, **fields: object) -> int:
    body = {"service": name, "image": str(package), "labels": {"com.infless.tenant": tenant}}
    status, _, payload = gw.request("POST", "/system/functions", body | fields)
    assert status == 202, payload
    [instance] = gw.wait_ready(name)
    return int(instance["pid"])


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    root = tmp_path_factory.mktemp("hostile")
    store = root / "store"
    sections: dict[str, dict[str, Any]] = {
        "isolation": {
            "enabled": "auto",
            "pids_max": PIDS_MAX,
            "memory_bytes": MEMORY_MIB * MIB,
            "scratch_bytes": SCRATCH_MIB * MIB,
        },
        "store": {"root": str(store)},
        "transform": {"enabled": False},  # a retired worker stops (no idle keeping)
    }
    with start_gateway(root, sections=sections) as gw:
        isolation = gw.json("GET", "/system/info")["isolation"]
        if not isolation["complete"]:
            pytest.skip(f"this host cannot keep tenants apart: {isolation['missing']}")
        secret = {"name": SECRET, "value": SECRET_VALUE}
        assert gw.request("POST", "/system/secrets", secret)[0] == 201
        victim = tinynet_package(root / "alice-pkg", hostile=False)
        alice = _deploy(gw, "alice", victim, "alice", secrets=[SECRET])
        pids = {
            name: _deploy(gw, name, tinynet_package(root / f"{name}-pkg", hostile=True), "mallory")
            for name in ("mallory", "mallory-bomb", "mallory-hog")  # a package each: no template
        }
        yield Tenants(gw, root, store, alice, pids["mallory"])


def test_a_hostile_worker_runs_as_its_tenant_with_no_privileges(tenants: Tenants) -> None:
    me = tenants.attack(attack="identity")
    alice = psutil.Process(tenants.alice_pid)
    assert me["uid"] == me["gid"] >= 200000  # from isolation.uid_range
    assert alice.uids().real != me["uid"]
    assert alice.uids().real != 0
    assert me["groups"] == []
    assert me["capEff"] == me["capBnd"] == "0000000000000000"
    assert me["noNewPrivs"] == "1"
    assert me["cwd"] == "/"
    uids = {psutil.Process(p).uids().real for p in (tenants.mallory_pid, tenants.alice_pid)}
    assert len(uids) == 2
    tenants.assert_still_serving()


def test_it_cannot_read_another_tenants_tensors_secrets_or_the_registry(
    tenants: Tenants,
) -> None:
    state = tenants.root / "state"
    alice = tenants.alice_pid
    own_tensor = next(p for p in (tenants.store / "mallory").iterdir() if p.name != ".lock")
    expected = {
        str(tenants.alice_tensor()): "ENOENT",  # alice's store directory does not exist
        str(state / "registry.sqlite"): "ENOENT",  # nor does the gateway's state
        str(state / "secrets" / SECRET): "ENOENT",
        str(SECRETS_MOUNT / SECRET): "ENOENT",  # mounted in alice's workers only
        # alice's worker's own view of its secrets, through its root in procfs: another uid
        str(PROCFS / str(alice) / "root" / SECRETS_MOUNT.relative_to("/") / SECRET): "EACCES",
        str(PROCFS / str(alice) / "environ"): "EACCES",
        str(PROCFS / str(alice) / "mem"): "EACCES",
        str(PROCFS / str(tenants.gw.pid) / "environ"): "EACCES",
        str(tenants.root / "alice-pkg" / "manifest.json"): "ENOENT",
        str(own_tensor): "ok",  # its own model's tensors: mapped by its worker
    }
    assert tenants.attack(attack="read", paths=list(expected)) == expected
    listed = tenants.attack(attack="list", paths=[str(tenants.store), str(state)])
    assert listed == {str(tenants.store): "ok", str(state): "ENOENT"}  # its own directory only
    tenants.assert_still_serving()


def test_it_cannot_write_into_the_store_or_anywhere_but_its_scratch(tenants: Tenants) -> None:
    own_dir = tenants.store / "mallory"
    own_tensor = next(p for p in own_dir.iterdir() if p.name != ".lock")
    before = own_tensor.read_bytes()
    marker = f"hostile-{time.monotonic_ns()}"
    expected = {
        str(own_tensor): "EACCES",  # its own tensors (0440, root's): shared by its instances
        str(own_dir / "planted"): "EROFS",
        str(tenants.store / "alice" / "planted"): "ENOENT",
        str(tenants.root / "state" / "registry.sqlite"): "ENOENT",
        str(tenants.root / "mallory-pkg" / "manifest.json"): "EACCES",  # its package (root's)
        f"/{marker}": "EROFS",
        f"/tmp/{marker}": "ok",
    }
    assert tenants.attack(attack="write", paths=list(expected)) == expected
    assert own_tensor.read_bytes() == before
    assert not (own_dir / "planted").exists()
    assert not Path(f"/tmp/{marker}").exists()
    tenants.assert_still_serving()


def test_it_cannot_signal_or_ptrace_other_tenants_or_the_gateway(tenants: Tenants) -> None:
    zygote = tenants.attack(attack="identity")["ppid"]
    assert psutil.Process(zygote).uids().real == 0
    targets = [tenants.gw.pid, tenants.alice_pid, zygote]
    expected = {str(pid): "EPERM" for pid in targets}
    assert tenants.attack(attack="signal", pids=targets, signal=0) == expected
    assert tenants.attack(attack="signal", pids=targets, signal=9) == expected
    assert tenants.attack(attack="ptrace", pids=targets) == expected
    assert all(psutil.pid_exists(pid) for pid in targets)
    tenants.assert_still_serving()


def test_it_cannot_reach_the_gateway_over_the_network(tenants: Tenants) -> None:
    port = int(tenants.gw.url.rsplit(":", 1)[1])
    assert tenants.attack(attack="connect", ports=[port]) == {str(port): "ENETUNREACH"}
    tenants.assert_still_serving()


def test_filling_the_disk_stops_at_its_scratch(tenants: Tenants) -> None:
    limit = 4 * SCRATCH_MIB * MIB
    fill = tenants.attack(attack="fill_disk", path="/tmp/fill", limit_bytes=limit)
    assert fill["error"] == "ENOSPC"
    assert fill["written"] <= SCRATCH_MIB * MIB
    for path in ("/dev/shm/more", "/var/tmp/more"):  # one quota for all three
        assert tenants.attack(attack="fill_disk", path=path, limit_bytes=limit) == {
            "written": 0,
            "error": "ENOSPC",
        }
    assert tenants.attack(attack="fill_disk", path="/fill", limit_bytes=limit) == {
        "written": 0,
        "error": "EROFS",
    }
    assert not Path("/tmp/fill").exists()
    tenants.assert_still_serving()


def _uid_processes(uid: int) -> set[int]:
    found = set()
    for process in psutil.process_iter(["uids"]):
        uids = process.info["uids"]
        if uids is not None and uids.real == uid:
            found.add(process.pid)
    return found


def test_a_fork_bomb_stops_at_its_pids_limit_and_dies_with_its_worker(tenants: Tenants) -> None:
    [bomb] = tenants.gw.instances("mallory-bomb")
    uid = psutil.Process(bomb["pid"]).uids().real
    result = tenants.attack("mallory-bomb", attack="fork_bomb", limit=10 * PIDS_MAX)
    assert result["error"] == "EAGAIN"
    assert 0 < result["forked"] < PIDS_MAX  # its worker's threads count too
    assert len(_uid_processes(uid)) > result["forked"]  # they are there, waiting
    tenants.assert_still_serving()

    tenants.gw.json("POST", "/system/scale-function/mallory-bomb", {"replicas": 0})
    deadline = time.monotonic() + 30.0
    while (left := _uid_processes(uid) - {tenants.mallory_pid}) and time.monotonic() < deadline:
        time.sleep(0.1)  # the other mallory functions' workers remain
    others = {i["pid"] for i in tenants.gw.instances() if i["function"].startswith("mallory")}
    assert left <= others, left  # the bomb's children died with its worker
    tenants.assert_still_serving()


def test_unbounded_memory_kills_only_that_worker(tenants: Tenants) -> None:
    body = {"attack": "hog_memory", "limit_mib": 16 * MEMORY_MIB}
    status, _, payload = tenants.gw.request("POST", "/function/mallory-hog", body)
    assert status == 503, payload  # its worker died for its limit, and so did the retry's
    last_error = tenants.gw.json("GET", "/system/function/mallory-hog")["lastError"]
    assert f"killed: out of memory (limit {MEMORY_MIB} MiB)" in last_error
    tenants.assert_still_serving()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_killing_every_process_it_may_kills_only_its_own_tenants(tenants: Tenants) -> None:
    uid = psutil.Process(tenants.mallory_pid).uids().real
    zygote = tenants.attack(attack="identity")["ppid"]
    assert tenants.attack(attack="fork_bomb", limit=3) == {"forked": 3, "error": "ok"}
    own = _uid_processes(uid) - {tenants.mallory_pid}  # its children, its siblings' workers
    assert len(own) >= 3
    # kill(-1): every process the caller may signal, but itself
    assert tenants.attack(attack="signal", pids=[-1], signal=9) == {"-1": "ok"}
    deadline = time.monotonic() + 10.0
    while not all(map(_gone, own)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(map(_gone, own))  # its own tenant's processes: they were its to kill
    assert not any(map(_gone, [tenants.gw.pid, zygote, tenants.alice_pid]))
    tenants.assert_still_serving()


def test_gpu_workers_drop_to_their_tenants_uid_on_their_first_load(tmp_path: Path) -> None:
    """Standby CUDA workers start before their tenant is known; each drops on its first
    load (fake GPUs: the same path as real ones)."""
    sections = {"gpu": {"fake_devices": 1, "fake_memory_mib": 1024, "mps": "off"}}
    with start_gateway(tmp_path, [], sections) as gw:
        if not gw.json("GET", "/system/info")["isolation"]["complete"]:
            pytest.skip("this host cannot keep tenants apart")
        for tenant in ("alice", "mallory"):
            labels = {
                "com.infless.tenant": tenant,
                "com.infless.gpu": "30",
                "com.infless.max.batch": "4",
            }
            slo = {"com.infless.latency_target": "1000ms"}
            deployment = {"service": f"{tenant}-gpu", "image": "mnist", "labels": labels}
            answered, _, payload = gw.request(
                "POST", "/system/functions", {**deployment, "annotations": slo}
            )
            assert answered == 202, payload
        uids = set()
        for function in ("alice-gpu", "mallory-gpu"):
            [instance] = gw.wait_ready(function)
            assert instance["gpuDevice"] is not None
            status = status_fields(Path(f"/proc/{instance['pid']}/status").read_text())
            assert status["CapEff"] == status["CapBnd"] == "0000000000000000"
            assert status["NoNewPrivs"] == "1"
            uid = int(status["Uid"].split()[0])
            assert uid >= 200000
            uids.add(uid)
            body = {"inputs": [[[0.5] * 28] * 28]}
            assert gw.request("POST", f"/function/{function}", body, timeout_s=60)[0] == 200
        assert len(uids) == 2
