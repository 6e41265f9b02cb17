"""Fixed: ``taskctl board backup FILE`` onto a full disk, or into a directory on a read-only file
system, answered ``500 INTERNAL: internal error; see the board log``: SQLite's "database or disk
is full" and "unable to open database file" went up untranslated, and on the read-only disk the
clean-up's own failure (unlinking a temp file that was never made) replaced the first error.

Expected: an answer that names the problem and the directory, says nothing was written, and
leaves nothing there: ``503 STORE_UNAVAILABLE`` (free space and retry) on a full disk,
``400 VALIDATION_FAILED`` on a directory the board cannot write. The board keeps serving and a
backup elsewhere then works.

Mounting needs root (or CAP_SYS_ADMIN): tests/support/disks.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.board import API, BoardClient, make_task
from tests.support.disks import fill, remount, tmpfs

pytestmark = [pytest.mark.asyncio, pytest.mark.sqlite_only]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A fresh 1 MiB tmpfs."""
    with tmpfs(tmp_path / "backups", "1m") as where:
        yield where


async def test_a_backup_onto_a_full_disk_says_so_and_writes_nothing(client: BoardClient, disk: Path, tmp_path: Path) -> None:
    await make_task(client, title="worth a backup")
    filler = fill(disk)
    reply = await client.post(f"{API}/admin/backup", {"path": str(disk / "board.sqlite")})
    assert reply.status == 503 and reply.error == "STORE_UNAVAILABLE", reply.body
    message = reply.body["error"]["message"]
    assert str(disk) in message and "full" in message and "nothing was written" in message, message
    assert sorted(disk.iterdir()) == [filler], "nothing of the backup is left on the full disk"
    elsewhere = await client.post(f"{API}/admin/backup", {"path": str(tmp_path / "board.sqlite")})
    assert elsewhere.status == 200, elsewhere.body


async def test_a_backup_into_a_read_only_directory_says_so_and_writes_nothing(
    client: BoardClient, disk: Path, tmp_path: Path
) -> None:
    await make_task(client, title="worth a backup")
    remount(disk, "ro")
    reply = await client.post(f"{API}/admin/backup", {"path": str(disk / "board.sqlite")})
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    message = reply.body["error"]["message"]
    assert str(disk) in message and "read-only" in message and "nothing was written" in message, message
    assert list(disk.iterdir()) == []
    elsewhere = await client.post(f"{API}/admin/backup", {"path": str(tmp_path / "board.sqlite")})
    assert elsewhere.status == 200, elsewhere.body
