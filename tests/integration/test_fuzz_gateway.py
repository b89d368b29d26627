"""Hypothesis fuzzing of a real gateway: hundreds of malformed (and some valid) requests on
the V2, invoke and system routes. No 5xx except a 503 the OpenAPI document names, every V2
error is JSON `{"error": ...}`, nothing hangs, and the gateway serves normally afterwards."""

from __future__ import annotations

import http.client
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infless.gateway.openapi import openapi_document
from infless.gateway.openapi_schemas import DATATYPES
from infless.gateway.v2.datatypes import NUMPY_BY_V2
from infless.models.zoo import ZOO
from tests.support.gateway import GatewayProcess, start_gateway

FUNCTIONS = [
    {"name": "mnist", "image": "mnist", "slo_ms": 50, "max_batch": 4},
    {"name": "textcnn-69", "image": "textcnn-69", "slo_ms": 50, "max_batch": 4},
]
TIMEOUT_S = 20.0  # a request slower than this counts as a hang
FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PATHS = openapi_document()["paths"]


def _template(path: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$")


TEMPLATES = [(_template(path), path) for path in PATHS]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=16,
)
names = st.sampled_from(["mnist", "textcnn-69", "ghost", "mnist.openfaas-fn"]) | st.text(
    st.characters(codec="ascii", exclude_characters="/?#"), min_size=1, max_size=12
)
datatypes = st.sampled_from([*DATATYPES, "BYTES", "BF16", "fp32", ""]) | json_values
shapes = st.lists(st.integers(-2, 70), max_size=5) | json_values
tensors = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["image", "token_ids", "x"]) | json_values,
        "datatype": datatypes,
        "shape": shapes,
    },
    optional={
        "data": json_values | st.lists(st.integers(-5, 12000) | st.floats(-1, 1), max_size=80),
        "parameters": st.fixed_dictionaries(
            {},
            optional={
                "binary_data_size": st.integers(-4, 4000) | json_values,
                "shared_memory_region": st.text(max_size=4),
            },
        )
        | json_values,
    },
)
outputs = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["probabilities", "nope"]) | json_values},
        optional={
            "parameters": st.dictionaries(
                st.sampled_from(["binary_data", "classification"]), scalars
            )
        },
    ),
    max_size=2,
)
infer_documents = st.fixed_dictionaries(
    {"inputs": st.lists(tensors, min_size=1, max_size=3) | st.lists(tensors) | json_values},
    optional={
        "id": json_values,
        "outputs": outputs | json_values,
        "parameters": st.dictionaries(st.sampled_from(["binary_data_output", "x"]), scalars),
    },
)


# Mostly the deployed models, so requests get past the model lookup.
model_names = st.sampled_from(["mnist", "textcnn-69"] * 3 + ["ghost", "mnist.openfaas-fn"])
SIGNATURES = [("mnist", "image", (1, 28, 28)), ("textcnn-69", "token_ids", (69,))]


@st.composite
def near_valid(draw: st.DrawFn) -> tuple[str, bytes, dict[str, str]]:
    """A request one mutation away from valid: right model and input name, then a drawn
    batch size (maybe 0), datatype, dimension tweak, value kind and binary size error."""
    model, name, sample_shape = draw(st.sampled_from(SIGNATURES))
    shape = [draw(st.integers(0, 3)), *sample_shape]
    if draw(st.integers(0, 3)) == 0:
        shape[draw(st.integers(0, len(shape) - 1))] += draw(st.sampled_from([-1, 1, 5]))
    datatype = draw(st.sampled_from(DATATYPES))
    count = int(np.prod(shape)) if min(shape) >= 0 else 0
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    tensor: dict[str, Any] = {"name": name, "datatype": datatype, "shape": shape}
    headers: dict[str, str] = {}
    blob = b""
    if draw(st.booleans()):
        itemsize = NUMPY_BY_V2[datatype].itemsize
        size = max(0, count * itemsize + draw(st.sampled_from([0, 0, 0, -1, 1, -itemsize])))
        blob = rng.bytes(size)
        tensor["parameters"] = {"binary_data_size": size}
    else:
        kind = draw(st.sampled_from(["int", "big", "float", "bool", "text", "mixed"]))
        values: list[Any]
        if kind == "int":
            values = rng.integers(-100, 12000, count).tolist()
        elif kind == "big":
            values = [2**63 + 5] * count
        elif kind == "float":
            values = rng.normal(0, 1e6, count).tolist()
        elif kind == "bool":
            values = [bool(v) for v in rng.random(count) < 0.5]
        elif kind == "text":
            values = ["x"] * count
        else:
            values = [1, "a", None, [2]] * (count // 4 + 1)
        values = values[: count + draw(st.sampled_from([0, 0, 0, -1, 1]))]
        tensor["data"] = values
    document: dict[str, Any] = {"inputs": [tensor]}
    if draw(st.booleans()):
        document["outputs"] = [{"name": "probabilities", "parameters": {"binary_data": True}}]
    header = _dumps(document)
    if blob or "parameters" in tensor:
        headers["Inference-Header-Content-Length"] = str(len(header))
    return model, header + blob, headers


def _dumps(value: object) -> bytes:
    return json.dumps(value).encode()  # stdlib: integers beyond 64 bits are fine here


def send(
    gw: GatewayProcess,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    host, port = gw.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT_S)
    try:
        connection.request(method, path, body=body or None, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def check(method: str, path: str, status: int, headers: dict[str, str], body: bytes) -> None:
    route = path.split("?", maxsplit=1)[0]
    documented = [t for pattern, t in TEMPLATES if pattern.match(route)]
    if status >= 500:
        assert status == 503, (method, path, status, body[:300])
        assert any("503" in op["responses"] for t in documented for op in PATHS[t].values())
        assert "Retry-After" in headers
    if method == "HEAD":
        return  # no body to check
    if route.startswith("/v2") and status >= 400:
        error = json.loads(body)
        assert isinstance(error["error"], str), body[:200]
    if route.startswith("/v2") and status == 200 and "Inference-Header-Content-Length" in headers:
        json.loads(body[: int(headers["Inference-Header-Content-Length"])])


def model_path(name: str, version: str | None, suffix: str) -> str:
    path = f"/v2/models/{quote(name, safe='')}"
    if version is not None:
        path += f"/versions/{quote(version, safe='')}"
    return path + suffix


def fuzz_infer(gw: GatewayProcess) -> None:
    @FUZZ
    @given(
        name=model_names,
        version=st.none() | st.sampled_from(["1", "1", "2"]),
        document=infer_documents,
        tail=st.binary(max_size=64),
        header_length=st.none() | st.sampled_from(["exact", "0", "-1", "x", "99999999"]),
        content_type=st.sampled_from(
            [None, "application/json", "application/octet-stream", "text/plain"]
        ),
    )
    def run(
        name: str,
        version: str | None,
        document: dict[str, Any],
        tail: bytes,
        header_length: str | None,
        content_type: str | None,
    ) -> None:
        header = _dumps(document)
        headers: dict[str, str] = {}
        if content_type is not None:
            headers["Content-Type"] = content_type
        body = header
        if header_length is not None:
            body = header + tail
            headers["Inference-Header-Content-Length"] = (
                str(len(header)) if header_length == "exact" else header_length
            )
        path = model_path(name, version, "/infer")
        check("POST", path, *send(gw, "POST", path, body, headers))

    run()


def fuzz_near_valid(gw: GatewayProcess) -> None:
    @FUZZ
    @given(request=near_valid())
    def run(request: tuple[str, bytes, dict[str, str]]) -> None:
        model, body, headers = request
        path = f"/v2/models/{model}/infer"
        check("POST", path, *send(gw, "POST", path, body, headers))

    run()


def fuzz_valid_binary_rows(gw: GatewayProcess) -> None:
    """Well-formed binary requests with any float bits (NaN, inf) or any token ids."""

    @settings(FUZZ, max_examples=30)
    @given(
        rows=st.integers(1, 5),
        seed=st.integers(0, 2**32 - 1),
        model=st.sampled_from(["mnist", "textcnn-69"]),
    )
    def run(rows: int, seed: int, model: str) -> None:
        rng = np.random.default_rng(seed)
        if model == "mnist":
            batch: np.ndarray = rng.integers(0, 2**32, (rows, 1, 28, 28), dtype=np.uint32).view(
                np.float32
            )
            name, datatype = "image", "FP32"
        else:
            batch = rng.integers(-(2**63), 2**63 - 1, (rows, 69), dtype=np.int64)
            name, datatype = "token_ids", "INT64"
        header = orjson.dumps(
            {
                "inputs": [
                    {
                        "name": name,
                        "datatype": datatype,
                        "shape": list(batch.shape),
                        "parameters": {"binary_data_size": batch.nbytes},
                    }
                ],
                "outputs": [
                    {"name": "probabilities", "parameters": {"binary_data": bool(seed % 2)}}
                ],
            }
        )
        path = f"/v2/models/{model}/infer"
        headers = {"Inference-Header-Content-Length": str(len(header))}
        status, reply_headers, body = send(gw, "POST", path, header + batch.tobytes(), headers)
        check("POST", path, status, reply_headers, body)
        assert status == 200, body[:300]

    run()


def fuzz_routes(gw: GatewayProcess) -> None:
    deployed = {f["name"] for f in FUNCTIONS}

    @FUZZ
    @given(
        kind=st.sampled_from(["model", "repository", "invoke", "system", "anything"]),
        name=names,
        suffix=st.sampled_from(["", "/ready", "/config", "/infer", "/stats", "/x/y"]),
        method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]),
        body=json_values.map(_dumps) | st.binary(max_size=64),
        query=st.dictionaries(
            st.sampled_from(
                ["name", "tail", "since", "follow", "instance", "namespace", "function"]
            ),
            st.text(max_size=8),
            max_size=3,
        ),
    )
    def run(
        kind: str, name: str, suffix: str, method: str, body: bytes, query: dict[str, str]
    ) -> None:
        quoted = quote(name, safe="")
        if kind == "model":
            path = model_path(name, None, suffix)
        elif kind == "repository":
            if name in ZOO or name in deployed:
                return  # never deploy or remove a real model from the fuzzer
            path = f"/v2/repository/models/{quoted}/{'load' if len(body) % 2 else 'unload'}"
            method = "POST"
        elif kind == "invoke":
            path = f"/function/{quoted}"
        elif kind == "system":
            if method in ("POST", "PUT", "DELETE") and any(
                k in body for k in (b"service", b"functionName")
            ):
                return  # random deployments or removals are out of scope
            query["follow"] = "false"
            path = f"/system/{'logs' if len(body) % 3 == 0 else 'function/' + quoted}"
            path += "?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
        else:
            path = f"/v2/{quoted}{suffix}"
        check(method, path, *send(gw, method, path, body))

    run()


def test_fuzzed_requests_never_break_the_gateway(tmp_path: Path) -> None:
    with start_gateway(tmp_path, FUNCTIONS) as gw:
        fuzz_infer(gw)
        fuzz_near_valid(gw)
        fuzz_routes(gw)
        fuzz_valid_binary_rows(gw)
        assert gw.process.poll() is None
        assert send(gw, "GET", "/v2/health/ready")[0] == 200
        request = {
            "inputs": [
                {"name": "token_ids", "datatype": "INT64", "shape": [1, 69], "data": [7] * 69}
            ]
        }
        status, _, body = send(gw, "POST", "/v2/models/textcnn-69/infer", orjson.dumps(request))
        assert status == 200, body
        assert len(json.loads(body)["outputs"][0]["data"]) == 20
        assert {i["state"] for i in gw.instances()} == {"ready"}
