"""Retention: archive the oldest activity rows, then raise the floor and delete them (SPEC §12).

Order is what makes it safe against a crash at any moment:

1. the rows with ``floor < revision <= through`` are written to
   ``<data_dir>/archive/activities-<from>-<to>.jsonl.gz`` (a temp file, fsynced, renamed, the
   directory fsynced): the archive is complete before anything is deleted;
2. one transaction raises ``board_meta.floor`` to ``through`` and deletes exactly the rows at or
   below it (the trigger of migration 0005 lets these deletes, and no others, through).

A kill before step 2 commits leaves the old floor and every row (perhaps an archive beside
them, which the next run rewrites); after it, the new floor and its complete archive. Card state
is never trimmed. The newest row is always kept: row ids are handed out after the largest one
left, and an empty table would hand out ids again that paged readers have already seen.

Readers below the floor are told so: SSE and ``/activities`` answer ``410 CURSOR_EXPIRED``.
"""

from __future__ import annotations

import asyncio
import gzip
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import orjson
import structlog
from aiohttp import web

from shared import limits
from shared.errors import TaskloomError, validation
from shared.timestamps import format_timestamp

from .files import atomic_writer
from .queries import activities
from .store import Tx, WriterStore, disk_refused

log = structlog.get_logger("taskd.compaction")

RETENTION_KEY: Final = "event_retention_days"
#: board_meta key: the largest row id deleted, so a paged reader behind it is told (410).
FLOOR_ID_KEY: Final = "floor_id"
ARCHIVE_DIR: Final = "archive"


@dataclass(frozen=True)
class Plan:
    previous_floor: int
    through: int
    rows: int

    @property
    def empty(self) -> bool:
        return self.through <= self.previous_floor


def floor(conn: Any) -> int:
    return int(activities.board_meta(conn).get("floor", "0"))


def retention_days(conn: Any) -> int | None:
    value = activities.board_meta(conn).get(RETENTION_KEY)
    return int(value) if value else None


def set_retention(tx: Tx, days: int | None) -> dict[str, Any]:
    """``event_retention_days`` (None: keep every row); the daily compaction reads it each time."""
    if days is None:
        tx.execute("DELETE FROM board_meta WHERE key = ?", (RETENTION_KEY,))
    else:
        tx.execute(
            "INSERT INTO board_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (RETENTION_KEY, str(check_days(days, RETENTION_KEY))),
        )
    return {"event_retention_days": days}


def check_days(days: Any, field: str) -> int:
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= limits.RETENTION_DAYS_MAX:
        raise validation(
            f"{field} must be a whole number of days, from 1 to {limits.RETENTION_DAYS_MAX}", field=field, value=days
        )
    return days


def plan(conn: Any, *, through: int | None, older_than_days: int | None, now: datetime) -> Plan:
    """What a compaction would remove; refuses a revision above the head or a day count below 1."""
    current = floor(conn)
    head = activities.head(conn)
    if (through is None) == (older_than_days is None):
        raise validation("name exactly one of through (a revision) or older_than_days", field="through")
    if through is not None:
        if through > head:
            raise validation(f"through {through} is above the head revision {head}", field="through",
                             through=through, head=head)
        target = through
    else:
        cutoff = format_timestamp(now - timedelta(days=check_days(older_than_days, "older_than_days")))
        row = conn.execute("SELECT max(revision) FROM task_activities WHERE created_at < ?", (cutoff,)).fetchone()
        target = row[0] or 0
    newest = conn.execute("SELECT max(revision) FROM task_activities").fetchone()[0] or 0
    target = min(target, newest - 1)
    if target <= current:
        return Plan(current, current, 0)
    rows = conn.execute(
        "SELECT count(*) FROM task_activities WHERE revision > ? AND revision <= ?", (current, target)
    ).fetchone()[0]
    return Plan(current, target, rows)


#: One compaction at a time per store. Each one clears the archives a killed run left just past
#: the floor it planned from; a second run planned from the same floor would take the first
#: one's archive (or its temp file, mid-write) for such a leftover while the first commits.
_RUNNING: Final[weakref.WeakKeyDictionary[WriterStore, asyncio.Lock]] = weakref.WeakKeyDictionary()


def archive_path(data_dir: Path, start: int, end: int) -> Path:
    return data_dir / ARCHIVE_DIR / f"activities-{start}-{end}.jsonl.gz"


def write_archive(conn: Any, data_dir: Path, chosen: Plan) -> Path:
    """Step 1: every row to be removed, as its frame, one a line, gzip; durable before it is named."""
    target = archive_path(data_dir, chosen.previous_floor + 1, chosen.through)
    try:
        target.parent.mkdir(mode=0o700, exist_ok=True)
        _remove_uncommitted(target.parent, chosen.previous_floor + 1)
        with atomic_writer(target) as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as packed:
            cursor = conn.execute(
                f"SELECT {activities.ACTIVITY_COLUMNS} FROM task_activities WHERE revision > ? AND revision <= ?"
                " ORDER BY revision",
                (chosen.previous_floor, chosen.through),
            )
            while rows := cursor.fetchmany(1000):
                for row in rows:
                    packed.write(orjson.dumps(activities.to_frame(row), option=orjson.OPT_APPEND_NEWLINE))
    except OSError as exc:
        # A full (or read-only, or failing) disk: what any write there answers, not a 500. Nothing
        # was removed: the rows go only once their archive is whole (the writer left no temp file).
        raise disk_refused(exc, f"the archive could not be written in {target.parent}", then="; nothing was removed",
                           hint="free space on the board's disk (its data directory) and compact again") from exc
    return target


def _remove_uncommitted(folder: Path, start: int) -> None:
    """Archives a killed compaction left: they start just past the floor, which never reached them
    (a committed one moves the floor past its end), and temp files that were never renamed."""
    for stale in (*folder.glob(f"activities-{start}-*.jsonl.gz"), *folder.glob(".activities-*.tmp")):
        stale.unlink(missing_ok=True)


def raise_floor(tx: Tx, chosen: Plan) -> int:
    """Step 2, one transaction: the floor rises to ``through`` and exactly the rows at or below go."""
    current = int(tx.one("SELECT value FROM board_meta WHERE key = 'floor'")[0])  # type: ignore[index]
    if current != chosen.previous_floor:
        raise TaskloomError("CONFLICT", f"the floor moved to {current} meanwhile (another compaction)",
                            details={"floor": current})
    last_id = tx.one("SELECT max(id) FROM task_activities WHERE revision <= ?", (chosen.through,))
    tx.execute("UPDATE board_meta SET value = ? WHERE key = 'floor'", (str(chosen.through),))
    tx.execute(
        "INSERT INTO board_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (FLOOR_ID_KEY, str(last_id[0] if last_id and last_id[0] is not None else 0)),
    )
    removed = tx.execute("DELETE FROM task_activities WHERE revision <= ?", (chosen.through,)).rowcount
    tx.execute("DELETE FROM retention_window")  # the window closes with the transaction that opened it
    return int(removed)


async def compact(
    store: WriterStore,
    data_dir: Path,
    *,
    through: int | None = None,
    older_than_days: int | None = None,
    dry_run: bool = False,
    actor: Any = None,
) -> dict[str, Any]:
    lock = _RUNNING.setdefault(store, asyncio.Lock())
    async with lock:
        return await _compact(store, data_dir, through=through, older_than_days=older_than_days,
                              dry_run=dry_run, actor=actor)


async def _compact(
    store: WriterStore, data_dir: Path, *, through: int | None, older_than_days: int | None, dry_run: bool, actor: Any,
) -> dict[str, Any]:
    from .store import SYSTEM_ACTOR

    # Two board processes (PostgreSQL) cannot both win either: the second finds the floor moved
    # (409 CONFLICT) and removes the archive it wrote.
    now = datetime.now(UTC)
    chosen = await store.query(plan, through=through, older_than_days=older_than_days, now=now)
    answer: dict[str, Any] = {
        "previous_floor": chosen.previous_floor, "floor": chosen.through, "through": chosen.through,
        "removed": chosen.rows, "archive": None, "dry_run": dry_run,
    }
    if chosen.empty:
        answer["removed"] = 0
        return answer
    if dry_run:
        answer["archive"] = str(archive_path(data_dir, chosen.previous_floor + 1, chosen.through))
        return answer
    archive = await store.query(write_archive, data_dir, chosen)
    removed = await commit_plan(store, chosen, archive, actor or SYSTEM_ACTOR)
    log.info("log_compacted", floor=chosen.through, removed=removed, archive=str(archive))
    return {**answer, "removed": removed, "archive": str(archive)}


async def commit_plan(store: WriterStore, chosen: Plan, archive: Path, actor: Any) -> int:
    """Step 2. A plan another compaction overtook (409 CONFLICT: on PostgreSQL, another board
    process's daily run) removed nothing: its archive names rows nobody removed through it, so it
    goes, unless the winner committed this very range (then the file is the winner's too)."""
    try:
        removed: int = await store.command(raise_floor, actor, chosen)
    except TaskloomError as exc:
        if exc.code == "CONFLICT" and exc.details.get("floor") != chosen.through:
            archive.unlink(missing_ok=True)
        raise
    return removed


def setup(app: web.Application, *, store_key: Any, settings_key: Any) -> None:
    """Compact once per ``compaction_interval`` (a day) while ``event_retention_days`` is set."""

    async def daily(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(_every(app[store_key], app[settings_key]), name="taskloom-compaction")
        yield
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    app.cleanup_ctx.append(daily)


async def _every(store: WriterStore, settings: Any) -> None:
    """At start (a board restarted daily must still compact), then once per interval."""
    while True:
        try:
            days = await store.query(retention_days)
            if days:
                await compact(store, settings.data_dir, older_than_days=days)
        except Exception:
            log.exception("compaction_failed")
        await asyncio.sleep(settings.compaction_interval)
