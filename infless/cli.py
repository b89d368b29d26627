"""The `infless` command line: a table of subcommands, each living in its own module.

Each subcommand module exposes `configure(parser)` and `run(args) -> int`, and keeps heavy
imports (torch, aiohttp) inside `run`, so `infless --help` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Protocol, cast

from infless import __version__

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("infless.serve_command", "run the gateway with its worker pool"),
    "node": ("infless.nodes.node_command", "join this machine to a cluster (ray start)"),
    "deploy": ("infless.client.deploy_command", "deploy functions from a stack.yml or flags"),
    "up": ("infless.client.deploy_command", "alias of deploy (faas-cli style)"),
    "list": ("infless.client.list_command", "list deployed functions"),
    "describe": ("infless.client.list_command", "show one function in detail"),
    "instances": ("infless.client.list_command", "list running instances"),
    "invoke": ("infless.client.invoke_command", "invoke a function with JSON from stdin"),
    "scale": ("infless.client.scale_command", "set a function's instance count"),
    "remove": ("infless.client.scale_command", "remove a function"),
    "rm": ("infless.client.scale_command", "alias of remove (faas-cli style)"),
    "ls": ("infless.client.list_command", "alias of list (faas-cli style)"),
    "logs": ("infless.client.logs_command", "print (and follow) a function's log lines"),
    "secret": ("infless.client.secret_command", "create, update, list and remove secrets"),
    "infer": ("infless.client.infer_command", "V2 (Open Inference Protocol) inference from JSON"),
    "metadata": ("infless.client.infer_command", "a model's V2 metadata: inputs and outputs"),
    "metrics": ("infless.client.metrics_command", "the gateway's Prometheus series"),
    "login": ("infless.client.login_command", "save basic-auth credentials for a gateway"),
    "logout": ("infless.client.login_command", "forget saved credentials for a gateway"),
    "models": ("infless.models.commands", "build and list zoo function packages"),
    "package": ("infless.packaging.commands", "make a function package from your own model"),
    "register": ("infless.client.register_command", "register a model: generate its variants"),
    "variants": ("infless.client.register_command", "a registered model's variants and states"),
    "profile": ("infless.profiler.commands", "profile operators into the profile database"),
    "predict": ("infless.profiler.commands", "print a function's predicted latency table"),
    "coldstart-eval": (
        "infless.offline.coldstart.commands",
        "replay a trace through cold-start policies",
    ),
    "simulate": ("infless.sim.command", "run the server's policies on simulated servers"),
    "loadgen": ("loadgen.cli", "drive a gateway with trace replays or synthetic load"),
}


class SubcommandModule(Protocol):
    def configure(self, parser: argparse.ArgumentParser, name: str) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _load(module_name: str) -> SubcommandModule:
    return cast(SubcommandModule, importlib.import_module(module_name))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="infless", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"infless {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or only == name:
            try:
                module = _load(module_name)
            except ModuleNotFoundError:
                continue  # a capability not present in this build
            module.configure(sub_parser, name)
            sub_parser.set_defaults(_module=module_name)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and not argv[0].startswith("-") else None
    parser = build_parser(only=command)
    args = parser.parse_args(argv)
    module_name = getattr(args, "_module", None)
    if module_name is None:
        parser.print_help()
        return 0 if command is None else 2
    return _load(module_name).run(args)


if __name__ == "__main__":
    raise SystemExit(main())
