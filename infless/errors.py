"""The exception hierarchy and the one table that maps errors to HTTP statuses.

Every error a caller can see is an `InflessError` with a status, a stable `code`, a message
that names the field, the value and the fix, and optionally a Retry-After hint.
"""

from __future__ import annotations

from typing import ClassVar


class InflessError(Exception):
    """Base of every error that reaches a caller."""

    status: int = 500  # a class's own; `HandlerRefused` carries the one its handler raised
    code: ClassVar[str] = "internal"

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s

    def to_json(self) -> dict[str, object]:
        return {"error": self.message, "code": self.code}


class BadRequest(InflessError):
    status = 400
    code = "bad_request"


class InvalidInput(BadRequest):
    code = "invalid_input"


class MalformedBody(BadRequest):
    code = "malformed_body"


class InvalidDeployment(BadRequest):
    code = "invalid_deployment"


class BadContentEncoding(BadRequest):
    """A body that is not what its `Content-Encoding` says (not gzip, truncated)."""

    code = "bad_content_encoding"


class UnknownModel(BadRequest):
    code = "unknown_model"


class Unauthorized(InflessError):
    status = 401
    code = "unauthorized"


class FunctionNotFound(InflessError):
    status = 404
    code = "function_not_found"


class PackageNotFound(InflessError):
    status = 404
    code = "package_not_found"


class FunctionExists(InflessError):
    # faas-netes answers a duplicate create with a 500 from Kubernetes; 409 is the honest code
    # and faas-cli only special-cases 404 on PUT, so it is safe.
    status = 409
    code = "function_exists"


class TenantsNotIsolated(InflessError):
    """A function of a second tenant, where this gateway cannot keep tenants' workers apart
    (`tenancy.status.tenant_refusal`)."""

    status = 409
    code = "tenants_not_isolated"


class SecretNotFound(InflessError):
    status = 404
    code = "secret_not_found"


class SecretExists(InflessError):
    status = 409  # what faas-cli's `secret create` reports as "already exists"
    code = "secret_exists"


class PayloadTooLarge(InflessError):
    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(InflessError):
    status = 415
    code = "unsupported_media_type"


class InvalidPackage(InflessError):
    """An uploaded function package is unsafe or incomplete (a member, a manifest, a digest)."""

    status = 422
    code = "invalid_package"


class MissingRequirements(InflessError):
    """A package names distributions (`requirements`) this gateway's Python lacks."""

    status = 422
    code = "missing_requirements"


class InputMismatch(InflessError):
    status = 422
    code = "input_mismatch"


class GoalsUnmet(InflessError):
    """A model-less query's goals (latency, accuracy) that no variant of the model meets:
    the answer names the closest variants."""

    status = 422
    code = "goals_unmet"

    def __init__(self, message: str, *, closest: list[dict[str, object]]) -> None:
        super().__init__(message)
        self.closest = closest

    def to_json(self) -> dict[str, object]:
        return {**super().to_json(), "closest": self.closest}


class Overloaded(InflessError):
    status = 429
    code = "overloaded"


class InferenceFailed(InflessError):
    status = 500
    code = "inference_failed"


class HandlerRefused(InflessError):
    """A package's handler refused one request (`infless.handlers.HandlerError`, or it
    raised): the status it chose and its message."""

    code = "handler_error"

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class WorkerUnavailable(InflessError):
    status = 503
    code = "worker_unavailable"


class TooManyViewers(InflessError):
    """The live board has as many pages open as `ui.max_viewers` allows."""

    status = 503
    code = "too_many_viewers"


class FunctionFailed(InflessError):
    """A function that could not be deployed (its image or package is missing or broken):
    it stays listed as `failed` with the reason until it is redeployed or removed."""

    status = 503
    code = "function_failed"


class ConfigError(Exception):
    """A configuration file or value is invalid; raised at startup, never on the request path."""


class GatewayTimeout(InflessError):
    status = 504
    code = "timeout"


class RegistryUnavailable(InflessError):
    """The registry (`state/registry.sqlite`) cannot record a change now: another process
    holds its write lock, or the file is damaged. Nothing was changed."""

    status = 503
    code = "registry_unavailable"


class StateDiskFull(InflessError):
    """The state directory's file system is full: a change could not be recorded, and
    nothing was changed (507 Insufficient Storage)."""

    status = 507
    code = "state_disk_full"


class StateError(Exception):
    """The state directory cannot be used at startup (another gateway holds it, the
    registry is damaged or locked, the disk is full); the message names the file and the
    fix. `infless serve` prints it and exits 2."""
