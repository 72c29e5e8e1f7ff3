# The two quick-start commands: `make demo` and `make test`. Everything they need is
# installed here, into .venv, from the package registries.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
BASE_STAMP := $(VENV)/.base-stamp
PYTHON ?= python3

.PHONY: install prerequisites demo lint typecheck docs test chaos image-test bench clean

# The demo needs only the core (local driver, no cloud SDKs, no Spark): a quick first run.
# Packages are installed with uv (from PyPI, into the venv): the same versions pip resolves,
# from its cache in seconds where pip took ~2.5 minutes of every CI run on a fresh clone.
UV := $(VENV)/bin/uv pip install --quiet --python $(PY)
# Kept between clones (CI runs on a fresh one): pyspark's wheel, which the registry's answers
# keep uv from caching (scripts/source_wheels.py), and mypy's cache, which checks every module
# against its source's hash before it trusts an entry. Together ~80 s of every fresh run.
CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/priority-pubsub

$(BASE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip uv
	$(UV) -e .
	touch $(BASE_STAMP)

$(STAMP): pyproject.toml $(BASE_STAMP) scripts/source_wheels.py
	$(PY) scripts/source_wheels.py $(CACHE)/wheels
	$(UV) --find-links $(CACHE)/wheels -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

prerequisites:
	bash scripts/ci-prerequisites.sh

demo: $(BASE_STAMP)
	$(VENV)/bin/priority-pubsub demo

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache

typecheck: install
	MYPY_CACHE_DIR=$(CACHE)/mypy $(PY) scripts/typecheck.py

# The suite mostly waits (servers, sidecars, apps): three workers on two cores, one test file
# per worker at a time (a file's module fixtures and servers stay in one process).
PYTEST_WORKERS ?= -n 3 --dist loadfile

# The manual (mkdocs.yml) into build/site; --strict: a broken link or anchor fails the build.
# The reference pages are generated from the config models and the CLI while it builds.
docs: install
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(VENV)/bin/mkdocs build --strict --quiet

test: prerequisites lint typecheck docs
	$(PY) -m pytest $(PYTEST_WORKERS) $(PYTEST_ARGS)

# The chaos scenarios alone (make test runs them too): kill -9 under load, app faults, a
# broker restart, hostile bodies and config files; prints the accounting of each.
chaos: install
	$(PY) -m pytest tests/chaos -m chaos -q -ra $(PYTEST_ARGS)

# The image built with buildah and run with podman alone (tests/image, part of make test;
# needs root). Time-boxed: a first run debootstraps the base (~1 min, then cached in
# /var/cache/priority-pubsub).
image-test: install
	timeout 900 $(PY) -m pytest tests/image -q -ra
	@cat build/image-report.json

# ministack (SQS at broker speed for bench.throughput) pins botocore exactly: its own venv.
MINISTACK_VENV := .venv-ministack

$(MINISTACK_VENV)/bin/ministack:
	$(PYTHON) -m venv $(MINISTACK_VENV)
	$(MINISTACK_VENV)/bin/pip install --quiet 'ministack>=1.5,<2'

bench: install $(MINISTACK_VENV)/bin/ministack
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) $(MINISTACK_VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
