"""`infless node`: join this machine to an infless cluster (a thin wrapper over `ray start`).

It runs `ray start` with the resource that makes the gateway place a node agent here
(`infless_node`), this machine's cores (or `--cpus`), and the ports a firewall must let
through pinned, so that they can be written down (see docs/cluster.md). `--head` starts
the cluster's first node (the gateway then serves with `--cluster auto` on it, or
`--cluster ray://HEAD:10001` from elsewhere); `--stop` stops this machine's node.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

RESOURCE = "infless_node"
GCS_PORT = 6379
CLIENT_PORT = 10001
NODE_MANAGER_PORT = 6380
OBJECT_MANAGER_PORT = 6381
MIN_WORKER_PORT, MAX_WORKER_PORT = 10002, 10999  # Ray's own workers (the agent among them)


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--head", action="store_true", help="start the cluster's first node")
    parser.add_argument("--address", default=None, help="the head's HOST:6379 (to join)")
    parser.add_argument("--cpus", type=int, default=None, help="cores offered (default: all)")
    parser.add_argument("--node-ip", default=None, help="this machine's address (default: Ray's)")
    parser.add_argument("--stop", action="store_true", help="stop this machine's Ray node")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the ray command instead of running it"
    )


def ray_command(args: argparse.Namespace) -> list[str]:
    ray = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    if args.stop:
        return [ray, "stop"]
    if args.head == (args.address is not None):
        raise ValueError("give --head (the first node) or --address HEAD:6379 (to join one)")
    command = [ray, "start"]
    if args.head:
        command += ["--head", f"--port={GCS_PORT}", f"--ray-client-server-port={CLIENT_PORT}"]
    else:
        command += [f"--address={args.address}"]
    cpus = args.cpus if args.cpus is not None else len(os.sched_getaffinity(0))
    command += [
        f"--num-cpus={cpus}",
        f"--resources={json.dumps({RESOURCE: 1})}",
        f"--node-manager-port={NODE_MANAGER_PORT}",
        f"--object-manager-port={OBJECT_MANAGER_PORT}",
        f"--min-worker-port={MIN_WORKER_PORT}",
        f"--max-worker-port={MAX_WORKER_PORT}",
        "--include-dashboard=false",
    ]
    if args.node_ip:
        command.append(f"--node-ip-address={args.node_ip}")
    return command


def run(args: argparse.Namespace) -> int:
    try:
        command = ray_command(args)
    except ValueError as exc:
        print(f"infless node: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(" ".join(command))
        return 0
    try:
        return subprocess.call(command)
    except FileNotFoundError:
        print("infless node: Ray is not installed: pip install 'infless[cluster]'", file=sys.stderr)
        return 2
