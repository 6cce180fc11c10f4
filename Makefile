# The project's two entry points (see README.md):
#   make book   set up, then render the book from the committed, GPU-executed chapters
#   make test   set up, then run the tests (unit, distributed on gloo, Triton interpreter, nbval, book build)
# Both create .venv on first use. PYTHON picks the interpreter; PIP_CONSTRAINT (environment) may pin
# versions, as CI does for the CPU build of torch.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup book test chapters clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,book]"
	touch $@

book: setup
	$(BIN)/python -m systems.pipeline status
	$(BIN)/jupyter-book build . -n -W --keep-going

test: setup
	$(BIN)/python -m pytest

# Re-execute every chapter into the book (on a GPU machine; the full profile refuses to run without one).
chapters: setup
	$(BIN)/python -m systems.pipeline run --profile full

clean:
	rm -rf _build
