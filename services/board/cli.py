"""``taskd``: run the board."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import structlog
from aiohttp import web

from shared import knobs
from shared.errors import TaskloomError
from shared.paths import data_dir as default_data_dir
from shared.paths import runtime_dir

from .app import create_app
from .auth import LOGIN_CODE_TTL
from .connections import BoardRunner, ConnectionLimits, listen_backlog
from .descriptors import raise_nofile_limit, reserve_within
from .files import NotOwned, ensure_private_dir, restrict_umask, tighten
from .keys import CREDENTIALS, STORE
from .lock import LOCK_FILE, DataDirBusy, DataDirLock
from .pointer import pointer_names, remove_pointer_if_mine, write_pointer
from .process import ShutdownSignals, configure_logging, exit_forced
from .settings import SERVE_KNOBS, BoardSettings
from .sqlite_store import migrate, verify_triggers
from .store import MigrationFailed, SchemaDamaged, SchemaTooNew, StoreUnreachable

#: What the board keeps in its data directory, made owner-only at every start (docs/security.md).
DATABASE_FILE = "board.sqlite"
#: SQLite's files beside the database: part of it (https://www.sqlite.org/tempfiles.html).
DATABASE_SIBLINGS = tuple(f"{DATABASE_FILE}{suffix}" for suffix in ("-wal", "-shm", "-journal"))
DATA_FILES = (DATABASE_FILE, *DATABASE_SIBLINGS, "token", LOCK_FILE)
DATA_DIRS = ("logs", "attachments")
#: What the board and ``taskctl``'s autostart keep in the runtime directory.
RUNTIME_FILES = ("board-start.lock",)  # and the pointers (``pointer_names``)

log = structlog.get_logger("taskd")


@dataclass
class Startup:
    """Whether ``serve`` got as far as listening: a failure before that is a failed start."""

    done: bool = False


async def serve(settings: BoardSettings, *, lock: DataDirLock | None = None, startup: Startup | None = None) -> None:
    app = create_app(settings)
    limits = connection_limits(settings)
    runner = BoardRunner(app, limits=limits, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, reuse_address=True, backlog=listen_backlog(limits))
    await site.start()
    server = site._server
    addresses = runner.addresses  # the runner's one site: the port the OS picked for port 0
    port = addresses[0][1] if addresses else settings.port
    host = settings.host if ":" not in settings.host else f"[{settings.host}]"
    url = f"http://{host}:{port}"
    meta = await app[STORE].query(lambda conn: conn.execute("SELECT value FROM board_meta WHERE key = 'board_id'").fetchone()[0])
    runtime = runtime_dir(os.environ, Path.home())
    pid = os.getpid()

    def forced() -> None:
        # A second signal: streams and requests are not waited for, but the port closes and the
        # pointer goes, so nobody is sent to a board that is no longer there.
        log.warning("board_forced_exit", pid=pid)
        exit_forced(*([server.close] if server is not None else []), lambda: remove_pointer_if_mine(runtime, pid, settings.data_dir))

    # Handlers before the pointer: a SIGTERM from whoever just read it must still remove it.
    with ShutdownSignals(force=forced) as signals:
        # The lock names the URL before the pointer does: whoever found the pointer and then
        # reads the lock (a second board on this data directory) sees the same board.
        if lock is not None:
            lock.stamp(url=url)
        write_pointer(
            runtime,
            {
                "url": url,
                "pid": pid,
                "board_id": meta,
                "data_dir": str(settings.data_dir),
                "token_file": str(settings.token_path),
            },
        )
        if startup is not None:
            startup.done = True
        log.info("board_listening", url=url, data_dir=str(settings.data_dir), board_id=meta)
        click.echo(f"Taskloom board on {url}  (data: {settings.data_dir})", err=True)
        announce_login(app, url)

        try:
            await signals.requested.wait()
        finally:
            log.info("board_stopping")
            remove_pointer_if_mine(runtime, pid, settings.data_dir)
            await runner.cleanup()
            log.info("board_stopped")


def connection_limits(settings: BoardSettings) -> ConnectionLimits:
    return ConnectionLimits(
        idle_timeout=settings.idle_timeout,
        header_timeout=settings.header_timeout,
        body_timeout=settings.body_timeout,
        descriptor_reserve=settings.descriptor_reserve,
    )


def raise_open_file_limit(*, reserve: int) -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (each connection and stream costs a
    descriptor); the descriptor reserve that limit affords."""
    limit = raise_nofile_limit()
    if limit is None:
        return reserve
    log.info("open_file_limit", soft=limit.soft, hard=limit.hard, raised_from=limit.before)
    affordable = reserve_within(reserve, soft=limit.soft)
    if affordable != reserve:
        log.warning("descriptor_reserve_lowered", requested=reserve, reserve=affordable, soft=limit.soft,
                    hint="raise the open-file limit (LimitNOFILE=) for the reserve asked for")
    return affordable
def announce_login(app: web.Application, url: str) -> None:
    """A one-time login link on a terminal only: stderr may be a log file or the journal, which
    outlive the link's use and may be read by others; ``taskctl open`` mints a fresh one anyway."""
    if sys.stderr.isatty():
        code = app[CREDENTIALS].new_login_code()
        minutes = int(LOGIN_CODE_TTL // 60)
        click.echo(f"Open the board (this link works once, for {minutes} minutes): {url}/login?code={code}", err=True)
    else:
        click.echo("Open the board with `taskctl open` (it asks for a one-time login link).", err=True)


def prepare_data_dir(directory: Path, runtime: Path) -> DataDirLock:
    """Own the data directory before anything in it is read or written.

    Owner-only from here on (umask), the directory ours and 0700, then the lock: a second board
    stops at the lock having changed nothing of the first's. Only the lock holder tightens what
    an older version or another tool left group- or world-readable.
    """
    restrict_umask()
    ensure_private_dir(directory)
    lock = DataDirLock.acquire(directory)
    try:
        for name in (*DATA_FILES, *DATA_DIRS):
            tighten(directory / name)
        logs = directory / "logs"
        if logs.is_dir():
            for entry in logs.iterdir():
                tighten(entry)
        ensure_private_dir(runtime)
        for name in (*RUNTIME_FILES, *pointer_names(directory)):
            tighten(runtime / name)
    except BaseException:
        lock.release()
        raise
    return lock


def check_schema(settings: BoardSettings, *, repair: bool) -> None:
    """Migrate, then make sure every trigger the migrations define is there and enabled (or put
    them back, with ``repair``): a database whose rules are gone is not served."""
    if settings.database:
        from . import postgres_store  # psycopg is loaded only by a board that uses it

        postgres_store.migrate(settings.database)
        from .postgres_schema import verify_triggers as verify_pg_triggers

        repaired = verify_pg_triggers(settings.database, repair=repair)
    else:
        migrate(settings.database_path)
        repaired = verify_triggers(settings.database_path, repair=repair)
    if repaired:
        log.warning("schema_repaired", triggers=repaired)
        click.echo(f"Put back {len(repaired)} trigger(s) the schema defines: {', '.join(repaired)}", err=True)


# No auto_envvar_prefix: the variables are the table's, spelled out (services/board/settings.py).
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Taskloom board: HTTP API, web UI and live event stream over one SQLite file."""


@main.command("serve")
@knobs.options(SERVE_KNOBS)
def serve_command(*, data_dir: Path | None, repair_schema: bool, **params: Any) -> None:
    """Run the board until SIGINT or SIGTERM."""
    # Lines on stdout, banner and login link on stderr (docs/operations.md); JSON off a terminal.
    configure_logging(sys.stdout, json=not sys.stderr.isatty())
    directory = (data_dir or default_data_dir(os.environ, Path.home(), platform=sys.platform)).absolute()
    values = knobs.settings_values(BoardSettings, params)
    values["descriptor_reserve"] = raise_open_file_limit(reserve=values["descriptor_reserve"])
    settings = BoardSettings(data_dir=directory, **values)
    refuse_sqlite_durability(settings)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    startup = Startup()
    found = _entries(directory)
    try:
        lock = prepare_data_dir(directory, runtime_dir(os.environ, Path.home()))
        check_schema(settings, repair=repair_schema)
        asyncio.run(serve(settings, lock=lock, startup=startup))
    except (SchemaTooNew, SchemaDamaged, DataDirBusy, NotOwned) as exc:
        raise click.ClickException(str(exc)) from exc
    except MigrationFailed as exc:
        # One line naming the script and the reason: the pending scripts are one transaction, so
        # the database is still at the version it had, and the data directory as this start found it.
        _remove_new_entries(directory, found)
        where = settings.database_label
        raise click.ClickException(f"cannot upgrade the board's database ({where}): {exc}") from None
    except StoreUnreachable as exc:
        # The PostgreSQL server named by --database cannot be reached: one line, host and port, exit 1.
        raise click.ClickException(str(exc)) from None
    except (OSError, sqlite3.Error) as exc:
        if startup.done:
            raise
        # A disk that is full (or read-only, or failing) at start: one line, exit 1, and the data
        # directory as this start found it.
        _remove_new_entries(directory, found)
        raise click.ClickException(f"cannot start the board in {directory}: {_describe(exc)}; nothing was written") from None


def refuse_sqlite_durability(settings: BoardSettings) -> None:
    """``--durability`` is SQLite's ``synchronous`` pragma. A PostgreSQL board's commits are as
    durable as its server's ``synchronous_commit`` makes them; asking this board for ``normal``
    there would be a promise it cannot keep, so it is refused before anything starts."""
    if settings.database and settings.durability != "full":
        raise click.ClickException(
            f"--durability {settings.durability} applies to the SQLite file only; a board on PostgreSQL is as durable "
            "as the server's synchronous_commit setting (set it there: ALTER DATABASE … SET synchronous_commit = off). "
            "Nothing was started"
        )


def _entries(directory: Path) -> set[str] | None:
    """The names in ``directory`` now; None when it does not exist."""
    try:
        return {entry.name for entry in directory.iterdir()}
    except FileNotFoundError:
        return None


def _remove_new_entries(directory: Path, found: set[str] | None) -> None:
    """Undo a failed start: what it created in ``directory`` (or ``directory`` itself) goes.

    Except the siblings of a database that was already there: its ``-wal`` can hold committed
    pages a failed checkpoint has half copied into the file (deleting it corrupts the file), and
    its ``-journal`` is what undoes a half-written transaction. Only an empty one holds nothing.
    A database this start created goes with all of them (a stale WAL must not meet a new file).
    """
    if found is None:
        shutil.rmtree(directory, ignore_errors=True)
        return
    database_was_there = DATABASE_FILE in found
    for entry in directory.iterdir():
        if entry.name in found:
            continue
        if database_was_there and entry.name in DATABASE_SIBLINGS and not _empty_database_sibling(directory, entry):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _empty_database_sibling(directory: Path, entry: Path) -> bool:
    """An empty ``-wal`` or ``-journal``, or a ``-shm`` beside no WAL frames: nothing of the database."""
    try:
        if entry.name.endswith("-shm"):
            wal = directory / f"{DATABASE_FILE}-wal"
            return not wal.exists() or wal.stat().st_size == 0
        return entry.stat().st_size == 0
    except OSError:
        return False


def _describe(exc: OSError | sqlite3.Error) -> str:
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{(exc.strerror or str(exc)).lower()}{where}"
    return str(exc)


@main.command("restore")
@click.argument("backup_file", metavar="FILE", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), envvar="TASKLOOM_DATA_DIR",
              help="The data directory to restore into (default: TASKLOOM_DATA_DIR, else the platform default).")
@click.option("--database", envvar="TASKLOOM_DATABASE_URL", metavar="URL", hidden=True,
              help="Refused: a board on PostgreSQL is restored with pg_restore (docs/operations.md).")
def restore_command(backup_file: Path, data_dir: Path | None, database: str | None) -> None:
    """Install a backup (from `taskctl board backup`) with a new board id; the board must be stopped.

    \b
    The new board_id is a new epoch: the hub, the page and `taskctl events tail --board-id`
    see it and reload instead of resuming from a revision the restored board will reuse. The
    database it replaces is kept beside it as board.sqlite.replaced-<time>.
    """
    from .backup import RestoreRefused, restore

    if database:
        # Before the data directory is touched: this board's state is not in it.
        from .postgres_store import describe_target

        raise click.ClickException(
            f"this board's database is PostgreSQL ({describe_target(database)}, from --database or "
            "TASKLOOM_DATABASE_URL): taskd restore installs SQLite backups only. Restore a pg_dump with pg_restore "
            "into an empty database, then give it a new board_id (docs/operations.md, Backup and restore); "
            "nothing was changed"
        )
    configure_logging(sys.stdout, json=not sys.stderr.isatty())
    directory = (data_dir or default_data_dir(os.environ, Path.home(), platform=sys.platform)).absolute()
    restrict_umask()
    try:
        ensure_private_dir(directory)
        lock = DataDirLock.acquire(directory)
    except DataDirBusy as exc:
        raise click.ClickException(f"{exc}; stop the board before restoring (nothing was changed)") from exc
    except NotOwned as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        # A data directory on a read-only (or full, or failing) disk: one line, as `serve` says it.
        raise click.ClickException(f"cannot restore into {directory}: {_describe(exc)}; nothing was changed") from None
    try:
        result = restore(backup_file, directory)
    except (sqlite3.OperationalError, OSError) as exc:
        # The disk's words ("database or disk is full", "attempt to write a readonly database")
        # name no disk: say whose it is.
        raise click.ClickException(f"cannot restore into {directory}: {_describe(exc)}; nothing was changed") from exc
    except (RestoreRefused, SchemaTooNew, SchemaDamaged, sqlite3.Error, TaskloomError) as exc:
        raise click.ClickException(f"{exc}; nothing was changed") from exc
    finally:
        lock.release()
    log.info("board_restored", board_id=result.board_id, previous_board_id=result.previous_board_id,
             revision=result.revision, blobs=result.blobs, source=str(backup_file))
    kept = f"; the replaced database is kept as {result.replaced}" if result.replaced else ""
    blobs = (f", {result.blobs} attachment blobs" if result.blobs is not None
             else "; this backup predates backups that carry attachments: copy its attachments/ folder by hand")
    click.echo(f"restored {backup_file} into {directory}: board {result.board_id} (was {result.previous_board_id}), "
               f"revision {result.revision}{blobs}{kept}", err=True)


if __name__ == "__main__":
    main()
