# Each target sets up .venv itself, so a fresh clone needs nothing but Python 3.11+.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP_RUN  := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test

.PHONY: run test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@ $(STAMP_RUN)

run: $(STAMP_RUN)
	$(BIN)/taskd serve

test: $(STAMP_TEST)
	$(BIN)/python -m pytest -q
	@if command -v node >/dev/null 2>&1 && [ -d tests/js ]; then node --test tests/js/; fi

bench: $(STAMP_TEST)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build *.egg-info
