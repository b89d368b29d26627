"""Model-less serving on this gateway: registration, the variants' functions, the monitor.

`ModellessService.register` takes a registration (a model name, the fp32 package's image,
the SLO, a validation set, the applications' goals), stores it as "generating", and in the
background runs the variant generator (`python -m infless.modelless.generate`, a process
of its own: it imports torch and loads each variant in a fresh child) into the model
repository (`<repository>/variants/<model>/<variant>/`); it then stores the profiles in the
metadata store (SQLite, `registry.variants`), deploys one function per ready variant
(`<model>--<variant>`, autoscaled, starting with no instance: Inactive) and puts the model
into the catalogue the request path selects from. `VariantMonitor.tick` (every
`modelless.monitor_s`) turns what each variant's instances did into its state
(`modelless.states`). Gateway side: no torch.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import re
import sys
from pathlib import Path

import msgspec
from msgspec.structs import replace

from infless.clock import Clock
from infless.config import Config
from infless.control.functions import DeployedFunction
from infless.control.service import FunctionService, rfc3339
from infless.dataplane.instance import InstanceState as LiveState
from infless.errors import FunctionExists, FunctionNotFound, InvalidDeployment
from infless.modelless.catalog import ModelEntry, ModellessCatalog
from infless.modelless.config import ModellessConfig
from infless.modelless.latency import profile_ms
from infless.modelless.profiles import TRANSFORMS, GenerationResult, Goals, variant_function
from infless.modelless.states import Tracked, WindowLoad, capacity_factor, next_state
from infless.models.resolver import PackageResolver
from infless.registry.variants import RegisteredModel, VariantStore
from infless.types import FunctionSpec

log = logging.getLogger(__name__)

MODEL_LABEL = "com.infless.model"
VARIANT_LABEL = "com.infless.variant"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
VALIDATION_SUFFIXES = (".npz", ".safetensors", ".txt")
MAX_VALIDATION_BYTES = 64 << 20


class AppGoals(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    id: str
    latency_ms: float | None = None
    min_accuracy: float = 0.0
    cost_weight: float = 1.0

    def goals(self) -> Goals:
        return Goals(self.latency_ms, self.min_accuracy, self.cost_weight)


class Validation(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    generate: int | None = None  # seeded random samples from the signature
    filename: str = ""  # or a file: .npz / .safetensors (tensors, `labels`), .txt (bodies)
    data: str = ""  # its bytes, base64


class Registration(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    model: str
    image: str
    slo_ms: float
    validation: Validation
    max_batch: int = 16
    metric: str = ""
    variants: list[str] = []
    cpus: list[int] = []
    apps: list[AppGoals] = []


def parse_registration(body: object) -> Registration:
    try:
        reg = msgspec.convert(body, type=Registration)
    except msgspec.ValidationError as exc:
        raise InvalidDeployment(f"registration: {exc}") from None
    if not _NAME.match(reg.model) or len(reg.model) > 40 or "--" in reg.model:
        raise InvalidDeployment(
            f"model {reg.model!r}: lowercase letters, digits and single dashes, at most 40"
        )
    if reg.slo_ms <= 0 or not 1 <= reg.max_batch <= 256:
        raise InvalidDeployment("registration: need sloMs > 0 and 1 <= maxBatch <= 256")
    unknown = [v for v in reg.variants if v not in TRANSFORMS]
    if unknown:
        raise InvalidDeployment(f"variants {unknown}: unknown; known: {', '.join(TRANSFORMS)}")
    v = reg.validation
    if (v.generate is None) == (not v.filename):
        raise InvalidDeployment("validation: give either generate (a count) or filename + data")
    if v.generate is not None and not 1 <= v.generate <= 4096:
        raise InvalidDeployment("validation.generate: between 1 and 4096 samples")
    if v.filename and not v.filename.endswith(VALIDATION_SUFFIXES):
        raise InvalidDeployment(
            f"validation.filename {v.filename!r}: expected {', '.join(VALIDATION_SUFFIXES)}"
        )
    for app in reg.apps:
        check_goals(app)
    return reg


def check_goals(app: AppGoals) -> None:
    if not _NAME.match(app.id):
        raise InvalidDeployment(f"application id {app.id!r}: lowercase letters, digits, dashes")
    if app.latency_ms is not None and app.latency_ms <= 0:
        raise InvalidDeployment(f"application {app.id!r}: latencyMs must be > 0")
    if not 0 <= app.min_accuracy <= 1 or not 0 <= app.cost_weight <= 1:
        raise InvalidDeployment(
            f"application {app.id!r}: minAccuracy and costWeight must be in [0, 1]"
        )


class ModellessService:
    def __init__(
        self,
        config: Config,
        clock: Clock,
        store: VariantStore,
        catalog: ModellessCatalog,
        functions: FunctionService,
        resolver: PackageResolver,
        deployed: dict[str, DeployedFunction],
    ) -> None:
        self._config = config
        self._clock = clock
        self._store = store
        self.catalog = catalog
        self._functions = functions
        self._resolver = resolver
        self._deployed = deployed
        self._jobs: dict[str, asyncio.Task[None]] = {}
        self.python = sys.executable

    @property
    def variants_root(self) -> Path:
        return self._config.model_repository / "variants"

    async def register(self, body: object) -> RegisteredModel:
        """Start a registration; it is "generating" until the variants are profiled."""
        reg = parse_registration(body)
        if reg.model in self._deployed and self.catalog.owner_of(reg.model) is None:
            raise FunctionExists(f"{reg.model!r} is a deployed function; choose another name")
        if reg.model in self._jobs:
            raise FunctionExists(f"model {reg.model!r} is being registered; wait for it")
        package_dir, _ = await self._resolver.resolve(reg.image)
        record = RegisteredModel(
            reg.model, reg.image, reg.slo_ms, reg.max_batch, reg.metric,
            registered_at=rfc3339(self._clock.wall()),
        )  # fmt: skip
        self._store.put_model(record)
        for app in reg.apps:
            self._store.put_app(reg.model, app.id, app.goals())
        work = self.variants_root / reg.model
        work.mkdir(parents=True, exist_ok=True)
        validation = self._write_validation(reg, work)
        task = asyncio.create_task(self._generate(reg, record, package_dir, validation))
        self._jobs[reg.model] = task
        task.add_done_callback(lambda _: self._jobs.pop(reg.model, None))
        return record

    def _write_validation(self, reg: Registration, work: Path) -> Path | None:
        v = reg.validation
        if v.generate is not None:
            return None
        try:
            data = base64.b64decode(v.data, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidDeployment("validation.data: not base64") from None
        if not data or len(data) > MAX_VALIDATION_BYTES:
            raise InvalidDeployment(
                f"validation.data: {len(data)} bytes (1 to {MAX_VALIDATION_BYTES} allowed)"
            )
        path = work / ("validation" + Path(v.filename).suffix)
        path.write_bytes(data)
        return path

    async def _generate(
        self, reg: Registration, record: RegisteredModel, package_dir: Path, validation: Path | None
    ) -> None:
        started = self._clock.now()
        try:
            result = await self._run_generator(reg, package_dir, validation)
            await self._install(reg, result)
        except Exception as exc:  # a failed registration is a state, not a crash
            log.exception("registering %s failed", reg.model)
            self._store.put_model(replace(record, status="failed", error=str(exc)[-2000:]))
            return
        self._store.put_model(
            replace(record, status="ready", metric=result.metric,
                    generation_s=round(self._clock.now() - started, 1))
        )  # fmt: skip
        log.info("model %s registered: %d variants", reg.model, len(result.variants))

    async def _run_generator(
        self, reg: Registration, package_dir: Path, validation: Path | None
    ) -> GenerationResult:
        args = [
            self.python, "-m", "infless.modelless.generate",
            "--package", str(package_dir), "--model", reg.model,
            "--out", str(self.variants_root / reg.model), "--max-batch", str(reg.max_batch),
            "--state-dir", str(self._config.state_dir),
        ]  # fmt: skip
        if validation is None:
            args += ["--generate", str(reg.validation.generate)]
        else:
            args += ["--validation", str(validation)]
        if reg.metric:
            args += ["--metric", reg.metric]
        if reg.variants:
            args += ["--variants", ",".join(reg.variants)]
        if reg.cpus:
            args += ["--cpus", ",".join(map(str, reg.cpus))]
        process = await asyncio.create_subprocess_exec(
            *args, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        stdout, stderr = await process.communicate()
        lines = [x for x in stdout.decode(errors="replace").splitlines() if x.strip()]
        if process.returncode != 0 or not lines:
            err = [x for x in stderr.decode(errors="replace").splitlines() if x.strip()]
            raise RuntimeError(
                f"variant generation failed (exit {process.returncode}): "
                f"{err[-1] if err else 'no output'}"
            )
        return msgspec.json.decode(lines[-1], type=GenerationResult)

    async def _install(self, reg: Registration, result: GenerationResult) -> None:
        """Store the profiles, deploy a function per ready variant, publish the model."""
        self._store.put_variants(reg.model, result.variants)
        ready = [p for p in result.variants if p.status == "ready"]
        if not ready:
            raise RuntimeError("no variant could be built: " + "; ".join(
                f"{p.name}: {p.error}" for p in result.variants))  # fmt: skip
        old = self.catalog.get(reg.model)
        keep = {variant_function(reg.model, p.name) for p in ready}
        if old is not None:
            for card in old.catalogue.cards:
                if card.function not in keep:
                    await self._remove_function(card.function)
        for profile in ready:
            await self._functions.put(self._variant_spec(reg, profile.name, profile.package_dir))
        self._publish(reg.model, reg.slo_ms)

    def _variant_spec(self, reg: Registration, variant: str, package_dir: str) -> FunctionSpec:
        return FunctionSpec(
            name=variant_function(reg.model, variant),
            image=package_dir,
            slo_ms=reg.slo_ms,
            max_batch=reg.max_batch,
            min_instances=0,
            max_instances=8,
            instances=0,
            labels={MODEL_LABEL: reg.model, VARIANT_LABEL: variant},
            created_at=rfc3339(self._clock.wall()),
        )

    def _publish(self, model: str, slo_ms: float) -> None:
        profiles = tuple(self._store.variants(model))
        entry = ModelEntry(model, slo_ms, profiles, self._store.apps(model))
        old = self.catalog.get(model)
        if old is not None:
            entry.target, entry.switches = old.target, old.switches
        self.catalog.put(entry)

    async def _remove_function(self, name: str) -> None:
        with contextlib.suppress(FunctionNotFound):
            await self._functions.remove(name)

    def restore(self) -> None:
        """After a restart: every ready model back into the catalogue (its variant functions
        come back with the function registry)."""
        for record in self._store.models():
            if record.status == "ready":
                self._publish(record.model, record.slo_ms)
            elif record.status == "generating":  # the gateway stopped mid-way
                self._store.put_model(
                    replace(record, status="failed", error="the gateway restarted while "
                            "generating; register again")
                )  # fmt: skip

    def put_app(self, model: str, body: object) -> AppGoals:
        try:
            app = msgspec.convert(body, type=AppGoals)
        except msgspec.ValidationError as exc:
            raise InvalidDeployment(f"application: {exc}") from None
        check_goals(app)
        if self._store.model(model) is None:
            raise FunctionNotFound(f"model {model!r} is not registered")
        self._store.put_app(model, app.id, app.goals())
        entry = self.catalog.get(model)
        if entry is not None:
            entry.apps[app.id] = app.goals()
        return app

    def describe(self, model: str) -> dict[str, object]:
        record = self._store.model(model)
        if record is None:
            raise FunctionNotFound(
                f"model {model!r} is not registered; GET /system/models lists them"
            )
        entry = self.catalog.get(model)
        variants = []
        for profile in self._store.variants(model):
            row: dict[str, object] = msgspec.to_builtins(profile)
            card = entry.card(profile.name) if entry else None
            if entry is not None and card is not None:
                row["state"] = entry.states.get(card.name, Tracked().state).value
                row["function"] = card.function
                row["config"] = {"batchSize": card.batch_size, "cpus": card.cpus,
                                 "qps": round(card.qps, 1),
                                 "costPerRequest": card.cost_per_request}  # fmt: skip
                row["served"] = entry.served.get(card.name, 0)
            variants.append(row)
        return {
            **msgspec.to_builtins(record),
            "apps": {k: msgspec.to_builtins(g) for k, g in self._store.apps(model).items()},
            "target": entry.target if entry else None,
            "switches": entry.switches if entry else 0,
            "variants": variants,
        }

    def models(self) -> list[dict[str, object]]:
        return [msgspec.to_builtins(m) for m in self._store.models()]

    async def remove(self, model: str) -> None:
        entry = self.catalog.remove(model)
        profiles = self._store.variants(model)
        if not self._store.delete_model(model) and entry is None:
            raise FunctionNotFound(f"model {model!r} is not registered")
        for profile in profiles:
            await self._remove_function(variant_function(model, profile.name))

    async def wait(self, model: str) -> None:
        """Until the model's registration job (if any) ends (tests, `--wait`)."""
        task = self._jobs.get(model)
        if task is not None:
            await asyncio.shield(task)

    async def stop(self) -> None:
        for task in list(self._jobs.values()):
            task.cancel()
        await asyncio.gather(*self._jobs.values(), return_exceptions=True)


class VariantMonitor:
    """Every `monitor_s`: each registered variant's state from its instances' last window."""

    def __init__(
        self,
        catalog: ModellessCatalog,
        functions: dict[str, DeployedFunction],
        cfg: ModellessConfig,
        clock: Clock,
    ) -> None:
        self._catalog = catalog
        self._functions = functions
        self._cfg = cfg
        self._clock = clock
        self._seen: dict[str, tuple[int, int, float, int]] = {}  # served, batches, exec, refused
        self._last_s: float | None = None

    def tick(self) -> None:
        now = self._clock.now()
        window = self._cfg.monitor_s if self._last_s is None else max(1e-3, now - self._last_s)
        self._last_s = now
        for entry in self._catalog.entries():
            for card in entry.catalogue.cards:
                function = self._functions.get(card.function)
                if function is None:
                    continue
                load = self._window(entry, card.name, function, window)
                prev = entry.tracked.get(card.name, Tracked())
                tracked = next_state(prev, load, self._cfg.states)
                if tracked.state is not prev.state:
                    log.info("modelless: %s is %s", card.function, tracked.state.value)
                entry.tracked[card.name] = tracked
                entry.states[card.name] = tracked.state
                entry.capacity[card.name] = capacity_factor(
                    entry.capacity.get(card.name, 1.0), tracked.state, load, card.qps,
                    self._cfg.capacity_recovery,
                )  # fmt: skip

    def _window(
        self, entry: ModelEntry, variant: str, function: DeployedFunction, window: float
    ) -> WindowLoad:
        ready = [i for i in function.router.instances if i.state is LiveState.READY]
        served = sum(i.served for i in ready)
        batches = sum(i.batches for i in ready)
        exec_total = sum(i.exec_ms_total for i in ready)
        refused = function.router.rejected
        s0, b0, e0, r0 = self._seen.get(function.name, (served, batches, exec_total, refused))
        self._seen[function.name] = (served, batches, exec_total, refused)
        d_served, d_batches = max(0, served - s0), max(0, batches - b0)
        mean_batch = d_served / d_batches if d_batches else 0.0
        batch_size = max((i.config.batch_size for i in ready), default=1)
        cpus = max((i.config.cpus for i in ready), default=1)
        return WindowLoad(
            replicas=len(ready),
            batch_size=batch_size,
            profiled_ms=profiled_ms(entry, variant, mean_batch or batch_size, cpus),
            window_s=window,
            completed=d_served,
            batches=d_batches,
            service_ms=max(0.0, exec_total - e0) if d_batches else 0.0,
            queued=sum(i.queue_length for i in ready),
            refused=max(0, refused - r0),
        )


def profiled_ms(entry: ModelEntry, variant: str, batch: float, cpus: int) -> float:
    """The profile's t_exec at a (mean) batch size and `cpus` cores (`latency.profile_ms`)."""
    profile = next((p for p in entry.profiles if p.name == variant), None)
    if profile is None or not profile.latency:
        return 1.0
    return profile_ms(profile, batch, cpus)
