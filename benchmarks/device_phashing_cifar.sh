#!/usr/bin/env bash
# PHashing on CIFAR-10 (JPEG copy, class-balanced subset) on a lent GPU machine.
#
# That machine has PyTorch but no network, no Flower and no Ray, and a call carries
# at most 64 MiB. So, prepared here (docs/benchmarks.md, "GPU runs"):
#   .gpu/bundle312/gpu-bundle.tar.xz  Flower 1.42, Ray and what the image lacks, for
#          CPython 3.12 (bash benchmarks/gpu_bundle.sh .gpu/bundle312)
#   .gpu/  python -m experiments.cifar_subset --out .gpu/cifar10_q1000_db10000.npz,
#          then python benchmarks/npz_xz.py pack (that .npz) (that .npz).xz and only
#          the .xz kept there (21 MB instead of 31: the tree, wheels and data must fit
#          in 64 MiB); the script unpacks it on the machine
# and on the machine, from the repository root, with OUT set:
#   bash benchmarks/device_phashing_cifar.sh [SECONDS [PHASHING_TABLE_ARGS...]]
# trains through a loopback Flower deployment (experiments/loopback.py: SuperLink +
# one SuperNode per client, each ClientApp on CUDA) for at most SECONDS (default
# 480), then copies the table, rows, figures and logs into $OUT (8 files at most
# come back: machine.txt, phashing.log, table.md, summary.json, rows.jsonl, two PR
# figures and logs.tar.gz with every run's Flower log and GPU samples every 10 s).
#
# PHASHING_TABLE_ARGS replace the table's own arguments (the data options are always
# given). Without them: ResNet-18, 10 clients, 10 rounds, bits 32,48,12,24, seeds
# 0,1,2. The table runs bits-major, seed by seed, so a table cut short by the time
# limit holds whole seeds of the first code lengths; each cell says how many seeds
# it has when that is fewer than three, and --resume (with rows.jsonl put back)
# goes on from there. Wheels are installed only where flwr is missing, so the
# script also runs here on the CPU (with the venv's python3 first on PATH).
set -u
budget=${1:-480}
shift $(($# > 0 ? 1 : 0))
out=${OUT:?set OUT to the folder that comes back}
work=/tmp/phashing-cifar10
data="$PWD/.gpu/cifar10_q1000_db10000.npz"
if [ $# -gt 0 ]; then
  table_args=("$@")
else
  table_args=(--jobs 3 --clients 10 --rounds 10 --bits 32,48,12,24 --seeds 0,1,2
    --set model=resnet18 --set local-epochs=2 --set batch-size=128
    --set learning-rate=0.001 --set map-top-k=1000 --set precision-k=100,500,1000)
fi

if [ ! -f "$data" ] && [ -f "$data.xz" ]; then
  python3 benchmarks/npz_xz.py unpack "$data.xz" "$data" || exit 1
fi
if ! python3 -c "import flwr" 2>/dev/null; then
  rm -rf /tmp/gpu-bundle && mkdir -p /tmp/gpu-bundle
  tar -xJf .gpu/bundle312/gpu-bundle.tar.xz -C /tmp/gpu-bundle || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site /tmp/gpu-bundle/wheels/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$PWD" PATH="/tmp/site/bin:$PATH"
else
  export PYTHONPATH="$PWD"
fi
export PYTHONUNBUFFERED=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  nproc
  free -g | head -2
  python3 -c "import sys, torch, flwr; print(sys.version.split()[0], torch.__version__,
torch.cuda.is_available(), flwr.__version__)"
  python3 -c "import clients.client_app, server.server_app; print('app imports: ok')"
  echo "phashing_table ${table_args[*]}"
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

mkdir -p "$work/gpu"
# GPU use and host memory while the table trains (read afterwards: where the time goes)
(while sleep 10; do
  date +%T
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
  free -m | awk 'NR==2 {print "host MiB used " $3}'
  pgrep -c -f flwr-clientapp | sed 's/^/flwr-clientapp processes /'
done) > "$work/gpu/samples.txt" 2>&1 &
sampler=$!

timeout "$budget" python3 -m experiments.phashing table1 --backend loopback \
  --out "$work" "${table_args[@]}" \
  --set dataset=npz --set "data-path=\"$data\"" --set image-shape=32,32,3 2>&1 | tee "$out/phashing.log"
echo "phashing_table exit: ${PIPESTATUS[0]} (124 = stopped at ${budget} s)" | tee -a "$out/phashing.log"
kill "$sampler" 2>/dev/null

cp "$work"/table.md "$work"/summary.json "$work"/rows.jsonl "$out"/ 2>/dev/null
ls "$work"/pr-*.png 2>/dev/null | head -2 | xargs -r -I{} cp {} "$out"/
# every run's own view of the run (per-round lines and times), the GPU samples, and
# the first run's first SuperNode
(cd "$work" && tar czf "$out/logs.tar.gz" gpu runs/*/logs/flwr-run.log \
  $(ls runs/*/logs/supernode-0.log 2>/dev/null | head -1)) 2>/dev/null
ls -l "$out"
