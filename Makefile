# Streamscribe — the documented entry points. `make demo` and `make test` work on a fresh machine:
# every install step lives here or in scripts/ and deploy/local/ (idempotent: a second run
# downloads nothing).

SHELL := /bin/bash
# A failing command fails its recipe, inside a pipe too (`pip freeze | sed` in `lock`).
.SHELLFLAGS := -eo pipefail -c
PYTHON_BIN ?= python3.11
PIP_VERSION := 26.3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
APT_PACKAGES := python3.11-venv curl redis-server redis-tools espeak-ng sox flite festival \
	festvox-us-slt-hts festvox-kallpc16k maven openjdk-17-jre-headless prometheus chromium \
	chromium-driver ffmpeg gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good \
	gstreamer1.0-plugins-bad baresip
PYTEST_ARGS ?=

export STREAMSCRIBE_CACHE ?= $(HOME)/.cache/streamscribe
export PYTHON := $(abspath $(PY))

.PHONY: help setup system-packages venv kafka-fetch kafka-up kafka-down redis-up redis-down \
	topics infra-up infra-down test test-unit test-integration lint format demo demo-call bench \
	bench-quick fixtures readme clean lock

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

setup: system-packages venv kafka-fetch  ## everything: Debian packages, .venv, Kafka jars

system-packages:  ## install missing Debian packages (apt-get update once, only if needed)
	@bash scripts/ensure_system_packages.sh $(APT_PACKAGES)

venv: $(STAMP)  ## virtualenv with the package (editable) and its dev extra

$(STAMP): pyproject.toml constraints.txt
	@# python3.11-venv first, whichever target asks for the venv (lint needs no other package).
	@bash scripts/ensure_system_packages.sh python3.11-venv
	@# A venv whose creation failed half-way (no ensurepip) has a python but no pip: redo it.
	@test -x $(VENV)/bin/pip || { rm -rf $(VENV); $(PYTHON_BIN) -m venv $(VENV); }
	$(PY) -m pip install --quiet pip==$(PIP_VERSION)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

lock: venv  ## pin constraints.txt to what .venv has now (after a deliberate upgrade)
	@{ sed -n '/^#/p' constraints.txt; $(PY) -m pip freeze --exclude-editable \
		| sed -E 's|^([A-Za-z0-9_.-]+) @ file:.*/[A-Za-z0-9_]+-([0-9][^-]*)-py3.*$$|\1==\2|'; \
	} > constraints.txt.new && mv constraints.txt.new constraints.txt

kafka-fetch: system-packages  ## resolve the Kafka broker jars from Maven Central into the cache
	@bash deploy/local/kafka.sh fetch

kafka-up: venv kafka-fetch  ## start the local Kafka broker (KRaft) and wait until ready
	@bash deploy/local/kafka.sh up

kafka-down:  ## stop the local Kafka broker
	@bash deploy/local/kafka.sh down

redis-up: system-packages  ## start the local Redis
	@bash deploy/local/redis.sh up

redis-down:  ## stop the local Redis
	@bash deploy/local/redis.sh down

infra-up: kafka-up redis-up  ## Kafka + Redis
infra-down: kafka-down redis-down  ## stop the local Kafka and Redis

topics: kafka-up  ## create / align the topics declared in topics/topics.toml
	@$(VENV)/bin/streamscribe topics apply

test: setup  ## unit + integration tests (starts Kafka and Redis itself unless given by env)
	$(VENV)/bin/pytest $(PYTEST_ARGS)

test-unit: venv  ## unit tests only (no broker, fast)
	$(VENV)/bin/pytest tests/unit $(PYTEST_ARGS)

test-integration: setup  ## integration tests only
	$(VENV)/bin/pytest tests/integration $(PYTEST_ARGS)

lint: venv  ## ruff (lint + format check), mypy and the import layering (lint-imports)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	PYTHONPATH=. $(VENV)/bin/lint-imports --no-logo --no-cache

format: venv  ## apply ruff's formatting and safe fixes
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

demo: setup  ## start everything and run the main job end to end
	@bash scripts/demo.sh

demo-call: setup  ## a phone call placed by baresip through the SIP ingress, transcribed live
	@bash scripts/demo_call.sh

bench: setup  ## all benchmarks; results under bench/results/
	$(PY) -m bench.run

bench-quick: setup  ## the benchmarks in quick mode (< 10 minutes)
	$(PY) -m bench.run --quick

readme: venv  ## regenerate docs/configuration.md's settings table from pipeline/settings.py
	$(PY) -m scripts.update_configuration

fixtures: system-packages  ## regenerate the speech fixtures under tests/fixtures/
	python3 scripts/make_fixtures.py

clean: infra-down  ## stop services, remove the virtualenv
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
