# ffnbench — `make help` lists the targets. Everything runs inside ./.venv, created on first use and
# refreshed whenever pyproject.toml changes.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# pytest-xdist: up to 4 workers, one test file each at a time (a file's shared fixtures are built once)
PARALLEL := -n auto --maxprocesses 4 --dist loadfile

EXP      ?= quick   # sweep preset: conf/experiment/<EXP>.yaml (micro: the quick form, at the micro model)
ARGS     ?=         # extra Hydra overrides for every run, e.g. ARGS="trainer.max_tokens=20000"
LAUNCHER ?=         # basic (default) | joblib | submitit_local | submitit_slurm
SWEEP    ?=         # sweep directory for `make report` (default: the last sweep)

.PHONY: help install lint test test-slow test-min sweep report bench gpu-check params data clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "  variables: EXP=<experiment> ARGS=\"<hydra overrides>\" LAUNCHER=<launcher> SWEEP=<dir> CONFIRM=1 GPU_HOURS=<budget>"

install: $(STAMP) ## create .venv and install ffnbench with its dev extras
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

lint: $(STAMP) ## ruff over the package and the tests
	$(VENV)/bin/ruff check ffnbench hydra_plugins tests

test: lint ## lint, then the test suite (minutes; slow checks excluded)
	$(PY) -m pytest -q $(PARALLEL)

test-slow: $(STAMP) ## only the slow checks
	$(PY) -m pytest -q -m slow

MIN_VENV := .venv-min
# the tests that touch Lightning, torch's training path, Hydra's launchers and submitit
MIN_TESTS := tests/training/test_module.py tests/test_train.py tests/test_fit.py tests/integration tests/test_placement.py tests/test_ddp.py tests/training/test_callbacks.py tests/training/test_loggers.py tests/sweep/test_*.py

test-min: ## the Lightning/Hydra/submitit tests at the lowest versions pyproject.toml allows (a separate venv; not in make test)
	@test -x $(MIN_VENV)/bin/python || $(PYTHON) -m venv $(MIN_VENV)
	$(PYTHON) tools/min_constraints.py > $(MIN_VENV)/constraints.txt
	$(MIN_VENV)/bin/pip install --quiet --disable-pip-version-check torch==2.13.0
	$(MIN_VENV)/bin/pip install --quiet --disable-pip-version-check -c $(MIN_VENV)/constraints.txt -e '.[dev]'
	$(MIN_VENV)/bin/python -m pip list --format=freeze | grep -iE '^(lightning|torch|hydra|omegaconf|submitit|wandb|datasets)' 
	$(MIN_VENV)/bin/python -m pytest -q -p no:cacheprovider $(PARALLEL) $(MIN_TESTS)

sweep: $(STAMP) ## run a sweep (default EXP=quick, ~10 min on 2 cores; EXP=micro: ~2 min) and write its report
	$(PY) -m ffnbench.sweep $(strip $(EXP)) $(if $(strip $(LAUNCHER)),--launcher $(strip $(LAUNCHER))) -- $(ARGS)

report: $(STAMP) ## (re)build REPORT.md and figures for SWEEP (default: the last sweep)
	$(PY) -m ffnbench.report $(strip $(SWEEP))

bench: $(STAMP) ## performance benchmarks, recorded as ratios under experiments/bench/
	$(PY) -m ffnbench.bench

gpu-check: $(STAMP) ## a GPU machine end to end, ≤ 8 min on one H100 → experiments/bench/<gpu>/ (ARGS="--cpu-smoke --out DIR": its control flow on a CPU)
	$(PY) -m ffnbench.bench.gpucheck $(ARGS)

params: $(STAMP) ## the documents' FFN parameter/FLOP table (ARGS="model=tiny ffn=swiglu" for a config)
	$(PY) -m ffnbench params $(ARGS)

data: $(STAMP) ## prepare the default corpus (ARGS="data=..." for another) and print its size
	$(PY) -m ffnbench.data $(ARGS)

clean: ## remove caches and build leftovers (keeps .venv, runs/ and experiments/)
	rm -rf .pytest_cache .ruff_cache build *.egg-info
