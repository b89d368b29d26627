"""`infless serve`: run the gateway on uvloop until SIGINT/SIGTERM, then drain and exit."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import shutil
import signal
import sys
import tempfile
from pathlib import Path


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--config", type=Path, default=None, help="config.toml (default: built-in)")
    parser.add_argument("--host", default=None, help="listen address (overrides gateway.host)")
    parser.add_argument("--port", type=int, default=None, help="listen port; 0 = any free port")
    parser.add_argument("--state-dir", default=None, help="overrides state.dir")
    parser.add_argument("--no-functions", action="store_true", help="skip [[functions]] deploys")
    parser.add_argument(
        "--basic-auth",
        action="store_true",
        help="require basic auth on /system/* and /v2/repository/* (sets auth.basic_auth)",
    )
    parser.add_argument(
        "--cluster",
        default=None,
        metavar="ADDRESS",
        help="run instances on a Ray cluster's nodes: ray://HOST:PORT, auto, or local:N "
        "(N nodes on this machine); sets cluster.backend = ray",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")


def is_loopback(host: str) -> bool:
    """Whether `host` only listens on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _serve(args: argparse.Namespace) -> int:
    import msgspec
    from aiohttp import web

    from infless.app import AUTH_KEY, PLATFORM_KEY, Platform, create_app
    from infless.config import load_config, with_overrides
    from infless.gateway.fastpath import FastPath, FastPathConfig
    from infless.gateway.http1 import UPSTREAM_SETTINGS
    from infless.gateway.invoke import Invoker

    config = load_config(args.config)
    gateway: dict[str, object] = {}
    if args.host is not None:
        gateway["host"] = args.host
    if args.port is not None:
        gateway["port"] = args.port
    overrides: dict[str, dict[str, object]] = {"gateway": gateway}
    if args.basic_auth:
        overrides["auth"] = {"basic_auth": True}
    if args.cluster is not None:
        overrides["cluster"] = {"backend": "ray", "address": args.cluster}
    if args.state_dir is not None:
        overrides["state"] = {"dir": args.state_dir}
        overrides["models"] = {"repository": str(Path(args.state_dir) / "models")}
    config = with_overrides(config, **overrides)
    if args.no_functions:
        config = msgspec.structs.replace(config, functions=[])
    if not config.auth.basic_auth and not is_loopback(config.gateway.host):
        logging.getLogger("infless").warning(
            "the management routes are open on %s: whoever reaches them can deploy code "
            "(a package runs its own Python in a worker); pass --basic-auth or set "
            "auth.basic_auth = true",
            config.gateway.host,
        )
    app = create_app(config)
    # aiohttp's own limits are wider than the listening socket's: it refuses first, in JSON
    runner = web.AppRunner(app, access_log=None, handle_signals=False, **UPSTREAM_SETTINGS)
    await runner.setup()
    # the application listens on an internal socket; the listening one is the fast path's,
    # which answers invokes itself and passes every other request on (`gateway.fastpath`)
    private = Path(tempfile.mkdtemp(prefix="infless-gateway-"))  # mode 0700: ours alone
    upstream = str(private / "app.sock")
    await web.UnixSite(runner, upstream).start()
    platform = app[PLATFORM_KEY]
    assert isinstance(platform, Platform)
    fast = FastPath(
        Invoker(platform.frontend),
        FastPathConfig(upstream, config.gateway.max_body_bytes, app[AUTH_KEY]),
        platform.clock,
    )
    fast.start()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(fast, config.gateway.host, config.gateway.port, backlog=1024)
    port = server.sockets[0].getsockname()[1] if server.sockets else config.gateway.port
    # A machine-readable line for scripts and tests (readiness is /healthz, not this line).
    print(f"infless gateway listening on http://{config.gateway.host}:{port}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger(__name__).info("shutting down: draining instances")
    server.close()  # no new connections; those open are answered, then closed
    await runner.cleanup()  # drains every instance: what was admitted is answered
    fast.close_idle()
    shutil.rmtree(private, ignore_errors=True)
    return 0


def run(args: argparse.Namespace) -> int:
    import uvloop

    from infless.errors import ConfigError

    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return uvloop.run(_serve(args))
    except ConfigError as exc:
        print(f"infless: {exc}", file=sys.stderr)
        return 2
