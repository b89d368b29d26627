#!/usr/bin/env bash
# One call checks a GPU machine: the GPU tests (tests/gpu/, skipped without CUDA) and
# bench.gpu, in under 8 minutes, with one JSON summary as the last line.
#
# The machine needs CUDA PyTorch >= 2.11 on Python 3.11 or 3.12 and infless's other
# dependencies. An image without a package registry (CUDA PyTorch, aiohttp, numpy, pytest,
# ... but not msgspec, orjson, httptools, pytest-asyncio) gets those as wheels carried in
# .whl/ at the repository root: ./scripts/gpu-wheels.sh fetches them wherever PyPI answers.
#
#   ./scripts/gpu-check.sh [OUT_DIR]     # logs and the bench's JSON in OUT_DIR
#                                        # (default: $OUT if set, else ./gpu-check-out)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-gpu-check-out}}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/infless-site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/infless-site:$PWD"
else
  export PYTHONPATH="$PWD"
fi

nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current,compute_mode \
  --format=csv 2>&1 | tee "$out/gpu.txt"
python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tee -a "$out/gpu.txt"

timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu 2>&1 | tee "$out/tests.log"
tests_rc=${PIPESTATUS[0]}
timeout 320 python3 -m bench.gpu --quick --out "$out" 2>&1 | tee "$out/bench.log"
bench_rc=${PIPESTATUS[0]}

python3 - "$out" "$tests_rc" "$bench_rc" <<'PY'
import json, pathlib, re, sys
out, tests_rc, bench_rc = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
tests = (out / "tests.log").read_text(errors="replace").strip().splitlines()
counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error)", tests[-1] if tests else "")}
bench = {}
lines = (out / "bench.log").read_text(errors="replace").strip().splitlines()
for line in reversed(lines):
    if line.startswith("{"):
        try:
            bench = json.loads(line)
        except ValueError:
            pass
        break
print(json.dumps({"gpu_check": {"tests_rc": tests_rc, "tests": counts, "bench_rc": bench_rc},
                  "bench": bench}))
PY
