"""The status views render the keys clients read, in their order: a failed function has no
counters or owner, a server's facts land in their named fields, a kept worker names its
server, and a starter's worker description is inlined into its instance's view."""

from __future__ import annotations

import msgspec

from infless.control.failed import FailedDeployment
from infless.control.status import ServerLoad, failed_view, server_status
from infless.types import FunctionSpec
from infless.workers.status import IdleWorkerView, PackageView, StructureView, WorkerView

SPEC_KEYS = [
    "name",
    "image",
    "namespace",
    "envProcess",
    "envVars",
    "labels",
    "annotations",
    "secrets",
    "limits",
    "createdAt",
    "latencyTargetMs",
    "maxBatch",
    "cpusPerInstance",
    "minInstances",
    "maxInstances",
    "tenant",
]


def _keys(view: msgspec.Struct) -> list[str]:
    decoded = msgspec.json.decode(msgspec.json.encode(view))
    assert isinstance(decoded, dict)
    return list(decoded)


def test_a_failed_function_has_its_spec_its_reason_and_no_counters() -> None:
    spec = FunctionSpec("c", "missing", 50.0, 1, 1, 1, 1)
    view = failed_view(FailedDeployment(spec, "image 'missing' is not a package"))
    assert _keys(view) == [
        *SPEC_KEYS,
        "invocationCount",
        "replicas",
        "availableReplicas",
        "state",
        "lastError",
        "signature",
    ]
    assert view.state == "failed"
    assert view.last_error == "image 'missing' is not a package"
    rendered = msgspec.json.decode(msgspec.json.encode(view))
    assert rendered["limits"] is None  # null, not absent
    assert rendered["createdAt"] is None


def test_a_cluster_nodes_facts_fill_the_servers_named_fields() -> None:
    load = ServerLoad(
        server_id="node-1",
        capacity_cpus=4,
        free_cpus=3,
        idle_cores=2,
        cores=((0, 1), (1, 0)),
        gpu_pct=(),
        free_gpu_pct=(),
        describe={"node": "n1", "host": "10.0.0.2", "backend": "ray", "head": False},
        facts={"store": {"bytes": 8, "tensors": 1, "tenantBytes": {"default": 8}}},
    )
    view = server_status(load, instances=1)
    assert _keys(view) == [
        "id",
        "cpus",
        "freeCpus",
        "gpuPct",
        "freeGpuPct",
        "instances",
        "node",
        "host",
        "backend",
        "head",
        "store",
    ]
    assert view.head is False
    assert view.free_cpus == 3


def test_a_kept_worker_and_a_worker_description_render_only_what_was_filled() -> None:
    idle = IdleWorkerView(worker_id="w-1", function="fn", pid=7, idle_s=1.5, history=[])
    kept = msgspec.structs.replace(idle, server="local")
    assert _keys(kept) == ["id", "function", "state", "pid", "idleS", "history", "server"]
    assert kept.state == "idle"
    process = WorkerView(confinement=None, memory_limit=None, pids_limit=None, template="t-1")
    assert _keys(process) == ["confinement", "memoryLimit", "pidsLimit", "template"]
    assert _keys(WorkerView(node="n1", endpoint=None)) == ["node", "endpoint"]
    assert _keys(PackageView()) == []
    undescribed = PackageView(structure=StructureView(described=False, transformable=None))
    structure = msgspec.json.decode(msgspec.json.encode(undescribed))["structure"]
    assert structure == {"described": False, "transformable": None}
