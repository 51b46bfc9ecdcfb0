# Every target works on a fresh machine: `make venv` installs what the others need.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
CLUSTER := $(PY) -m tools.localcluster

.PHONY: help venv demo test test-unit test-integration test-e2e test-image image lint \
        typecheck check coverage lint-only cluster-build cluster-up cluster-down cluster-status \
        bench bench-outcomes clean conformance-build test-conformance chart-package bench-footprint \
        test-cluster-autoscaler test-arc test-chart soak bench-receiver bench-report

help:
	@echo "make demo          run the local demo (builds the local cluster on first use)"
	@echo "make test          run every test: lint, unit, integration, e2e, conformance, image"
	@echo "make test-unit     unit tests only (no cluster, no network)"
	@echo "make lint          ruff, mypy (packages and tests), import-linter, vulture"
	@echo "make coverage      branch coverage of the unit tests"
	@echo "make cluster-up    start a local control plane in the background; cluster-down stops it"
	@echo "make bench         run the benchmarks (prints JSON)"
	@echo "make chart-package package charts/capacity-listener into dist/ (chart = image version)"
	@echo "make bench-receiver  the webhook receiver: deliveries/s, RSS at 10k/100k jobs, reads/s (prints JSON)"
	@echo "make bench-footprint  RSS of one listener beside ARC's Go listener (prints JSON)"
	@echo "make bench-outcomes  the outcome benchmark: JSON + figures into OUTCOMES_DIR (OUTCOMES_FAMILY=capped|roomy|staged)"
	@echo "make bench-report  docs/benchmarks.md and README.md's results block from the JSON in docs/img"
	@echo "make soak          the fault soak: SEED=1 (or \"1 2 3\") DURATION=240; JSON invariants"

# uv (from PyPI, into the venv) resolves and installs the test environment in seconds where
# pip takes minutes; pip stays in the venv for anything that calls it.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip uv
	$(VENV)/bin/uv pip install --quiet --python $(VENV)/bin/python -e '.[test,whatif]'
	touch $@

venv: $(VENV)/.installed

demo: venv cluster-build
	$(PY) -m tools.demo

# Static checks. mypy covers tools/ and tests/ too; import-linter holds ARCHITECTURE.md's
# import rules ([tool.importlinter] in pyproject.toml); vulture finds code production never
# calls ([tool.vulture]). The demo, benchmarks, soak and cluster targets run tools/
# (tools/README.md).
lint: venv lint-only

lint-only:
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/vulture

typecheck: venv
	$(VENV)/bin/mypy

# Offline: tests that need PyPI are marked `network` and run in `make test` only.
test-unit: venv
	$(VENV)/bin/pytest tests/unit -m "not network"

coverage: venv
	$(VENV)/bin/pytest tests/unit -m "not network" --cov --cov-branch --cov-report=term

test-integration: venv cluster-build
	$(VENV)/bin/pytest tests/integration

# helm lint / helm template with the pinned Helm (built by cluster-build).
test-chart: venv cluster-build
	$(VENV)/bin/pytest tests/chart

test-e2e: venv cluster-build
	$(VENV)/bin/pytest tests/e2e

# The Dockerfile built with buildah on a Debian stand-in for its base, then run (root, buildah,
# mmdebstrap; the base is cached under ~/.cache/capacity-listener/image-base/).
test-image: venv cluster-build
	$(VENV)/bin/pytest tests/image

image: venv
	$(PY) -m tools.image

# Opt-in: the capacity model on the real cluster-autoscaler (1.36, kwok provider), built from
# the source tree in CLUSTER_AUTOSCALER_SRC (not on the Go module proxy); skipped without it.
test-cluster-autoscaler: venv cluster-build
	@test -n "$(CLUSTER_AUTOSCALER_SRC)" || echo "cluster-autoscaler tier skipped: CLUSTER_AUTOSCALER_SRC is not set (a cluster-autoscaler 1.36 source tree; see CONTRIBUTING.md)"
	$(VENV)/bin/pytest tests/integration/test_cluster_autoscaler.py -rs -s

# Opt-in: this listener under ARC's real gha-runner-scale-set controller, built from the
# source tree in ARC_SRC (cached per commit); skipped without it.
test-arc: venv cluster-build
	@test -n "$(ARC_SRC)" || echo "ARC tier skipped: ARC_SRC is not set (an actions-runner-controller source tree; see CONTRIBUTING.md)"
	$(VENV)/bin/pytest tests/integration/test_arc_controller.py -rs -s

# Our listener against ARC's own poll loop (a Go reference over actions/scaleset, cached).
test-conformance: venv conformance-build
	$(VENV)/bin/pytest tests/conformance

# The one test command (README, CI): the fast gate (lint, unit) first, then the Go builds,
# then every slow tier; a per-tier timing summary at the end (tests/tiers.sh).
test: venv
	VENV=$(VENV) bash tests/tiers.sh

check: test

# The control plane, Karpenter, the Helm CLI the chart tests run and kubectl (the quick-start
# test) (all pinned, cached).
cluster-build: venv
	$(CLUSTER) build --karpenter --helm --kubectl

conformance-build: venv
	$(PY) -m tools.conformance.build

cluster-up: cluster-build
	$(CLUSTER) up

cluster-down: venv
	$(CLUSTER) down

cluster-status: venv
	$(CLUSTER) status

bench: venv cluster-build
	$(PY) -m tools.bench

# The companion chart, versioned like the image (pyproject.toml): chart version and appVersion
# (the image tag the chart's NOTES print) are both set here, with the pinned Helm.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -n 1)
chart-package: venv
	$(CLUSTER) helm -- lint --strict charts/capacity-listener \
	  --values charts/capacity-listener/ci/example-values.yaml
	$(CLUSTER) helm -- package charts/capacity-listener --version $(VERSION) \
	  --app-version $(VERSION) --destination dist

# The webhook receiver alone: no cluster, one process (prints JSON).
bench-receiver: venv
	$(PY) -m tools.bench_receiver

# RSS of one listener beside ARC's Go listener, idle and at 100 / 1,000 pairs (prints JSON).
bench-footprint: venv cluster-build conformance-build
	$(PY) -m tools.bench_footprint

# Five seeds, every variant of a seed side by side (about 2 h on a busy 2-core machine).
OUTCOMES_DIR ?= docs/img
OUTCOMES_FAMILY ?= capped
bench-outcomes: venv cluster-build
	$(PY) -m tools.bench_outcomes run --family $(OUTCOMES_FAMILY) --out $(OUTCOMES_DIR)

# docs/benchmarks.md and README.md's results block, generated from the committed JSON
# (tools/bench_report.py names it); the summary figures drawn again.
bench-report: venv
	$(PY) -m tools.bench_report

# The fault soak (docs/soak.md): seeded faults over two Karpenter sites, invariants as JSON.
SEED ?= 1
DURATION ?= 240
soak: venv cluster-build
	$(PY) -m tools.soak run --seeds $(SEED) --duration $(DURATION)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis .import_linter_cache .coverage
