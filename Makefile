# Everyday verbs; README and .ci/run use these.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install test lint typecheck bench bench-api bench-fuzz bench-ui plan serve

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

test: install
	./scripts/run-tests

lint: install
	$(VENV)/bin/ruff check fleet tests bench tools
	$(VENV)/bin/ruff format --check fleet tests bench tools
	$(VENV)/bin/mypy fleet tools
	$(VENV)/bin/lint-imports

bench: install
	$(PY) bench/bench_cycle.py
	$(PY) bench/bench_cells.py
	$(PY) bench/bench_api.py

# fleet serve on PostgreSQL and SQLite under 32 HTTP clients (BENCH_API_ARGS="--jobs 2000").
bench-api: install
	$(PY) bench/bench_api.py $(BENCH_API_ARGS)

# schemathesis against fleet serve on SQLite (BENCH_FUZZ_ARGS="--examples 500").
bench-fuzz: install
	$(PY) bench/bench_fuzz.py $(BENCH_FUZZ_ARGS)

# The dashboard's pages with 1,000 queues and 10,000 jobs (BENCH_UI_ARGS="--rounds 20").
bench-ui: install
	$(PY) bench/bench_ui.py $(BENCH_UI_ARGS)

serve: install
	$(VENV)/bin/fleet serve

plan: install
	$(VENV)/bin/fleet plan --quota policies/quota/team-tree.yaml --clusters policies/clusters/example.yaml --jobs policies/jobs/examples.yaml
