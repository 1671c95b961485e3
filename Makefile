# The two commands of README.md:  make lab  and  make test.
# Everything is installed into .venv by the project's own files; nothing by hand.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
SAMPLE_DB := data/sample.db
PYTEST_ARGS ?=

.PHONY: install system-deps data lab test lint bench clean

# setup.py builds the C core of references.py: a change to it reinstalls (recompiles)
$(STAMP): pyproject.toml setup.py opctx/context/_refscan.c
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[all]'
	$(BIN)/opctx info  # says so when the C core or the offline tokenizer is missing
	touch $(STAMP)

install: $(STAMP)

# Debian's chromium for the browser test (playwright drives it; it never downloads a browser).
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	  else echo "chromium is not installed and cannot be installed here (not root)"; fi; }

$(SAMPLE_DB): $(STAMP) $(wildcard data/samples/*) opctx/lab/scenarios.py
	$(BIN)/opctx build-samples --db $(SAMPLE_DB)

data: $(SAMPLE_DB)

# Offline: no update checks, no news, no extension-manager queries to PyPI.
# --allow-root only when run as root (containers), where jupyter refuses to start without it.
LAB_ARGS := --notebook-dir=notebooks --ServerApp.ip=127.0.0.1 --no-browser \
	--LabApp.news_url=None --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate \
	--LabApp.extension_manager=readonly $(if $(filter 0,$(shell id -u)),--allow-root)

lab: install data
	$(BIN)/jupyter lab $(LAB_ARGS)

lint: install
	$(BIN)/ruff check opctx tests benchmarks

# pytest exits 5 when it collected nothing: that is a failure here, never a pass.
test: install system-deps lint data
	$(BIN)/python -m pytest tests notebooks --nbval-lax --nbval-current-env --timeout=900 $(PYTEST_ARGS); \
	rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

bench: install
	for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) $(SAMPLE_DB) .pytest_cache .ruff_cache
