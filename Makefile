# The two commands a person needs: `make run` and `make test`. Everything installs itself into .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Two stamps: `make run` needs the runtime only (`pip install -e .`, about 150 MB); `make test`,
# `lint` and `bench` add the dev extra (test tools, browser driver, analytics engines: over 1 GB).
RUNTIME := $(VENV)/.installed-runtime
DEV     := $(VENV)/.installed-dev

.PHONY: run test lint bench venv venv-dev clean

$(RUNTIME): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $(RUNTIME)

$(DEV): $(RUNTIME) pyproject.toml
	$(BIN)/pip install -q -e ".[dev]"
	touch $(DEV)

venv: $(RUNTIME)
venv-dev: $(DEV)

## Embedded default: scheduler + notification in one process, SQLite under ./var, dev keys.
run: venv
	$(BIN)/python -m embedded

## Whole suite. PostgreSQL tests run when TEST_POSTGRES_URL is set (REQUIRE_POSTGRES=1 makes them mandatory).
## scripts/system-packages installs promtool and Chromium first when missing (apt, as root).
test: venv-dev
	scripts/system-packages
	$(BIN)/pytest -q $(PYTEST_ARGS)

lint: venv-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy pkg/webhookdeliver pkg/authclient pkg/eventbus pkg/servicekit pkg/schedulerclient services/scheduler services/notification embedded console
	$(BIN)/lint-imports

## Benchmarks print JSON figures on stdout. PostgreSQL figures use BENCH_POSTGRES_URL (a server
## where fresh databases may be created and dropped); SQLite figures always run.
BENCH_POSTGRES_URL ?= postgresql+asyncpg://postgres@127.0.0.1:5432/postgres
bench: venv-dev
	@BENCH_POSTGRES_URL=$(BENCH_POSTGRES_URL) $(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
