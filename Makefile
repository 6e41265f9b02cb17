# Each target sets up .venv itself, so a fresh clone needs nothing but Python 3.11+; `make test`
# also installs the system programs the suite runs (scripts/ensure-system-deps), or stops with
# the command that does.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP_RUN  := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test
LINTED := shared services taskctl tests bench
# pytest's worker processes (pytest-xdist; `auto`: one per CPU). The tests mostly wait on the
# boards, hubs and browsers they start, so two workers on a 2-core machine take the suite in about
# 55 % of one's time; `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= auto
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal
# The HTTP, stream, hub and loop-subscriber suites and the documents' stated figures, once more
# with every in-process board on PostgreSQL (tests/support/board.py); tests that open the SQLite
# file itself are left out there.
ON_POSTGRESQL := tests/integration/test_events_stream.py tests/integration/test_api_tasks.py \
	tests/integration/test_attachments.py tests/integration/test_relations.py tests/hub tests/subscriber \
	tests/integration/test_events_tail.py tests/integration/test_events_cursor_refusals.py \
	tests/integration/test_page_cursors_after_restore.py tests/integration/test_compaction.py \
	tests/integration/test_sessions.py tests/integration/test_nul_in_paths_and_cursors.py tests/contract/test_docs_claims.py \
	tests/integration/test_task_search.py tests/integration/test_state_import_refusals.py \
	tests/integration/test_state_import_hand_edited.py tests/integration/test_state_import_keeps_order.py

.PHONY: run deps lint test bench clean

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

# Lint and types run first: they fail in seconds, the suite takes minutes. Which packages mypy
# checks strictly is in pyproject.toml ([tool.mypy]).
# A skipped test fails the run (tests/conftest.py), so a green run ran every test.
test: deps $(STAMP_TEST)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/mypy
	$(PYTEST)
	TASKLOOM_TEST_ENGINE=postgresql $(PYTEST) $(ON_POSTGRESQL)
	node --test tests/js/

lint: $(STAMP_TEST)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/mypy

bench: $(STAMP_TEST)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build *.egg-info
