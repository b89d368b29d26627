"""The closed loop: the pure plan (clients, caps) and the client keeping exactly N requests
in flight against a tiny server, with credentials on every request it makes."""

from __future__ import annotations

import base64

import pytest

from loadgen.auth import Credentials
from loadgen.client import ClientConfig, OpenLoopClient
from loadgen.formats import PreparedRequest
from loadgen.workloads import ClosedLoopSpec, closed_loop_plan
from tests.unit.loadgen.http_stub import Stub, serve

BODY = (PreparedRequest("/function/count", "application/json", b'{"inputs": [1]}'),)


def test_clients_interleave_functions() -> None:
    plan = closed_loop_plan(ClosedLoopSpec(3, 10.0), ["a", "b"], 1000, 600.0)
    assert plan.clients == ("a", "b", "a", "b", "a", "b")
    assert plan.functions == ("a", "b")
    assert "3 client(s) per function" in plan.description


def test_the_caps_bound_sending() -> None:
    plan = closed_loop_plan(ClosedLoopSpec(2, 30.0), ["a"], 5, 10.0)
    assert plan.duration_s == 10.0  # max-duration-s wins over a longer duration
    assert plan.may_send(9.9, 4)
    assert not plan.may_send(10.0, 0)
    assert not plan.may_send(0.0, 5)


@pytest.mark.parametrize(
    ("concurrency", "duration_s", "message"),
    [(0, 1.0, "--concurrency 0"), (1, 0.0, "--duration-s 0.0")],
)
def test_bad_specs_name_the_flag(concurrency: int, duration_s: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClosedLoopSpec(concurrency, duration_s)


async def test_each_client_keeps_one_request_in_flight() -> None:
    stub = Stub()
    plan = closed_loop_plan(ClosedLoopSpec(3, 60.0), ["f"], 30, 600.0)
    async with (
        serve(stub) as url,
        OpenLoopClient(ClientConfig(url, poll_interval_s=0), 0.0, 3) as client,
    ):
        result = await client.run_closed(plan, {"f": BODY})
    assert len(result.records) == 30 == len(stub.requests)
    assert [r.index for r in result.records] == list(range(30))
    assert all(r.status == 200 and r.call_id for r in result.records)
    assert all(r.scheduled_s == r.sent_s for r in result.records)  # no schedule to lag behind
    assert stub.max_in_flight == 3
    assert stub.connections == 3  # one keep-alive connection per client
    assert result.not_sent == 0


async def test_credentials_go_on_invoke_requests_and_system_polls() -> None:
    seen: list[tuple[str, str]] = []
    stub = Stub()
    credentials = Credentials(token="tok", user="admin", password="pw")
    plan = closed_loop_plan(ClosedLoopSpec(1, 60.0), ["f"], 2, 600.0)
    async with serve(stub) as url:
        config = ClientConfig(url, poll_interval_s=0, credentials=credentials)
        async with OpenLoopClient(config, 0.0, 1) as client:
            await client.run_closed(plan, {"f": BODY})
            await client.get_json("/function/cl")  # any GET goes through the session
    seen = [(path, headers.get("authorization", "")) for path, headers, _ in stub.requests]
    basic = "Basic " + base64.b64encode(b"admin:pw").decode()
    assert seen == [("/function/count", "Bearer tok")] * 2 + [("/function/cl", basic)]
