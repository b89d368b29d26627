"""The Open Inference Protocol through the real tritonclient (HTTP, sync and aio) against a
real gateway: health, metadata, binary and JSON tensors, batches split into the batch
queues, errors, and the model repository. Outputs must equal the `/function` route's."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from tests.support.gateway import GatewayProcess, start_gateway

FUNCTIONS = [
    {"name": "mnist", "image": "mnist", "slo_ms": 200, "max_batch": 4},
    {"name": "textcnn-69", "image": "textcnn-69", "slo_ms": 200, "max_batch": 4},
]
RNG = np.random.default_rng(69)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with start_gateway(tmp_path_factory.mktemp("v2"), FUNCTIONS) as gw:
        yield gw


@pytest.fixture
def client(gateway: GatewayProcess) -> Iterator[httpclient.InferenceServerClient]:
    triton = httpclient.InferenceServerClient(url=gateway.url.removeprefix("http://"))
    yield triton
    triton.close()


def function_route(gw: GatewayProcess, name: str, sample: np.ndarray) -> np.ndarray:
    """What `/function/{name}` answers for one sample."""
    status, _, body = gw.request("POST", f"/function/{name}", {"inputs": sample.tolist()})
    assert status == 200, body
    return np.asarray(json.loads(body)["outputs"], dtype=np.float32)


def _infer(
    client: httpclient.InferenceServerClient,
    model: str,
    name: str,
    batch: np.ndarray,
    datatype: str,
    binary: bool,
) -> httpclient.InferResult:
    tensor = httpclient.InferInput(name, list(batch.shape), datatype)
    tensor.set_data_from_numpy(batch, binary_data=binary)
    wanted = [httpclient.InferRequestedOutput("probabilities", binary_data=binary)]
    return client.infer(model, [tensor], outputs=wanted, request_id=f"req-{binary}")


def test_health_and_metadata(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("mnist")
    assert client.is_model_ready("textcnn-69", "1")
    assert not client.is_model_ready("no-such-model")
    assert not client.is_model_ready("mnist", "7")

    server = client.get_server_metadata()
    assert server["name"] == "infless"
    assert "binary_tensor_data" in server["extensions"]

    mnist = client.get_model_metadata("mnist")
    assert mnist["name"] == "mnist"
    assert mnist["versions"] == ["1"]
    assert mnist["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 1, 28, 28]}]
    assert mnist["outputs"] == [{"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]}]
    tokens = client.get_model_metadata("textcnn-69", model_version="1")
    assert tokens["inputs"] == [{"name": "token_ids", "datatype": "INT64", "shape": [-1, 69]}]

    config = client.get_model_config("mnist")
    assert config["max_batch_size"] == 4
    assert config["input"][0]["data_type"] == "TYPE_FP32"

    with pytest.raises(InferenceServerException) as missing:
        client.get_model_metadata("no-such-model")
    assert missing.value.status() == "404"
    assert "no-such-model" in str(missing.value.message())
    with pytest.raises(InferenceServerException) as no_version:
        client.get_model_metadata("mnist", model_version="2")
    assert no_version.value.status() == "404"


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_float_batch_equals_the_function_route(
    gateway: GatewayProcess, client: httpclient.InferenceServerClient, binary: bool
) -> None:
    batch = RNG.random((6, 1, 28, 28), dtype=np.float32)  # more rows than the max batch of 4
    result = _infer(client, "mnist", "image", batch, "FP32", binary)
    outputs = result.as_numpy("probabilities")
    assert outputs is not None
    assert outputs.shape == (6, 10)
    assert outputs.dtype == np.float32
    response = result.get_response()
    assert response["id"] == f"req-{binary}"
    assert response["model_name"] == "mnist"
    for row in range(6):
        expected = function_route(gateway, "mnist", batch[row])
        np.testing.assert_allclose(outputs[row], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_token_batch_equals_the_function_route(
    gateway: GatewayProcess, client: httpclient.InferenceServerClient, binary: bool
) -> None:
    batch = RNG.integers(0, 12000, size=(5, 69), dtype=np.int64)
    outputs = _infer(client, "textcnn-69", "token_ids", batch, "INT64", binary).as_numpy(
        "probabilities"
    )
    assert outputs is not None
    assert outputs.shape == (5, 20)
    np.testing.assert_allclose(outputs.sum(axis=1), 1.0, rtol=1e-4)
    for row in range(5):
        expected = function_route(gateway, "textcnn-69", batch[row])
        np.testing.assert_allclose(outputs[row], expected, rtol=1e-5, atol=1e-6)


def test_gzip_requests_are_read_and_answers_stay_uncompressed(
    gateway: GatewayProcess, client: httpclient.InferenceServerClient
) -> None:
    batch = RNG.random((3, 1, 28, 28), dtype=np.float32)
    image = httpclient.InferInput("image", list(batch.shape), "FP32")
    image.set_data_from_numpy(batch)
    result = client.infer(
        "mnist",
        [image],
        request_compression_algorithm="gzip",
        response_compression_algorithm="gzip",
    )
    outputs = result.as_numpy("probabilities")
    assert outputs is not None
    np.testing.assert_allclose(
        outputs[1], function_route(gateway, "mnist", batch[1]), rtol=1e-5, atol=1e-6
    )


def test_unnamed_outputs_come_back_binary_for_tritonclient(
    client: httpclient.InferenceServerClient,
) -> None:
    batch = RNG.random((2, 1, 28, 28), dtype=np.float32)
    for binary in (True, False):
        tensor = httpclient.InferInput("image", [2, 1, 28, 28], "FP32")
        tensor.set_data_from_numpy(batch, binary_data=binary)
        # No outputs named: tritonclient sets binary_data_output, the answer follows it.
        result = client.infer("mnist", [tensor])
        outputs = result.as_numpy("probabilities")
        assert outputs is not None
        assert outputs.shape == (2, 10)
        assert result.get_output("probabilities")["parameters"]["binary_data_size"] == 80


def test_plain_json_request_without_tritonclient(gateway: GatewayProcess) -> None:
    """What curl sends: JSON only, nested data, no binary anywhere."""
    sample = RNG.random((1, 28, 28), dtype=np.float32)
    request = {
        "id": "curl-1",
        "inputs": [
            {
                "name": "image",
                "shape": [2, 1, 28, 28],
                "datatype": "FP32",
                "data": [sample.tolist()] * 2,
            }
        ],
    }
    status, headers, body = gateway.request("POST", "/v2/models/mnist/infer", request)
    assert status == 200, body
    assert headers["Content-Type"].startswith("application/json")
    assert "Inference-Header-Content-Length" not in headers
    answer = json.loads(body)
    assert answer["id"] == "curl-1"
    (output,) = answer["outputs"]
    assert output["shape"] == [2, 10]
    values = np.asarray(output["data"], dtype=np.float32).reshape(2, 10)
    np.testing.assert_allclose(values[0], function_route(gateway, "mnist", sample), rtol=1e-5)


def test_errors_are_json_with_the_right_status(client: httpclient.InferenceServerClient) -> None:
    tokens = np.zeros((2, 69), dtype=np.int32)
    cases: list[tuple[str, str, np.ndarray, str, str, str]] = [
        ("textcnn-69", "token_ids", tokens, "INT32", "400", "expected INT64"),
        ("mnist", "image", np.zeros((2, 28, 28), np.float32), "FP32", "400", "shape"),
        ("mnist", "pixels", np.zeros((1, 1, 28, 28), np.float32), "FP32", "400", "pixels"),
        ("ghost", "image", np.zeros((1, 1, 28, 28), np.float32), "FP32", "404", "ghost"),
    ]
    for model, name, batch, datatype, status, words in cases:
        for binary in (True, False):
            tensor = httpclient.InferInput(name, list(batch.shape), datatype)
            tensor.set_data_from_numpy(batch, binary_data=binary)
            with pytest.raises(InferenceServerException) as failure:
                client.infer(model, [tensor])
            assert failure.value.status() == status, (model, name, failure.value)
            assert words in str(failure.value.message())
    # The gateway still serves afterwards.
    assert client.infer("textcnn-69", [_tokens(tokens.astype(np.int64))]).as_numpy(
        "probabilities"
    ).shape == (2, 20)


def _tokens(batch: np.ndarray) -> httpclient.InferInput:
    tensor = httpclient.InferInput("token_ids", list(batch.shape), "INT64")
    tensor.set_data_from_numpy(batch)
    return tensor


async def test_the_aio_client_reads_uncompressed_answers(gateway: GatewayProcess) -> None:
    triton = aioclient.InferenceServerClient(url=gateway.url.removeprefix("http://"))
    try:
        assert await triton.is_server_ready()
        metadata = await triton.get_model_metadata("textcnn-69")
        assert metadata["outputs"][0]["shape"] == [-1, 20]
        tensor = aioclient.InferInput("token_ids", [3, 69], "INT64")
        tensor.set_data_from_numpy(np.ones((3, 69), dtype=np.int64))
        result = await triton.infer("textcnn-69", [tensor])
        outputs = result.as_numpy("probabilities")
        assert outputs is not None
        assert outputs.shape == (3, 20)
        np.testing.assert_allclose(outputs[0], outputs[2])
        with pytest.raises(InferenceServerException) as failure:
            await triton.get_model_metadata("ghost")
        assert failure.value.status() == "404"
    finally:
        await triton.close()


def test_repository_index_load_and_unload(
    gateway: GatewayProcess, client: httpclient.InferenceServerClient
) -> None:
    index = {entry["name"]: entry for entry in client.get_model_repository_index()}
    assert index["mnist"]["state"] == "READY"
    assert index["mnist"]["version"] == "1"
    assert index["resnet-20"]["state"] == "UNAVAILABLE"  # a zoo model, not deployed

    client.load_model("resnet-20")  # a zoo name: deployed with default settings
    assert any(f["name"] == "resnet-20" for f in gateway.json("GET", "/system/functions"))
    image = httpclient.InferInput("image", [1, 3, 32, 32], "FP32")
    image.set_data_from_numpy(np.zeros((1, 3, 32, 32), dtype=np.float32))
    outputs = client.infer("resnet-20", [image]).as_numpy("probabilities")  # waits: cold start
    assert outputs is not None
    assert outputs.shape == (1, 10)
    assert client.is_model_ready("resnet-20")

    client.unload_model("resnet-20")
    assert not client.is_model_ready("resnet-20")
    assert gateway.request("GET", "/system/function/resnet-20")[0] == 404
    with pytest.raises(InferenceServerException) as failure:
        client.unload_model("resnet-20")
    assert failure.value.status() == "404"
    with pytest.raises(InferenceServerException) as unknown:
        client.load_model("not-a-zoo-model")
    assert unknown.value.status() == "400"
