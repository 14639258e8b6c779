# Everyday verbs; README and .ci/run use these.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install test lint typecheck bench bench-api bench-fuzz bench-ha bench-kube bench-simulate bench-ui plan serve hub simulate-philly

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# The scheduling core compiled with mypyc into build/core (fleet/compiled_core.py);
# a no-op while current. Without a C compiler the core runs interpreted.
install: $(VENV)/.installed
	@./scripts/compile-core || echo "make install: WARNING: the core was not compiled; it runs interpreted (about half as fast)" >&2

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

# Replicas on PostgreSQL: failover after SIGKILL, submissions/s through 1 and 3 (BENCH_HA_ARGS="--kills 5").
bench-ha: install
	$(PY) bench/bench_ha.py $(BENCH_HA_ARGS)

# schemathesis against fleet serve on SQLite (BENCH_FUZZ_ARGS="--examples 500").
bench-fuzz: install
	$(PY) bench/bench_fuzz.py $(BENCH_FUZZ_ARGS)
# Replay speed (jobs simulated per second) and start-time estimate errors on Philly.
bench-simulate: install
	$(PY) bench/bench_simulate.py --policies fleet,capacity,private
	$(PY) bench/bench_estimates.py

# Dispatch to a real member (kube-apiserver from scripts/kube-binaries): BENCH_KUBE_ARGS="--jobs 200".
bench-kube: install
	./scripts/kube-binaries --install-go >/dev/null
	$(PY) bench/bench_kube.py $(BENCH_KUBE_ARGS)

# The dashboard's pages with 1,000 queues and 10,000 jobs (BENCH_UI_ARGS="--rounds 20").
bench-ui: install
	$(PY) bench/bench_ui.py $(BENCH_UI_ARGS)

serve: install
	$(VENV)/bin/fleet serve $(ARGS)

# A hub cluster on this machine for the kubectl door (docs/design/hub.md): runs
# until interrupted; `make serve ARGS=--hub-kubeconfig=.hub/fleet.kubeconfig` follows it.
hub: install
	$(VENV)/bin/python scripts/local-hub .hub

plan: install
	$(VENV)/bin/fleet plan --quota policies/quota/team-tree.yaml --clusters policies/clusters/example.yaml --jobs policies/jobs/examples.yaml

# The Philly policy comparison of the README: clusters and quota sized from the
# trace, then fleet, fleet-no-memory, capacity and private on the first SIM_JOBS
# jobs (SIM_LIMIT= for the whole trace; SIM_LOAD=0.6,0.8,1.0 at those offered
# loads); results in simulation/philly/.
SIM_JOBS ?= 5000
SIM_LIMIT ?= --limit $(SIM_JOBS)
PHILLY := data/traces/philly-vc/philly_vc_jobs.csv
simulate-philly: install
	$(VENV)/bin/fleet simulate gen-clusters --trace $(PHILLY) --format philly -o simulation/philly
	$(VENV)/bin/fleet simulate --trace $(PHILLY) --clusters simulation/philly/clusters.yaml \
	  --quota simulation/philly/quota.yaml --compare fleet,fleet-no-memory,capacity,private \
	  $(SIM_LIMIT) $(if $(SIM_LOAD),--load $(SIM_LOAD)) \
	  -o simulation/philly/compare
