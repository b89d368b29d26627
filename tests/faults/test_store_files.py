"""Faults of the tensor store under running instances: its files deleted, or truncated.

Deleted: the running instances keep the files they mapped (the inodes live on) and answer
as before; the next start finds the files missing, publishes them again, and serves the
same answers. Truncated: the kernel takes the truncated pages from every process mapping
them, so each running instance dies on its next batch (SIGBUS; docs/operations.md); a
request meets either its answer or a JSON 503 `worker_unavailable` (a request whose worker
died twice), never a wrong answer or a hang; the replacements find the files' sizes wrong,
publish them again, are never forked from a template that maps the truncated files, and
serve every request after that."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.faults import MNIST, MNIST_BODY, Load, own_store, post
from tests.support.gateway import GatewayProcess, start_gateway


def _tensor_files(tmp_path: Path) -> dict[Path, int]:
    tenant = tmp_path / "store" / "default"
    return {f: f.stat().st_size for f in tenant.iterdir() if not f.name.startswith(".")}


def _templates(gateway: GatewayProcess) -> set[str]:
    return {str(t["id"]) for t in gateway.json("GET", "/system/templates")}


def test_deleted_store_files_are_published_again_by_the_next_start(tmp_path: Path) -> None:
    with start_gateway(tmp_path, [{**MNIST, "instances": 2}], own_store(tmp_path)) as gateway:
        reference = gateway.request("POST", "/function/mnist", raw=MNIST_BODY)[2]
        files = _tensor_files(tmp_path)
        assert files
        for path in files:
            path.unlink()
        with Load(gateway.url, "/function/mnist", lambda _: MNIST_BODY) as load:
            load.wait_answered(20)
            status, _, _ = gateway.request("POST", "/system/scale-function/mnist", {"replicas": 3})
            assert status == 202
            gateway.wait_ready("mnist", 3)
            load.wait_answered(load.answered() + 30)
            replies = load.stop()
        assert {(r.status, r.body) for r in replies} == {(200, reference)}
        assert _tensor_files(tmp_path) == files, "published again, whole"


def test_truncated_store_files_cost_their_instances_and_nothing_is_answered_wrong(
    tmp_path: Path,
) -> None:
    with start_gateway(tmp_path, [{**MNIST, "instances": 2}], own_store(tmp_path)) as gateway:
        reference = gateway.request("POST", "/function/mnist", raw=MNIST_BODY)[2]
        before = {i["pid"] for i in gateway.instances("mnist")}
        stale_templates = _templates(gateway)
        files = _tensor_files(tmp_path)
        for path, size_bytes in files.items():
            os.truncate(path, size_bytes // 2)
        replies = [post(gateway.url, "/function/mnist", MNIST_BODY, i) for i in range(10)]
        for reply in replies:
            assert (reply.status, reply.body) == (200, reference) or (
                reply.status,
                reply.code,
            ) == (503, "worker_unavailable"), reply

        ready = gateway.wait_ready("mnist", 2)
        assert not before & {i["pid"] for i in ready}, "the instances mapping them were replaced"
        assert not stale_templates & {str(i.get("template")) for i in ready}
        after = [post(gateway.url, "/function/mnist", MNIST_BODY, i) for i in range(20)]
        assert {(r.status, r.body) for r in after} == {(200, reference)}
        assert _tensor_files(tmp_path) == files, "published again, whole"
