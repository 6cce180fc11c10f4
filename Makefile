# The project's two entry points (see README.md):
#   make book   set up what rendering needs (no torch), then render the book from the committed chapters
#   make test   set up everything, then run the tests (unit, distributed on gloo, Triton interpreter, nbval,
#               the book built and opened in a browser)
# Both use .venv. PYTHON picks the interpreter. Installs follow requirements/constraints.txt (the torch and
# Triton releases the tests are checked with; PIP_CONSTRAINT in the environment overrides it);
# TORCH_INDEX installs torch from another index first, e.g. PyTorch's CPU wheels on a machine without a GPU:
#   make test TORCH_INDEX=https://download.pytorch.org/whl/cpu

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --quiet
export PIP_CONSTRAINT ?= $(CURDIR)/requirements/constraints.txt

.PHONY: setup setup-book book test chapters clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip

setup-book: $(VENV)/.book
$(VENV)/.book: $(BIN)/python requirements/book.txt pyproject.toml
	$(PIP) -r requirements/book.txt
	$(PIP) --no-deps -e .
	touch $@

setup: $(VENV)/.installed
$(VENV)/.installed: $(BIN)/python pyproject.toml $(wildcard requirements/*.txt)
	$(if $(TORCH_INDEX),$(PIP) torch --index-url $(TORCH_INDEX))
	$(PIP) -e ".[test]"
	touch $@

book: setup-book
	$(BIN)/python -m systems.pipeline status
	$(BIN)/jupyter-book build . -n -W --keep-going

test: setup
	$(BIN)/python -m pytest

# Re-execute every chapter into the book (each on the machine its header requires: a GPU for most).
chapters: setup
	$(BIN)/python -m systems.pipeline run --profile full

clean:
	rm -rf _build
