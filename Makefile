# Two commands matter on a fresh machine: `make run` and `make test`. Both create .venv when missing.
SHELL := /bin/bash
VENV ?= .venv
BIN := $(VENV)/bin
export PIP_CACHE_DIR ?= $(CURDIR)/.cache/pip
export AGENTFLOW_HOME ?= $(CURDIR)
export PREFECT_HOME ?= $(CURDIR)/.prefect
export DO_NOT_TRACK := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export HF_HUB_OFFLINE := 1
# Keep Ray on loopback (ENVIRONMENT.md): no cluster discovery, no usage stats, no auth token, no metadata probes.
export RAY_USAGE_STATS_ENABLED := 0
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER := 0
export RAY_AUTH_MODE := disabled
export no_proxy := 127.0.0.1,localhost
export NO_PROXY := 127.0.0.1,localhost
export AGENTFLOW_DATASETS ?= $(abspath $(CURDIR)/../shared/datasets)

DEMO_WORLD ?= runs/demo-world
DEMO_QUESTIONS ?= 6

.PHONY: env run test test-fast bench clean

$(VENV)/.ready: pyproject.toml scripts/bootstrap.sh
	bash scripts/bootstrap.sh

env: $(VENV)/.ready

run: env
	$(BIN)/agentflow world generate --seed 0 --questions $(DEMO_QUESTIONS) --out $(DEMO_WORLD) --reuse
	$(BIN)/agentflow batch $(DEMO_WORLD)/questions.jsonl --corpus $(DEMO_WORLD)/corpus.jsonl --out runs

test: env
	$(BIN)/python -m pytest -q

test-fast: env
	$(BIN)/python -m pytest -q -m "not slow"

bench: env
	$(BIN)/python -m flows.bench --out bench-results/bench.json

clean:
	rm -rf runs .prefect bench-results .pytest_cache
