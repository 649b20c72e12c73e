# DSAN Scheduler. Two commands do everything on a fresh machine: `make demo`, `make test`.
# Heavy artefacts (Go binaries, kwok) are cached under $(CACHE) by version, never per test.
SHELL := /bin/bash
PY ?= python3.11
VENV ?= .venv
CACHE ?= $(HOME)/.cache/dsan
export DSAN_CACHE := $(CACHE)
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: help venv deps demo test test-unit test-fast go-test lint bench proto cluster cluster-down cluster-demo control-plane images images-build train train-actions clean

help:
	@echo "make demo     short openb reproduction on embedded defaults (installs what it needs)"
	@echo "make test     the whole test suite: unit, integration, e2e (installs and builds what it needs)"
	@echo "make lint     ruff + mypy"
	@echo "make bench    pytest-benchmark suites under bench/"
	@echo "make cluster  a local control plane (etcd, kube-apiserver, kube-scheduler, kwok) on 127.0.0.1"
	@echo "make images   the sidecar, device plugin and kube-scheduler images (podman, no registry), smoke-tested"
	@echo "make train    rebuild the shipped model dsan/model/default: actions, node model, headroom (~1 h)"
	@echo "make train-actions  re-learn DSAN's actions beyond node choice into dsan/model/default (~16 min)"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-*; touch $@

venv: $(STAMP)

# System packages the integration and e2e tiers run for real: etcd, Prometheus, protoc.
deps:
	@bash hack/deps.sh

demo: venv
	$(BIN)/dsan sim openb --policy all,dsan --seeds 42-44 --out out/demo

control-plane: deps
	@bash hack/control-plane-build.sh

test: venv deps control-plane images-build go-test lint
	$(BIN)/python -m pytest -q tests

# The three container images (hack/images.sh: podman, mmdebstrap, no registry), cached under
# $(CACHE)/images by content hash: cold ~6 min, warm seconds. `make images` also runs their
# smoke tests, which `make test` runs with the rest of the e2e tier.
images-build: deps
	@bash hack/images.sh

images: venv control-plane images-build
	$(BIN)/python -m pytest -q tests/e2e/test_images.py

# Go unit tests of the scheduler plugin; reuses control-plane's build cache (warm: seconds).
go-test: deps
	@bash hack/go-test.sh

test-unit: venv
	$(BIN)/python -m pytest -q tests/unit

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy dsan sidecar deviceplugin

bench: venv
	$(BIN)/python -m pytest -q bench --benchmark-only

proto: venv
	@bash hack/gen-proto.sh

cluster: venv control-plane
	@bash hack/cluster.sh up

cluster-down:
	@bash hack/cluster.sh down

cluster-demo: venv control-plane
	$(BIN)/python -m tests.e2e.demo

# The shipped model's two parts (docs/model.md, "The shipped model"): DSAN's actions beyond
# node choice (actions.json; docs/results/table1.md, "How the actions were learned": the eight
# numbers with k8s-default's node choice on 12 h episodes, then the headroom with DSAN's own
# on whole days) and the node model trained on seed-table1-v3, whose training seeds are
# validated with the first search's actions; the headroom search needs that node model.
ACTIONS_FIRST = $(BIN)/python -m dsan.train.actions_search --out out/actions --seeds 101 102 103 \
	--hours 12 --population 6 --iterations 3 --jobs 2 --model-dir dsan/model/default \
	--search w_gpu_h w_core_h w_count w_stop train_growth batch_growth gpu_reserve age_s
ACTIONS_SECOND = $(BIN)/python -m dsan.train.actions_search --out out/actions-ls \
	--seeds 101 102 103 --hours 24 --population 5 --iterations 3 --init-sd 0.6 \
	--node-policy dsan --jobs 2 --init-from dsan/model/default --search ls_headroom \
	--model-dir dsan/model/default
NODE_MODEL = $(BIN)/dsan train --scenario seed-table1-v3 --openb-skip dsan/train/openb_skip.json \
	--imitation-tolerance 0.1 --select-seeds 1 2 3 4 --select-jobs 2 \
	--actions-from dsan/model/default --out out/train-default --model-dir dsan/model/default

train: venv
	$(ACTIONS_FIRST)
	$(NODE_MODEL)
	$(ACTIONS_SECOND)

train-actions: venv
	$(ACTIONS_FIRST)
	$(ACTIONS_SECOND)

clean:
	rm -rf out .pytest_cache .mypy_cache .ruff_cache
