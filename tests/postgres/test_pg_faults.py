"""The PostgreSQL store's faults: a server missing at start, a newer schema, a server gone while serving."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import aiohttp
import psycopg

from services.board import postgres_store
from tests.support.board import VENV_BIN, BoardClient, start_board
from tests.support.postgres import cut_off, free_loopback_port, let_back
from tests.support.waiting import async_wait_until


def serve(tmp_path: Path, database: str) -> subprocess.CompletedProcess[str]:
    """``taskd serve`` on ``database``, given in TASKLOOM_DATABASE_URL (a URL with a password is
    refused on the command line), with the cluster's passfile and nothing else of ours."""
    return subprocess.run(
        [str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "/usr/bin:/bin", "TASKLOOM_RUNTIME_DIR": str(tmp_path / "run"), "HOME": str(tmp_path),
             "TASKLOOM_DATABASE_URL": database, "PGPASSFILE": os.environ.get("PGPASSFILE", ""),
             "PYTHONPATH": os.environ.get("PYTHONPATH", "")},  # the code under test, not another checkout's
    )


def test_an_unreachable_server_at_start_is_one_line_naming_host_and_port(tmp_path: Path) -> None:
    port = free_loopback_port()  # nothing listens there
    result = serve(tmp_path, f"postgresql://taskloom:secret@127.0.0.1:{port}/board")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: cannot reach PostgreSQL at ") and f"127.0.0.1:{port}/board" in lines[0]
    assert "secret" not in result.stderr


def test_a_wrong_url_at_start_is_one_line(tmp_path: Path) -> None:
    result = serve(tmp_path, "postgresql://127.0.0.1:99999999/board")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "127.0.0.1" in lines[0], result.stderr


def test_a_url_of_another_scheme_is_a_usage_error(tmp_path: Path) -> None:
    """Refused as the option is read (exit 2, as any bad option value), before anything starts."""
    result = serve(tmp_path, "mysql://127.0.0.1:3306/board")
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "--database" in errors[0] and "takes a postgresql://host:port/dbname URL" in errors[0]
    assert not (tmp_path / "data").exists()


def test_a_database_that_does_not_exist_is_named(tmp_path: Path, postgres_url: str) -> None:
    missing = postgres_url.rsplit("/", 1)[0] + "/no_such_board"
    result = serve(tmp_path, missing)
    assert result.returncode == 1
    assert "no_such_board" in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def snapshot(url: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return [
            *conn.execute("SELECT version, applied_at FROM schema_version ORDER BY version").fetchall(),
            *conn.execute("SELECT key, value FROM board_meta ORDER BY key").fetchall(),
            *conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename").fetchall(),
            *conn.execute("SELECT revision FROM global_revision").fetchall(),
        ]


def test_a_newer_schema_is_refused_untouched(tmp_path: Path, postgres_url: str) -> None:
    postgres_store.migrate(postgres_url)
    newer = postgres_store.schema_version() + 1
    with psycopg.connect(postgres_url) as conn:
        conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (%s, '2030-01-01T00:00:00.000Z')", (newer,))
    before = snapshot(postgres_url)
    result = serve(tmp_path, postgres_url)
    assert result.returncode == 1
    assert f"schema version {newer}, newer than this Taskloom understands" in result.stderr
    assert "was not modified" in result.stderr
    assert snapshot(postgres_url) == before


async def test_a_server_gone_while_serving_is_503_then_recovers(tmp_path: Path, postgres_url: str, pg_cluster: object) -> None:
    board = await start_board(tmp_path / "data", database=postgres_url)
    admin_url = pg_cluster.admin_url  # type: ignore[attr-defined]
    try:
        async with aiohttp.ClientSession() as session:
            client = BoardClient(board.url, board.token, session)
            assert (await client.post("/api/v1/projects", {"id": "demo", "name": "Demo"})).status == 201
            stream = await session.get(f"{board.url}/api/v1/events?after=0", headers={"Authorization": f"Bearer {board.token}"})
            assert stream.status == 200
            acknowledged = [(await client.post("/api/v1/tasks", {"project": "demo", "title": "before"})).body["id"]]

            cut_off(admin_url, postgres_url)
            try:
                for _ in range(2):  # the broken connection, then a reconnect the server refuses
                    refused = await client.post("/api/v1/tasks", {"project": "demo", "title": "while gone"})
                    assert refused.status == 503 and refused.error == "STORE_UNAVAILABLE", refused.body
                    assert refused.headers.get("Retry-After") == "1"
                    # The operator is sent to the server, in PostgreSQL's words, not to a disk and a file.
                    said = refused.body["error"]
                    assert "sqlstate" in said["details"] and "sqlite_error" not in said["details"], said
                    assert "PostgreSQL server" in said["hint"] and "disk" not in said["hint"], said

                async def stream_closed() -> bool:
                    try:
                        async with asyncio.timeout(0.05):
                            while await stream.content.readany():
                                pass
                    except TimeoutError:
                        return False
                    return True

                await async_wait_until(stream_closed, timeout=20, what="the stream to close quietly")
            finally:
                let_back(admin_url, postgres_url)

            async def written() -> str | None:
                reply = await client.post("/api/v1/tasks", {"project": "demo", "title": "after"})
                return reply.body["id"] if reply.status == 201 else None

            acknowledged.append(await async_wait_until(written, timeout=20, what="writes to succeed again"))
            listed = await client.get("/api/v1/tasks")
            assert listed.status == 200
            titles = sorted(task["title"] for task in listed.body["items"])
            assert titles == ["after", "before"], "nothing acknowledged is lost, nothing refused is written"
            assert {task["id"] for task in listed.body["items"]} == set(acknowledged)
    finally:
        await board.runner.cleanup()


def test_a_password_on_the_command_line_is_refused_unechoed(tmp_path: Path) -> None:
    """argv is every local user's to read (ps) for as long as the board runs, so a URL holding a
    password is a usage error on the command line, as a token is for taskctl; never quoted back.
    In TASKLOOM_DATABASE_URL the same URL is taken (the test above reaches the server with one)."""
    for url in ("postgresql://taskloom:s3cret-pw@127.0.0.1:5432/board", "postgresql://127.0.0.1/board?password=s3cret-pw"):
        result = subprocess.run(
            [str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(tmp_path / "data"), "--database", url],
            capture_output=True, text=True, timeout=60, check=False,
            env={"PATH": "/usr/bin:/bin", "TASKLOOM_RUNTIME_DIR": str(tmp_path / "run"), "HOME": str(tmp_path),
                 "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
        )
        assert result.returncode == 2, result.stderr
        assert "holds a password" in result.stderr and "TASKLOOM_DATABASE_URL" in result.stderr, result.stderr
        assert "s3cret-pw" not in result.stderr + result.stdout
        assert not (tmp_path / "data").exists()
