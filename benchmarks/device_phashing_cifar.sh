#!/usr/bin/env bash
# PHashing on CIFAR-10 (JPEG copy, class-balanced subset) on a lent GPU machine.
#
# That machine has PyTorch but no network, no Flower and no Ray, and a call carries
# at most 64 MiB. So, prepared here (docs/benchmarks.md, "GPU runs"):
#   .whl/  Flower 1.42 and the packages its image lacks, for CPython 3.12
#          (benchmarks/device-wheels.txt: the list and the download command)
#   .gpu/  python -m experiments.cifar_subset --out .gpu/cifar10_q1000_db10000.npz
# and on the machine, from the repository root, with OUT set:
#   bash benchmarks/device_phashing_cifar.sh [SECONDS]
# trains through a loopback Flower deployment (experiments/loopback.py: SuperLink +
# one SuperNode per client, each ClientApp on CUDA) for at most SECONDS (default
# 480), then copies the table, rows, figures and logs into $OUT. Bits run in the
# order 32, 48, 12, 24 (the paper's Table 1 columns), seed by seed, so a table cut
# short by the time limit holds whole seeds of the first code lengths; each cell
# says how many seeds it has when that is fewer than three.
set -u
budget=${1:-480}
out=${OUT:?set OUT to the folder that comes back}
work=/tmp/phashing-cifar10
data="$PWD/.gpu/cifar10_q1000_db10000.npz"

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" PATH="/tmp/site/bin:$PATH" PYTHONUNBUFFERED=1
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  nproc
  python3 -c "import sys, torch, flwr; print(sys.version.split()[0], torch.__version__,
torch.cuda.is_available(), flwr.__version__)"
  python3 -c "import clients.client_app, server.server_app; print('app imports: ok')"
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

timeout "$budget" python3 -m experiments.phashing_table --backend loopback --jobs 3 \
  --clients 10 --rounds 10 --bits 32,48,12,24 --seeds 0,1,2 --out "$work" \
  --set dataset=npz --set "data-path=\"$data\"" --set image-shape=32,32,3 \
  --set model=resnet18 --set local-epochs=2 --set batch-size=128 \
  --set learning-rate=0.001 --set map-top-k=1000 \
  --set precision-k=100,500,1000 2>&1 | tee "$out/phashing.log"
echo "phashing_table exit: ${PIPESTATUS[0]} (124 = stopped at ${budget} s)" | tee -a "$out/phashing.log"

cp "$work"/table.md "$work"/summary.json "$work"/rows.jsonl "$out"/ 2>/dev/null
cp "$work"/pr-32b.png "$work"/pr-48b.png "$out"/ 2>/dev/null
# the first run's logs, whatever happened (the deployment's own view of the run)
for f in "$work"/runs/fedavg-32b-s0/logs/flwr-run.log "$work"/runs/fedavg-32b-s0/logs/supernode-0.log; do
  [ -f "$f" ] && tail -c 20000 "$f" >> "$out/first-run-logs.txt"
done
ls "$out"
