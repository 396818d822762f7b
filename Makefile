# The two commands a newcomer needs: `make study` and `make test`. Each sets itself up.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PROFILE ?= quick
DEVICE ?= auto
STAMP := $(VENV)/.installed-stamp
# the project's notebooks (git's list, so a scratch notebook of one's own is neither run nor
# tested; every notebook in a copy that is not a git checkout)
NOTEBOOKS := $(sort $(or $(shell git ls-files 'notebooks/*.ipynb' 2>/dev/null),$(wildcard notebooks/*.ipynb)))

.PHONY: study test test-slow bench setup lab report docs docs-check

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[notebooks,test]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

setup: $(STAMP)

## Compute the pending runs of $(PROFILE) (quick|smoke|paper) on $(DEVICE) in parallel, within
## BUDGET minutes if set (run again to continue), then execute every notebook with papermill
## and regenerate figures/REPORT.md. The quick profile's executed notebooks replace the committed ones.
BUDGET ?=
WORKERS ?=
EXECUTOR ?= local
study: $(STAMP)
	$(BIN)/python -m vflkit.study --profile $(PROFILE) --device $(DEVICE) --executor $(EXECUTOR) \
		$(if $(BUDGET),--budget $(BUDGET)) $(if $(WORKERS),--workers $(WORKERS)) \
		$(if $(filter quick,$(PROFILE)),--commit-notebooks) $(NOTEBOOKS)

## Regenerate figures/REPORT.md (every artefact, printed number and claim of the five papers beside
## ours) from the committed records and tables; trains nothing. `make study` ends with it.
report: $(STAMP)
	$(BIN)/python -m vflkit.reproduction

## The fast tier: unit tests, the committed notebooks re-executed and checked by nbval, and the
## smoke profile of the notebooks that take seconds (tests marked `slow` are left to test-slow).
## TEST_WORKERS pytest-xdist processes share the tests (default auto: one per core; 0: this
## process alone); a test file, or a notebook's cells, stays on one worker, in order. Each worker's
## torch runs one thread: workers whose threads outnumber the cores wait on each other's.
TEST_WORKERS ?= auto
test: $(STAMP)
	$(if $(filter-out 0,$(TEST_WORKERS)),OMP_NUM_THREADS=1) $(BIN)/python -m pytest -m "not slow and not docs" -n $(TEST_WORKERS) --dist loadfile \
		--nbval --nbval-current-env tests $(NOTEBOOKS)

## The slow tier: what takes minutes (EASTER's and Multi-VFL's smoke notebooks, every notebook's
## paper-profile slice, the report and paper tables rebuilt from every record). CI runs both tiers.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow tests

## The book: a static HTML site of the README, docs/, figures/REPORT.md and the executed notebooks
## (rendered as committed, never run), in $(SITE)/; open $(SITE)/index.html. Sphinx's warnings are
## errors, and every page, figure and internal link must resolve (python -m vflkit.sitecheck).
SITE := _build/site
DOCS_STAMP := $(VENV)/.docs-stamp
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[docs]"
	touch $@

docs: $(DOCS_STAMP)
	rm -rf $(SITE)
	$(BIN)/python -m sphinx -W --keep-going -q -c docs -b html . $(SITE)
	$(BIN)/python -m vflkit.sitecheck $(SITE)

## The book checked as CI checks it: built, then opened in headless Chromium (tests marked `docs`).
docs-check: docs
	VFLKIT_BOOK=$(SITE) $(BIN)/python -m pytest -m docs tests/test_docs.py

## Throughput of a VFL step vs the same models without VFL machinery, masking's share, and
## samples/s of every method per model (with GPU utilisation on CUDA): make bench DEVICE=cuda
bench: $(STAMP)
	$(BIN)/python -m vflkit.ops.bench --device $(DEVICE)

## Open the notebooks in JupyterLab, in the project's environment (its kernel is "Python 3 (ipykernel)").
## Autosave is off (jupyter/labconfig/default_setting_overrides.json, found through JUPYTER_CONFIG_PATH,
## which adds to your own Jupyter config and replaces none of it): running a committed notebook never
## rewrites it behind your back; File > Save (or Save As into an ignored folder) is yours to choose.
lab: $(STAMP)
	JUPYTER_CONFIG_PATH=$(CURDIR)/jupyter$(if $(JUPYTER_CONFIG_PATH),:$(JUPYTER_CONFIG_PATH)) $(BIN)/jupyter lab --ServerApp.root_dir=.
