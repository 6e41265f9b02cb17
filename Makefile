# Each target sets up .venv itself, so a fresh clone needs nothing but Python 3.11+; `make test`
# also installs the system programs the suite runs (scripts/ensure-system-deps), or stops with
# the command that does.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP_RUN  := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test

.PHONY: run deps test bench clean

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

deps:
	scripts/ensure-system-deps

# A skipped test fails the run (tests/conftest.py), so a green run ran every test.
test: deps $(STAMP_TEST)
	$(BIN)/python -m pytest -q
	node --test tests/js/

bench: $(STAMP_TEST)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build *.egg-info
