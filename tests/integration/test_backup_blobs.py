"""One backup file is the whole board: the attachment bytes travel inside it.

An in-process board takes the backup while writers add, replace and remove attachments; a real
``taskd restore`` subprocess installs it into a fresh data directory and a real ``taskd serve``
on that directory serves every attachment byte for byte. A damaged backup is refused before the
data directory changes; a blob missing on disk fails the backup and writes nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import stat
from contextlib import closing
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest

from services.board.commands.attachments import pin_blobs
from tests.support.board import API, BoardClient, RunningBoard, TaskdProcess, make_task, taskd_restore
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.asyncio

WRITERS = 4



def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob_files(data_dir: Path) -> dict[str, Path]:
    root = data_dir / "attachments"
    return {path.name: path for path in root.glob("*/*") if path.is_file()} if root.is_dir() else {}


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (relative name → bytes): what "untouched" is compared by."""
    return {str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()}


async def attach(client: BoardClient, task: dict, filename: str, data: bytes) -> dict:
    reply = await client.request("POST", f"{API}/tasks/{task['identifier']}/attachments?filename={quote(filename)}",
                                 data=data, headers={"Content-Type": "application/octet-stream"})
    assert reply.status == 201, reply.body
    return reply.body


async def replace(client: BoardClient, attachment_id: str, data: bytes) -> dict:
    reply = await client.request("PUT", f"{API}/attachments/{attachment_id}", data=data,
                                 headers={"Content-Type": "application/octet-stream"})
    assert reply.status == 200, reply.body
    return reply.body


async def download(session: aiohttp.ClientSession, url: str, token: str, attachment_id: str) -> bytes:
    async with session.get(f"{url}{API}/attachments/{attachment_id}",
                           headers={"Authorization": f"Bearer {token}"}) as response:
        assert response.status == 200, await response.text()
        return await response.read()


async def test_a_backup_taken_under_writers_restores_every_attachment_byte_for_byte(
    board: RunningBoard, client: BoardClient, taskd: TaskdProcess, tmp_path: Path
) -> None:
    uploaded: dict[str, bytes] = {}  # every content ever sent, by digest

    def content(text: str) -> bytes:
        data = text.encode() * 50 + os.urandom(64)
        uploaded[digest(data)] = data
        return data

    task = await make_task(client)
    shared = content("the same bytes twice")
    uploaded[digest(shared)] = shared
    first = await attach(client, task, "shared-one.bin", shared)
    second = await attach(client, task, "shared-two.bin", shared)
    assert first["sha256"] == second["sha256"]
    replaced = await attach(client, task, "replaced.bin", content("before the replacement"))
    old_digest = replaced["sha256"]
    await replace(client, replaced["id"], content("after the replacement"))
    assert old_digest not in blob_files(board.data_dir), "a replaced blob no row names is purged"

    # Writers add attachments, and one keeps replacing its content: each replacement releases a
    # blob the backup's snapshot may still name, which must not vanish before the copy holds it.
    stop = asyncio.Event()
    done: list[int] = []
    added: list[str] = []  # attachment ids, as acknowledged

    async def adder(n: int) -> None:
        own = client.as_actor("claude", f"writer-{n}")
        mine = await make_task(own)
        while not stop.is_set():
            meta = await attach(own, mine, f"w{n}-{len(done)}.bin", content(f"writer {n} upload {len(done)}"))
            added.append(meta["id"])
            done.append(n)

    async def replacer() -> None:
        churn = await attach(client, task, "churn.bin", content("churn 0"))
        while not stop.is_set():
            await replace(client, churn["id"], content(f"churn {len(done)}"))
            done.append(-1)

    writers = [asyncio.create_task(adder(n)) for n in range(WRITERS)] + [asyncio.create_task(replacer())]
    target = tmp_path / "backups" / "board.taskloom-backup"
    target.parent.mkdir()
    try:
        async def under_way() -> bool:
            return len(done) >= 40

        await async_wait_until(under_way, what="writers under way", timeout=60)
        before = set(added)
        reply = await client.post(f"{API}/admin/backup", {"path": str(target)})
        assert reply.status == 200, reply.body
        during = len(added)
    finally:
        stop.set()
        await asyncio.gather(*writers)
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name], "no temp file left behind"

    with closing(sqlite3.connect(f"file:{target}?mode=ro", uri=True)) as copy:
        assert copy.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = copy.execute("SELECT id, sha256, size FROM attachments ORDER BY id").fetchall()
        carried = {sha: data for sha, data in copy.execute("SELECT sha256, content FROM backup_blobs")}
    named = {sha for _, sha, _ in rows}
    assert reply.body["blobs"] == len(carried) == len(named), "one blob per distinct content, shared ones once"
    assert set(carried) == named and all(digest(data) == sha for sha, data in carried.items())
    assert old_digest not in carried, "a blob no row names is not carried"
    assert before | {first["id"], second["id"], replaced["id"]} <= {row[0] for row in rows}
    assert during > len(before) or len(done) > 40, "the writers kept going"

    # The purges held back during the copy ran afterwards: the live directory holds exactly the
    # blobs its rows name, no more (a leak) and no fewer (a loss).
    with closing(sqlite3.connect(board.data_dir / "board.sqlite")) as live:
        live_named = {row[0] for row in live.execute("SELECT DISTINCT sha256 FROM attachments")}
    assert set(blob_files(board.data_dir)) == live_named

    fresh = taskd.data_dir
    assert not fresh.exists()
    restored = taskd_restore(target, fresh)
    assert restored.returncode == 0, restored.stderr
    assert f"{len(named)} attachment blobs" in restored.stderr
    on_disk = blob_files(fresh)
    assert set(on_disk) == named
    for path in on_disk.values():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, f"{path} is not owner-only"
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    with closing(sqlite3.connect(f"file:{fresh / 'board.sqlite'}?mode=ro", uri=True)) as installed:
        tables = {row[0] for row in installed.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "backup_blobs" not in tables, "the installed board has the live schema"
    assert (fresh / "board.sqlite").stat().st_size < target.stat().st_size, "the blobs' pages were not kept"

    taskd.start()
    try:
        async with aiohttp.ClientSession() as session:
            for attachment_id, sha256, size in rows:
                data = await download(session, taskd.url, taskd.token, attachment_id)
                assert len(data) == size and data == uploaded[sha256], f"attachment {attachment_id} differs"
    finally:
        assert taskd.stop() == 0


async def test_a_blob_missing_or_altered_on_disk_fails_the_backup_naming_it(
    board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    task = await make_task(client)
    kept = await attach(client, task, "kept.bin", b"kept bytes")
    lost = await attach(client, task, "lost.bin", b"bytes about to be lost")
    blobs = blob_files(board.data_dir)
    target = tmp_path / "backups" / "board.taskloom-backup"
    target.parent.mkdir()

    blobs[lost["sha256"]].unlink()
    reply = await client.post(f"{API}/admin/backup", {"path": str(target)})
    assert reply.status == 409 and reply.error == "CONFLICT", reply.body
    assert lost["sha256"] in reply.body["error"]["message"] and "missing" in reply.body["error"]["message"]
    assert reply.body["error"]["details"]["sha256"] == lost["sha256"]
    assert list(target.parent.iterdir()) == [], "nothing is left behind"

    blobs[kept["sha256"]].write_bytes(b"kept bytes, altered")
    await client.request("DELETE", f"{API}/attachments/{lost['id']}")
    reply = await client.post(f"{API}/admin/backup", {"path": str(target)})
    assert reply.status == 409 and reply.body["error"]["details"]["sha256"] == kept["sha256"], reply.body
    assert "does not match" in reply.body["error"]["message"]
    assert list(target.parent.iterdir()) == [], "nothing is left behind"


@pytest.mark.parametrize("damage", ["altered bytes", "blob dropped", "key escapes the directory"])
async def test_a_damaged_backup_is_refused_and_the_data_dir_is_untouched(
    board: RunningBoard, client: BoardClient, taskd: TaskdProcess, tmp_path: Path, damage: str
) -> None:
    task = await make_task(client)
    meta = await attach(client, task, "report.pdf", b"%PDF-1.7 the report" * 100)
    await attach(client, task, "other.txt", b"another attachment")
    backup = tmp_path / "board.taskloom-backup"
    reply = await client.post(f"{API}/admin/backup", {"path": str(backup)})
    assert reply.status == 200, reply.body

    with closing(sqlite3.connect(backup, isolation_level=None)) as conn:
        if damage == "altered bytes":
            conn.execute("UPDATE backup_blobs SET content = ? WHERE sha256 = ?", (b"%PDF-1.7 forged", meta["sha256"]))
        elif damage == "blob dropped":
            conn.execute("DELETE FROM backup_blobs WHERE sha256 = ?", (meta["sha256"],))
        else:
            conn.execute("UPDATE backup_blobs SET sha256 = ? WHERE sha256 = ?", ("../../../escaped", meta["sha256"]))

    # An existing board on the target directory, stopped: every file it holds must stay as it is.
    taskd.start()
    async with aiohttp.ClientSession() as session:
        own = BoardClient(taskd.url, taskd.token, session)
        await attach(own, await make_task(own), "mine.txt", b"the target board's own attachment")
    assert taskd.stop() == 0
    before = snapshot(taskd.data_dir)

    refused = taskd_restore(backup, taskd.data_dir)
    assert refused.returncode == 1
    assert "nothing was changed" in refused.stderr
    if damage == "blob dropped":
        assert f"lacks the blob {meta['sha256']} of attachment {meta['id']}" in refused.stderr, refused.stderr
    else:
        assert "damaged blob" in refused.stderr, refused.stderr
    transient = {"board.lock"}  # the restore takes the lock; nothing else changes
    assert {k: v for k, v in snapshot(taskd.data_dir).items() if k not in transient} == {
        k: v for k, v in before.items() if k not in transient
    }
    assert not (tmp_path / "escaped").exists()


async def test_a_purge_during_a_backup_waits_until_the_copy_is_done(board: RunningBoard, client: BoardClient) -> None:
    task = await make_task(client)
    meta = await attach(client, task, "gone-soon.bin", b"removed while a backup copies")
    path = blob_files(board.data_dir)[meta["sha256"]]
    with pin_blobs(board.data_dir / "attachments") as pin:
        reply = await client.request("DELETE", f"{API}/attachments/{meta['id']}")
        assert reply.status == 200, reply.body
        assert path.is_file(), "a blob the backup's snapshot may name stays until the copy holds it"
    assert pin.deferred == [meta["sha256"]], "the purge held back is handed to the backup to re-issue"


async def test_a_backup_from_before_blobs_travelled_is_installed_and_says_so(
    board: RunningBoard, client: BoardClient, taskd: TaskdProcess, tmp_path: Path
) -> None:
    await attach(client, await make_task(client), "notes.txt", b"notes")
    backup = tmp_path / "board.taskloom-backup"
    reply = await client.post(f"{API}/admin/backup", {"path": str(backup)})
    assert reply.status == 200, reply.body
    with closing(sqlite3.connect(backup, isolation_level=None)) as conn:
        conn.execute("DROP TABLE backup_blobs")  # what a backup written by an earlier release holds

    restored = taskd_restore(backup, taskd.data_dir)
    assert restored.returncode == 0, restored.stderr
    assert "copy its attachments/ folder by hand" in restored.stderr
    assert blob_files(taskd.data_dir) == {}
