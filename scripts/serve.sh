#!/usr/bin/env bash
# Set up (first run only) and serve with config.toml: the example functions are deployed.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/infless serve --config config.toml "$@"
