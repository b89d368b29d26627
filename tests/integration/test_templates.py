"""Per-model templates with real processes: instances forked from a template that loaded once,
directly through the `TemplateCache` and through a gateway."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest

from infless.weights.store import TensorStore
from infless.workers import protocol as p
from infless.workers.launcher import LaunchedWorker
from infless.workers.templates import Template, TemplateCache
from infless.workers.zygote import ZygoteLauncher
from tests.integration.test_batching_and_recovery import IMAGE
from tests.integration.test_store_worker import MODEL
from tests.support.gateway import start_gateway
from tests.support.workers import exchange, maps_file

TENANT = "t"


@pytest.fixture
async def templates(zygote: ZygoteLauncher, store: TensorStore) -> AsyncIterator[TemplateCache]:
    cache = TemplateCache(zygote, store, start_timeout_s=120.0)
    yield cache
    await cache.close()


@pytest.fixture
def launched() -> Iterator[list[LaunchedWorker]]:
    """Workers a test started; teardown closes their sockets and checks that they exit."""
    workers: list[LaunchedWorker] = []
    yield workers
    processes = []
    for worker in workers:
        worker.sock.close()
        try:
            processes.append(psutil.Process(worker.pid))
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(processes, timeout=10)
    for process in alive:
        process.kill()
    assert alive == []


def run_batch() -> p.RunBatch:
    batch = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    return p.RunBatch(1, {"image": p.TensorData("float32", list(batch.shape), batch.tobytes())})


async def start(
    instance_id: str,
    templates: TemplateCache,
    zygote: ZygoteLauncher,
    store: TensorStore,
    launched: list[LaunchedWorker],
    cpus: int = 1,
) -> tuple[LaunchedWorker, p.Ready, bool]:
    """What the booter does: publish, fork (from the template when there is one), load."""
    stored = await asyncio.to_thread(store.publish, MODEL, TENANT, holder=instance_id)
    worker = await templates.launch(instance_id, TENANT, str(MODEL), stored)
    from_template = worker is not None
    worker = worker or await zygote.launch(instance_id)
    launched.append(worker)
    worker.sock.setblocking(False)
    load = p.LoadModel(str(MODEL), cpus=cpus, warmup_batch_sizes=[1, 2], store_tensors=stored)
    ready = await exchange(worker, load)
    assert isinstance(ready, p.Ready), ready
    return worker, ready, from_template


async def serve_once(worker: LaunchedWorker) -> bytes:
    result = await exchange(worker, run_batch())
    assert isinstance(result, p.BatchResult), result
    return result.outputs["probabilities"].data


async def start_template(
    templates: TemplateCache,
    zygote: ZygoteLauncher,
    store: TensorStore,
    launched: list[LaunchedWorker],
) -> Template:
    """Two instances, both forked from the zygote; the second starts the model's template."""
    _, _, first_from_template = await start("i1", templates, zygote, store, launched)
    assert not first_from_template
    assert await templates.wait_started("i1") is None  # one instance: no template
    _, _, second_from_template = await start("i2", templates, zygote, store, launched)
    assert not second_from_template  # it started the template but did not wait for it
    template = await templates.wait_started("i2")
    assert template is not None
    return template


async def test_later_instances_fork_from_the_template_and_answer_alike(
    templates: TemplateCache,
    zygote: ZygoteLauncher,
    store: TensorStore,
    launched: list[LaunchedWorker],
) -> None:
    template = await start_template(templates, zygote, store, launched)
    assert template.pid != zygote.pid
    assert psutil.Process(template.pid).ppid() == zygote.pid
    assert template.ready.start.build_ms > 0  # the template built the model

    third, ready, from_template = await start("i3", templates, zygote, store, launched)
    assert from_template
    assert psutil.Process(third.pid).ppid() == template.pid
    assert ready.start.build_ms == 0.0  # nothing built: the template's module, as is
    assert set(ready.exec_ms) == {1, 2}  # but its own warm-up, timed on its own cores
    assert templates.template_of("i3") == template.key.template_id
    assert templates.template_of("i1") is None
    stored = store.publish(MODEL, TENANT)
    assert maps_file(third.pid, stored[0].path)  # the store's file, mapped
    assert template.key.template_id in store.holders(TENANT, stored[0].path.rsplit("/", 1)[1])

    assert await serve_once(launched[0]) == await serve_once(third)
    [described] = templates.describe()
    assert described.pid == template.pid
    assert described.instances == ["i3"]


async def test_the_template_goes_with_the_models_last_instance(
    templates: TemplateCache,
    zygote: ZygoteLauncher,
    store: TensorStore,
    launched: list[LaunchedWorker],
) -> None:
    template = await start_template(templates, zygote, store, launched)
    await start("i3", templates, zygote, store, launched)
    assert template.key.template_id in templates.holder_ids()

    for instance_id in ("i1", "i2"):
        templates.release(instance_id)
        store.release(instance_id)
    assert templates.describe() != []  # i3 still runs: the template stays
    templates.release("i3")
    store.release("i3")
    assert templates.describe() == []
    assert templates.holder_ids() == []
    assert store.live_set() == set()  # the template's holds went with it
    assert await zygote.wait_exit(template.pid) == 0  # EOF on its control socket: it exits


async def test_a_killed_template_is_replaced_and_its_instances_keep_serving(
    templates: TemplateCache,
    zygote: ZygoteLauncher,
    store: TensorStore,
    launched: list[LaunchedWorker],
) -> None:
    template = await start_template(templates, zygote, store, launched)
    child, _, _ = await start("i3", templates, zygote, store, launched)
    os.kill(template.pid, signal.SIGKILL)
    assert await zygote.wait_exit(template.pid) == -signal.SIGKILL
    expected = await serve_once(child)  # forked children do not depend on their template

    _, _, from_template = await start("i4", templates, zygote, store, launched)
    assert not from_template  # the dead template is being replaced; i4 did not wait
    replacement = await templates.wait_started("i4")
    assert replacement is not None
    assert replacement.pid != template.pid
    fifth, _, from_template = await start("i5", templates, zygote, store, launched)
    assert from_template
    assert await serve_once(fifth) == expected


async def test_an_instance_with_two_cores_runs_two_threads_from_a_one_thread_template(
    templates: TemplateCache,
    zygote: ZygoteLauncher,
    store: TensorStore,
    launched: list[LaunchedWorker],
) -> None:
    template = await start_template(templates, zygote, store, launched)
    assert template.client.ready is not None
    assert template.client.ready.threads == 1  # forking it is safe
    worker, _, from_template = await start("i3", templates, zygote, store, launched, cpus=2)
    assert from_template
    answer = await serve_once(worker)
    assert psutil.Process(worker.pid).num_threads() >= 2  # OpenMP started its pool after fork
    assert answer == await serve_once(launched[0])


def test_the_gateway_forks_a_models_instances_from_its_template(tmp_path: Path) -> None:
    functions = [
        {"name": "cifar", "image": "resnet-20", "slo_ms": 5000, "max_batch": 2, "instances": 2}
    ]
    with start_gateway(tmp_path, functions) as gw:
        first = gw.instances("cifar")
        assert [i["template"] for i in first] == [None, None]  # forked from the zygote
        deadline = time.monotonic() + 60
        while not gw.json("GET", "/system/templates") and time.monotonic() < deadline:
            time.sleep(0.1)  # the second instance started the template beside it
        [template] = gw.json("GET", "/system/templates")
        assert template["instances"] == []
        gw.json("POST", "/system/scale-function/cifar", {"replicas": 4})
        ready = gw.wait_ready("cifar", 4)
        later = [i for i in ready if i["id"] not in {f["id"] for f in first}]
        assert {i["template"] for i in later} == {template["id"]}
        assert {psutil.Process(i["pid"]).ppid() for i in later} == {template["pid"]}
        assert all(i["start"]["buildMs"] == 0.0 for i in later)
        [template] = gw.json("GET", "/system/templates")
        assert sorted(template["instances"]) == sorted(i["id"] for i in later)
        status, _, body = gw.request("POST", "/function/cifar", IMAGE)
        assert status == 200, body

        gw.json("POST", "/system/scale-function/cifar", {"replicas": 0})
        deadline = time.monotonic() + 30
        while gw.json("GET", "/system/templates") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gw.json("GET", "/system/templates") == []  # no instance, no template

        def template_gone() -> bool:  # it exits on its own once closed (children live on)
            return not psutil.pid_exists(template["pid"]) or (
                psutil.Process(template["pid"]).status() == psutil.STATUS_ZOMBIE
            )

        deadline = time.monotonic() + 10
        while not template_gone() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert template_gone()
