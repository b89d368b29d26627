"""Secrets (OpenFaaS's secrets API): the `Secret` body, and the store under the state directory.

A body is faas-provider's `Secret`: `name`, `namespace`, and `value` (text) or `rawValue`
(bytes; base64 in JSON, as Go encodes a []byte). The store keeps one file per secret in
`<state>/secrets/` (the directory 0700, each file 0600, written whole then renamed into
place); values are read only when a worker that mounts them starts, and are never logged,
listed or returned. Secrets live in one namespace, `openfaas-fn`.
Shell side: file I/O, no clock; never imports torch.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import secrets as random
from dataclasses import dataclass, field
from pathlib import Path

from infless.errors import BadRequest, SecretExists, SecretNotFound
from infless.registry.runtime_fields import secret_name_problem

SECRETS_NAMESPACE = "openfaas-fn"
MAX_SECRET_BYTES = 256 * 1024  # each is copied into every worker's tmpfs that mounts it


@dataclass(frozen=True, slots=True)
class Secret:
    name: str
    value: bytes = field(default=b"", repr=False)


def _namespace(body: dict[str, object]) -> None:
    namespace = body.get("namespace")
    if namespace not in (None, "", SECRETS_NAMESPACE):
        raise BadRequest(
            f"namespace = {namespace!r}: secrets live in {SECRETS_NAMESPACE!r} only (leave it out)"
        )


def _value(body: dict[str, object], name: str) -> bytes:
    text, raw = body.get("value"), body.get("rawValue")
    if text not in (None, "") and raw not in (None, ""):
        raise BadRequest(f"secret {name!r}: give value or rawValue, not both")
    if raw not in (None, ""):
        if not isinstance(raw, str):
            raise BadRequest(f"rawValue: expected base64 text, got {type(raw).__name__}")
        try:
            value = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(f"rawValue of secret {name!r}: not valid base64") from None
    elif isinstance(text, str):
        value = text.encode()
    elif text is None:
        raise BadRequest(f"secret {name!r}: value (text) or rawValue (base64) is required")
    else:
        raise BadRequest(f"value: expected a string, got {type(text).__name__}")
    if len(value) > MAX_SECRET_BYTES:
        raise BadRequest(
            f"secret {name!r}: {len(value)} bytes; a secret holds at most {MAX_SECRET_BYTES}"
        )
    return value


def parse_secret(body: object, *, with_value: bool = True) -> Secret:
    """A `Secret` request body; without `with_value` (DELETE) only the name counts."""
    if not isinstance(body, dict):
        raise BadRequest('the body must be a JSON object like {"name": ..., "value": ...}')
    name = body.get("name")
    problem = secret_name_problem(name)
    if problem is not None:
        raise BadRequest(f"name = {name!r}: {problem}")
    assert isinstance(name, str)
    _namespace(body)
    return Secret(name, _value(body, name) if with_value else b"")


class SecretStore:
    """One file per secret under `root` (0700), readable by root only."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        root.chmod(0o700)

    def _path(self, name: str) -> Path:
        problem = secret_name_problem(name)
        if problem is not None:  # names become file names: never a path
            raise BadRequest(f"secret name {name!r}: {problem}")
        return self.root / name

    def names(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if secret_name_problem(p.name) is None)

    def exists(self, name: str) -> bool:
        return secret_name_problem(name) is None and self._path(name).is_file()

    def read(self, name: str) -> bytes:
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError:
            raise SecretNotFound(f"secret {name!r} does not exist") from None

    def _write_temporary(self, value: bytes) -> Path:
        temporary = self.root / f".tmp-{random.token_hex(8)}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            view = memoryview(value)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            temporary.unlink(missing_ok=True)
            raise
        os.close(fd)
        return temporary

    def create(self, secret: Secret) -> None:
        """A new secret; SecretExists when the name is taken."""
        target = self._path(secret.name)
        temporary = self._write_temporary(secret.value)
        try:
            os.link(temporary, target)  # atomic, and refuses an existing name
        except FileExistsError:
            raise SecretExists(
                f"secret {secret.name!r} already exists; update it with PUT /system/secrets"
            ) from None
        finally:
            temporary.unlink(missing_ok=True)

    def replace(self, secret: Secret) -> None:
        """A new value for an existing secret (workers started from now on see it)."""
        target = self._path(secret.name)
        if not target.is_file():
            raise SecretNotFound(
                f"secret {secret.name!r} does not exist; create it with POST /system/secrets"
            )
        temporary = self._write_temporary(secret.value)
        try:
            temporary.replace(target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                temporary.unlink()

    def delete(self, name: str) -> None:
        try:
            self._path(name).unlink()
        except FileNotFoundError:
            raise SecretNotFound(f"secret {name!r} does not exist") from None
