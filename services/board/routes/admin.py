"""Board administration: token rotation and the board's own status (for ``taskctl``).

Rotating the token is not an event (SPEC §4.4): it changes no board state. The new token is
written to the token file first (atomically, owner-only) and only then swapped in memory, so a
failed write leaves the old token working. Every open stream is then closed (without a shutdown
frame), so nothing keeps reading with the old credential; a reconnect must bring the new token.
The answer never carries the token: clients read the file, exactly as they found the old one.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from typing import Any

import structlog

from shared import limits
from shared.errors import TaskloomError

from .. import auth, backup, compaction
from ..api import PREFIX, Call, F, Route
from ..client_stream import TOKEN_ROTATED
from ..commands import attachments
from ..keys import CREDENTIALS, STREAMS
from ..queries import activities
from ..store import SharedSecrets

log = structlog.get_logger("taskd")
#: When this process started serving, for the status answer's uptime.
_STARTED = time.monotonic()


async def rotate_token(call: Call) -> Any:
    actor = call.actor  # an anonymous rotation is refused like any other write
    path = call.settings.token_path
    token = auth.new_token()
    loop = asyncio.get_running_loop()
    credentials = call.request.app[CREDENTIALS]
    # One replacement at a time (auth.Credentials.replacing): a rotation heard from another
    # process while this one is under way is read after it, so the newest token in the database
    # is the one this process ends on.
    async with credentials.replacing:
        if isinstance(call.store, SharedSecrets):
            # The database's copy is the token every board process on it accepts; its NOTIFY makes
            # the others reload it (app.share_credentials). The login links minted under the old
            # token go with it, for every process: each forgets only its own codes in memory.
            await loop.run_in_executor(None, functools.partial(
                call.store.write_secret, auth.TOKEN_SECRET, token, notify_token=True, drop_prefix=auth.LOGIN_PREFIX))
        # fsync off the loop: a slow disk must not stall every open stream.
        await loop.run_in_executor(None, auth.write_token, path, token)
        credentials.replace_token(token)
    # Every open stream was authenticated with the old token (or a session it signed): without
    # this, a holder of the old token would keep reading the board until its stream ended.
    closed = call.request.app[STREAMS].end_where(TOKEN_ROTATED)
    log.info("token_rotated", actor=f"{actor.kind}:{actor.id}", fingerprint=auth.token_fingerprint(token),
             streams_closed=closed)
    return {"rotated": True, "token_file": str(path)}


def _status(conn: Any) -> dict[str, Any]:
    meta = activities.board_meta(conn)
    rows, size, oldest = conn.execute(
        "SELECT count(*), coalesce(sum(length(changes_json)), 0), min(revision) FROM task_activities"
    ).fetchone()
    return {
        "board_id": meta["board_id"], "revision": activities.head(conn), "floor": int(meta.get("floor", "0")),
        "log_rows": rows, "log_bytes": size, "oldest_revision": oldest,
        "event_retention_days": compaction.retention_days(conn),
    }


async def board_status(call: Call) -> Any:
    from .meta import VERSION

    settings = call.settings
    durability = settings.durability
    if getattr(call.store, "engine", "sqlite") == "postgresql":
        # The server decides how durable a commit is (its synchronous_commit): say what it does.
        durability = await call.store.query(_server_durability)
    return {
        **await call.store.query(_status),
        "version": VERSION,
        "pid": os.getpid(),
        "data_dir": str(settings.data_dir),
        "database": settings.database_label,
        "token_file": str(settings.token_path),
        "uptime_seconds": round(time.monotonic() - _STARTED, 1),
        "durability": durability,
    }


def _server_durability(conn: Any) -> str:
    """PostgreSQL's ``synchronous_commit = off`` may lose the last acknowledged commits on a crash
    of the server, as SQLite's ``normal`` may on a power cut; any other value waits for the flush."""
    value = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()[0]
    return "normal" if value == "off" else "full"


def _sqlite_only(call: Call) -> None:
    """The file copy is SQLite's; a board on PostgreSQL is backed up with ``pg_dump``."""
    if getattr(call.store, "engine", "sqlite") != "sqlite":
        raise TaskloomError("VALIDATION_FAILED", "this board runs on PostgreSQL: back it up with pg_dump",
                            details={"engine": getattr(call.store, "engine", None)},
                            hint="pg_dump --format=custom (docs/operations.md, Backup and restore)")


async def take_backup(call: Call) -> Any:
    actor = call.actor
    _sqlite_only(call)
    target = backup.check_target(call.body["path"])
    loop = asyncio.get_running_loop()
    root = call.settings.attachments_dir
    # Pinned from before the snapshot: a blob it names stays on disk until the copy holds it.
    async with attachments.blobs_held(call.store, root):
        result = await loop.run_in_executor(None, backup.backup, call.settings.database_path, target, root)
    log.info("backup_taken", actor=f"{actor.kind}:{actor.id}", path=str(result.path), revision=result.revision,
             seconds=round(result.seconds, 3))
    return {"path": str(result.path), "board_id": result.board_id, "revision": result.revision,
            "bytes": result.bytes, "seconds": round(result.seconds, 6), "blobs": result.blobs}


async def compact_log(call: Call) -> Any:
    actor = call.actor
    body = call.body
    older = body.get("older_than_days")
    if older is not None:
        compaction.check_days(older, "older_than_days")
    return await compaction.compact(
        call.store, call.settings.data_dir, through=body.get("through"), older_than_days=older,
        dry_run=body.get("dry_run", False), actor=actor,
    )


def _settings(conn: Any) -> dict[str, Any]:
    return {"event_retention_days": compaction.retention_days(conn)}


async def get_settings(call: Call) -> Any:
    return await call.store.query(_settings)


async def update_settings(call: Call) -> Any:
    actor = call.actor
    if "event_retention_days" not in call.body:
        return await call.store.query(_settings)
    days = call.body["event_retention_days"]
    if days is not None:
        compaction.check_days(days, "event_retention_days")
    result = await call.store.command(compaction.set_retention, actor, days)
    log.info("settings_changed", actor=f"{actor.kind}:{actor.id}", **result)
    return result


ROUTES = [
    Route("POST", f"{PREFIX}/token/rotate", rotate_token,
          "Replace the board token with a new one written to the token file (the answer never holds it)",
          body={}),
    Route("GET", f"{PREFIX}/board/status", board_status,
          "Where this board runs: pid, data directory, database, token file (never the token)"),
    Route("POST", f"{PREFIX}/admin/backup", take_backup,
          "Copy the database to a new file while the board keeps serving (SQLite online backup), fsynced",
          body={"path": F("str", required=True, description="absolute path of a new file in an existing directory")}),
    Route("POST", f"{PREFIX}/admin/compact", compact_log,
          "Archive the oldest activity rows, raise the floor and delete the rows at or below it",
          body={
              "through": F("int", minimum=0, description="remove rows up to this revision (at most the head)"),
              "older_than_days": F("int", minimum=1, maximum=limits.RETENTION_DAYS_MAX,
                                   description="remove rows older than this many days"),
              "dry_run": F("bool", description="say what would be removed, remove nothing"),
          }),
    Route("GET", f"{PREFIX}/admin/settings", get_settings, "Board-wide settings kept in the database"),
    Route("PATCH", f"{PREFIX}/admin/settings", update_settings, "Change board-wide settings",
          body={"event_retention_days": F("int", nullable=True, minimum=1, maximum=limits.RETENTION_DAYS_MAX,
                                          description="compact rows older than this many days, daily; null: keep all")}),
]
