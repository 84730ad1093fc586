#!/usr/bin/env bash
# The 15-minute GPU runbook (benchmarks/gpu_run.py says what it runs):
#   bash benchmarks/gpu_run.sh --out DIR [--budget SECONDS] [--device cuda|cpu]
#        [--tiny] [--data IMAGES.npz[.xz]] [--bundle gpu-bundle.tar.xz]
# Where Flower is missing (the lent GPU machine), it first installs the bundle that
# `bash benchmarks/gpu_bundle.sh .gpu/bundle312` made here (default
# .gpu/bundle312/gpu-bundle.tar.xz) into /tmp/site, then runs the steps with the
# machine's own python3 and torch. Here it uses the project's .venv.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
bundle=.gpu/bundle312/gpu-bundle.tar.xz
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python
if ! "$py" -c "import flwr, ray" 2>/dev/null; then
  [ -f "$bundle" ] || { echo "error: Flower or Ray missing and no bundle at $bundle (bash benchmarks/gpu_bundle.sh .gpu/bundle312)" >&2; exit 2; }
  t0=$(date +%s)
  rm -rf /tmp/gpu-bundle && mkdir -p /tmp/gpu-bundle /tmp/site
  tar -xJf "$bundle" -C /tmp/gpu-bundle || exit 2
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site /tmp/gpu-bundle/wheels/*.whl 2>&1 | grep -v -i "warning" || true
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH"
  "$py" -c "import flwr, ray" || { echo "error: the bundle did not install Flower and Ray" >&2; exit 2; }
  echo "[gpu_run] bundle installed in $(( $(date +%s) - t0 )) s"
fi
# -m: the repository root is on sys.path (gpu_run imports server.run_files)
exec "$py" -m benchmarks.gpu_run "${args[@]}"
