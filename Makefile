# Two commands a newcomer needs: `make demo` and `make test`. Both work on a bare machine
# with Python 3.11+ and make: they create .venv and install what they need into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev

.PHONY: demo test test-oldest lint typecheck pytest fuzz bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[all]"
	touch $@

$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@ $(STAMP_RUN)

demo: $(STAMP_RUN)
	$(BIN)/managedloop demo

lint: $(STAMP_DEV)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP_DEV)
	$(BIN)/mypy --strict src/managedloop

pytest: $(STAMP_DEV)
	$(BIN)/python -m pytest --cov --cov-branch --cov-report=term -q

test: lint typecheck pytest

# The whole suite again on the oldest anthropic and botocore we claim to support
# (ci/oldest.txt pins pyproject's floors); `make test` runs on the newest.
VENV_OLD := .venv-oldest
$(VENV_OLD)/.installed: pyproject.toml ci/oldest.txt
	$(PYTHON) -m venv $(VENV_OLD)
	$(VENV_OLD)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_OLD)/bin/python -m pip install --quiet -e ".[dev]" -c ci/oldest.txt
	touch $@

test-oldest: $(VENV_OLD)/.installed
	$(VENV_OLD)/bin/python -m pip list 2>/dev/null | grep -iE '^(anthropic|botocore) '
	$(VENV_OLD)/bin/python -m pytest -q

# The hypothesis properties with the "fuzz" profile: 10,000 examples per property.
fuzz: $(STAMP_DEV)
	HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -q -m fuzz --timeout=0

bench: $(VENV)/.installed-bench
	$(BIN)/python -m bench

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev,bench]"
	touch $@

clean:
	rm -rf $(VENV) $(VENV_OLD) .coverage .mypy_cache .ruff_cache
