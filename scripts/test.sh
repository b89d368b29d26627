#!/usr/bin/env bash
# Set up (first run only), then lint, type-check and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --test
echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== import-linter (layering contracts in pyproject.toml)"
.venv/bin/lint-imports --no-cache
echo "== mypy (strict)"
.venv/bin/mypy
echo "== pytest"
exec .venv/bin/pytest "$@"
