"""The model-less status views: `describe` and `models` answer frozen structs whose JSON
has the keys, in the order, that clients have always read (snake_case for the stored
records, camelCase for the live figures, absent where a variant has none)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import msgspec
import pytest

from infless.config import Config
from infless.control.modelless import ModellessService, progress_of
from infless.control.service import FunctionService
from infless.errors import FunctionNotFound
from infless.modelless.catalog import ModelEntry, ModellessCatalog
from infless.modelless.profiles import GenerationProgress, Goals
from infless.modelless.states import VariantState
from infless.modelless.views import VIEW_TYPES, ModelView
from infless.models.resolver import PackageResolver
from infless.registry.variants import RegisteredModel, VariantStore
from tests.support.clock import FakeClock
from tests.unit.modelless.support import profile, three_variants

RECORD_KEYS = [
    "model",
    "image",
    "slo_ms",
    "max_batch",
    "metric",
    "status",
    "error",
    "registered_at",
    "generation_s",
]
PROFILE_KEYS = [
    "model",
    "name",
    "transform",
    "status",
    "error",
    "package_dir",
    "accuracy",
    "metric",
    "latency",
    "load_ms",
    "peak_memory_bytes",
    "gpu_error",
]
READY_KEYS = ["function", "sloProblem", "meetsSlo", "config"]
LIVE_KEYS = ["state", "served", "capacityFactor", "released"]


def service(tmp_path: Path) -> tuple[ModellessService, ModellessCatalog]:
    """A service over a store holding model `m` (three variants that fit the SLO, one too
    slow for it, one failed) and `g` (generating); `m` is in the catalogue."""
    store = VariantStore(tmp_path / "registry.db")
    ready = RegisteredModel(model="m", image="img", slo_ms=50.0, max_batch=8, status="ready")
    store.put_model(ready)
    store.put_model(RegisteredModel(model="g", image="img", slo_ms=50.0, max_batch=8))
    slow = profile("slow", 0.9, 400.0, 1.0)
    failed = profile("bad", 0.5, 1.0, 1.0, status="failed")
    store.put_variants("m", [*three_variants(), slow, failed])
    store.put_app("m", "strict", Goals(None, 0.99, 1.0))
    catalog = ModellessCatalog()
    entry = ModelEntry(
        model="m",
        slo_ms=50.0,
        profiles=tuple(store.variants("m")),
        apps=store.apps("m"),
        states={"fp32": VariantState.ACTIVE},
        target="fp32",
        released=frozenset({"int8"}),
        switches=2,
    )
    catalog.publish(entry)
    entry.traffic.served["fp32"] = 7
    entry.traffic.spilled = 3
    svc = ModellessService(
        config=Config(),
        clock=FakeClock(),
        store=store,
        catalog=catalog,
        functions=cast(FunctionService, None),  # describing never deploys
        resolver=PackageResolver(tmp_path / "repository"),
        deployed={},
    )
    return svc, catalog


def rendered(view: object) -> Any:
    return msgspec.json.decode(msgspec.json.encode(view))


def test_a_model_view_keeps_its_keys_and_their_order(tmp_path: Path) -> None:
    svc, _ = service(tmp_path)
    view = svc.describe("m")
    assert isinstance(view, ModelView)
    document = rendered(view)
    extra = ["progress", "apps", "target", "overflow", "switches", "spilled", "variants"]
    assert list(document) == RECORD_KEYS + extra
    assert document["apps"] == {
        "strict": {"latency_ms": None, "min_accuracy": 0.99, "cost_weight": 1.0}
    }
    assert (document["target"], document["switches"], document["spilled"]) == ("fp32", 2, 3)
    variants = {v["name"]: v for v in document["variants"]}
    assert list(variants) == ["fp32", "bf16", "int8", "slow", "bad"]
    fp32 = variants["fp32"]
    assert list(fp32) == PROFILE_KEYS + READY_KEYS + LIVE_KEYS
    assert (fp32["function"], fp32["state"], fp32["served"]) == ("m--fp32", "active", 7)
    assert (fp32["meetsSlo"], fp32["sloProblem"], fp32["released"]) == (True, None, False)
    assert list(fp32["config"]) == ["batchSize", "cpus", "qps", "costPerRequest"]
    assert variants["bf16"]["state"] == "inactive"  # in the catalogue, not seen serving
    assert variants["int8"]["released"] is True
    # ready but no configuration fits the SLO: a function, no card, so no live figures
    slow = variants["slow"]
    assert list(slow) == PROFILE_KEYS + READY_KEYS
    assert (slow["meetsSlo"], slow["config"]) == (False, None)
    assert "cannot meet the 50-ms SLO" in slow["sloProblem"]
    assert list(variants["bad"]) == PROFILE_KEYS  # failed: its profile only


def test_a_generating_model_has_no_catalogue_figures(tmp_path: Path) -> None:
    svc, _ = service(tmp_path)
    document = rendered(svc.describe("g"))
    assert (document["status"], document["target"], document["variants"]) == (
        "generating",
        None,
        [],
    )
    assert [m["model"] for m in rendered(svc.models())] == ["g", "m"]
    assert list(rendered(svc.models())[0]) == RECORD_KEYS
    with pytest.raises(FunctionNotFound, match="GET /system/models"):
        svc.describe("nothing")


def test_an_application_added_reaches_the_catalogue_through_its_writer(tmp_path: Path) -> None:
    svc, catalog = service(tmp_path)
    before = catalog.get("m")
    svc.put_app("m", {"id": "fast", "latencyMs": 20.0})
    after = catalog.get("m")
    assert before is not None
    assert after is not None
    assert set(after.apps) == {"strict", "fast"}
    assert set(before.apps) == {"strict"}  # a reader's entry never changes under it
    assert after.traffic is before.traffic  # the request path's counters carry on


def test_the_generators_progress_is_shown_with_its_keys() -> None:
    progress = progress_of(b'{"progress": {"done": 1, "total": 3, "step": "bf16"}}\n')
    assert progress == GenerationProgress(done=1, total=3, step="bf16")
    assert progress_of(b'{"progress": "half"}\n') is None  # malformed: not progress
    record = RegisteredModel(model="m", image="img", slo_ms=50.0, max_batch=8)
    view = ModelView(**msgspec.structs.asdict(record), progress=progress)
    assert rendered(view)["progress"] == {"done": 1, "total": 3, "step": "bf16"}


def test_the_views_give_a_json_schema_with_the_clients_keys() -> None:
    _, components = msgspec.json.schema_components(VIEW_TYPES)
    assert {"ModelView", "VariantView", "VariantConfigView", "GenerationProgress"} <= set(
        components
    )
    variant = components["VariantView"]["properties"]
    assert {"package_dir", "sloProblem", "meetsSlo", "capacityFactor"} <= set(variant)
    assert set(components["VariantConfigView"]["properties"]) == {
        "batchSize",
        "cpus",
        "qps",
        "costPerRequest",
    }
