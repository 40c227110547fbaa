# The README's two commands:
#   make serve   set up .venv, regenerate snippets/, serve the site at http://127.0.0.1:8000
#   make test    set up .venv, run every test (slow ones included)
# Set-up installs torch==2.13.0 (the CPU build) before anything else, so that no other package pulls a
# multi-GB CUDA build of torch in through its own requirements. A stamp file makes the second run quick.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TORCH := torch==2.13.0

export NO_MKDOCS_2_WARNING := 1

.PHONY: serve test snippets build clean venv

venv: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install "$(TORCH)"
	$(BIN)/python -m pip install -e ".[all]"
	touch $(STAMP)

snippets: $(STAMP)
	$(BIN)/python -m site_scripts.regenerate

serve: snippets
	$(BIN)/python -m mkdocs serve -a 127.0.0.1:8000

test: $(STAMP)
	$(BIN)/python -m pytest

build: snippets
	$(BIN)/python -m mkdocs build --strict --site-dir site

clean:
	rm -rf site .cache build dist *.egg-info .pytest_cache .hypothesis
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
