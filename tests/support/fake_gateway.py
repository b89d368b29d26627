"""A stand-in for the infless gateway's HTTP API, for loadgen tests only (loopback, in-process).

Serves the routes loadgen uses: POST /function/{name} (checks the body against the signature,
answers with the timing headers), GET /system/functions, /system/function/{name},
/system/instances, /healthz. Function "broken" answers 500; "limited" answers 429 on every
other request; `delay_ms` slows a function down (for timeouts). `serve` runs on the caller's
loop, `serve_in_thread` on its own (for code that calls asyncio.run itself).
Run alone for manual tries: `python -m tests.support.fake_gateway 8099`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

MNIST = {
    "name": "mnist",
    "slo_ms": 200.0,
    "max_batch": 8,
    "inputs": [{"name": "image", "dtype": "float32", "shape": [1, 28, 28]}],
}
BERT = {
    "name": "bert",
    "slo_ms": 50.0,
    "max_batch": 4,
    "inputs": [
        {"name": "input_ids", "dtype": "int64", "shape": [-1], "vocabSize": 30522},
        {"name": "attention_mask", "dtype": "int64", "shape": [-1]},
    ],
}


def _shape_of(value: Any) -> tuple[int, ...]:
    shape: list[int] = []
    while isinstance(value, list):
        shape.append(len(value))
        value = value[0] if value else None
    return tuple(shape)


def _matches(shape: tuple[int, ...], spec: list[int]) -> bool:
    return len(shape) == len(spec) and all(
        d < 0 or d == s for s, d in zip(shape, spec, strict=True)
    )


@dataclass
class FakeGateway:
    functions: list[dict[str, Any]] = field(default_factory=lambda: [MNIST])
    exec_ms: float = 1.0
    delay_ms: dict[str, float] = field(default_factory=dict)  # extra per-function delay
    received: dict[str, int] = field(default_factory=dict)
    bad_bodies: list[str] = field(default_factory=list)
    _warm: set[str] = field(default_factory=set)

    def status(self, fn: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": fn["name"],
            "image": fn["name"],
            "replicas": 1,
            "availableReplicas": 1,
            "invocationCount": self.received.get(fn["name"], 0),
            "labels": {},
            "annotations": {"com.infless.latency_target": f"{fn['slo_ms']:g}ms"},
            "latencyTargetMs": fn["slo_ms"],
            "maxBatch": fn["max_batch"],
            "signature": {"inputs": fn["inputs"], "outputs": []},
        }

    def _find(self, name: str) -> dict[str, Any] | None:
        return next((f for f in self.functions if f["name"] == name), None)

    async def invoke(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        fn = self._find(name)
        if fn is None:
            return web.json_response(
                {"error": f"no function {name}", "code": "not_found"}, status=404
            )
        count = self.received[name] = self.received.get(name, 0) + 1
        body = orjson.loads(await request.read())
        inputs = fn["inputs"]
        values = body.get("inputs")
        named = {inputs[0]["name"]: values} if len(inputs) == 1 else values
        if not isinstance(named, dict) or any(
            not _matches(_shape_of(named.get(i["name"])), i["shape"]) for i in inputs
        ):
            self.bad_bodies.append(name)
            return web.json_response({"error": "bad input", "code": "invalid_input"}, status=422)
        if name == "broken":
            return web.json_response({"error": "worker died", "code": "worker_failed"}, status=500)
        if name == "limited" and count % 2 == 0:
            return web.json_response(
                {"error": "busy", "code": "overloaded"}, status=429, headers={"Retry-After": "1"}
            )
        await asyncio.sleep((self.exec_ms + self.delay_ms.get(name, 0.0)) / 1000.0)
        cold = name not in self._warm
        self._warm.add(name)
        headers = {
            "X-Call-Id": f"{name}-{count}",
            "X-Duration-Seconds": f"{(self.exec_ms + 0.5) / 1000.0:.6f}",
            "X-Infless-Instance": f"{name}-0",
            "X-Infless-Batch-Size": str(1 + count % fn["max_batch"]),
            "X-Infless-Queue-Ms": "0.5",
            "X-Infless-Exec-Ms": f"{self.exec_ms:.3f}",
            "X-Infless-Cold-Start": "true" if cold else "false",
        }
        if cold:
            headers["X-Infless-Cold-Start-Ms"] = "2.0"
        return web.Response(
            body=b'{"outputs": [0.1, 0.9]}', content_type="application/json", headers=headers
        )

    async def list_functions(self, request: web.Request) -> web.Response:
        return web.json_response([self.status(f) for f in self.functions])

    async def one_function(self, request: web.Request) -> web.Response:
        fn = self._find(request.match_info["name"])
        if fn is None:
            return web.json_response({"error": "unknown", "code": "not_found"}, status=404)
        return web.json_response(self.status(fn))

    async def instances(self, request: web.Request) -> web.Response:
        return web.json_response(
            [
                {
                    "id": f"{f['name']}-0",
                    "function": f["name"],
                    "batchSize": f["max_batch"],
                    "cpus": 1,
                    "gpuPct": 0,
                    "pid": 1,
                    "state": "ready",
                    "served": self.received.get(f["name"], 0),
                    "failed": 0,
                    "queueLength": 0,
                }
                for f in self.functions
            ]
        )

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/function/{name}", self.invoke)
        app.router.add_get("/system/functions", self.list_functions)
        app.router.add_get("/system/function/{name}", self.one_function)
        app.router.add_get("/system/instances", self.instances)
        app.router.add_get("/healthz", self.healthz)
        return app


@contextlib.asynccontextmanager
async def serve(gateway: FakeGateway, port: int = 0) -> AsyncIterator[str]:
    """Serve on 127.0.0.1 (a free port by default); yields the base URL."""
    runner = web.AppRunner(gateway.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound_port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{bound_port}"
    finally:
        await runner.cleanup()


@contextlib.contextmanager
def serve_in_thread(gateway: FakeGateway) -> Iterator[str]:
    """Serve from a daemon thread with its own event loop; yields the base URL."""
    loop = asyncio.new_event_loop()
    urls: list[str] = []
    started = threading.Event()
    stop = asyncio.Event()

    async def main() -> None:
        async with serve(gateway) as url:
            urls.append(url)
            started.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    try:
        assert started.wait(timeout=10), "fake gateway did not start"
        yield urls[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
        loop.close()


async def _main(port: int) -> None:
    async with serve(FakeGateway(functions=[MNIST, BERT], exec_ms=0.0), port) as url:
        print(url, flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_main(int(sys.argv[1]) if len(sys.argv) > 1 else 8099))
