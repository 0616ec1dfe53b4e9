# One entry point for everything. `make test` and `make run` set themselves up on a fresh clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PACKAGES := libs/rules libs/protos libs/platform tools/mjctl tools/bench infra $(wildcard services/*/pyproject.toml)
EDITABLE := $(foreach p,$(PACKAGES),-e $(patsubst %/pyproject.toml,%,$(p)))

.PHONY: setup proto proto-check api-release lint lint-python test test-unit test-integration run bench bench-system bench-floor bench-pair chaos kafka-start kafka-stop clean

setup: $(STAMP)

$(STAMP): requirements-dev.txt $(wildcard libs/*/pyproject.toml services/*/pyproject.toml tools/*/pyproject.toml infra/pyproject.toml)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt
	$(BIN)/pip install --quiet --no-deps $(EDITABLE)
	touch $(STAMP)

proto: setup
	$(BIN)/python -m mahjong_infra.protogen

proto-check: setup
	$(BIN)/python -m mahjong_infra.protogen --check

# buf (the protos' lint and breaking-change checks) from the npm registry, into .cache/, pinned.
BUF_VERSION := 1.75.0
BUF := .cache/buf-$(BUF_VERSION)/node_modules/.bin/buf
# The last released API: `buf breaking` compares protos/ with it. Refresh it when releasing.
RELEASED_API := protos/released/mahjong-v1.binpb

$(BUF):
	@command -v npm >/dev/null || { echo "make lint needs npm (Node.js) to fetch @bufbuild/buf"; exit 1; }
	mkdir -p .cache/buf-$(BUF_VERSION)
	cd .cache/buf-$(BUF_VERSION) && npm install --no-save --no-audit --no-fund --loglevel=error @bufbuild/buf@$(BUF_VERSION)

api-release: $(BUF)
	$(BUF) build --exclude-source-info -o $(RELEASED_API)

# The Python checks (about half a minute): part of `make test`, so CI runs them on every landing.
lint-python: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache --no-logo
	$(BIN)/mypy libs/rules libs/platform tools/mjctl/mjctl tools/bench/mahjong_bench $(filter-out %.egg-info,$(wildcard services/*/mahjong_*))

# Everything `lint-python` checks, plus the protos' lint and breaking-change checks (needs npm).
lint: lint-python $(BUF)
	$(BUF) lint
	$(BUF) breaking --against $(RELEASED_API)

test: setup proto-check lint-python
	$(BIN)/pytest -m "not benchmark" $(PYTEST_ARGS)

test-unit: setup
	$(BIN)/pytest -m "not integration and not benchmark" $(PYTEST_ARGS)

test-integration: setup
	$(BIN)/pytest -m "integration" $(PYTEST_ARGS)

# The pure-Python peer `mahjong` shares its top-level name with our generated `mahjong.v1`, so it
# lives in its own folder, put first on the path only for the rules benchmark.
PEERS := .cache/bench-peers
bench: setup
	test -d $(PEERS)/mahjong || $(BIN)/pip install --quiet --target $(PEERS) mahjong==1.3.0
	PYTHONPATH=$(PEERS) $(BIN)/python -m mahjong_rules.bench
	$(BIN)/python -m mahjong_rules.formula.bench
	$(BIN)/python -m mahjong_table.bench
	$(BIN)/python -m mahjong_table.bench --variant formula
	$(BIN)/python -m mahjong_ledger.bench
	$(BIN)/python -m mahjong_bench.rebuild --games 200 --database both

# The whole system under load (not a test): Kafka, the services and bots on free ports, two runs
# (saturation, --think-ms 100); e.g. make bench-system BENCH_SYSTEM_ARGS="--database postgresql".
bench-system: setup
	$(BIN)/python -m mjctl.bench_system $(BENCH_SYSTEM_ARGS)

# The required stack's floor under bench-system (gRPC streams, kafka-python through a local
# broker, SQLite group commits, none of our code) against issue 10's ratio budget; e.g. make
# bench-floor BENCH_FLOOR_ARGS="--measured bench-system.json" (a `bench_system --json` file).
bench-floor: setup
	$(BIN)/python -m mahjong_bench.floor $(BENCH_FLOOR_ARGS)

# Two checkouts' bench-system alternated run by run (A = before, B = after; each with its own
# .venv from `make setup`, each run with its own code) and a table comparing them; run it under
# the heavy lock on a shared box. e.g. make bench-pair A=../before B=. BENCH_PAIR_ARGS="--order
# ABBAABBA --runs think --tables 32 --games 128 --out /tmp/pair"; --summarize DIR prints it again.
bench-pair: setup
	@test -n "$(A)" -a -n "$(B)" || { echo "usage: make bench-pair A=DIR B=DIR [BENCH_PAIR_ARGS=...]"; exit 2; }
	$(BIN)/python -m mjctl.bench_pair --a $(A) --b $(B) $(BENCH_PAIR_ARGS)

run: setup
	$(BIN)/mjctl run $(RUN_ARGS)

# Bot games while seeded faults hit every service and the broker; checks the books afterwards.
CHAOS_SEED ?= 1
CHAOS_ARGS ?= --games 40 --players 8 --rounds 3
chaos: setup
	$(BIN)/mjctl chaos --seed $(CHAOS_SEED) $(CHAOS_ARGS)

kafka-start: setup
	$(BIN)/python -m mahjong_infra.kafka start

kafka-stop: setup
	$(BIN)/python -m mahjong_infra.kafka stop

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
