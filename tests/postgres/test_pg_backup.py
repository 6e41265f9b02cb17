"""Backup, restore and durability on a PostgreSQL board: the SQLite file copy refuses clearly,
naming what to use instead, and writes nothing; the documented pg_dump / pg_restore / new-epoch
procedure gives a board followers cannot confuse with the one it was dumped from."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import psycopg
import pytest

from tests.cli.conftest import Taskctl, taskctl_for
from tests.support.board import API, VENV_BIN, BoardClient, RunningBoard, TaskdProcess, activity_count, make_task, start_board
from tests.support.postgres import Cluster, fresh_database

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
#: The statement docs/operations.md gives for minting a new epoch after pg_restore (checked verbatim).
NEW_EPOCH_SQL = (
    "INSERT INTO board_meta (key, value) SELECT 'previous_board_id', value FROM board_meta WHERE key = 'board_id' "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value; "
    "UPDATE board_meta SET value = 'brd_' || substr(md5(random()::text || clock_timestamp()::text), 1, 16) "
    "WHERE key = 'board_id';"
)


@pytest.fixture
async def pg_board(tmp_path: Path, postgres_url: str) -> AsyncIterator[tuple[RunningBoard, BoardClient]]:
    running = await start_board(tmp_path / "data", database=postgres_url)
    try:
        async with aiohttp.ClientSession() as session:
            yield running, BoardClient(running.url, running.token, session)
    finally:
        await running.runner.cleanup()


@pytest.mark.parametrize("path", ["/abs", "relative/board.sqlite", "dir"])
async def test_the_backup_route_names_pg_dump_and_writes_nothing(
    pg_board: tuple[RunningBoard, BoardClient], tmp_path: Path, path: str
) -> None:
    board, client = pg_board
    await make_task(client)
    before = await activity_count(board)
    target = {"/abs": str(tmp_path / "backup.sqlite"), "dir": str(tmp_path)}.get(path, path)
    listing = sorted(p.name for p in tmp_path.iterdir())
    reply = await client.post(f"{API}/admin/backup", {"path": target})
    # The engine is the reason, whatever the path: nothing about the path is looked at.
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    assert "pg_dump" in reply.body["error"]["message"] and "pg_dump" in reply.body["error"]["hint"]
    assert reply.body["error"]["details"] == {"engine": "postgresql"}
    assert sorted(p.name for p in tmp_path.iterdir()) == listing, "no file was written"
    assert await activity_count(board) == before


async def test_board_status_on_postgresql_reports_the_servers_durability(
    pg_board: tuple[RunningBoard, BoardClient], postgres_url: str, pg_cluster: Cluster
) -> None:
    _, client = pg_board
    status = (await client.get(f"{API}/board/status")).body
    assert pg_cluster.password not in str(status)
    with psycopg.connect(postgres_url) as conn:
        setting = conn.execute("SHOW synchronous_commit").fetchone()
    assert setting is not None
    # The test cluster runs with synchronous_commit = off: the status says so rather than "full".
    assert status["durability"] == ("normal" if setting[0] == "off" else "full")


# -- the commands -----------------------------------------------------------------------------


@pytest.fixture
def pg_taskd(tmp_path: Path, postgres_url: str) -> Iterator[TaskdProcess]:
    process = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    process.start("--database", postgres_url)
    try:
        yield process
    finally:
        if process.process is not None and process.process.poll() is None:
            process.stop()


async def test_taskctl_board_backup_on_postgresql_is_refused_naming_pg_dump(
    pg_taskd: TaskdProcess, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    taskctl: Taskctl = taskctl_for(pg_taskd, tmp_path_factory.mktemp("pycache"), work)
    taskctl.ok("project", "create", "demo")
    run = taskctl.refused("VALIDATION_FAILED", "board", "backup", "board.sqlite")
    assert "pg_dump" in run.stderr
    assert list(work.iterdir()) == [], "nothing was written"
    taskctl.assert_no_secret(pg_taskd.token)


def taskd(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TASKLOOM_RUNTIME_DIR": str(tmp_path / "run")}
    return subprocess.run([str(VENV_BIN / "taskd"), *args], capture_output=True, text=True, timeout=60, check=False,
                          env={**base, **(env or {})})


def schema_tables(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [str(row[0]) for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_taskd_restore_refuses_a_postgresql_setup_and_changes_nothing(
    tmp_path: Path, postgres_url: str, pg_cluster: Cluster, how: str
) -> None:
    backup = tmp_path / "backup.sqlite"
    backup.write_bytes(b"SQLite format 3\x00" + bytes(84))
    data_dir = tmp_path / "data"
    args = ["restore", str(backup), "--data-dir", str(data_dir)]
    if how == "flag":
        result = taskd(tmp_path, *args, "--database", postgres_url)
    else:
        result = taskd(tmp_path, *args, env={"TASKLOOM_DATABASE_URL": postgres_url})
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "PostgreSQL" in lines[0] and "pg_restore" in lines[0] and "nothing was changed" in lines[0]
    assert pg_cluster.password not in result.stderr
    assert not data_dir.exists(), "the data directory was not even created"
    assert schema_tables(postgres_url) == [], "the database was not touched"


def test_durability_normal_with_a_postgresql_database_is_refused_before_anything_starts(
    tmp_path: Path, postgres_url: str
) -> None:
    data_dir = tmp_path / "data"
    for args, env in [
        (["--database", postgres_url, "--durability", "normal"], {}),
        (["--database", postgres_url], {"TASKLOOM_BOARD_DURABILITY": "normal"}),
    ]:
        result = taskd(tmp_path, "serve", "--port", "0", "--data-dir", str(data_dir), *args, env=env)
        assert result.returncode == 1, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "synchronous_commit" in lines[0] and "SQLite file only" in lines[0], result.stderr
        assert not data_dir.exists() and schema_tables(postgres_url) == []


# -- the documented procedure: pg_dump, pg_restore, a new epoch ---------------------------------------


def client_program(cluster: Cluster, name: str, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    parts = urlsplit(url)
    env = {**os.environ, **({"PGPASSWORD": parts.password} if parts.password else {})}
    return subprocess.run(
        [str(cluster.binaries.bindir / name), "--host", str(parts.hostname), "--port", str(parts.port),
         "--username", str(parts.username), *args],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )


async def test_pg_dump_pg_restore_and_a_new_epoch_as_documented(pg_cluster: Cluster, tmp_path: Path, postgres_url: str) -> None:
    assert NEW_EPOCH_SQL in " ".join(DOCS.read_text(encoding="utf-8").split()), "the statement is the one documented"
    original = await start_board(tmp_path / "a", database=postgres_url)
    try:
        async with aiohttp.ClientSession() as session:
            client = BoardClient(original.url, original.token, session)
            task = await make_task(client, title="Kept by the dump")
            old_meta = (await client.get(f"{API}/meta")).body
    finally:
        await original.runner.cleanup()

    dump = tmp_path / "board.dump"
    dumped = client_program(pg_cluster, "pg_dump", postgres_url, "--format=custom", "--file", str(dump),
                            urlsplit(postgres_url).path.lstrip("/"))
    assert dumped.returncode == 0, dumped.stderr
    restored_url = fresh_database(pg_cluster)
    try:
        loaded = client_program(pg_cluster, "pg_restore", restored_url, "--no-owner", "--exit-on-error",
                                "--dbname", urlsplit(restored_url).path.lstrip("/"), str(dump))
        assert loaded.returncode == 0, loaded.stderr
        epoch = pg_cluster.psql(restored_url, NEW_EPOCH_SQL)
        assert epoch.returncode == 0, epoch.stderr

        board = await start_board(tmp_path / "b", database=restored_url)
        try:
            async with aiohttp.ClientSession() as session:
                client = BoardClient(board.url, board.token, session)
                meta = (await client.get(f"{API}/meta")).body
                assert meta["board_id"] != old_meta["board_id"] and meta["board_id"].startswith("brd_")
                assert meta["revision"] == old_meta["revision"]
                assert (await client.get(f"{API}/tasks/{task['id']}")).body["title"] == "Kept by the dump"
                written = await client.patch(f"{API}/tasks/{task['id']}", {"title": "Written after the restore"})
                assert written.status == 200, written.body
                assert (await client.get(f"{API}/meta")).body["revision"] > old_meta["revision"]
            with psycopg.connect(restored_url) as conn:
                previous = conn.execute("SELECT value FROM board_meta WHERE key = 'previous_board_id'").fetchone()
                assert previous is not None and previous[0] == old_meta["board_id"]
            # The triggers came back with the dump: the log is still append-only.
            refused = pg_cluster.psql(restored_url, "DELETE FROM task_activities")
            assert refused.returncode != 0 and "ACTIVITY_APPEND_ONLY" in refused.stderr
        finally:
            await board.runner.cleanup()
    finally:
        pg_cluster.drop_later(restored_url)
