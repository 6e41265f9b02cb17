"""Real boards for tests: in-process on a loopback port, or ``taskd`` as a subprocess.

``TASKLOOM_TEST_ENGINE=postgresql`` puts every in-process board of the run on its own fresh
database of one throwaway PostgreSQL cluster instead of a SQLite file (``make test`` runs the
HTTP and stream suites once that way).
"""

from __future__ import annotations

import inspect
import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from services.board.app import BoardSettings, create_app
from services.board.keys import STORE
from services.board.sqlite_store import SqliteStore
from services.board.store import WriterStore

from .waiting import wait_until

VENV_BIN = Path(sys.executable).parent
API = "/api/v1"
#: A delivery report that passes the format check (report_format).
REPORT = (
    "## Summary\n\nThe docs site builds again.\n\n"
    "## Changes\n\n- docs/conf.py: pin the theme\n\n"
    "## Verification\n\n- make docs: no warnings\n"
)


@dataclass
class Reply:
    status: int
    body: Any
    headers: Any = None

    @property
    def error(self) -> str | None:
        return self.body.get("error", {}).get("code") if isinstance(self.body, dict) else None


@dataclass
class BoardClient:
    """A thin JSON client with the token and an actor; returns (status, body) without raising."""

    url: str
    token: str | None
    session: aiohttp.ClientSession
    actor: tuple[str, str] | None = ("human", "ann")

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: bytes | None = None,
        actor: tuple[str, str] | None | str = "default",
        headers: dict[str, str] | None = None,
        token: str | None | bool = True,
    ) -> Reply:
        sent: dict[str, str] = {}
        use_token = self.token if token is True else (token or None)
        if use_token:
            sent["Authorization"] = f"Bearer {use_token}"
        who = self.actor if actor == "default" else actor
        if who:
            sent["X-Taskloom-Actor-Kind"], sent["X-Taskloom-Actor"] = who  # type: ignore[misc]
        if json_body is not None:
            data = json.dumps(json_body).encode()
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        async with self.session.request(method, self.url + path, data=data, headers=sent) as response:
            raw = await response.read()
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw
            return Reply(response.status, body, response.headers)

    async def get(self, path: str, **kw: Any) -> Reply:
        return await self.request("GET", path, **kw)

    async def post(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return await self.request("POST", path, json_body=body if body is not None else {}, **kw)

    async def patch(self, path: str, body: Any, **kw: Any) -> Reply:
        return await self.request("PATCH", path, json_body=body, **kw)

    def as_actor(self, kind: str, actor_id: str) -> BoardClient:
        return BoardClient(self.url, self.token, self.session, (kind, actor_id))


@dataclass
class RunningBoard:
    """An in-process board bound to a free loopback port."""

    url: str
    token: str
    data_dir: Path
    app: web.Application
    runner: web.AppRunner
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def store(self) -> SqliteStore:
        return self.app[STORE]  # type: ignore[return-value]  # a PostgresStore under TASKLOOM_TEST_ENGINE


#: Which engine the in-process boards of this run use: ``sqlite`` (the default) or ``postgresql``.
ENGINE_ENV = "TASKLOOM_TEST_ENGINE"
_CLUSTER: list[Any] = []


def test_engine() -> str:
    engine = os.environ.get(ENGINE_ENV, "sqlite")
    assert engine in ("sqlite", "postgresql"), f"{ENGINE_ENV} is sqlite or postgresql, not {engine!r}"
    return engine


def shared_cluster() -> Any:
    """The run's one throwaway PostgreSQL cluster, started on first use (stopped at exit)."""
    from .postgres import Cluster, find_binaries

    if not _CLUSTER:
        cluster = Cluster(find_binaries())
        cluster.start()
        _CLUSTER.append(cluster)
    return _CLUSTER[0]


#: Databases copied ahead of use: a copy takes most of a second, so a thread keeps a few ready.
_READY: queue.Queue[str] = queue.Queue(maxsize=3)


def fresh_database_url() -> str:
    """A new database with the schema already applied (copied from a template migrated once per run)."""
    from .postgres import apply_migrations, copy_database, fresh_database

    cluster = shared_cluster()
    if len(_CLUSTER) == 1:
        template = fresh_database(cluster)
        apply_migrations(template)  # the files only: each board's own start still adds its board_id
        _CLUSTER.append(template)

        def copy_ahead() -> None:
            try:
                while True:
                    _READY.put(copy_database(cluster, template))  # blocks while three are waiting
            except Exception:  # noqa: BLE001 - the cluster stopping at exit ends the copies
                return

        threading.Thread(target=copy_ahead, name="pg-test-copies", daemon=True).start()
    return _READY.get(timeout=60)


#: What the tests that reach past the board into the SQLite file itself use: they are SQLite's own
#: (the PostgreSQL triggers have theirs in tests/postgres/test_pg_triggers.py).
SQLITE_ONLY_MARKS = ("raw_connection", "sqlite3.", "board.sqlite", "data_version", "sqlite_master", 'data_dir / "attachments"')


def _source(obj: object) -> str:
    try:
        return inspect.getsource(obj)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return ""


def _names_a_mark(text: str) -> bool:
    return any(mark in text for mark in SQLITE_ONLY_MARKS)


def file_helpers(module: ModuleType) -> set[str]:
    """The names of the module's helpers that open the SQLite file: its functions, defined there or
    imported, whose source names a mark. Those of this module are not judged so: they run on either
    engine (``start_board`` names the file for a SQLite board only), and the one that opens the
    file, ``raw_connection``, is itself a mark."""
    return {name for name, value in vars(module).items()
            if inspect.isfunction(value) and not name.startswith("test_")
            and value.__module__ != __name__ and _names_a_mark(_source(value))}


def opens_the_file(function: object, helpers: set[str]) -> bool:
    """Whether a test's source names a mark or calls one of its module's ``file_helpers``."""
    text = _source(function)
    return _names_a_mark(text) or any(f"{name}(" in text for name in helpers)


def deselect_sqlite_only(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``TASKLOOM_TEST_ENGINE=postgresql``, leave out the tests marked ``sqlite_only`` (a
    failure only a file can have) and those that open the SQLite file (``opens_the_file``)."""
    if test_engine() != "postgresql":
        return
    helpers: dict[ModuleType, set[str]] = {}
    keep, drop = [], []
    for item in items:
        function = getattr(item, "function", None)
        module = getattr(item, "module", None)
        if module is not None and module not in helpers:
            helpers[module] = file_helpers(module)
        marked = item.get_closest_marker("sqlite_only") is not None
        opens = function is not None and opens_the_file(function, helpers.get(module, set()))
        (drop if marked or opens else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


#: Under PostgreSQL, the database each data directory's board was given: a board started again on
#: the same data directory (a restart, a board swapped back behind one URL) finds its state there.
_DATABASES: dict[Path, str] = {}


def database_for(data_dir: Path) -> str | None:
    """The database a board on ``data_dir`` uses in this run: None on SQLite (the file in the
    directory), else the same fresh database every time the directory is named."""
    if test_engine() != "postgresql":
        return None
    key = data_dir.resolve()
    if key not in _DATABASES:
        _DATABASES[key] = fresh_database_url()
    return _DATABASES[key]


async def start_board(data_dir: Path, *, clock: Callable[[], str] | None = None, **settings: Any) -> RunningBoard:
    """A board on a free loopback port; with ``clock``, its store stamps commits with that clock."""
    store: WriterStore | None = None
    if test_engine() == "postgresql" and "database" not in settings:
        settings["database"] = database_for(data_dir)
    if clock is not None:
        if settings.get("database"):
            from services.board.postgres_store import PostgresStore

            store = PostgresStore(settings["database"], clock=clock)
        else:
            store = SqliteStore(data_dir / "board.sqlite", clock=clock)
        store.open()
    app = create_app(BoardSettings(data_dir=data_dir, port=0, **settings), store=store)
    if store is not None:
        async def close_store(app: web.Application) -> None:
            store.close()  # after the app's own cleanup contexts (the log reader) have run

        app.on_cleanup.append(close_store)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    token = (data_dir / "token").read_text().strip()
    return RunningBoard(f"http://127.0.0.1:{port}", token, data_dir, app, runner)


# -- helpers the integration tests share --------------------------------------------------------


async def activity_count(board: RunningBoard) -> int:
    """Rows in the activity log: a refusal must leave this number as it was."""
    return (await row_counts(board, "task_activities"))[0]


async def row_counts(board: RunningBoard, *tables: str) -> tuple[int, ...]:
    """``count(*)`` of each table, read in one snapshot."""
    return await board.store.query(
        lambda conn: tuple(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in tables)
    )


@contextmanager
def raw_connection(board: RunningBoard) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection to the board's file, bypassing the board's code as a script would
    (foreign keys on, so only the triggers and constraints stand in the way)."""
    with closing(sqlite3.connect(board.data_dir / "board.sqlite", isolation_level=None, timeout=5)) as conn:
        conn.execute("PRAGMA foreign_keys = ON")
        yield conn


async def make_project(client: BoardClient, project: str = "demo") -> None:
    """Create the project unless it exists."""
    if (await client.get(f"{API}/projects/{project}")).status == 404:
        reply = await client.post(f"{API}/projects", {"id": project})
        assert reply.status == 201, reply.body


async def make_task(client: BoardClient, project: str = "demo", **fields: Any) -> dict[str, Any]:
    """A new task (its project made on first use); ``fields`` go into the create body."""
    await make_project(client, project)
    reply = await client.post(f"{API}/tasks", {"project": project, "title": "Write the docs", **fields})
    assert reply.status == 201, reply.body
    return reply.body


async def task_rows(client: BoardClient, ref: str) -> list[dict[str, Any]]:
    """The task's activity frames, oldest first (up to 1000)."""
    reply = await client.get(f"{API}/tasks/{ref}/activities?limit=1000")
    assert reply.status == 200, reply.body
    return reply.body["items"]


async def last_row(client: BoardClient, ref: str) -> dict[str, Any]:
    """The task's newest activity frame."""
    reply = await client.get(f"{API}/tasks/{ref}/activities?order=desc&limit=1")
    assert reply.status == 200, reply.body
    return reply.body["items"][0]


@dataclass
class TaskdProcess:
    """``taskd serve`` as a user runs it, on a free port, with its own runtime directory."""

    data_dir: Path
    runtime_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    url: str = ""

    @property
    def token(self) -> str:
        return (self.data_dir / "token").read_text().strip()

    def env(self) -> dict[str, str]:
        # Under TASKLOOM_TEST_ENGINE=postgresql a board run as a user runs it serves a database
        # too, as the in-process boards do (``start_board``); a test naming its own keeps it.
        # Asked for first: the first ask starts the cluster, which sets PGPASSFILE.
        database = database_for(self.data_dir)
        env = dict(os.environ)
        env["TASKLOOM_RUNTIME_DIR"] = str(self.runtime_dir)
        env["TASKLOOM_DATA_DIR"] = str(self.data_dir)
        if database is not None:
            env.setdefault("TASKLOOM_DATABASE_URL", database)
        return env

    def start(self, *args: str, port: int = 0, timeout: float = 20.0) -> TaskdProcess:
        pointer = self.runtime_dir / "board.json"
        pointer.unlink(missing_ok=True)
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [str(VENV_BIN / "taskd"), "serve", "--port", str(port), "--data-dir", str(self.data_dir), *args],
            env=self.env(),
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
        log.close()

        def ready() -> str | None:
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"taskd exited with {self.process.returncode}: {self.log_path.read_text()}")
            try:
                record = json.loads(pointer.read_text())
            except (OSError, ValueError):
                return None
            return record["url"] if record.get("pid") == self.process.pid else None

        self.url = wait_until(ready, timeout=timeout, what="taskd to write its pointer")
        return self

    def api(self, method: str, path: str, body: object = None) -> Any:
        """One JSON request as ann (a person) with the board's token; the decoded answer. A refusal
        raises ``urllib.error.HTTPError``: these callers expect every request to succeed."""
        request = urllib.request.Request(
            self.url + path, method=method, data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
                     "X-Taskloom-Actor": "ann", "X-Taskloom-Actor-Kind": "human"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout=timeout)
        return code


def taskd_restore(backup: Path, data_dir: Path) -> subprocess.CompletedProcess[str]:
    """``taskd restore BACKUP --data-dir DIR`` as an operator runs it (the board stopped)."""
    return subprocess.run([str(VENV_BIN / "taskd"), "restore", str(backup), "--data-dir", str(data_dir)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@asynccontextmanager
async def board_running(data_dir: Path, *, restored_from: Path | None = None) -> AsyncIterator[RunningBoard]:
    """A board on ``data_dir`` for the block, stopped however the block ends; with
    ``restored_from``, the stopped board there is first restored from that backup (``taskd
    restore``, the SQLite file's: a test that restores is ``sqlite_only``)."""
    if restored_from is not None:
        done = taskd_restore(restored_from, data_dir)
        assert done.returncode == 0, done.stderr
    board = await start_board(data_dir)
    try:
        yield board
    finally:
        await board.runner.cleanup()


async def board_backed_up(data_dir: Path, backup_file: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A board in ``data_dir`` with one task, backed up to ``backup_file``, then stopped: the task
    and the backup's answer."""
    async with board_running(data_dir) as board, aiohttp.ClientSession() as session:
        client = BoardClient(board.url, board.token, session)
        task = await make_task(client)
        taken = await client.post(f"{API}/admin/backup", {"path": str(backup_file)})
        assert taken.status == 200, taken.body
        return task, dict(taken.body)
