# Set-up and entry points. `make run` and `make test` install everything they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
FLWR_HOME_DIR := $(CURDIR)/.flwr
NUM_CLIENTS ?= 10
# CPUs Ray reserves per simulated client: Ray runs (its CPUs / CLIENT_CPUS) clients at once
CLIENT_CPUS ?= 1
# GPU share per simulated client (0.1: ten clients on one GPU at once); 0 = CPU only
CLIENT_GPUS ?= 0
RUN_CONFIG ?=
# key=value overrides of RUN_CONFIG's preset: make run RUN_CONFIG=conf/fedhap.toml
# OVERRIDES="rounds=5 seed=1". Flower takes one .toml or pairs, not both, so the
# pre-flight writes the preset with its overrides into one file for flwr run.
OVERRIDES ?=
OVERRIDES_FILE := $(FLWR_HOME_DIR)/run-config.toml
RUN_ARGS = $(if $(RUN_CONFIG),--run-config $(RUN_CONFIG)) $(if $(OVERRIDES),--run-config "$(OVERRIDES)")
FLWR_RUN_CONFIG = $(if $(OVERRIDES),--run-config $(OVERRIDES_FILE),$(if $(RUN_CONFIG),--run-config $(RUN_CONFIG)))
VERBOSE ?=
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION := 1
SHELL := /bin/bash
# Quiet by default: warnings a user cannot act on (Ray's accelerator FutureWarning,
# raised inside Flower's simulation process). VERBOSE=1 shows everything.
ifeq ($(VERBOSE),)
export PYTHONWARNINGS := ignore::FutureWarning:ray._private.worker
# Flower's simulation warns that its default federation size changed, although we
# pass num-supernodes; dropped from make run's output (server/log_filters.py drops
# the ServerApp's own unactionable warnings)
QUIET := | grep --line-buffered -v "default simulated SuperNodes changed"
else
export FEDHASH_VERBOSE := 1
QUIET :=
endif

.PHONY: install run check-config test test-fast lint docs bench-retrieval bench-dphe bench-round-time bench-fedhap-cost \
	clean-superlink deploy-credentials deploy-constraints test-containers test-scale

install: $(STAMP)

# torch/torchvision are pinned to the builds shipped on this machine's disk
# (pip takes them from there); everything else comes from pyproject.toml.
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu installs the CPU-only build
# (a few hundred MB instead of the multi-GB CUDA one) on a machine without a GPU.
TORCH_INDEX_URL ?=
PYTHON_ACCEPTED := accepted: Python 3.11 or newer (make PYTHON=python3.11 ...)
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	  2>/dev/null || { found=$$(command -v $(PYTHON) >/dev/null && $(PYTHON) --version 2>&1 \
	  || echo 'not found'); echo "error: PYTHON=$(PYTHON) is $$found; $(PYTHON_ACCEPTED)" >&2; \
	  exit 2; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) \
	  torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

# Default experiment: 10 simulated clients, FedAvg + DPSH, 32 bits, digits.
# 1. The run config is checked first (python -m settings check): a bad value is one
#    line, before any SuperLink or Ray starts (make exits 2).
# 2. The run streams; its final status is then read from the SuperLink: make fails
#    (exit 2) unless it finished completed. The local SuperLink is stopped afterwards.
# 3. The checkout's git commit goes into the run's config.json if the FAB that ran is
#    this checkout's (server/provenance.py; a FAB carries no .git).
run: install
	@awk -v v="$(CLIENT_CPUS)" 'BEGIN { exit !(v ~ /^[0-9]*[.]?[0-9]+$$/ && v + 0 > 0) }' || \
	  { echo "error: CLIENT_CPUS=$(CLIENT_CPUS): accepted is a number > 0 (CPUs per simulated client)" >&2; exit 2; }
	@awk -v v="$(CLIENT_GPUS)" 'BEGIN { exit !(v ~ /^[0-9]*[.]?[0-9]+$$/ && v + 0 >= 0) }' || \
	  { echo "error: CLIENT_GPUS=$(CLIENT_GPUS): accepted is a number >= 0 (GPUs per simulated client)" >&2; exit 2; }
	@awk -v v="$(NUM_CLIENTS)" 'BEGIN { exit !(v ~ /^[0-9]+$$/ && v + 0 >= 1) }' || \
	  { echo "error: NUM_CLIENTS=$(NUM_CLIENTS): accepted is a whole number >= 1 (simulated SuperNodes)" >&2; exit 2; }
	@$(PY) -m settings check --quiet --num-clients $(NUM_CLIENTS) $(RUN_ARGS) \
	  $(if $(OVERRIDES),--write-overrides $(OVERRIDES_FILE))
	@mkdir -p $(FLWR_HOME_DIR); \
	  PATH="$(CURDIR)/$(VENV)/bin:$$PATH" FLWR_HOME=$(FLWR_HOME_DIR) flwr run . --stream \
	  --federation-config "num-supernodes=$(NUM_CLIENTS) client-resources-num-cpus=$(CLIENT_CPUS) client-resources-num-gpus=$(CLIENT_GPUS)" \
	  $(FLWR_RUN_CONFIG) 2>&1 | tee $(FLWR_HOME_DIR)/last-run.log $(QUIET); \
	  rc=$${PIPESTATUS[0]}; \
	  if [ $$rc -eq 0 ]; then $(PY) -m server.local_superlink status $(FLWR_HOME_DIR) \
	    $(FLWR_HOME_DIR)/last-run.log; rc=$$?; fi; \
	  if [ $$rc -eq 0 ]; then $(PY) -m server.provenance stamp \
	    --log $(FLWR_HOME_DIR)/last-run.log || true; fi; \
	  $(MAKE) --no-print-directory clean-superlink; exit $$rc

# Check a run config without running it: prints the resolved config, or one error line.
check-config: install
	@$(PY) -m settings check $(RUN_ARGS)

clean-superlink:
	@$(PY) -m server.local_superlink stop $(FLWR_HOME_DIR)

# Everything: tests/unit (library), tests/integration (apps, strategies, deployment
# files, docs build, mypy), tests/e2e (real Flower runs, the loopback deployment).
# Not the opt-in scale tests (marker scale): make test-scale.
# Two pytest-xdist workers (TEST_WORKERS=0: one process): measured faster than one
# process on the same day (docs/tests.md). --dist loadfile: each file runs whole, in
# order, on one worker (the loopback deployment's tests share one deployment; every
# test that starts Flower's local SuperLink is in tests/e2e/test_flwr_run.py). Not
# loadgroup: with pytest 9.2, xdist 3.8's groups are never formed (docs/tests.md).
TEST_WORKERS ?= 2
XDIST = $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)
test: install
	$(PY) -m pytest -q -m "not scale" $(XDIST)

# The fast subset: unit + integration, no real Flower run (pytest marker e2e).
test-fast: install
	$(PY) -m pytest -q -m "not e2e" $(XDIST)

lint: install
	$(VENV)/bin/ruff check .

# The docs site (mkdocs-material, mkdocs.yml) into site/ (git-ignored). --strict: a
# broken link, a page outside the nav or a missing result file fails the build
# (tests/integration/test_docs.py builds it the same way). Open site/index.html.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# Each benchmark target installs the optional packages its benchmark compares against
# (pyproject.toml extras), once per venv: bench-retrieval needs faiss-cpu and
# threadpoolctl (the `bench` extra), bench-dphe TenSEAL (`ckks-bench`).
BENCH_STAMP := $(VENV)/.installed-bench
CKKS_STAMP := $(VENV)/.installed-ckks-bench
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[dev,bench]"
	touch $@
$(CKKS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[dev,ckks-bench]"
	touch $@

bench-retrieval: install $(BENCH_STAMP)
	$(PY) benchmarks/retrieval.py

bench-dphe: install $(CKKS_STAMP)
	$(PY) benchmarks/dphe.py $(if $(BENCH_ARGS),$(BENCH_ARGS),--part cnn)

bench-round-time: install
	$(PY) benchmarks/round_time.py

bench-fedhap-cost: install
	$(PY) benchmarks/fedhap_cost.py

# The paper-shaped suite (docs/benchmarks.md "Benchmark suite"): every paper's
# driver at its full budget, 3 seeds, default datasets, into docs/results/<paper>/.
# Hours on CPU (see there). BENCH_ARGS="--resume", "--dataset fedhap=mirflickr" etc.
.PHONY: bench
bench: install
	$(PY) -m experiments.suite --paper all $(BENCH_ARGS)

# Deployment (docs/deploy.md): CA, TLS certificates, SuperNode keys, SuperExec
# secrets and DPHE bundles under deploy/credentials/ (DEPLOY_ARGS="--overwrite" etc.)
deploy-credentials: install
	$(PY) -m deploy.generate $(DEPLOY_ARGS)

# Re-pin the image's dependencies to this venv's versions (deploy/constraints.txt);
# the CUDA wheels and dev tools are left out.
deploy-constraints: install
	{ grep '^#' deploy/constraints.txt; $(VENV)/bin/pip freeze --exclude-editable \
	  | grep -viE '^(nvidia-|triton==|cuda-|pytest==|iniconfig==|pluggy==|ruff==|faiss-cpu==|mypy==|mypy[-_]extensions==|librt==|ast[-_]serialize==|mkdocs.*==|pymdown-extensions==|ghp-import==|mergedeep==|paginate==|backrefs==)'; \
	} > deploy/constraints.txt.new && mv deploy/constraints.txt.new deploy/constraints.txt

# Opt-in, not part of `make test`: the deployment in real containers (docs/deploy.md,
# tests/e2e/test_containers.py). Needs Docker with Compose v2, free loopback ports 8000
# and 9092, and several GB. FEDHASH_PYTHON_IMAGE / FEDHASH_TORCH_INDEX_URL (build
# args) and FEDHASH_CONTAINER_SCALE=N (scale-out to N SuperNodes) pass through.
test-containers: install
	@start=$$(date +%s); FEDHASH_CONTAINER_TESTS=1 $(PY) -m pytest -q -s -rs \
	  -p no:cacheprovider tests/e2e/test_containers.py; rc=$$?; \
	  echo "make test-containers: $$(( $$(date +%s) - start )) s wall, exit $$rc"; exit $$rc

# Opt-in, not part of `make test` (marker scale, FEDHASH_SCALE_TESTS=1): the simulation
# on a two-node loopback Ray cluster (tests/e2e/test_ray_cluster.py), the benchmark
# drivers' loopback backend (tests/e2e/test_loopback.py), and the loopback
# deployment with 8 SuperNodes, the SuperLink SIGKILLed mid-run and restarted on its
# database, the run resumed from its checkpoint (tests/e2e/test_deployment_restart.py,
# docs/deploy.md "Restart and resume"). About 10-15 min on 2 shared cores.
test-scale: install
	@start=$$(date +%s); FEDHASH_SCALE_TESTS=1 $(PY) -m pytest -q -s -rs \
	  -p no:cacheprovider -m scale tests/e2e/test_ray_cluster.py tests/e2e/test_loopback.py \
	  tests/e2e/test_deployment_restart.py; rc=$$?; \
	  echo "make test-scale: $$(( $$(date +%s) - start )) s wall, exit $$rc"; exit $$rc
