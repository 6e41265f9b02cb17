"""Which tests the PostgreSQL run leaves out as the SQLite file's own (tests/support/board.py):
those that reach the file, themselves or through a helper, and not those that merely start a board."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.board import file_helpers, opens_the_file

HELPERS = '''
import sqlite3


def rows_in_the_file(data_dir):
    with sqlite3.connect(data_dir / "board.sqlite") as conn:
        return conn.execute("SELECT count(*) FROM task_activities").fetchone()[0]
'''

SAMPLE = '''
from tests.support.board import make_task, raw_connection, start_board

from deselection_helpers import rows_in_the_file


def file_version(board):
    return board.store.query(lambda conn: conn.execute("PRAGMA data_version").fetchone()[0])


async def test_on_a_board(tmp_path):
    await start_board(tmp_path)


async def test_through_an_imported_helper(tmp_path):
    rows_in_the_file(tmp_path)


async def test_through_a_helper_of_its_own(tmp_path):
    file_version(await start_board(tmp_path))


async def test_on_a_raw_connection(board):
    with raw_connection(board) as conn:
        conn.execute("SELECT 1")
'''


@pytest.fixture
def sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    (tmp_path / "deselection_helpers.py").write_text(HELPERS)
    (tmp_path / "deselection_sample.py").write_text(SAMPLE)
    monkeypatch.syspath_prepend(tmp_path)
    try:
        yield importlib.import_module("deselection_sample")
    finally:
        for name in ("deselection_sample", "deselection_helpers"):
            sys.modules.pop(name, None)


def test_a_helper_that_reaches_the_file_counts_whether_defined_or_imported(sample: ModuleType) -> None:
    assert file_helpers(sample) == {"rows_in_the_file", "file_version"}


def test_a_test_that_only_starts_a_board_runs_on_postgresql(sample: ModuleType) -> None:
    helpers = file_helpers(sample)
    judged = {name: opens_the_file(getattr(sample, name), helpers) for name in dir(sample) if name.startswith("test_")}
    assert judged == {
        "test_on_a_board": False,
        "test_through_an_imported_helper": True,
        "test_through_a_helper_of_its_own": True,
        "test_on_a_raw_connection": True,
    }
