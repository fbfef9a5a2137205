SHELL := /bin/bash
.DEFAULT_GOAL := help
export PYTHONPATH := shared:.
export SAM_CLI_TELEMETRY := 0
export POWERTOOLS_TRACE_DISABLED := true

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUNTIME_STAMP := $(VENV)/.runtime-installed
SAM_VENV := .venv-sam
FN ?= ScanGpuWasteFunction
EVENT ?= events/scheduled_scan.json
LAYER_DIR := .aws-sam/layer

.PHONY: help install install-user prometheus browser fmt lint typecheck test test-unit test-integration test-hardening test-aws demo bench scorecard coverage layer build invoke deploy clean check validate image image-base

help: ## list the targets
	@if [ -t 1 ]; then c='\033[36m'; r='\033[0m'; else c=''; r=''; fi; \
	grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -v c="$$c" -v r="$$r" 'BEGIN {FS = ":.*?## "}; {printf "  %s%-18s%s %s\n", c, $$1, r, $$2}'

$(RUNTIME_STAMP): shared/requirements.txt requirements-cli.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip >/dev/null
	$(BIN)/pip install -q -r requirements-cli.txt
	$(BIN)/pip install -q -e .
	@touch $(RUNTIME_STAMP)

$(STAMP): $(RUNTIME_STAMP) requirements-dev.txt
	$(BIN)/pip install -q -r requirements-dev.txt
	$(BIN)/pip install -q --no-deps -e .
	@touch $(STAMP)

install-user: $(RUNTIME_STAMP) ## .venv with the gpuwaste command and its runtime dependencies only (no dev toolchain)
	@echo "installed: $(BIN)/gpuwaste ($$($(BIN)/gpuwaste --version 2>/dev/null || echo gpuwaste))"

install: $(STAMP) ## create .venv and install runtime + dev dependencies (and the gpuwaste command)

prometheus: ## install Debian's prometheus/promtool (+ node-exporter, for the textfile test) when missing (tests need a real Prometheus)
	@if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null || ! command -v prometheus-node-exporter >/dev/null; then \
	  echo "installing prometheus, prometheus-node-exporter (Debian packages)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get update -q >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends prometheus prometheus-node-exporter >/dev/null; \
	fi
	@prometheus --version 2>&1 | head -1

browser: ## install Debian's chromium when missing (the HTML summary's narrow-screen test lays the page out in it; skipped without it)
	@if ! command -v chromium >/dev/null; then \
	  echo "installing chromium (Debian package, for the HTML summary layout test)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  (DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || \
	   (DEBIAN_FRONTEND=noninteractive $$SUDO apt-get update -q >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends chromium >/dev/null)) || \
	  echo "chromium could not be installed: the narrow-screen summary test will skip"; \
	fi

fmt: install ## format and autofix
	$(BIN)/ruff format shared functions tests bench
	$(BIN)/ruff check --fix shared functions tests bench

lint: install ## ruff, import boundaries, mypy --strict on the core, template lint
	$(BIN)/ruff check shared functions
	$(BIN)/lint-imports
	$(MAKE) --no-print-directory typecheck
	$(BIN)/cfn-lint template.yaml

typecheck: install ## mypy --strict on all of shared/gpuwaste (pyproject.toml [tool.mypy])
	$(BIN)/mypy

validate: install ## cfn-lint + sam validate (sam in its own venv, offline)
	$(BIN)/cfn-lint template.yaml
	@test -x $(SAM_VENV)/bin/sam || ($(PYTHON) -m venv $(SAM_VENV) && $(SAM_VENV)/bin/pip install -q aws-sam-cli)
	$(SAM_VENV)/bin/sam validate -t template.yaml --region us-east-1

test: install prometheus browser ## the README's test command: install what is needed, then run every test (unit + real servers)
	$(BIN)/python -m pytest -q tests

test-unit: install ## unit tests only (no servers)
	$(BIN)/python -m pytest -q tests/unit

test-integration: install prometheus ## integration tests against real local servers
	$(BIN)/python -m pytest -q tests/integration

test-hardening: install prometheus ## faults, bad input, hostile names, secrets, least privilege, soak; prints the figures
	$(BIN)/python -m pytest -q tests/hardening

test-aws: install ## tests against a deployed stack (needs AWS_SAM_STACK_NAME)
	$(BIN)/python -m pytest -q -m aws tests/aws

demo: $(RUNTIME_STAMP) ## run the whole local pipeline on the bundled demo fleet (runtime dependencies only)
	$(BIN)/gpuwaste demo

bench: install prometheus ## benchmarks: fleet scale, floor and naive comparisons; exposition parser vs prometheus_client (prints numbers)
	$(BIN)/python bench/run.py
	$(BIN)/python bench/parser_speed.py

scorecard: install ## detector scorecard: precision/recall per waste kind on the generated scenarios
	$(BIN)/python bench/scorecard.py

coverage: install ## unit tests with coverage
	$(BIN)/pip install -q pytest-cov
	$(BIN)/python -m pytest -q tests/unit --cov=shared/gpuwaste --cov=functions

layer: install ## assemble the Lambda layer in .aws-sam/layer without sam or Docker (shared/Makefile) and print its size
	rm -rf $(LAYER_DIR)
	$(MAKE) --no-print-directory -C shared build-SharedLayer ARTIFACTS_DIR=$(abspath $(LAYER_DIR)) PYTHON=$(abspath $(BIN)/python)
	@echo "Lambda layer (unzipped; limit 250 MB with the functions): $$(du -sh $(LAYER_DIR) | cut -f1)" \
	  "· gpuwaste $$(du -sh $(LAYER_DIR)/python/gpuwaste | cut -f1)" \
	  "· zipped $$(cd $(LAYER_DIR) && $(abspath $(BIN)/python) -c 'import io,os,zipfile;b=io.BytesIO();z=zipfile.ZipFile(b,"w",zipfile.ZIP_DEFLATED);[z.write(os.path.join(d,f)) for d,_,fs in os.walk(".") for f in fs];z.close();print(f"{len(b.getvalue())/1e6:.1f}M")')"
	@test ! -e $(LAYER_DIR)/python/gpuwaste/cli.py && test ! -e $(LAYER_DIR)/python/gpuwaste/fleet && \
	  test ! -e $(LAYER_DIR)/python/rich && test ! -e $(LAYER_DIR)/python/typer && \
	  echo "the layer holds no CLI, no fleet generator, no rich/typer"

build: layer ## the Lambda layer (size printed), then sam build when .venv-sam has sam (`make validate` installs it)
	@if test -x $(SAM_VENV)/bin/sam; then $(SAM_VENV)/bin/sam build && \
	  echo "sam build: SharedLayer $$(du -sh .aws-sam/build/SharedLayer | cut -f1) unzipped"; \
	  else echo "sam not installed ($(SAM_VENV)): the layer above is what sam build would ship"; fi

invoke: ## sam local invoke $(FN) -e $(EVENT) (needs Docker)
	$(SAM_VENV)/bin/sam local invoke $(FN) -e $(EVENT)

deploy: ## sam build && sam deploy --guided
	$(SAM_VENV)/bin/sam build && $(SAM_VENV)/bin/sam deploy --guided

IMAGE ?= registry.example.com/gpuwaste
WITH_MCP ?= 0
# the first container engine that answers (a docker CLI without a daemon does not count)
ENGINE ?= $(shell for e in podman docker; do command -v $$e >/dev/null 2>&1 && $$e info >/dev/null 2>&1 && { echo $$e; break; }; done)
PKG_VERSION = $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)
PKG_HOME = $(shell sed -n 's/^Homepage = "\(.*\)"/\1/p' pyproject.toml | head -1)

image: ## build the container image (Containerfile) with podman or docker, tagged with the package's version; says so when neither exists
	@if [ -z "$(ENGINE)" ]; then \
	  echo "make image: no working container engine (podman, or docker with its daemon): no image built."; \
	  echo "  install one, or build elsewhere: podman build --build-arg VERSION=$(PKG_VERSION) --build-arg HOMEPAGE=$(PKG_HOME) -t $(IMAGE):$(PKG_VERSION) -f Containerfile ."; \
	  exit 1; \
	fi
	$(ENGINE) build -f Containerfile -t $(IMAGE):$(PKG_VERSION) \
	  --build-arg VERSION=$(PKG_VERSION) --build-arg WITH_MCP=$(WITH_MCP) --build-arg HOMEPAGE=$(PKG_HOME) \
	  --build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null || echo unknown) \
	  --build-arg CREATED=$$(date -u +%Y-%m-%dT%H:%M:%SZ) .
	@echo "built $(IMAGE):$(PKG_VERSION) with $(ENGINE)"

image-base: ## print the current digest of the Containerfile's base image (to refresh BASE_DIGEST; needs podman/skopeo or docker)
	@base=$$(sed -n 's/^ARG BASE_NAME=//p' Containerfile); \
	if command -v skopeo >/dev/null; then skopeo inspect --format '{{.Digest}}' docker://$$base; \
	elif [ -n "$(ENGINE)" ]; then $(ENGINE) pull -q $$base >/dev/null && $(ENGINE) image inspect --format '{{index .RepoDigests 0}}' $$base; \
	else echo "make image-base: needs skopeo, podman or docker"; exit 1; fi

clean: ## remove build output and caches
	rm -rf .aws-sam .pytest_cache .mypy_cache .ruff_cache build dist shared/*.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

check: lint test ## what CI runs
