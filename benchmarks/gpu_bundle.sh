#!/usr/bin/env bash
# bash benchmarks/gpu_bundle.sh DIR [--python-version 3.12] [--no-strip] [--check]
# Writes DIR/gpu-bundle.tar.xz: the wheels the lent GPU machine lacks (Flower, a Ray
# rebuilt without its Java jars, the backbone's weights ...), and prints its size.
# benchmarks/gpu_bundle.py says how; benchmarks/gpu_run.sh installs it there.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
[ -x "$here/.venv/bin/python" ] && py="$here/.venv/bin/python"
[ $# -ge 1 ] || { echo "usage: bash benchmarks/gpu_bundle.sh DIR [--check]" >&2; exit 2; }
exec "$py" "$here/benchmarks/gpu_bundle.py" "$@"
