"""Fixed: ``taskctl board compact`` (and the daily compaction) on a board whose disk is full
answered ``500 INTERNAL: internal error; see the board log``: the archive it writes first could
not be written, and the ``OSError`` went up untranslated.

Expected: what every write on a full disk answers (docs/operations.md, "A full disk"): ``503
STORE_UNAVAILABLE`` with ``Retry-After``, naming the archive folder and saying nothing was
removed; the floor and every row stay, no archive or temp file is left, and once space is freed
the same compaction goes through.

Mounting needs root (or CAP_SYS_ADMIN): tests/support/disks.py.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support.board import API, BoardClient, RunningBoard, make_task, start_board
from tests.support.disks import fill, tmpfs

pytestmark = [pytest.mark.asyncio, pytest.mark.sqlite_only]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A fresh tmpfs."""
    with tmpfs(tmp_path / "disk", "8m") as where:
        yield where


@pytest.fixture
async def board(disk: Path) -> AsyncIterator[RunningBoard]:
    running = await start_board(disk / "data")
    try:
        yield running
    finally:
        await running.runner.cleanup()


async def test_a_compaction_on_a_full_disk_is_503_and_removes_nothing(
    board: RunningBoard, client: BoardClient, disk: Path
) -> None:
    for n in range(30):
        await make_task(client, title=f"card {n}", description=os.urandom(2000).hex())
    meta = (await client.get(f"{API}/meta")).body
    through = meta["revision"] - 1
    status = (await client.get(f"{API}/board/status")).body
    filler = fill(disk)

    reply = await client.post(f"{API}/admin/compact", {"through": through})
    assert reply.status == 503 and reply.error == "STORE_UNAVAILABLE", reply.body
    assert reply.headers["Retry-After"] == "1"
    message = reply.body["error"]["message"]
    archive = board.data_dir / "archive"
    assert str(archive) in message and "nothing was removed" in message, message
    assert (await client.get(f"{API}/board/status")).body["log_rows"] == status["log_rows"]
    assert (await client.get(f"{API}/meta")).body["floor"] == meta["floor"]
    assert not archive.exists() or list(archive.iterdir()) == []

    filler.unlink()
    done = await client.post(f"{API}/admin/compact", {"through": through})
    assert done.status == 200 and done.body["floor"] == through, done.body
