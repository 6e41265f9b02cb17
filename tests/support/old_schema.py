"""Boards at an older schema version, with real rows, for the upgrade tests.

A board is built through the real API by the current code (every kind of card state), then its
rows are copied into a file made by migrations 1..N only: the tables and indexes of 1..N first,
the rows (each table's columns that generation has), then the triggers of 1..N, so the triggers
do not restamp what they did not write. The result is the file an installation of generation N
would hold for the same history.
"""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import aiohttp

from services.board.dialect import statement_code
from services.board.sqlite_store import _statements, migrations
from tests.support.board import API, REPORT, BoardClient, start_board
from tests.support.state_builder import build_random_board

_TRIGGER = re.compile(r"\s*CREATE\s+TRIGGER", re.IGNORECASE)


async def _ok(reply: Any, *statuses: int) -> Any:
    assert reply.status in (statuses or (200, 201)), (reply.status, reply.body)
    return reply.body


async def build_source_board(data_dir: Path) -> Path:
    """A current board with every kind of row; stopped; its board.sqlite."""
    running = await start_board(data_dir)
    try:
        async with aiohttp.ClientSession() as session:
            client = BoardClient(running.url, running.token, session)
            await build_random_board(client, seed=7, projects=2, tasks=8)
            worker = client.as_actor("claude", "worker-x")
            project = "every"
            await _ok(await client.post(f"{API}/projects", {"id": project, "name": "Every status"}), 201)
            cards = {}
            for status in ("backlog", "todo", "in_progress", "awaiting", "blocked", "in_review", "done", "canceled"):
                cards[status] = await _ok(await client.post(
                    f"{API}/tasks", {"project": project, "title": f"A card {status}", "description": f"about {status}"}), 201)
            ids = {status: card["id"] for status, card in cards.items()}
            await _ok(await client.post(f"{API}/tasks/{ids['todo']}/acceptance", {"items": ["one", "two"]}))
            await _ok(await client.post(f"{API}/tasks/{ids['in_review']}/acceptance", {"items": ["it works"]}))
            await _ok(await client.post(f"{API}/tasks/{ids['backlog']}/move", {"to": "backlog"}), 200, 409)
            for status in ("in_progress", "awaiting", "blocked", "in_review", "done"):
                await _ok(await worker.post(f"{API}/tasks/{ids[status]}/claim"))
            await _ok(await worker.post(f"{API}/tasks/{ids['awaiting']}/move", {"to": "awaiting", "reason": "needs input"}))
            await _ok(await worker.post(f"{API}/tasks/{ids['blocked']}/move", {"to": "blocked", "reason": "waits on infra"}))
            for status in ("in_review", "done"):
                await _ok(await worker.post(f"{API}/tasks/{ids[status]}/deliver", {"body": REPORT}))
            await _ok(await client.post(f"{API}/tasks/{ids['done']}/comments", {"body": "Approved.", "kind": "confirm"}), 201)
            await _ok(await client.post(f"{API}/tasks/{ids['done']}/move", {"to": "done"}))
            await _ok(await client.post(f"{API}/tasks/{ids['canceled']}/move", {"to": "canceled", "reason": "not needed"}))
            await _ok(await client.post(f"{API}/tasks/{ids['todo']}/relations", {"type": "blocks", "target": ids["backlog"]}), 201)
            await _ok(await client.request("POST", f"{API}/tasks/{ids['todo']}/attachments?filename=a.txt",
                                           data=b"attached bytes\n", headers={"Content-Type": "text/plain"}), 201)
    finally:
        await running.runner.cleanup()
    return data_dir / "board.sqlite"


def _tables(conn: sqlite3.Connection) -> dict[str, list[str]]:
    ordinary = {row[1] for row in conn.execute("PRAGMA table_list") if row[2] == "table" and row[0] == "main"}
    found = {}
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"):
        if name in ordinary and not name.startswith("tasks_search"):
            found[name] = [row[1] for row in conn.execute(f"PRAGMA table_info({name})")]
    return found


def make_old_file(source: Path, target: Path, version: int) -> None:
    """``target``: generation ``version`` of the schema, holding ``source``'s rows."""
    target.parent.mkdir(parents=True, exist_ok=True)
    triggers: list[str] = []
    with closing(sqlite3.connect(target, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN")
        for number, script in migrations():
            if number > version:
                break
            for statement in _statements(script):
                code = statement_code(statement)
                if _TRIGGER.match(code):
                    triggers.append(code)
                elif re.match(r"\s*DROP\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?(\w+)", code, re.IGNORECASE):
                    dropped = re.match(r"\s*DROP\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?(\w+)", code, re.IGNORECASE)[1]  # type: ignore[index]
                    triggers = [t for t in triggers if not re.match(rf"\s*CREATE\s+TRIGGER\s+{dropped}\b", t, re.IGNORECASE)]
                else:
                    conn.execute(statement)
        conn.execute("ATTACH DATABASE ? AS src", (f"file:{source}?mode=ro",))
        with closing(sqlite3.connect(source)) as src:
            source_tables = _tables(src)
        for table, columns in _tables(conn).items():
            shared = [c for c in columns if c in source_tables.get(table, [])]
            if not shared:
                continue
            names = ", ".join(shared)
            conn.execute(f"INSERT OR REPLACE INTO main.{table} ({names}) SELECT {names} FROM src.{table}")
        for trigger in triggers:
            conn.execute(trigger)
        conn.execute(f"PRAGMA user_version = {version}")
        conn.execute("COMMIT")
        conn.execute("DETACH DATABASE src")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for suffix in ("-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)


def user_version(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
