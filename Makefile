# The two quick-start commands: `make demo` and `make test`. Everything they need is
# installed here, into .venv, from the package registries.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTHON ?= python3

.PHONY: install demo lint typecheck test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/priority-pubsub demo

lint: install
	$(VENV)/bin/ruff check .

typecheck: install
	$(PY) scripts/typecheck.py

test: lint typecheck
	$(PY) -m pytest $(PYTEST_ARGS)

bench: install
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
