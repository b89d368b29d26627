"""Model-less serving on this gateway: registration and the variants' functions.

`ModellessService.register` takes a registration: a model name, the fp32 package's image,
the SLO, a validation set and the applications' goals. It stores the model as
"generating" and runs the variant generator in the background
(`python -m infless.modelless.generate`, a process of its own: it imports torch and loads
each variant in a fresh child) into the model repository
(`<repository>/variants/<model>/<variant>/`). Then it stores the profiles in the metadata
store (SQLite, `registry.variants`), deploys one function per ready variant
(`<model>--<variant>`, autoscaled, starting with no instance: Inactive) and publishes the
model into the catalogue the request path selects from. The registration's wire format is
`registry.registration`'s; the variants' live states are `control.variant_monitor`'s.

Registration is one of the catalogue's writers, all in the control shell: it publishes
and withdraws models and their applications' goals. Its status answers are typed views
(`modelless.views`) that the gateway renders. Gateway side: no torch.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec
from msgspec.structs import replace

from infless.clock import Clock
from infless.config import Config
from infless.control.functions import DeployedFunction
from infless.control.service import FunctionService, rfc3339
from infless.errors import FunctionExists, FunctionNotFound, InvalidDeployment
from infless.modelless.cards import slo_problem
from infless.modelless.catalog import ModelEntry, ModellessCatalog
from infless.modelless.profiles import (
    PROGRESS_KEY,
    GenerationProgress,
    GenerationResult,
    ProgressLine,
    VariantProfile,
    variant_function,
)
from infless.modelless.states import VariantState
from infless.modelless.views import ModelView, VariantConfigView, VariantView
from infless.models.resolver import PackageResolver
from infless.registry.registration import AppGoals, Registration, check_goals, parse_registration
from infless.registry.variants import RegisteredModel, VariantStore
from infless.types import FunctionSpec

log = logging.getLogger(__name__)

MODEL_LABEL = "com.infless.model"
VARIANT_LABEL = "com.infless.variant"
MAX_VALIDATION_BYTES = 64 << 20
GENERATOR_LINE_BYTES = 64 << 20  # the generator's result is one JSON line


def progress_of(line: bytes) -> GenerationProgress | None:
    """A progress line of the generator (`{"progress": {...}}`), None for any other."""
    if not line.startswith(b'{"' + PROGRESS_KEY.encode()):
        return None
    try:
        return msgspec.json.decode(line, type=ProgressLine).progress
    except msgspec.DecodeError:  # the result line, or a malformed one
        return None


class ModellessService:
    """Registers models, deploys their variants' functions and describes them."""

    def __init__(
        self,
        *,
        config: Config,
        clock: Clock,
        store: VariantStore,
        catalog: ModellessCatalog,
        functions: FunctionService,
        resolver: PackageResolver,
        deployed: dict[str, DeployedFunction],
        gpu_target: Callable[[], tuple[str, str | None] | None] = lambda: None,
    ) -> None:
        """`gpu_target`: the GPU variants are measured on, as (uuid, MPS pipe directory or
        None), or None (the children measure on the first GPU they find, if any)."""
        self._gpu_target = gpu_target
        self._config = config
        self._clock = clock
        self._store = store
        self.catalog = catalog
        self._functions = functions
        self._resolver = resolver
        self._deployed = deployed
        self._jobs: dict[str, asyncio.Task[None]] = {}
        self._progress: dict[str, GenerationProgress] = {}  # by model, while generating
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
            model=reg.model,
            image=reg.image,
            slo_ms=reg.slo_ms,
            max_batch=reg.max_batch,
            metric=reg.metric,
            registered_at=rfc3339(self._clock.wall()),
        )
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
        generation_s = round(self._clock.now() - started, 1)
        ready = replace(record, status="ready", metric=result.metric, generation_s=generation_s)
        self._store.put_model(ready)
        log.info("model %s registered: %d variants", reg.model, len(result.variants))

    async def _run_generator(
        self, reg: Registration, package_dir: Path, validation: Path | None
    ) -> GenerationResult:
        process = await asyncio.create_subprocess_exec(
            *self._generator_args(reg, package_dir, validation),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=GENERATOR_LINE_BYTES,
        )
        assert process.stdout is not None
        assert process.stderr is not None
        stderr = asyncio.ensure_future(process.stderr.read())
        result = b""
        try:
            async for line in process.stdout:  # progress lines, then the result
                progress = progress_of(line)
                if progress is not None:
                    self._progress[reg.model] = progress
                elif line.strip():
                    result = line
            await process.wait()
            errors = await stderr
        finally:
            stderr.cancel()
            self._progress.pop(reg.model, None)
        if process.returncode != 0 or not result:
            err = [x for x in errors.decode(errors="replace").splitlines() if x.strip()]
            raise RuntimeError(
                f"variant generation failed (exit {process.returncode}): "
                f"{err[-1] if err else 'no output'}"
            )
        return msgspec.json.decode(result, type=GenerationResult)

    def _generator_args(
        self, reg: Registration, package_dir: Path, validation: Path | None
    ) -> list[str]:
        args = [self.python, "-m", "infless.modelless.generate"]
        args += ["--package", str(package_dir), "--model", reg.model]
        args += ["--out", str(self.variants_root / reg.model)]
        args += ["--max-batch", str(reg.max_batch)]
        args += ["--state-dir", str(self._config.state_dir)]
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
        if self._config.gpu.enabled:  # measured on a GPU too where the children find one
            args += ["--gpu-shares", ",".join(map(str, self._config.scaling.gpu_options_pct))]
            target = self._gpu_target()
            if target is not None:
                uuid, pipe_dir = target
                args += ["--gpu-uuid", uuid]
                if pipe_dir is not None:  # under MPS: every share, else 100 % only
                    args += ["--mps-pipe-dir", pipe_dir]
        return args

    async def _install(self, reg: Registration, result: GenerationResult) -> None:
        """Store the profiles, deploy a function per ready variant, publish the model."""
        self._store.put_variants(reg.model, result.variants)
        ready = [p for p in result.variants if p.status == "ready"]
        if not ready:
            why = "; ".join(f"{p.name}: {p.error}" for p in result.variants)
            raise RuntimeError(f"no variant could be built: {why}")
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
        """The model's entry from the store into the catalogue (a re-registration keeps
        the target and the switch count)."""
        old = self.catalog.get(model)
        entry = ModelEntry(
            model=model,
            slo_ms=slo_ms,
            profiles=tuple(self._store.variants(model)),
            apps=self._store.apps(model),
            target=old.target if old is not None else None,
            switches=old.switches if old is not None else 0,
        )
        self.catalog.publish(entry)

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
                error = "the gateway restarted while generating; register again"
                self._store.put_model(replace(record, status="failed", error=error))

    def put_app(self, model: str, body: object) -> AppGoals:
        try:
            app = msgspec.convert(body, type=AppGoals)
        except msgspec.ValidationError as exc:
            raise InvalidDeployment(f"application: {exc}") from None
        check_goals(app)
        if self._store.model(model) is None:
            raise FunctionNotFound(f"model {model!r} is not registered")
        self._store.put_app(model, app.id, app.goals())
        self.catalog.put_app(model, app.id, app.goals())
        return app

    def describe(self, model: str) -> ModelView:
        """The model's view (`GET /system/variants/{model}`); FunctionNotFound if it is not
        registered."""
        record = self._store.model(model)
        if record is None:
            raise FunctionNotFound(
                f"model {model!r} is not registered; GET /system/models lists them"
            )
        entry = self.catalog.get(model)
        variants = tuple(
            _variant_view(profile, record.slo_ms, entry) for profile in self._store.variants(model)
        )
        return ModelView(
            **msgspec.structs.asdict(record),
            progress=self._progress.get(model),
            apps=self._store.apps(model),
            target=entry.target if entry else None,
            overflow=entry.overflow if entry else None,
            switches=entry.switches if entry else 0,
            spilled=entry.spilled if entry else 0,
            variants=variants,
        )

    def models(self) -> tuple[RegisteredModel, ...]:
        """Every registered model's record (`GET /system/models`)."""
        return tuple(self._store.models())

    async def remove(self, model: str) -> None:
        entry = self.catalog.withdraw(model)
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


def _variant_view(profile: VariantProfile, slo_ms: float, entry: ModelEntry | None) -> VariantView:
    """One variant's view: its profile; its function and SLO fit when it is ready (it is
    deployed whether or not it fits); its live figures when it is in the catalogue."""
    view = VariantView(**msgspec.structs.asdict(profile))
    if profile.status == "ready":
        problem = slo_problem(profile, slo_ms)
        view = replace(
            view,
            function=variant_function(profile.model, profile.name),
            slo_problem=problem,
            meets_slo=problem is None,
            config=None,
        )
    card = entry.card(profile.name) if entry is not None else None
    if entry is None or card is None:
        return view
    config = VariantConfigView(
        batch_size=card.batch_size,
        cpus=card.cpus,
        qps=round(card.qps, 1),
        cost_per_request=card.cost_per_request,
    )
    return replace(
        view,
        state=entry.states.get(card.name, VariantState.INACTIVE),
        config=config,
        served=entry.served.get(card.name, 0),
        capacity_factor=round(entry.capacity.factor(card.name), 3),
        released=card.name in entry.released,
    )
