"""A restore keeps the old history's retention archive: it goes aside with the database it was
cut from (``archive.replaced-<time>``, beside ``board.sqlite.replaced-<time>``). Archive files
are named only by revision range, and the restored board's first compaction took the old epoch's
``activities-1-<n>.jsonl.gz`` for a killed run's leftover and deleted it: the only copy of the
rows that compaction had removed.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.board.store import Actor, Tx
from shared import events
from tests.support.board import API, BoardClient, make_task, start_board, taskd_restore

pytestmark = pytest.mark.asyncio

WRITER = Actor("human", "ann")


def bulk_rows(tx: Tx, task_id: str, project_id: str, count: int, tag: str) -> list[int]:
    return [
        tx.record(events.TASK_UPDATED, events.task_updated(fields=["meta"], after={"meta": {tag: n}}),
                  task_id=task_id, project_id=project_id)
        for n in range(count)
    ]


def archived(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]


def archive_contents(data_dir: Path) -> dict[str, bytes]:
    folder = data_dir / "archive"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.is_dir() else {}


async def test_the_restored_boards_compaction_keeps_the_old_epochs_archive(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    backup_file = tmp_path / "before-compaction.sqlite"
    board = await start_board(data_dir)
    try:
        async with aiohttp.ClientSession() as session:
            client = BoardClient(board.url, board.token, session)
            task = await make_task(client)
            await board.store.command(bulk_rows, WRITER, task["id"], task["project_id"], 10, "before")
            taken = await client.post(f"{API}/admin/backup", {"path": str(backup_file)})
            assert taken.status == 200, taken.body
            backed_up = taken.body["revision"]
            old_epoch = await board.store.command(bulk_rows, WRITER, task["id"], task["project_id"], 30, "lost")
            through = old_epoch[19]
            compacted = await client.post(f"{API}/admin/compact", {"through": through})
            assert compacted.status == 200, compacted.body
            old_archive = Path(compacted.body["archive"])
            assert old_archive.name == f"activities-1-{through}.jsonl.gz"
            old_bytes = old_archive.read_bytes()
            old_rows = archived(old_archive)
            lost_future = [row for row in old_rows if row["revision"] > backed_up]
            assert lost_future and all(row["changes"]["after"]["meta"].get("lost") is not None for row in lost_future)
    finally:
        await board.runner.cleanup()

    restored = taskd_restore(backup_file, data_dir)
    assert restored.returncode == 0, restored.stderr
    # The old epoch's archive goes aside with the database it was cut from: its rows past the backup
    # are in neither the restored database nor the replaced one (they were compacted away from it).
    replaced = next(data_dir.glob("board.sqlite.replaced-*"))
    assert replaced.is_file()
    kept_aside = data_dir / f"archive.replaced-{replaced.name.removeprefix('board.sqlite.replaced-')}"

    board = await start_board(data_dir)
    try:
        async with aiohttp.ClientSession() as session:
            client = BoardClient(board.url, board.token, session)
            assert (await client.get(f"{API}/meta")).body["floor"] == 0, "the backup's floor came back"
            await board.store.command(bulk_rows, WRITER, task["id"], task["project_id"], 5, "new")
            # The restored board's own compaction, well inside its own history.
            compacted = await client.post(f"{API}/admin/compact", {"through": backed_up - 2})
            assert compacted.status == 200, compacted.body
            new_archive = Path(compacted.body["archive"])
    finally:
        await board.runner.cleanup()

    left = archive_contents(data_dir)
    assert new_archive.name in left
    aside = {p.name: p.read_bytes() for p in kept_aside.iterdir()} if kept_aside.is_dir() else {}
    assert aside == {old_archive.name: old_bytes} and old_archive.name not in left, (
        f"the restored board's compaction deleted {old_archive.name}, the old epoch's archive and the only "
        f"copy of its {len(lost_future)} rows past the backup (archive/ now holds {sorted(left)})"
    )
    assert archived(kept_aside / old_archive.name) == old_rows
