#!/usr/bin/env bash
# The prepared GPU check (benchmarks/gpu_check.py; docs/gpu.md): run from anywhere, with
# the Python that has torch (PYTHON, default python3: on the GPU machine, the one with
# its CUDA build). `--prepare` instead downloads the wheels it installs there, on a
# machine with a package registry (benchmarks/gpu_wheels.py).
#
#   bash benchmarks/gpu_check.sh --prepare
#   bash benchmarks/gpu_check.sh --device cuda --out "$OUT/gpu_check.txt"
#   PYTHON=.venv/bin/python bash benchmarks/gpu_check.sh --device cpu --dry-run --out /tmp/gpu_check.txt
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [[ "${1:-}" == "--prepare" ]]; then
    shift
    exec "$PYTHON" -m benchmarks.gpu_wheels "$@"
fi
exec "$PYTHON" -m benchmarks.gpu_check "$@"
