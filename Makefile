# The README's two commands:
#   make serve   set up, regenerate snippets/, serve the site at http://127.0.0.1:8000
#   make test    set up, run every test (slow ones included)
# and, while you work, `make test-quick`: every test that is not marked slow, in about two minutes.
# Set-up, done once (stamp files make later runs quick):
#   1. say in one line which Python was found and which one the site and the tests need, and stop there if it
#      is too old (`make check-python` does only this);
#   2. create .venv and install torch==2.13.0 (the CPU build) before anything else, so that no other package
#      pulls a multi-GB CUDA build of torch in through its own requirements; then the project with [all];
#   3. for `make test`: fetch DeepInfer's sdist from PyPI into .cache/deepinfer/, check its SHA-256 against the
#      one that docs/reference/deepinfer-refs.json quotes, and unpack it (site_scripts/build/fetch_sdist.py); the
#      tests check the mapping page's DeepInfer line numbers against it. The tests themselves never download;
#   4. for `make serve`, `make build` and `make test`: fetch the pinned Pyodide runtime (the npm package's
#      tarball, site_scripts/build/pyodide.json) into .cache/pyodide/, check it against the registry's integrity
#      hash, and unpack the files the pages' Run buttons need (site_scripts/build/fetch_pyodide.py); every build
#      copies them into the site. Without them the site still builds, and the buttons say how to run locally.

PYTHON ?= python3
# The oldest Python that the site and the tests install on: the highest Requires-Python among the pins of
# pyproject.toml's extras (pymdown-extensions 13.1.2 asks for 3.11.5; tests/test_setup.py checks that this
# is the floor they give). The toy demo alone runs on 3.10 (requires-python in pyproject.toml).
PYTHON_FLOOR := 3.11.5
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TORCH := torch==2.13.0
DEEPINFER_SDIST := .cache/deepinfer/sdist
SDIST_STAMP := $(DEEPINFER_SDIST)/.fetched-stamp
PYODIDE_STAMP := .cache/pyodide/.fetched-stamp

export NO_MKDOCS_2_WARNING := 1

# $(call check_python,INTERPRETER,ADVICE): one line naming INTERPRETER's version and the floor, on stdout; when
# INTERPRETER is older, the line (with ADVICE) goes to stderr and the exit status is 2. It installs nothing,
# and it is written so that any Python, 2.7 included, can say how old it is.
check_python = $(1) -c 'import sys; found = tuple(sys.version_info[:3]); \
  floor = tuple(int(part) for part in "$(PYTHON_FLOOR)".split(".")); ok = found >= floor; \
  line = "%s is Python %d.%d.%d; the site and the tests need Python $(PYTHON_FLOOR) or newer" % ((sys.argv[1],) + found); \
  (sys.stdout if ok else sys.stderr).write(line + ("" if ok else sys.argv[2]) + "\n"); sys.exit(0 if ok else 2)' \
  '$(1)' '$(2)'
NEWER_PYTHON := ; run make again with PYTHON set to a newer one (for example PYTHON=python3.12)
STALE_VENV := ; $(VENV) was made with it: remove $(VENV), then run make again with PYTHON set to a newer one

.PHONY: serve test test-quick snippets build clean venv setup check-python

check-python:
	@$(call check_python,$(PYTHON),$(NEWER_PYTHON))

venv: $(STAMP)

setup: $(STAMP) $(SDIST_STAMP) $(PYODIDE_STAMP)

$(BIN)/python:
	@$(call check_python,$(PYTHON),$(NEWER_PYTHON))
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	@$(call check_python,$(BIN)/python,$(STALE_VENV))
	$(BIN)/python -m pip install "$(TORCH)"
	$(BIN)/python -m pip install -e ".[all]"
	touch $(STAMP)

$(SDIST_STAMP): docs/reference/deepinfer-refs.json | $(STAMP)
	$(BIN)/python -m site_scripts.build.fetch_sdist $(DEEPINFER_SDIST)
	touch $(SDIST_STAMP)

$(PYODIDE_STAMP): site_scripts/build/pyodide.json | $(STAMP)
	$(BIN)/python -m site_scripts.build.fetch_pyodide
	touch $(PYODIDE_STAMP)

# Runs only the generators whose inputs or outputs changed since their last run here (stamps under
# .cache/regenerate/), so a second `make serve` starts in seconds; `regenerate --all` runs every one.
snippets: $(STAMP)
	$(BIN)/python -m site_scripts.build.regenerate

serve: snippets $(PYODIDE_STAMP)
	$(BIN)/python -m mkdocs serve -a 127.0.0.1:8000

# The suite runs on two workers (pytest-xdist). The scheduler in tests/conftest.py sends each unit of work whole
# to one worker: a file's tests, or the session's shared work (the site build, each of three parts of the
# regeneration of snippets/) with the tests that read it, so nothing is made twice. A third worker on two cores
# made the suite slower (on a 2-core AMD EPYC its CPU time rose by a quarter). The 15 slowest tests end a run.
PYTEST_WORKERS := -n 2 --durations=15

test: setup
	DEEPINFER_SDIST=$(abspath $(DEEPINFER_SDIST)) $(BIN)/python -m pytest $(PYTEST_WORKERS)

# The quick loop while you work: every test but the slow ones (the regeneration, the site builds, the browser,
# and the few model runs over ~20 s). It needs neither the sdist nor the Pyodide runtime.
test-quick: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_WORKERS) -m "not slow"

build: snippets $(PYODIDE_STAMP)
	$(BIN)/python -m mkdocs build --strict --site-dir site

clean:
	rm -rf site .cache build dist *.egg-info .pytest_cache .hypothesis
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
