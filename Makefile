# The two commands of the README:
#   make demo   set everything up, then run the fleet_report flow on the bundled trace
#   make test   set everything up, then run the test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SAMPLE := data/sample/mooncake/conversation_trace.jsonl.gz
AGENTS := data/sample/agents/claude_code_traces.tar.gz
BUILD := build

.PHONY: setup demo test test-fast browser bench bench-week bench-plan-week peers peers-vllm peers-sglang \
	peers-replay lint clean

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
# salted caches show, and 41 Claude Code conversations (data/sample/agents/) as tenant
# claude-code, started over the hour's first 20 minutes.
demo: setup
	@rm -f $(BUILD)/demo.duckdb $(BUILD)/demo.duckdb.wal
	@$(BIN)/prefixscope fleet-report --input $(SAMPLE) --tenant kimi \
		--synthetic-tenants chat,search,agent --isolation shared,salted \
		--agent-input $(AGENTS) --agent-tenant claude-code --agent-arrival uniform:20m \
		--warehouse $(BUILD)/demo.duckdb --out $(BUILD)/report.html

# The page test drives a real headless Chromium; install Debian's when it is missing.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Chromium for the page test"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

# Two workers, one file each at a time (a file's fixtures stay in one process): the suite is
# single-threaded Python, so the second core halves what the kernels' first compile costs.
test: setup browser
	$(BIN)/ruff check prefixscope tests benchmarks
	$(BIN)/python -m pytest -n 2 --dist loadfile

# The inner loop: everything but the slow, Prefect-flow and browser tests.
test-fast: setup
	$(BIN)/python -m pytest -m "not slow and not flow and not browser" -q

# The release every policy's time is held against, side by side (benchmarks/policy_speed.py):
# the last before the row policies (docs/simulation.md#adding-a-policy).
POLICY_BASELINE ?= f6647eb

# Every benchmark runs, whether or not one before it missed its gate: one that exits non-zero
# is named in $(BENCH_FAILED), and `make bench` then fails, naming each (the last line).
BENCH_FAILED := $(BUILD)/bench-failed
bench_step = $(1) || echo "$(filter benchmarks/%.py,$(1))" >> $(BENCH_FAILED)

bench: setup peers-vllm peers-sglang
	@mkdir -p $(BUILD) && rm -f $(BENCH_FAILED)
	$(call bench_step,$(BIN)/python benchmarks/simulate_bundled.py)
	$(call bench_step,$(BIN)/python benchmarks/ingest_scale.py)
	$(call bench_step,$(BIN)/python benchmarks/agent_ingest.py)
	$(call bench_step,$(BIN)/python benchmarks/agent_policies.py)
	$(call bench_step,$(BIN)/python benchmarks/keyed_ingest.py)
	$(call bench_step,$(BIN)/python benchmarks/hashing.py)
	$(call bench_step,$(BIN)/python benchmarks/simulator_core.py)
	$(call bench_step,$(BIN)/python benchmarks/mrc.py)
	$(call bench_step,$(BIN)/python benchmarks/turn_inference.py)
	$(call bench_step,$(BIN)/python benchmarks/miss_cost_cpu.py)
	$(call bench_step,$(BIN)/python benchmarks/measured_error.py)
	$(call bench_step,$(BIN)/python benchmarks/restructure_whatif.py)
	$(call bench_step,$(BIN)/python benchmarks/fifo_order.py)
	$(call bench_step,$(BIN)/python benchmarks/fleet_speed.py)
	$(call bench_step,$(BIN)/python benchmarks/plan_speed.py)
	$(call bench_step,$(BIN)/python benchmarks/tier_crossover.py)
	$(call bench_step,$(BIN)/python benchmarks/structure_speed.py --copies 20)
	$(call bench_step,PEER_PYTHON=$$(test -x $(PEERS)/bin/python && echo $(PEERS)/bin/python) $(BIN)/python benchmarks/policy_speed.py --against $(POLICY_BASELINE))
	$(call bench_step,$(BIN)/python benchmarks/validate_recovery.py)
	$(call bench_step,$(BIN)/python benchmarks/validate_layouts.py)
	$(call bench_step,$(BIN)/python benchmarks/validate_events.py)
	$(call bench_step,$(BIN)/python benchmarks/warm_start.py)
	$(call bench_step,$(BIN)/python benchmarks/router_delay.py)
	$(call bench_step,$(BIN)/python benchmarks/sampled_error.py --quick)
	$(call bench_step,$(BIN)/python benchmarks/flow_speed.py --cluster)
	$(call bench_step,$(BIN)/python benchmarks/export_roundtrip.py)
	$(call bench_step,$(BIN)/python benchmarks/engine_conformance.py --vllm-python $(PEERS_VLLM)/bin/python --sglang-python $(PEERS_SGLANG)/bin/python --out $(BUILD)/engine_conformance.json)
	$(call bench_step,if test -x $(PEERS)/bin/python; then PEER_PYTHON=$(PEERS)/bin/python $(BIN)/python benchmarks/export_peer.py ; else echo "export_peer: make peers first"; fi)
	$(call bench_step,$(BIN)/python benchmarks/replay_tools.py --tools-python $(PEERS_REPLAY)/bin/python)
	$(call bench_step,$(BIN)/python benchmarks/answer_blocks.py)
	$(call bench_step,if test -f $(BUILD)/demo.duckdb; then $(BIN)/python benchmarks/page_load.py --warehouse $(BUILD)/demo.duckdb; else echo "page_load: make demo first"; fi)
	@if test -s $(BENCH_FAILED); then echo "make bench: these missed a gate or failed:"; \
		cat $(BENCH_FAILED); exit 1; fi

# The whole flow on a generated week (10.4 M requests, 250 M lookups; about 20 minutes and a
# 3.2 GB trace file in a temporary directory): docs/scale.md.
bench-week: setup
	$(BIN)/python benchmarks/flow_speed.py --week

# The SLO plan on the same week on 2 Dask workers: every hour held, each sized alone, and the
# fleet split into prefill and decode pools (docs/plan.md).
bench-plan-week: setup
	$(BIN)/python benchmarks/plan_week.py

# The KVCache.AI simulator, to time beside ours in `make bench`: a scratch environment outside
# the repository, never a dependency of the project.
PEERS ?= $(or $(TMPDIR),/tmp)/prefixscope-peers
peers: peers-vllm peers-sglang peers-replay
	@test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet kvcache-simulator==0.1.3

# vLLM's own scheduler and KV cache manager, the referee of `fleet --engine vllm`
# (benchmarks/engine_conformance.py): vLLM without its dependencies (the full install stops at
# a pinned flashinfer-python), torch and the pure-Python modules its v1 core imports.
PEERS_VLLM = $(PEERS)/vllm
VLLM_PURE = packaging==26.4 pydantic==2.14.4 pydantic_core==2.50.5 typing-inspection==0.4.5 \
	annotated-types==0.8.0 regex==2026.11.19 numpy==2.4.6 psutil==7.2.2 pyzmq==27.3.0 \
	urllib3==2.8.0 tqdm==4.70.1 httpx2==2.16.2 idna==3.20 PyYAML==6.0.4 httpcore2==2.16.2 \
	truststore==0.10.5 h11==0.16.0 aiohttp==3.14.5 multidict==7.2.1 attrs==26.1.0 yarl==1.25.1 \
	propcache==0.5.4 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 frozenlist==1.8.0 requests==2.34.2 \
	certifi==2026.10.19.post1 pillow==13.0.0 pybase64==1.5.1 cachetools==8.0.2 cbor2==6.3.0 \
	msgspec==0.23.0 cloudpickle==3.1.3 uvloop==0.23.0 py-cpuinfo==9.0.0 \
	prometheus_client==0.26.0 llguidance==1.9.1 xgrammar==0.2.8 apache-tvm-ffi==0.1.15.post2 \
	einops==0.8.2
peers-vllm:
	@test -x $(PEERS_VLLM)/bin/python || $(PYTHON) -m venv $(PEERS_VLLM)
	@$(PEERS_VLLM)/bin/python -c "import vllm" 2>/dev/null || { \
		$(PEERS_VLLM)/bin/python -m pip install --quiet --no-deps vllm==0.34.0 && \
		$(PEERS_VLLM)/bin/python -m pip install --quiet torch==2.13.0 \
			'transformers>=5.16.1,<5.23.0' && \
		$(PEERS_VLLM)/bin/python -m pip install --quiet --no-deps $(VLLM_PURE); }

# SGLang's own RadixCache, the referee of `fleet --engine sglang` one request at a time
# (benchmarks/sglang_driver.py): SGLang without its dependencies (its kernels need a GPU),
# torch and the pure-Python modules its cache imports, listed here.
PEERS_SGLANG = $(PEERS)/sglang
SGLANG_PURE = aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 annotated-types==0.8.0 \
	anyio==4.16.0 apache-tvm-ffi==0.1.15.post2 attrs==26.1.0 certifi==2026.10.19.post1 \
	compressed-tensors==0.20.1 frozenlist==1.8.0 gguf==0.19.0 h11==0.16.0 httpcore2==2.17.0 \
	httpx2==2.17.0 huggingface_hub==2.4.0 idna==3.20 ipython==9.18.1 loguru==0.7.3 \
	msgspec==0.23.0 multidict==7.2.1 numpy==2.4.6 orjson==3.13.0 packaging==26.4 \
	pillow==13.0.0 propcache==0.5.4 psutil==7.2.2 pybase64==1.5.1 pydantic==2.14.4 \
	pydantic_core==2.50.5 Pygments==2.21.0 PyYAML==6.0.4 pyzmq==27.3.0 regex==2026.12.2 \
	requests==2.34.2 safetensors==0.8.0 sentencepiece==0.2.3 starlette==1.10.0 \
	tokenizers==0.23.3 tqdm==4.70.1 traitlets==5.16.1 transformers==5.25.0 triton==3.9.0 \
	truststore==0.10.5 typing-inspection==0.4.5 urllib3==2.8.0 yarl==1.25.1
peers-sglang:
	@test -x $(PEERS_SGLANG)/bin/python || $(PYTHON) -m venv $(PEERS_SGLANG)
	@$(PEERS_SGLANG)/bin/python -c "import sglang" 2>/dev/null || { \
		$(PEERS_SGLANG)/bin/python -m pip install --quiet --no-deps sglang==0.5.23 && \
		$(PEERS_SGLANG)/bin/python -m pip install --quiet torch==2.13.0 && \
		$(PEERS_SGLANG)/bin/python -m pip install --quiet --no-deps $(SGLANG_PURE); }

# The replay tools an export is checked against (benchmarks/replay_tools.py): AIPerf and
# GuideLLM, replaying against a tiny local server; never dependencies of the project.
PEERS_REPLAY = $(PEERS)/replay
peers-replay:
	@test -x $(PEERS_REPLAY)/bin/python || $(PYTHON) -m venv $(PEERS_REPLAY)
	@test -x $(PEERS_REPLAY)/bin/guidellm || \
		$(PEERS_REPLAY)/bin/python -m pip install --quiet aiperf==0.13.0 guidellm==0.8.1

lint: setup
	$(BIN)/ruff check prefixscope tests benchmarks

clean:
	rm -rf $(BUILD) .pytest_cache .hypothesis
