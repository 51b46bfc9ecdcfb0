# Every target works on a fresh machine: `make venv` installs what the others need.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
CLUSTER := $(PY) -m tests.support.localcluster

.PHONY: help venv demo test test-unit test-integration test-e2e lint typecheck check \
        cluster-build cluster-up cluster-down cluster-status bench clean

help:
	@echo "make demo          run the local demo (builds the local cluster on first use)"
	@echo "make test          run every test: lint, types, unit, integration, e2e"
	@echo "make test-unit     unit tests only (no cluster)"
	@echo "make cluster-up    start a local control plane in the background; cluster-down stops it"
	@echo "make bench         run the benchmarks (prints JSON)"

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

demo: venv cluster-build
	$(PY) -m tests.support.demo

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: venv
	$(VENV)/bin/mypy

test-unit: venv
	$(VENV)/bin/pytest tests/unit

test-integration: venv cluster-build
	$(VENV)/bin/pytest tests/integration

test-e2e: venv cluster-build
	$(VENV)/bin/pytest tests/e2e

# The one test command (README, CI): static checks, then all three test tiers.
test: lint typecheck cluster-build
	$(VENV)/bin/pytest tests

check: test

cluster-build: venv
	$(CLUSTER) build --karpenter

cluster-up: cluster-build
	$(CLUSTER) up

cluster-down: venv
	$(CLUSTER) down

cluster-status: venv
	$(CLUSTER) status

bench: venv cluster-build
	$(PY) -m tests.support.bench

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
