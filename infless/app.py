"""Composition root: wires config, clock, store, starter, pool, policies and routes; no logic.

`Platform` holds the subsystems of one gateway, built by keyword in `build_platform`.
`create_app` returns the aiohttp application. Its start and stop order is
`infless.lifecycle`: one cleanup context per resource. At start-up the application restores
the deployed functions and starts the control loops. At clean-up it stops them, drains
every instance and stops every worker it started.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aiohttp import web

from infless import lifecycle
from infless.clock import Clock, RealClock, Ticker
from infless.cluster.cgroups import CpuConfiner
from infless.cluster.cpus import CpuAllocator, usable_cpus
from infless.cluster.gpus import GpuInventory, inventory_for
from infless.coldstart.policies import build_policy
from infless.config import Config
from infless.control.autoscaler import Autoscaler
from infless.control.failed import FailedDeployments
from infless.control.functions import DeployedFunction, FunctionFrontDoor
from infless.control.modelless import ModellessService
from infless.control.pool import WorkerPool
from infless.control.prewarm import PrewarmManager
from infless.control.readiness import Readiness
from infless.control.servers import LOCAL_SERVER, Server
from infless.control.service import FunctionService
from infless.control.status import PoolStatus
from infless.control.structures import StructureCache
from infless.control.transforms import TransformingStarter
from infless.control.variant_monitor import VariantMonitor
from infless.control.vertical import VerticalScaling
from infless.dataplane.lagprobe import LoopLagProbe
from infless.gateway import routes
from infless.gateway.auth import AuthSettings, load_auth
from infless.gateway.context import GatewayContext
from infless.gateway.logs import LogBuffer
from infless.gateway.metrics import GatewayMetrics
from infless.modelless.catalog import ModellessCatalog
from infless.modelless.latency import CatalogPredictor
from infless.models.resolver import PackageResolver
from infless.nodes.backend import ClusterBackend
from infless.nodes.factory import make_starter, make_store, store_root
from infless.nodes.gpu_factory import GpuSide, make_gpu_side
from infless.packaging.store import PackageStore
from infless.registry.secrets import SecretStore
from infless.registry.store import FunctionRegistry
from infless.registry.tenants import TenantRegistry
from infless.registry.variants import VariantStore
from infless.scaling.profiled import load_planning_predictor
from infless.statedir import run_records
from infless.tenancy.sandboxes import TenantSandboxes
from infless.transform.costdb import load_costs
from infless.weights.reclaimer import Reclaimer, store_usage
from infless.weights.store import TensorStore
from infless.workers.output import Sink
from infless.workers.starting import Starter

log = logging.getLogger(__name__)

AUTH_KEY = web.AppKey("auth", AuthSettings)  # the fast path checks invoke tokens too
REGISTRY_FILE = "registry.sqlite"
SECRETS_DIR = "secrets"
STRUCTURES_DIR = "structures"  # packages' model structures (control.structures)


@dataclass
class Platform:
    config: Config
    clock: Clock
    metrics: GatewayMetrics
    registry: FunctionRegistry
    pool: WorkerPool
    functions: FunctionService
    frontend: FunctionFrontDoor
    prewarm: PrewarmManager
    store: TensorStore | None
    reclaimer: Reclaimer | None
    logs: LogBuffer
    secrets: SecretStore
    autoscaler: Autoscaler | None
    confiner: CpuConfiner | None
    gpus: GpuInventory
    tickers: tuple[Ticker, ...]
    loop_lag: LoopLagProbe
    packages: PackageStore
    modelless: ModellessService
    variant_store: VariantStore
    readiness: Readiness
    gpu: GpuSide | None = None  # this machine's GPU layer, monitor and MPS, when it has GPUs
    cluster: ClusterBackend | None = None  # set at startup when [cluster] asks for one
    tenants: TenantRegistry | None = None  # tenants' uids and gids
    sandboxes: TenantSandboxes | None = None  # what workers of each tenant are confined by

    def gateway_context(self) -> GatewayContext:
        gpu = self.gpu
        status = PoolStatus(self.pool, self.functions.failed, self.autoscaler)
        return GatewayContext(
            config=self.config,
            frontend=self.frontend,
            functions=self.functions,
            deployed=status,
            instances=status,
            servers=status,
            prewarm=self.prewarm,
            metrics=self.metrics,
            logs=self.logs,
            secrets=self.secrets,
            packages=self.packages,
            modelless=self.modelless,
            gpus=None if gpu is None else gpu.monitor,
            gpu_sharing=tuple if gpu is None else gpu.mps.all,
            clock=self.clock,
            readiness=self.readiness,
            isolation=dict if self.sandboxes is None else self.sandboxes.describe,
        )


PLATFORM_KEY = web.AppKey("platform", Platform)


@dataclass(frozen=True, slots=True)
class LocalChain:
    """This machine's chain of starters, and the layers the rest of the wiring reads."""

    starter: Starter
    transforms: TransformingStarter | None
    gpu: GpuSide | None


def local_starter(
    config: Config,
    clock: Clock,
    store: TensorStore | None,
    confiner: CpuConfiner | None,
    secrets: SecretStore,
    output: Sink,
    gpus: GpuInventory,
    sandboxes: TenantSandboxes | None = None,
) -> LocalChain:
    """This machine's chain of starters: processes (templates, zygote), wrapped by
    warm-instance transformation when it is on, wrapped by the GPU layer when the machine
    has GPUs."""
    records = run_records(config.state_dir)  # PID files: the next gateway finds orphans
    processes = make_starter(
        config, store, confiner, secrets, output, records=records, sandboxes=sandboxes
    )
    starter: Starter = processes
    transforms = None
    if store is not None and config.transform.enabled:
        structures = StructureCache(
            config.state_dir / STRUCTURES_DIR, config.transform.describe_timeout_s
        )
        transforms = TransformingStarter(
            processes,
            config.transform,
            clock,
            structures,
            load_costs(config.state_dir),
            store,
        )
        starter = transforms
    gpu = None
    if gpus.count:
        gpu = make_gpu_side(
            config.gpu,
            gpus,
            state_dir=config.state_dir,
            clock=clock,
            inner=starter,
            processes=processes,
            tier=store is not None,
            start_timeout_s=config.workers.start_timeout_s,
        )
        starter = gpu.starter
    return LocalChain(starter, transforms, gpu)


def server_status(
    store: TensorStore | None, gpu: GpuSide | None
) -> Callable[[], Mapping[str, object]] | None:
    """This machine's live facts for `/system/servers` and the board: its GPUs (devices,
    sharing, standby workers, the tier) and its tensor store (bytes per tenant)."""
    if store is None and gpu is None:
        return None

    def status() -> Mapping[str, object]:
        facts: dict[str, object] = {} if gpu is None else dict(gpu.starter.describe_server())
        if store is not None:
            facts["store"] = store_usage(store.entries())
        return facts

    return status


def tenancy(config: Config) -> tuple[TenantRegistry, TenantSandboxes]:
    """The tenants' ids and their workers' sandboxes, which hide the gateway's state, the
    model repository and the store's root."""
    tenants = TenantRegistry(config.state_dir / REGISTRY_FILE, config.isolation.uids)
    root = store_root(config)
    sandboxes = TenantSandboxes(
        config.isolation,
        tenants.identity,
        hidden=[config.state_dir, config.model_repository, root],
        store_root=root if config.store.enabled else None,
    )
    return tenants, sandboxes


def build_platform(
    config: Config, clock: Clock | None = None, starter: Starter | None = None
) -> Platform:
    """Every subsystem of one gateway; `starter` replaces the worker processes (tests)."""
    clock = clock or RealClock()
    state_dir = config.state_dir
    state_dir.mkdir(parents=True, exist_ok=True)
    metrics = GatewayMetrics()

    def instances_changed(function: DeployedFunction) -> None:
        metrics.set_instances(function.name, function.router.ready_count)

    tenants, sandboxes = tenancy(config)
    # nodes have theirs
    store = None if config.cluster.enabled else make_store(config, clock, sandboxes)
    secrets = SecretStore(state_dir / SECRETS_DIR)
    logs = LogBuffer(clock.wall)
    wall = clock.wall

    def worker_output(function: str, instance: str, line: str) -> None:
        logs.append(function, instance, line, wall())

    confiner = (
        CpuConfiner(parent="infless", nice=config.workers.nice) if config.workers.cgroups else None
    )
    cores = usable_cpus(config.workers.reserved_cpus)
    gpus = inventory_for(config.gpu)
    scaling = config.scaling
    autoscaled = scaling.policy != "none"
    chain = LocalChain(starter, None, None) if starter is not None else None
    servers = []  # a cluster's nodes join at startup (`nodes.backend`)
    if chain is None and not config.cluster.enabled:
        chain = local_starter(
            config, clock, store, confiner, secrets, worker_output, gpus, sandboxes
        )
    gpu = None
    if chain is not None:
        transforms, gpu = chain.transforms, chain.gpu
        servers.append(
            Server(
                server_id=LOCAL_SERVER,
                starter=chain.starter,
                allocator=CpuAllocator(cores),
                capacity_cpus=max(1, math.floor(len(cores) * scaling.cpu_overcommit)),
                gpu_pct=gpus.share_capacity_pct if gpu is not None else (),
                affinity=None if transforms is None else transforms.affinities,
                default_gpu_pct=config.gpu.default_pct if gpu is not None else 0,
                status=server_status(store, gpu),
            )
        )
    pool = WorkerPool(
        clock,
        servers,
        config.batching,
        autoscaled=autoscaled,
        on_instance_change=instances_changed,
    )
    tickers: list[Ticker] = []
    catalog = ModellessCatalog()
    autoscaler = None
    if autoscaled:
        autoscaler = Autoscaler(
            pool,
            scaling,
            profiles=lambda keys: CatalogPredictor(  # g > 0: this server's GPUs' profiles
                catalog, load_planning_predictor(state_dir, keys, [d.name for d in gpus.devices])
            ),
            vertical=VerticalScaling(catalog, config.modelless, scaling.demand),
        )
        tickers.append(Ticker(clock, scaling.tick_s, autoscaler.tick, "autoscaler"))
    coldstart = config.coldstart
    prewarm = PrewarmManager(
        pool,
        build_policy(coldstart.policy, coldstart.params),
        release_grace_s=coldstart.release_grace_s,
        scale_to_zero_default=coldstart.scale_to_zero,
    )
    tickers.append(Ticker(clock, coldstart.tick_s, prewarm.tick, "prewarm-manager"))
    reclaimer = (
        None
        if store is None
        else Reclaimer(store, clock, pool.holder_ids, config.store.reclaim_interval_s)
    )
    registry = FunctionRegistry(state_dir / REGISTRY_FILE)
    packages = PackageStore(config.model_repository)
    resolver = PackageResolver(config.model_repository, packages=packages)
    failed: FailedDeployments = {}  # functions whose package could not be had
    functions = FunctionService(
        clock, registry, pool, resolver, secrets, failed, tenancy=sandboxes.refusal
    )
    variant_store = VariantStore(state_dir / REGISTRY_FILE)
    modelless = ModellessService(
        config=config,
        clock=clock,
        store=variant_store,
        catalog=catalog,
        functions=functions,
        resolver=resolver,
        deployed=pool.functions,
        gpu_target=lambda: None if gpu is None else gpu.starter.profile_target(),
    )
    monitor = VariantMonitor(pool, catalog, config.modelless)
    tickers.append(Ticker(clock, config.modelless.monitor_s, monitor.tick, "variant-monitor"))
    gateway = config.gateway
    frontend = FunctionFrontDoor(
        functions=pool.functions,
        clock=clock,
        observer=metrics,
        timeout_s=gateway.request_timeout_s,
        max_body_bytes=gateway.max_body_bytes,
        catalog=catalog,
        failed=failed,
        spill_share=config.modelless.spill_share,
    )
    loop_lag = LoopLagProbe(clock, frontend.loop_lag)
    return Platform(
        config=config,
        clock=clock,
        metrics=metrics,
        registry=registry,
        pool=pool,
        functions=functions,
        frontend=frontend,
        prewarm=prewarm,
        store=store,
        reclaimer=reclaimer,
        logs=logs,
        secrets=secrets,
        autoscaler=autoscaler,
        confiner=confiner,
        gpus=gpus,
        tickers=tuple(tickers),
        loop_lag=loop_lag,
        packages=packages,
        modelless=modelless,
        variant_store=variant_store,
        readiness=Readiness(pool.functions, failed),
        gpu=gpu,
        tenants=tenants,
        sandboxes=sandboxes,
    )


def create_app(
    config: Config, clock: Clock | None = None, starter: Starter | None = None
) -> web.Application:
    platform = build_platform(config, clock, starter)
    auth = load_auth(config)
    app = web.Application(
        client_max_size=config.gateway.max_body_bytes,
        middlewares=routes.middlewares(config, auth),
    )
    app[PLATFORM_KEY] = platform
    app[AUTH_KEY] = auth
    routes.install(app, platform.gateway_context())

    app.cleanup_ctx.extend(lifecycle.contexts(platform))
    return app
