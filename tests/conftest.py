"""Fixtures: real boards on loopback ports with real SQLite files in a temp dir."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from hypothesis import settings

from tests.support.board import BoardClient, RunningBoard, TaskdProcess, deselect_sqlite_only, start_board
from tests.support.no_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401 (hooks)
from tests.support.postgres import pg_cluster, postgres_url  # noqa: F401 (fixtures: throwaway PostgreSQL)

# Hypothesis fails an example that runs longer than 200 ms by default: a timed test, which on a
# shared machine under load fails for want of CPU, not for a defect. Properties here are judged on
# their answers only; speed is the benches' to measure.
settings.register_profile("taskloom", deadline=None)
settings.load_profile("taskloom")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect_sqlite_only(config, items)


@pytest.fixture
async def board(tmp_path: Path) -> AsyncIterator[RunningBoard]:
    running = await start_board(tmp_path / "data")
    try:
        yield running
    finally:
        await running.runner.cleanup()


@pytest.fixture
async def pg_board(tmp_path: Path, postgres_url: str) -> AsyncIterator[RunningBoard]:  # noqa: F811 (the imported fixture)
    """An in-process board on a fresh database of the session's throwaway PostgreSQL cluster."""
    running = await start_board(tmp_path / "data", database=postgres_url)
    try:
        yield running
    finally:
        await running.runner.cleanup()


@pytest.fixture
async def pg_client(pg_board: RunningBoard) -> AsyncIterator[BoardClient]:
    async with aiohttp.ClientSession() as session:
        yield BoardClient(pg_board.url, pg_board.token, session)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """A client session without a cookie jar: every cookie a test sends is one it chose to send."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:
        yield session


@pytest.fixture
async def client(board: RunningBoard) -> AsyncIterator[BoardClient]:
    async with aiohttp.ClientSession() as session:
        yield BoardClient(board.url, board.token, session)


@pytest.fixture
def taskd(tmp_path: Path) -> Iterator[TaskdProcess]:
    """A ``taskd serve`` subprocess factory; call ``.start()``. Stopped at teardown."""
    runtime = tmp_path / "run"
    process = TaskdProcess(data_dir=tmp_path / "taskd-data", runtime_dir=runtime, log_path=tmp_path / "taskd.log")
    yield process
    if process.process is not None and process.process.poll() is None:
        process.process.kill()
        process.process.wait(timeout=10)
