"""Moving a board between engines with the state export: SQLite → PostgreSQL and back.

A varied board (projects, epics with children, blocks, comments, reports, acceptance items,
sessions, attachments with their bytes, archived cards) is built through the API on one engine,
exported, imported into an empty board on the other engine, and exported again: the two files
must be equal apart from the header's board id, revision and time. On PostgreSQL the attachment
bytes are rows of the database, so the move also proves they are read from and written to it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest

from tests.cli.conftest import Taskctl, taskctl_for
from tests.support.board import API, BoardClient, RunningBoard, TaskdProcess, row_counts, start_board
from tests.support.postgres import Cluster, fresh_database
from tests.support.state_builder import build_random_board

pytestmark = pytest.mark.asyncio

#: The header fields that name the board a file came from, not its card state.
HEADER_OWN = ("board_id", "revision", "exported_at")


@asynccontextmanager
async def board_on(engine: str, data_dir: Path, cluster: Cluster) -> AsyncIterator[tuple[RunningBoard, BoardClient]]:
    """An in-process board on ``engine``: a SQLite file in ``data_dir``, or a fresh PostgreSQL database."""
    database = fresh_database(cluster) if engine == "postgresql" else None
    board = await start_board(data_dir, database=database)
    try:
        async with aiohttp.ClientSession() as session:
            yield board, BoardClient(board.url, board.token, session)
    finally:
        await board.runner.cleanup()
        if database is not None:
            cluster.drop_later(database)


async def export(client: BoardClient) -> bytes:
    reply = await client.get(f"{API}/state")
    assert reply.status == 200, reply.body
    assert isinstance(reply.body, bytes)
    return reply.body


async def import_(client: BoardClient, data: bytes) -> Any:
    return await client.request("POST", f"{API}/state", data=data, headers={"Content-Type": "application/x-ndjson"})


def same_card_state(first: bytes, second: bytes) -> None:
    """Equal files apart from the header's own fields; the header's kind and version are kept."""
    head_a, head_b = json.loads(first.splitlines()[0]), json.loads(second.splitlines()[0])
    assert {k: v for k, v in head_a.items() if k not in HEADER_OWN} == {k: v for k, v in head_b.items() if k not in HEADER_OWN}
    assert head_a["board_id"] != head_b["board_id"], "the target is a board of its own"
    assert second.splitlines()[1:] == first.splitlines()[1:], "the other engine exports the same card state"


async def attachment_bytes(client: BoardClient) -> dict[str, bytes]:
    """Every attachment's downloaded bytes, by id (archived cards too)."""
    found: dict[str, bytes] = {}
    tasks = (await client.get(f"{API}/tasks?archived=true&limit=500")).body["items"]
    for task in tasks:
        for item in (await client.get(f"{API}/tasks/{task['id']}/attachments")).body["items"]:
            reply = await client.get(f"{API}/attachments/{item['id']}")
            assert reply.status == 200, reply.body
            found[item["id"]] = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
    return found


def blob_rows(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM attachment_blobs").fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.parametrize(("source", "target", "seed"), [
    ("sqlite", "postgresql", 7),
    ("sqlite", "postgresql", 424242),
    ("postgresql", "sqlite", 1201),
    ("postgresql", "sqlite", 99),
])
async def test_a_board_moves_between_engines_with_the_same_card_state(
    pg_cluster: Cluster, tmp_path: Path, source: str, target: str, seed: int
) -> None:
    async with board_on(source, tmp_path / "source", pg_cluster) as (_, old):
        made = await build_random_board(old, seed)
        assert made["archived"] and made["attachments"] and made["relations"] and made["reports"], made
        first = await export(old)
        old_bytes = await attachment_bytes(old)
        old_tasks = (await old.get(f"{API}/tasks?archived=true&limit=500")).body["items"]

        async with board_on(target, tmp_path / "target", pg_cluster) as (moved_board, moved):
            reply = await import_(moved, first)
            assert reply.status == 201, reply.body
            assert reply.body["imported"]["task"] == made["tasks"]
            assert reply.body["imported"]["attachment"] == made["attachments"]
            same_card_state(first, await export(moved))

            # The bytes are served by the target engine, wherever it keeps them.
            assert await attachment_bytes(moved) == old_bytes
            if target == "postgresql":
                assert not (moved_board.data_dir / "attachments").exists(), "a PostgreSQL board keeps no blob files"
            # Identifiers resolve and each project's counter goes on from where it was.
            for task in old_tasks:
                shown = (await moved.get(f"{API}/tasks/{task['identifier']}")).body
                assert (shown["id"], shown["status"], shown["archived_at"]) == (task["id"], task["status"], task["archived_at"])
            project = old_tasks[0]["project_id"]
            highest = max(task["number"] for task in old_tasks if task["project_id"] == project)
            new = await moved.post(f"{API}/tasks", {"project": project, "title": "The first card after the move"})
            assert new.status == 201 and new.body["number"] == highest + 1, new.body
            # The import wrote one activity row, import_completed, and nothing of the old log.
            rows = (await moved.get(f"{API}/activities?limit=10")).body["items"]
            assert [(r["event"], r["actor_id"]) for r in rows[:1]] == [("import_completed", "state-import")]


async def test_and_back_again_the_round_trip_through_postgresql_is_lossless(pg_cluster: Cluster, tmp_path: Path) -> None:
    """SQLite → PostgreSQL → SQLite: the third board exports the bytes the first one did."""
    async with board_on("sqlite", tmp_path / "a", pg_cluster) as (_, first_board):
        await build_random_board(first_board, 31337, projects=2, tasks=8)
        original = await export(first_board)
    async with board_on("postgresql", tmp_path / "b", pg_cluster) as (_, middle):
        assert (await import_(middle, original)).status == 201
        through_pg = await export(middle)
    async with board_on("sqlite", tmp_path / "c", pg_cluster) as (_, last):
        assert (await import_(last, through_pg)).status == 201
        back = await export(last)
    same_card_state(original, through_pg)
    same_card_state(original, back)


# -- refusals on PostgreSQL write nothing, blobs included ---------------------------------------------


async def _source_file(cluster: Cluster, tmp_path: Path) -> bytes:
    async with board_on("sqlite", tmp_path / "src", cluster) as (_, old):
        await build_random_board(old, 5, projects=1, tasks=6)
        return await export(old)


def _edit(data: bytes, kind: str, change: Any) -> bytes:
    """The file with ``change(row)`` applied to the first line of ``kind`` it accepts (returns True)."""
    lines = data.splitlines()
    for position, line in enumerate(lines):
        record = json.loads(line)
        if record.get("kind") == kind and change(record):
            lines[position] = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
            return b"\n".join(lines) + b"\n"
    raise AssertionError(f"no {kind} line to edit")


async def _nothing_written(board: RunningBoard) -> None:
    counts = await row_counts(board, "projects", "tasks", "comments", "attachments", "attachment_blobs", "task_activities")
    assert counts == (0, 0, 0, 0, 0, 0), counts


async def test_a_file_the_triggers_refuse_rolls_back_everything_on_postgresql(pg_cluster: Cluster, tmp_path: Path) -> None:
    """It passes the line checks, but a parent relation names an epic turned into a task: the
    PostgreSQL trigger refuses it mid-import and not one row, blob or activity is left."""
    data = await _source_file(pg_cluster, tmp_path)
    parents = {json.loads(line)["row"]["source_id"] for line in data.splitlines()
               if json.loads(line).get("kind") == "relation" and json.loads(line)["row"]["type"] == "parent"}
    if not parents:
        pytest.fail("the seeded board has no parent relation to break")

    def demote(record: dict[str, Any]) -> bool:
        if record["row"]["id"] in parents:
            record["row"]["kind"] = "task"
            return True
        return False

    broken = _edit(data, "task", demote)
    async with board_on("postgresql", tmp_path / "pg", pg_cluster) as (board, client):
        reply = await import_(client, broken)
        assert reply.status in (400, 409, 422), reply.body
        assert reply.error in ("RELATION_INVALID", "VALIDATION_FAILED"), reply.body
        await _nothing_written(board)
        # The same file, whole, then imports: the refusal left nothing in its way.
        assert (await import_(client, data)).status == 201


async def test_bad_imports_into_postgresql_are_refused_and_write_nothing(pg_cluster: Cluster, tmp_path: Path) -> None:
    data = await _source_file(pg_cluster, tmp_path)

    def wrong_bytes(record: dict[str, Any]) -> bool:
        record["data"] = "aGVsbG8="  # "hello": not the bytes its sha256 names
        return True

    async with board_on("postgresql", tmp_path / "pg", pg_cluster) as (board, client):
        for bad, code, words in [
            (_edit(data, "attachment", wrong_bytes), "VALIDATION_FAILED", "do not match its sha256"),
            (b"\n".join(data.splitlines()[:-3]) + b"\n", "VALIDATION_FAILED", "truncated"),
            (data.replace(b'"version":1', b'"version":2', 1), "VALIDATION_FAILED", "unknown export version"),
        ]:
            reply = await import_(client, bad)
            assert reply.status == 400 and reply.error == code, reply.body
            assert words in reply.body["error"]["message"], reply.body
            await _nothing_written(board)
        assert (await import_(client, data)).status == 201
        (before,) = await row_counts(board, "task_activities")
        again = await import_(client, data)
        assert again.status == 409 and again.error == "BOARD_NOT_EMPTY", again.body
        assert await row_counts(board, "task_activities") == (before,)


# -- the commands a user runs: taskctl against taskd serve on each engine ----------------------------


@pytest.fixture
def two_taskds(tmp_path: Path, pg_cluster: Cluster) -> Iterator[tuple[TaskdProcess, TaskdProcess, str]]:
    """``taskd serve`` on a SQLite file and ``taskd serve --database postgresql://…`` (empty)."""
    url = fresh_database(pg_cluster)
    started: list[TaskdProcess] = []
    try:
        on_sqlite = TaskdProcess(data_dir=tmp_path / "sq-data", runtime_dir=tmp_path / "sq-run", log_path=tmp_path / "sq.log")
        started.append(on_sqlite.start())
        on_pg = TaskdProcess(data_dir=tmp_path / "pg-data", runtime_dir=tmp_path / "pg-run", log_path=tmp_path / "pg.log")
        started.append(on_pg.start("--database", url))
        yield on_sqlite, on_pg, url
    finally:
        for process in started:
            if process.process is not None and process.process.poll() is None:
                process.stop()
        pg_cluster.drop_later(url)


async def test_taskctl_moves_a_taskd_board_from_sqlite_to_postgresql_and_back(
    two_taskds: tuple[TaskdProcess, TaskdProcess, str], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    on_sqlite, on_pg, url = two_taskds
    cache = tmp_path_factory.mktemp("pycache")
    work = tmp_path / "work"
    work.mkdir()
    from_sqlite: Taskctl = taskctl_for(on_sqlite, cache, work)
    into_pg: Taskctl = taskctl_for(on_pg, cache, work)
    async with aiohttp.ClientSession() as session:
        made = await build_random_board(BoardClient(on_sqlite.url, on_sqlite.token, session), 2026, projects=2, tasks=6)

    exported = from_sqlite.data("export", "state", "--out", "board.jsonl")
    assert exported["counts"]["task"] == made["tasks"]
    imported = into_pg.data("import", "state", "board.jsonl")
    assert imported["imported"]["attachment"] == made["attachments"]
    same_card_state((work / "board.jsonl").read_bytes(), into_pg.ok("export", "state").stdout.encode())
    assert blob_rows(url) == len({json.loads(line)["row"]["sha256"] for line in (work / "board.jsonl").read_bytes().splitlines()
                                  if json.loads(line).get("kind") == "attachment"})
    into_pg.refused("BOARD_NOT_EMPTY", "import", "state", "board.jsonl")

    # And back: the PostgreSQL board's export into a new, empty SQLite board.
    into_pg.ok("export", "state", "--out", "from-pg.jsonl")
    back = TaskdProcess(data_dir=tmp_path / "back-data", runtime_dir=tmp_path / "back-run", log_path=tmp_path / "back.log")
    back.start()
    try:
        onto_sqlite = taskctl_for(back, cache, work)
        onto_sqlite.ok("import", "state", "from-pg.jsonl")
        same_card_state((work / "board.jsonl").read_bytes(), onto_sqlite.ok("export", "state").stdout.encode())
        onto_sqlite.assert_no_secret(back.token)
    finally:
        back.stop()
    from_sqlite.assert_no_secret(on_sqlite.token)
    into_pg.assert_no_secret(on_pg.token)
