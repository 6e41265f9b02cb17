"""Online backup and offline restore of the SQLite file (docs/operations.md, "Backup and restore").

**Backup** runs on a reader's side while the board keeps serving writes. SQLite's online backup
API copies the database in one step from one read snapshot: in WAL mode a reader never blocks
the writer, so writes go on while the copy is made, and the copy holds every transaction
committed before the snapshot began (a step-wise copy would restart every time a write landed,
and never finish under load). The copy is written beside the target, checked
(``PRAGMA integrity_check``), fsynced, and renamed into place: a target either does not exist or
is a whole backup. PostgreSQL boards are backed up with ``pg_dump`` instead.

**One file is the whole board.** On SQLite the attachment bytes are files under
``<data_dir>/attachments/``; the backup stores the bytes of every blob its snapshot names in a
table of the copy only, ``backup_blobs (sha256, content)``, each checked against its digest as it
is read. A blob that is missing or altered on disk fails the backup, naming it. While the copy is
made the board's blob purges are held back (``pin_blobs``): a blob the snapshot names cannot be
unlinked by a removal or replacement that commits after the snapshot.

**Restore** (``taskd restore FILE --data-dir DIR``, board stopped) installs a backup and mints a
new epoch: a new ``board_id``, with the one it replaces kept in ``board_meta``; with a new
``board_id`` every follower that knows the old one resets (SPEC §7.2). A cursor names a revision,
not a board, so the revisions of the lost future (past the backup's R, up to the replaced head H)
are never reused: the restored board's counter moves past H, and ``(R, H]`` is recorded
(``board_meta.restore_gaps``) so a cursor inside it is refused (``410 CURSOR_EXPIRED``) instead of
resumed past rows the client never had. Before anything in the data directory
changes, every blob in ``backup_blobs`` is checked against its digest and every attachment row
must find its blob there; then ``backup_blobs`` is dropped from the installed file (the live
schema has no such table), the blobs are written into ``attachments/`` (atomically, owner-only)
and the database is installed. A backup taken before backups carried blobs has no
``backup_blobs``: it is installed as before, and the result says its blobs were not in it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog

from shared import limits
from shared.errors import TaskloomError, validation

from .commands.attachments import DIGEST, blob_holds, blob_path, write_blob
from .compaction import ARCHIVE_DIR
from .files import ensure_private_dir, fsync_directory, fsync_file, move_atomic
from .queries.activities import RESTORE_GAPS_KEY
from .sqlite_store import SQLITE_MAGIC, migrate, schema_version, verify_triggers
from .store import utc_now

log = structlog.get_logger("taskd.backup")


@dataclass(frozen=True)
class BackupResult:
    path: Path
    board_id: str
    revision: int
    bytes: int
    seconds: float
    blobs: int = 0


#: The table of a backup file that carries the attachment bytes; never part of a live board.
BLOBS_TABLE = "backup_blobs"


class BlobMissing(TaskloomError):
    """An attachment row names a blob the attachments directory does not hold (or holds altered)."""

    def __init__(self, sha256: str, path: Path, problem: str) -> None:
        super().__init__(
            "CONFLICT",
            f"the blob {sha256} ({path}) {problem}: the backup cannot hold that attachment's bytes",
            details={"sha256": sha256, "path": str(path)},
            hint="no backup was written; restore the blob into the attachments directory, or remove the "
                 "attachments that name it, and back up again",
        )


def _copy_blobs(copy: sqlite3.Connection, attachments_dir: Path) -> int:
    """Store every blob the copy's attachment rows name inside the copy; returns how many."""
    copy.execute(f"CREATE TABLE {BLOBS_TABLE} (sha256 TEXT PRIMARY KEY, content BLOB NOT NULL)")
    digests = [row[0] for row in copy.execute("SELECT DISTINCT sha256 FROM attachments ORDER BY sha256")]
    copy.execute("BEGIN")
    for sha256 in digests:
        path = blob_path(attachments_dir, sha256)
        try:
            content = path.read_bytes()
        except FileNotFoundError:
            raise BlobMissing(sha256, path, "is missing") from None
        if hashlib.sha256(content).hexdigest() != sha256:
            raise BlobMissing(sha256, path, "does not match its digest")
        copy.execute(f"INSERT INTO {BLOBS_TABLE} (sha256, content) VALUES (?, ?)", (sha256, content))
    copy.execute("COMMIT")
    return len(digests)


def check_path_text(path_text: str) -> Path:
    """The text alone: absolute, at most ``limits.PATH_MAX_CHARS`` characters."""
    if len(path_text) > limits.PATH_MAX_CHARS:
        raise validation(f"the backup path is longer than {limits.PATH_MAX_CHARS} characters", field="path")
    path = Path(path_text)
    if not path.is_absolute():
        raise validation("the backup path must be absolute (the board's working directory is not yours)",
                         field="path", value=path_text)
    return path


def check_target(path_text: str) -> Path:
    """An absolute path to a new file in an existing directory; anything else is 400 and writes nothing."""
    path = check_path_text(path_text)
    if path.is_dir():
        raise validation("the backup path is a directory; name the file to write", field="path", value=path_text)
    if path.exists() or path.is_symlink():
        raise TaskloomError("CONFLICT", f"{path} exists; a backup never overwrites a file", details={"path": path_text},
                            hint="choose a new file name, or remove the old backup first")
    if not path.parent.is_dir():
        raise validation(f"the directory {path.parent} does not exist", field="path", value=path_text)
    return path


def backup(database: Path, target: Path, attachments_dir: Path) -> BackupResult:
    """Copy ``database`` and the blobs it names to ``target`` (checked by :func:`check_target`)
    while writers go on. The caller holds ``pin_blobs(attachments_dir)`` from before the snapshot."""
    started = time.monotonic()
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        source = sqlite3.connect(database, isolation_level=None)
        try:
            copy = sqlite3.connect(temp, isolation_level=None)
            try:
                # The copy is fsynced once, whole, before it is renamed into place: SQLite's own
                # syncs of it would only add flushes the board's WAL fsyncs queue behind.
                copy.execute("PRAGMA synchronous = OFF")
                # One step (pages=-1): one read snapshot, never restarted by a concurrent write.
                source.backup(copy, pages=-1)
                # A backup is one self-contained file: no -wal beside it to lose on the way.
                copy.execute("PRAGMA journal_mode = DELETE")
                blobs = _copy_blobs(copy, attachments_dir)
                # quick_check reads every page and record (a torn or short copy fails it) at half
                # the CPU of integrity_check, which also cross-checks every index: CPU the board's
                # writers share with the backup (tests run the full check on the copy).
                checked = copy.execute("PRAGMA quick_check").fetchone()[0]
                if checked != "ok":
                    raise TaskloomError("STORE_UNAVAILABLE", f"the copy failed its check: {checked}",
                                        details={"retry_after": 1})
                board_id = copy.execute("SELECT value FROM board_meta WHERE key = 'board_id'").fetchone()[0]
                revision = copy.execute("SELECT revision FROM global_revision WHERE singleton = 1").fetchone()[0]
            finally:
                copy.close()
        finally:
            source.close()
        fsync_file(temp)
        move_atomic(temp, target)
    except BaseException as exc:
        for leftover in (temp, Path(f"{temp}-journal")):
            # A temp file a read-only directory never let us create cannot be unlinked either:
            # that failure must not hide the first one.
            with contextlib.suppress(OSError):
                leftover.unlink()
        unwritable = _target_unwritable(target, exc)
        if unwritable is not None:
            raise unwritable from exc
        raise
    return BackupResult(target, board_id, revision, target.stat().st_size, time.monotonic() - started, blobs)


#: What SQLite says (besides SQLITE_FULL) and the errnos that mean the target's directory cannot be
#: written, and the errnos of a full disk.
_SQLITE_UNWRITABLE: Final = frozenset({sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM})
_FULL_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT})
_UNWRITABLE_ERRNOS: Final = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def _target_unwritable(target: Path, exc: BaseException) -> TaskloomError | None:
    """The copy could not be written where it was asked for: a full disk (503, free space and
    retry) or a directory the board cannot write (400), named with its directory; None for any
    other failure. The board's own file is only read by a backup, so these are the target's."""
    if isinstance(exc, sqlite3.Error):
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        full, unwritable, reason = code == sqlite3.SQLITE_FULL, code in _SQLITE_UNWRITABLE, str(exc)
    elif isinstance(exc, OSError):
        full, unwritable, reason = exc.errno in _FULL_ERRNOS, exc.errno in _UNWRITABLE_ERRNOS, exc.strerror or str(exc)
    else:
        return None
    directory = target.parent
    if full:
        return TaskloomError("STORE_UNAVAILABLE", f"the disk of {directory} is full ({reason}); nothing was written",
                             details={"path": str(target), "retry_after": 1},
                             hint="free space there, or back up into another directory")
    if unwritable:
        read_only = isinstance(exc, OSError) and exc.errno == errno.EROFS or _read_only(directory)
        why = "is on a read-only file system" if read_only else f"cannot be written by the board ({reason})"
        return validation(f"the directory {directory} {why}; nothing was written", field="path", value=str(target))
    return None


def _read_only(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


class RestoreRefused(RuntimeError):
    """The file is not a board backup this Taskloom can install; nothing was changed."""


@dataclass(frozen=True)
class RestoreResult:
    board_id: str
    previous_board_id: str
    revision: int
    replaced: Path | None
    #: Blobs the backup carried (written, or already in the attachments directory); None for a
    #: backup from before backups carried blobs (its attachments/ must be copied by hand).
    blobs: int | None = None
    #: The head of the database replaced (its revisions past ``revision`` are the lost future);
    #: None when there was none, or it could not be read.
    replaced_head: int | None = None


def _carried_blobs(conn: sqlite3.Connection, source: Path) -> int | None:
    """Check every blob ``source`` carries against its digest, and that each attachment row finds
    its blob; returns how many it carries (None: the backup predates ``backup_blobs``)."""
    # Whatever the backup's age: an attachment's digest names its file, so one that is not a
    # digest (a damaged or crafted backup: an absolute path) would name a file outside the board.
    for attachment_id, sha256 in conn.execute("SELECT id, sha256 FROM attachments"):
        if not isinstance(sha256, str) or not DIGEST.fullmatch(sha256):
            raise RestoreRefused(f"{source} names attachment {attachment_id} by {str(sha256)[:80]!r}, not a SHA-256 digest")
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (BLOBS_TABLE,)).fetchone() is None:
        return None
    count = 0
    for sha256, content in conn.execute(f"SELECT sha256, content FROM {BLOBS_TABLE}"):
        if not isinstance(content, bytes) or hashlib.sha256(content).hexdigest() != sha256:
            raise RestoreRefused(f"{source} carries a damaged blob: its bytes do not match the digest {sha256!r}")
        count += 1
    missing = conn.execute(
        f"SELECT a.id, a.sha256 FROM attachments a LEFT JOIN {BLOBS_TABLE} b ON b.sha256 = a.sha256"
        " WHERE b.sha256 IS NULL ORDER BY a.id LIMIT 1"
    ).fetchone()
    if missing is not None:
        raise RestoreRefused(f"{source} lacks the blob {missing[1]} of attachment {missing[0]}")
    return count


def _write_blobs(source: Path, attachments_dir: Path) -> list[Path]:
    """Write the checked blobs of ``source`` into ``attachments_dir``; returns the files created.
    A blob already there is kept when it holds its digest's bytes, and replaced by the backup's
    when it does not (bit rot: the very case a restore is for)."""
    ensure_private_dir(attachments_dir)
    created: list[Path] = []
    conn = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        try:
            for sha256, content in conn.execute(f"SELECT sha256, content FROM {BLOBS_TABLE}"):
                path = blob_path(attachments_dir, sha256)
                there = path.is_file()
                if there and blob_holds(path, sha256):
                    continue
                if hashlib.sha256(content).hexdigest() != sha256:  # the file changed since it was checked
                    raise RestoreRefused(f"{source} changed while it was restored (blob {sha256})")
                write_blob(attachments_dir, content, sha256)
                if not there:
                    created.append(path)
        except BaseException:
            for path in created:
                path.unlink(missing_ok=True)
            raise
    finally:
        conn.close()
    return created


def _check_backup(source: Path) -> int | None:
    try:
        with open(source, "rb") as handle:
            magic = handle.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise RestoreRefused(f"cannot read {source}: {exc.strerror}") from None
    if magic != SQLITE_MAGIC:
        raise RestoreRefused(f"{source} is not an SQLite database")
    conn = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > schema_version():
            # Named here, before anything is copied: the copy's temp file would be all a later refusal names.
            raise RestoreRefused(
                f"{source} is a backup of schema version {version}, newer than this Taskloom understands "
                f"({schema_version()}); restore it with that Taskloom or a newer one"
            )
        checked = conn.execute("PRAGMA integrity_check").fetchone()[0]
        if checked != "ok":
            raise RestoreRefused(f"{source} fails its integrity check: {checked}")
        try:
            conn.execute("SELECT value FROM board_meta WHERE key = 'board_id'").fetchone()[0]
        except (sqlite3.Error, TypeError):
            raise RestoreRefused(f"{source} is not a Taskloom board (no board_id)") from None
        return _carried_blobs(conn, source)
    finally:
        conn.close()


def restore(source: Path, data_dir: Path) -> RestoreResult:
    """Install ``source`` as ``data_dir``'s database with a new epoch. The board must be stopped
    (the caller holds the data directory's lock). The file it replaces is kept beside it."""
    source = source.absolute()
    blobs = _check_backup(source)
    database = data_dir / "board.sqlite"
    replaced_head = _head_of(database)
    incoming = data_dir / f".board.sqlite.restore-{secrets.token_hex(4)}.tmp"
    created: list[Path] = []
    replaced: Path | None = None
    archive_kept: Path | None = None
    installing = False
    try:
        reader = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        try:
            copy = sqlite3.connect(incoming, isolation_level=None)
            try:
                reader.backup(copy, pages=-1)
            finally:
                copy.close()
        finally:
            reader.close()
        if blobs is not None:
            _drop_blobs(incoming)
        migrate(incoming)  # a backup from an older schema is brought up to this one first
        verify_triggers(incoming)
        conn = sqlite3.connect(incoming, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            previous = conn.execute("SELECT value FROM board_meta WHERE key = 'board_id'").fetchone()[0]
            board_id = f"brd_{secrets.token_hex(8)}"
            for key, value in (("board_id", board_id), ("previous_board_id", previous),
                               ("restored_at", utc_now()), ("restored_from", str(source))):
                conn.execute(
                    "INSERT INTO board_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (key, value),
                )
            revision = conn.execute("SELECT revision FROM global_revision WHERE singleton = 1").fetchone()[0]
            if replaced_head is not None and replaced_head > revision:
                _skip_lost_future(conn, revision, replaced_head)
            conn.execute("COMMIT")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        for suffix in ("-wal", "-shm"):
            Path(f"{incoming}{suffix}").unlink(missing_ok=True)
        fsync_file(incoming)
        if blobs is not None:
            # Last before the database: every check has passed, and the blobs a board names must
            # be on disk before the board is.
            created = _write_blobs(source, data_dir / "attachments")
        stamp = utc_now().replace(":", "").replace(".", "")
        # ``board.sqlite`` names the old database until the restored one is renamed over it in
        # one step: a restore killed at any moment leaves the old board or the new one, never a
        # data directory without a database (where the next start would make an empty board).
        replaced = _set_aside(database, stamp)
        archive_kept = _set_aside_archive(data_dir, stamp)
        installing = True
        move_atomic(incoming, database)
    except BaseException:
        if installing and not incoming.exists():
            raise  # installed (only the directory's fsync failed): its blobs and kept files stay
        for leftover in (incoming, Path(f"{incoming}-wal"), Path(f"{incoming}-shm"), *created):
            leftover.unlink(missing_ok=True)
        if replaced is not None:
            replaced.unlink(missing_ok=True)  # the old database was not replaced: its second name goes
        if archive_kept is not None:
            move_atomic(archive_kept, data_dir / ARCHIVE_DIR)  # and its archive comes back
        raise
    return RestoreResult(board_id, previous, revision, replaced, blobs, replaced_head)


def _head_of(database: Path) -> int | None:
    """The head revision of the database a restore replaces (its WAL read too); None when there is
    none, or it is too damaged to say (the new ``board_id`` is then all that tells followers)."""
    if not database.exists():
        return None
    try:
        conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT revision FROM global_revision WHERE singleton = 1").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        # Damaged, or no board at all: the restore is for that case too. (A busy file stops the
        # restore when it is set aside, before anything is installed.)
        log.warning("restore_cannot_read_replaced_head", database=str(database), error=str(exc))
        return None
    return int(row[0]) if row is not None else None


def _skip_lost_future(conn: sqlite3.Connection, restored: int, replaced_head: int) -> None:
    """Move the counter past the lost future ``(restored, replaced_head]`` (to ``replaced_head + 1``)
    and record it as a gap.

    New rows then never carry a revision a client saw in the history the restore replaced, and a
    cursor inside the gap is refused (``activities.check_not_expired``): the client read state
    that is no longer the board's, and must rescan. Gaps the backup itself recorded stay (a
    cursor from an earlier lost future is no better now).
    """
    # Past H, not to it: a follower starts from the head (/meta), which must not be inside the gap.
    conn.execute("UPDATE global_revision SET revision = ? WHERE singleton = 1", (replaced_head + 1,))
    row = conn.execute("SELECT value FROM board_meta WHERE key = ?", (RESTORE_GAPS_KEY,)).fetchone()
    gaps = json.loads(row[0]) if row is not None else []
    gaps.append([restored, replaced_head])
    conn.execute(
        "INSERT INTO board_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (RESTORE_GAPS_KEY, json.dumps(gaps)),
    )


def _drop_blobs(incoming: Path) -> None:
    """The installed file gets the live schema: no ``backup_blobs``, and no free pages its bytes
    left behind (VACUUM rewrites the file without them)."""
    conn = sqlite3.connect(incoming, isolation_level=None)
    try:
        conn.execute(f"DROP TABLE {BLOBS_TABLE}")
        conn.execute("VACUUM")
    finally:
        conn.close()


def _set_aside_archive(data_dir: Path, stamp: str) -> Path | None:
    """Retention's archive files go with the history they were cut from, beside the database
    kept (``archive.replaced-<time>``): named only by revision range, they would be taken for a
    killed compaction's leftovers by the restored board's first compaction, which removes those."""
    archive = data_dir / ARCHIVE_DIR
    if not archive.is_dir():
        return None
    kept = data_dir / f"{ARCHIVE_DIR}.replaced-{stamp}"
    move_atomic(archive, kept)
    return kept


def _set_aside(database: Path, stamp: str) -> Path | None:
    """Keep the database being replaced as ``board.sqlite.replaced-<time>``, its WAL folded in
    first: a stale ``-wal`` left beside the restored file would be replayed into it.

    The kept name is a second name for the same file (a hard link; a copy where the file system
    has none): ``board.sqlite`` stays the old database until the restore renames the new one
    over it, so no moment leaves the data directory without one."""
    if not database.exists():
        for suffix in ("-wal", "-shm"):
            Path(f"{database}{suffix}").unlink(missing_ok=True)
        return None
    kept = database.with_name(f"board.sqlite.replaced-{stamp}")
    try:
        conn = sqlite3.connect(database, isolation_level=None)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA journal_mode = DELETE")
        finally:
            conn.close()
    except sqlite3.OperationalError:
        raise  # busy, locked, unreadable: not damage; the restore stops with nothing changed
    except sqlite3.DatabaseError as exc:
        # Damaged (torn, overwritten): the very case a restore is for. Nothing can be folded in;
        # the file and its WAL are kept as they are, side by side, for whoever wants to look.
        log.warning("restore_replaces_damaged_database", database=str(database), error=str(exc), kept=str(kept))
        for suffix in ("-wal", "-shm"):
            beside = Path(f"{database}{suffix}")
            if beside.exists():
                move_atomic(beside, Path(f"{kept}{suffix}"))
    else:
        for suffix in ("-wal", "-shm"):
            Path(f"{database}{suffix}").unlink(missing_ok=True)
    _second_name(database, kept)
    return kept


def _second_name(database: Path, kept: Path) -> None:
    """``kept`` names ``database``'s bytes too, durably, while ``database`` still names them."""
    try:
        os.link(database, kept)
    except OSError:
        # A file system without hard links: a whole copy, flushed before it counts as kept.
        shutil.copyfile(database, kept)
        fsync_file(kept)
    fsync_directory(database.parent)
