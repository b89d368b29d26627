"""Secret bodies (faas-provider's Secret) and the secret store: root-only files, atomic writes,
names listed, values never shown."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest

from infless.errors import BadRequest, SecretExists, SecretNotFound
from infless.registry.secrets import MAX_SECRET_BYTES, Secret, SecretStore, parse_secret


def test_a_secret_is_text_value_or_base64_raw_value() -> None:
    assert parse_secret({"name": "db", "value": "pässword"}) == Secret("db", "pässword".encode())
    raw = bytes(range(256))
    body = {"name": "blob", "rawValue": base64.b64encode(raw).decode(), "namespace": "openfaas-fn"}
    assert parse_secret(body).value == raw
    assert parse_secret({"name": "empty", "value": ""}).value == b""
    assert parse_secret({"name": "db"}, with_value=False) == Secret("db")
    assert "pässword" not in repr(parse_secret({"name": "db", "value": "pässword"}))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "JSON object"),
        ({"value": "x"}, "name = None: a secret name is a non-empty string"),
        ({"name": "Db", "value": "x"}, "name = 'Db': a secret name is lowercase"),
        ({"name": "../etc", "value": "x"}, "name = '../etc'"),
        ({"name": "db"}, "value (text) or rawValue (base64) is required"),
        ({"name": "db", "value": 3}, "value: expected a string"),
        ({"name": "db", "rawValue": "not base64!"}, "rawValue of secret 'db': not valid base64"),
        ({"name": "db", "value": "a", "rawValue": "YQ=="}, "value or rawValue, not both"),
        ({"name": "db", "value": "x", "namespace": "other"}, "namespace = 'other'"),
        ({"name": "db", "value": "x" * (MAX_SECRET_BYTES + 1)}, f"at most {MAX_SECRET_BYTES}"),
    ],
)
def test_bad_secret_bodies_are_400s_naming_the_field(body: object, message: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_secret(body)
    assert message in str(info.value)
    assert "x" * 20 not in str(info.value)  # a value is never echoed


def test_the_store_keeps_values_root_only_and_lists_names(tmp_path: Path) -> None:
    store = SecretStore(tmp_path / "secrets")
    assert stat.S_IMODE((tmp_path / "secrets").stat().st_mode) == 0o700
    store.create(Secret("db-password", b"hunter2"))
    store.create(Secret("api.key", b"\x00\xff"))
    path = tmp_path / "secrets" / "db-password"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert store.names() == ["api.key", "db-password"]
    assert store.exists("db-password")
    assert not store.exists("nope")
    assert not store.exists("../secrets")
    assert store.read("api.key") == b"\x00\xff"

    with pytest.raises(SecretExists, match="'db-password' already exists"):
        store.create(Secret("db-password", b"other"))
    assert store.read("db-password") == b"hunter2"
    store.replace(Secret("db-password", b"correct horse"))
    assert store.read("db-password") == b"correct horse"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    store.delete("api.key")
    assert store.names() == ["db-password"]
    for missing in (lambda: store.delete("api.key"), lambda: store.read("api.key")):
        with pytest.raises(SecretNotFound, match=r"'api\.key' does not exist"):
            missing()
    with pytest.raises(SecretNotFound, match="create it with POST"):
        store.replace(Secret("api.key", b"x"))
    assert sorted(p.name for p in (tmp_path / "secrets").iterdir()) == ["db-password"]

    again = SecretStore(tmp_path / "secrets")  # a restart finds them
    assert again.read("db-password") == b"correct horse"
