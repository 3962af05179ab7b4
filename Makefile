# The two commands of the README:
#   make demo   set everything up, then run the fleet_report flow on the bundled trace
#   make test   set everything up, then run the test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SAMPLE := data/sample/mooncake/conversation_trace.jsonl.gz
BUILD := build

.PHONY: setup demo test test-fast browser bench bench-week peers lint clean

setup: $(STAMP)

# Reinstall whenever the dependency list (or this recipe) changes.
$(STAMP): pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "setting up $(VENV) (pip's output in $(VENV)/install.log)"
	@$(BIN)/python -m pip install --quiet -e '.[test,replay]' > $(VENV)/install.log 2>&1 \
		|| { cat $(VENV)/install.log; exit 1; }
	@touch $(STAMP)

# The bundled Kimi hour as tenant kimi, beside three synthetic tenants (prefixscope/synthetic.py)
# that share a preamble, so that per-tenant results, cross-tenant hits and shared against
# salted caches show.
demo: setup
	@rm -f $(BUILD)/demo.duckdb $(BUILD)/demo.duckdb.wal
	@$(BIN)/prefixscope fleet-report --input $(SAMPLE) --tenant kimi \
		--synthetic-tenants chat,search,agent --isolation shared,salted \
		--warehouse $(BUILD)/demo.duckdb --out $(BUILD)/report.html

# The page test drives a real headless Chromium; install Debian's when it is missing.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Chromium for the page test"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

test: setup browser
	$(BIN)/ruff check prefixscope tests benchmarks
	$(BIN)/python -m pytest

# The inner loop: everything but the slow, Prefect-flow and browser tests.
test-fast: setup
	$(BIN)/python -m pytest -m "not slow and not flow and not browser" -q

bench: setup
	$(BIN)/python benchmarks/simulate_bundled.py
	$(BIN)/python benchmarks/ingest_scale.py
	$(BIN)/python benchmarks/hashing.py
	$(BIN)/python benchmarks/simulator_core.py
	$(BIN)/python benchmarks/mrc.py
	$(BIN)/python benchmarks/turn_inference.py
	$(BIN)/python benchmarks/miss_cost_cpu.py
	$(BIN)/python benchmarks/measured_error.py
	$(BIN)/python benchmarks/fifo_order.py
	$(BIN)/python benchmarks/fleet_speed.py
	$(BIN)/python benchmarks/plan_speed.py
	$(BIN)/python benchmarks/tier_crossover.py
	$(BIN)/python benchmarks/structure_speed.py --copies 20
	PEER_PYTHON=$$(test -x $(PEERS)/bin/python && echo $(PEERS)/bin/python) \
		$(BIN)/python benchmarks/policy_speed.py
	$(BIN)/python benchmarks/validate_recovery.py
	$(BIN)/python benchmarks/validate_layouts.py
	$(BIN)/python benchmarks/validate_events.py
	$(BIN)/python benchmarks/sampled_error.py --quick
	$(BIN)/python benchmarks/flow_speed.py --cluster
	$(BIN)/python benchmarks/export_roundtrip.py
	if test -x $(PEERS)/bin/python; then PEER_PYTHON=$(PEERS)/bin/python \
		$(BIN)/python benchmarks/export_peer.py; else echo "export_peer: make peers first"; fi
	if test -f $(BUILD)/demo.duckdb; then $(BIN)/python benchmarks/page_load.py \
		--warehouse $(BUILD)/demo.duckdb; else echo "page_load: make demo first"; fi

# The whole flow on a generated week (10.4 M requests, 250 M lookups; about 20 minutes and a
# 3.2 GB trace file in a temporary directory): docs/scale.md.
bench-week: setup
	$(BIN)/python benchmarks/flow_speed.py --week

# The KVCache.AI simulator, to time beside ours in `make bench`: a scratch environment outside
# the repository, never a dependency of the project.
PEERS ?= $(or $(TMPDIR),/tmp)/prefixscope-peers
peers:
	@test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet kvcache-simulator==0.1.3

lint: setup
	$(BIN)/ruff check prefixscope tests benchmarks

clean:
	rm -rf $(BUILD) .pytest_cache .hypothesis
