"""Durable commits: ``synchronous=FULL`` unless ``taskd serve --durability normal`` asks for speed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.support.board import BoardClient, make_task, start_board

SYNCHRONOUS = {1: "normal", 2: "full"}


async def _writer_level(data_dir: Path, **settings: str) -> str:
    """The pragma on the connection that commits (the writer thread's), after a real write."""
    board = await start_board(data_dir, **settings)
    try:
        async with aiohttp.ClientSession() as session:
            await make_task(BoardClient(board.url, board.token, session))
        store = board.store
        levels = {SYNCHRONOUS[conn.execute("PRAGMA synchronous").fetchone()[0]] for conn in store._connections}
        assert len(levels) == 1, levels
        return levels.pop()
    finally:
        await board.runner.cleanup()


@pytest.mark.sqlite_only  # the synchronous pragma; a PostgreSQL board's durability is its server's
async def test_full_is_the_default(tmp_path: Path) -> None:
    assert await _writer_level(tmp_path / "d") == "full"


@pytest.mark.sqlite_only  # the synchronous pragma; a PostgreSQL board's durability is its server's
async def test_normal_is_chosen_with_the_knob(tmp_path: Path) -> None:
    assert await _writer_level(tmp_path / "d", durability="normal") == "normal"


def test_an_unknown_level_is_refused_by_taskd(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "services.board.cli", "serve", "--data-dir", str(tmp_path / "d"), "--durability", "off"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2 and "--durability" in done.stderr
    assert not (tmp_path / "d").exists(), "a refused start writes nothing"


@pytest.mark.sqlite_only  # the synchronous pragma; a PostgreSQL board's durability is its server's
@pytest.mark.parametrize("level", ["full", "normal"])
async def test_the_level_holds_for_every_connection_the_store_opens(tmp_path: Path, level: str) -> None:
    board = await start_board(tmp_path / "d", durability=level)
    try:
        reader_level = await board.store.query(lambda conn: conn.execute("PRAGMA synchronous").fetchone()[0])
        assert SYNCHRONOUS[reader_level] == level
    finally:
        await board.runner.cleanup()
