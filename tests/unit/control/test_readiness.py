"""Readiness bookkeeping (`control.readiness`): not ready before the functions are restored,
then until each startup function settled once (ready, scaled to zero, or failed — reported,
not waited for); ready stays ready while a function is replaced or another deploys."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from infless.control.failed import FailedDeployment
from infless.control.functions import DeployedFunction, StartHealth
from infless.control.readiness import Readiness
from infless.types import FunctionSpec


@dataclass
class Stub:
    """What readiness reads of a deployed function."""

    state: str
    health: StartHealth = field(default_factory=StartHealth)


def _readiness(functions: dict[str, Stub], failed: dict[str, FailedDeployment]) -> Readiness:
    return Readiness(cast(dict[str, DeployedFunction], functions), failed)


def test_not_ready_until_every_startup_function_settled_once() -> None:
    functions: dict[str, Any] = {"a": Stub("starting"), "b": Stub("starting")}
    spec = FunctionSpec("c", "missing", 50.0, 1, 1, 1, 1)
    failed = {"c": FailedDeployment(spec, "image 'missing' is not a package")}
    readiness = _readiness(functions, failed)
    assert not readiness.report().ready  # still restoring
    readiness.started(["a", "b", "c"])
    report = readiness.report()
    assert not report.ready
    assert report.starting == ("a", "b")
    assert report.failed == {"c": "image 'missing' is not a package"}

    functions["a"].state = "ready"
    functions["b"].state = "failed"
    functions["b"].health.last_error = "worker exited (code 1)"
    report = readiness.report()
    assert report.ready
    assert report.failed == {"b": "worker exited (code 1)", "c": failed["c"].error}


def test_once_ready_a_replacement_or_a_new_deploy_does_not_take_it_out_of_service() -> None:
    functions: dict[str, Any] = {"a": Stub("idle")}  # scaled to zero: it answers (cold)
    readiness = _readiness(functions, {})
    readiness.started(["a"])
    assert readiness.report().ready
    functions["a"].state = "starting"  # its worker died and is being replaced
    functions["b"] = Stub("starting")  # deployed after startup
    assert readiness.report().ready


def test_a_startup_function_removed_before_it_settled_is_not_waited_for() -> None:
    functions: dict[str, Any] = {"a": Stub("starting")}
    readiness = _readiness(functions, {})
    readiness.started(["a"])
    assert not readiness.report().ready
    del functions["a"]
    assert readiness.report().ready
