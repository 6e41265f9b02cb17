"""Attachments: content-addressed blobs on disk, metadata rows in the database (SPEC §4.4).

Bytes live at ``<data_dir>/attachments/<sha256[:2]>/<sha256>``. A blob is written (temp file in
the same directory, fsync, rename) *before* the transaction that records its row: a blob left by
a failed transaction is harmless, a row without its blob is not. Blobs are shared by every row
with the same content, so one is unlinked only when no row names it any more, and that check runs
on the writer thread (``purge_blob``), serialised with the inserts that could revive it.

A blob that cannot be written (disk full, quota, I/O error) is ``503 STORE_UNAVAILABLE`` and leaves
nothing behind: the temp file is removed by ``write_atomic`` and the directories this write
created are removed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import structlog

from shared import domain, events, limits
from shared.errors import TaskloomError, validation

from ..dialect import Connection, dialect_of
from ..files import write_atomic
from ..queries.attachments import attachment_to_dict, get_attachment, require_attachment
from ..queries.tasks import require_task
from ..store import SYSTEM_ACTOR, Tx, WriterStore, disk_refused
from .common import load_task, new_id, refuse_archived

log = structlog.get_logger("taskd.attachments")

FILENAME_MAX_CHARS = limits.FILENAME_MAX_CHARS
CONTENT_TYPE_MAX_CHARS = limits.CONTENT_TYPE_MAX_CHARS
DEFAULT_CONTENT_TYPE = "application/octet-stream"
# RFC 9110 §8.3.1: type "/" subtype, both tokens, then optional parameters.
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_CONTENT_TYPE = re.compile(rf"^{_TOKEN}/{_TOKEN}(\s*;.*)?$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# -- validation ---------------------------------------------------------------------------------


def check_filename(name: str) -> str:
    """A plain file name: no directory part, no '..', no control characters, 1–255 characters."""
    if (
        not name.strip()
        or len(name) > FILENAME_MAX_CHARS
        or "/" in name
        or "\\" in name
        or ".." in name
        or name in (".", "..")
        or _CONTROL.search(name)
    ):
        raise validation(
            f"filename must be a plain name of 1–{FILENAME_MAX_CHARS} characters without '/', '\\\\' or '..'",
            filename=name[:FILENAME_MAX_CHARS + 1],
        )
    return name


def check_content_type(value: str | None) -> str:
    if value is None or not value.strip():
        return DEFAULT_CONTENT_TYPE
    value = value.strip()
    if not value.isascii():
        # A media type is ASCII (RFC 9110 §8.3.1); bytes that are not UTF-8 reach us as surrogates,
        # which no row may hold and no answer can echo.
        raise validation("Content-Type must be ASCII text of the form type/subtype")
    if len(value) > CONTENT_TYPE_MAX_CHARS or _CONTROL.search(value) or not _CONTENT_TYPE.match(value):
        raise validation("Content-Type must look like type/subtype", content_type=value[:CONTENT_TYPE_MAX_CHARS + 1])
    return value


def check_size(data: bytes) -> None:
    if len(data) > domain.ATTACHMENT_MAX_BYTES:
        raise TaskloomError(
            "PAYLOAD_TOO_LARGE",
            f"an attachment is at most {domain.ATTACHMENT_MAX_BYTES} bytes",
            details={"limit": domain.ATTACHMENT_MAX_BYTES, "size": len(data)},
        )


# -- blobs (plain file I/O; callers run these off the event loop) -------------------------------


#: What an attachment's ``sha256`` is: the digest names its file under the attachments directory.
DIGEST: Final = re.compile(r"[0-9a-f]{64}")


def blob_path(root: Path, sha256: str) -> Path:
    """The file of the blob ``sha256`` under ``root``. Only a digest names one: any other text
    (a damaged or crafted row, a path) is refused, so no file outside ``root`` is ever read,
    written or removed for an attachment."""
    if not DIGEST.fullmatch(sha256):
        raise ValueError(f"not a SHA-256 digest, so no blob: {sha256[:80]!r}")
    return root / sha256[:2] / sha256


#: Blob writes run in executor threads; one at a time, so a failed write removing the directory
#: it created cannot pull it from under another write that is about to use it.
_BLOB_WRITES = threading.Lock()


def _missing_directories(directory: Path) -> list[Path]:
    """``directory`` and its ancestors that do not exist yet, outermost first."""
    missing: list[Path] = []
    while not directory.exists() and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    return missing[::-1]


def store_unavailable(exc: OSError) -> TaskloomError:
    return disk_refused(exc, "the board could not store the attachment",
                        hint="nothing was written; free space on the board's disk (its data directory) and retry")


def blob_holds(path: Path, sha256: str) -> bool:
    """Whether the file at ``path`` is there and holds the bytes of digest ``sha256``."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as file:
            while chunk := file.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return False
    return digest.hexdigest() == sha256


def write_blob(root: Path, data: bytes, sha256: str | None = None) -> str:
    """Store ``data`` under its digest (atomically); returns the digest. A file already there is
    kept when it holds those bytes, and replaced when it does not (a leftover, a damaged copy):
    content-addressed means the name promises the bytes."""
    sha256 = sha256 or hashlib.sha256(data).hexdigest()
    path = blob_path(root, sha256)
    if path.is_file():
        if blob_holds(path, sha256):
            return sha256
        log.warning("blob_replaced", sha256=sha256, reason="the file did not hold its digest's bytes")
    with _BLOB_WRITES:
        created = _missing_directories(path.parent)
        try:
            write_atomic(path, data)
        except OSError as exc:
            for directory in reversed(created):
                with contextlib.suppress(OSError):  # not empty: another blob lives there now
                    directory.rmdir()
            raise store_unavailable(exc) from exc
    return sha256


class BlobPin:
    """While a backup copies blobs, none it may name is unlinked; what a purge skipped meanwhile
    is listed in ``deferred`` once the last pin on that directory is released."""

    def __init__(self) -> None:
        self.deferred: list[str] = []


#: Pinned attachment directories: how many backups hold each, and the purges they held back.
#: A purge checks the pins and unlinks under this lock, so a blob is either gone before a
#: backup's snapshot (and no row in it names the blob) or still on disk until the backup ends.
_PINS_LOCK = threading.Lock()
_PINS: dict[Path, tuple[int, set[str]]] = {}


@contextlib.contextmanager
def pin_blobs(root: Path) -> Iterator[BlobPin]:
    """Hold back every blob purge under ``root`` for the block; the caller re-issues the deferred
    purges on the writer thread afterwards (a left-over blob is harmless, a missing one is not)."""
    pin = BlobPin()
    with _PINS_LOCK:
        count, skipped = _PINS.get(root, (0, set()))
        _PINS[root] = (count + 1, skipped)
    try:
        yield pin
    finally:
        with _PINS_LOCK:
            count, skipped = _PINS.pop(root)
            if count > 1:
                _PINS[root] = (count - 1, skipped)
            else:
                pin.deferred = sorted(skipped)


@contextlib.asynccontextmanager
async def blobs_held(store: WriterStore, root: Path) -> AsyncIterator[None]:
    """``pin_blobs`` for a reader of a snapshot that names blobs (a backup, a state export),
    from before its snapshot until it ends; the purges held back meanwhile run afterwards, on the
    writer thread as always."""
    pin: BlobPin | None = None
    try:
        with pin_blobs(root) as pin:
            yield
    finally:
        await purge_blobs(store, pin.deferred if pin is not None else (), root)


async def purge_blobs(store: WriterStore, sha256s: Iterable[str], root: Path) -> None:
    """``purge_blob`` for each, on the writer thread as always. One that fails (the store went
    away) leaves its file, which no row names, and the others still go: a leftover blob is
    harmless and a later write of the same bytes reuses it (``blob_holds``)."""
    for sha256 in sha256s:
        try:
            await store.command(purge_blob, SYSTEM_ACTOR, sha256, root)
        except Exception as exc:  # noqa: BLE001 - best effort: the caller's own outcome stands
            log.warning("blob_purge_failed", sha256=sha256, error=type(exc).__name__)


def _unlink_unless_pinned(root: Path, sha256: str) -> None:
    with _PINS_LOCK:
        pinned = _PINS.get(root)
        if pinned is not None:
            pinned[1].add(sha256)
            return
        blob_path(root, sha256).unlink(missing_ok=True)


# -- reads --------------------------------------------------------------------------------------


def check_attachable(conn: Connection, ref: str) -> str:
    """Refuse an unknown or archived task before any bytes reach the disk; returns the task id."""
    task = require_task(conn, ref)
    refuse_archived(task)
    task_id: str = task["id"]
    return task_id


def check_replaceable(conn: Connection, attachment_id: str) -> dict[str, Any]:
    """Refuse an unknown attachment or one on an archived task before any bytes reach the disk."""
    row = require_attachment(conn, attachment_id)
    refuse_archived(require_task(conn, row["task_id"]))
    return attachment_to_dict(row)


#: Media types a browser runs or applies when a page names their URL (``<script src>``,
#: ``<link rel=stylesheet>``): WHATWG's JavaScript MIME type essences, and CSS.
_PAGE_CODE_TYPES: Final = frozenset({
    "application/ecmascript", "application/javascript", "application/x-ecmascript", "application/x-javascript",
    "text/ecmascript", "text/javascript", "text/javascript1.0", "text/javascript1.1", "text/javascript1.2",
    "text/javascript1.3", "text/javascript1.4", "text/javascript1.5", "text/jscript", "text/livescript",
    "text/x-ecmascript", "text/x-javascript", "text/css",
})
#: What such an attachment is served as: ``nosniff`` forbids it as a script or a stylesheet.
OPAQUE_CONTENT_TYPE: Final = "application/octet-stream"


def served_content_type(recorded: str) -> str:
    """The Content-Type a download answers with. Attachments come from the page's own origin,
    which its policy trusts for scripts and styles (``script-src 'self'``): one recorded as
    JavaScript or CSS would be code the page could be made to load, so it goes out opaque (the
    recorded type is kept and listed as it was given)."""
    essence = recorded.split(";", 1)[0].strip().lower()
    return OPAQUE_CONTENT_TYPE if essence in _PAGE_CODE_TYPES else recorded


def content_disposition(filename: str) -> str:
    """RFC 6266: an ASCII fallback plus the exact name as RFC 8187 ``filename*``."""
    fallback = "".join(ch if 32 <= ord(ch) < 127 and ch not in '"\\' else "_" for ch in filename)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


# -- commands -----------------------------------------------------------------------------------


def ensure_blob(tx: Tx, root: Path, sha256: str, data: bytes) -> None:
    """The bytes of a row this transaction writes are there when it commits, on either engine."""
    if blobs_in_database(tx):
        # Every board process serves the same blobs: the bytes are a row, written with the row naming them.
        tx.execute(
            "INSERT INTO attachment_blobs (sha256, content, created_at) VALUES (?, ?, ?) ON CONFLICT (sha256) DO NOTHING",
            (sha256, data, tx.now),
        )
        return
    # Normally written before the transaction; only a purge racing this upload removes it, and
    # both run on the writer thread, so re-checking here closes the race.
    if not blob_path(root, sha256).is_file():
        write_blob(root, data, sha256)


def blobs_in_database(tx: Tx) -> bool:
    """A database several board processes share keeps the attachment bytes (PostgreSQL); else files."""
    return dialect_of(tx.conn).name == "postgresql"


def add_attachment(
    tx: Tx, ref: str, *, filename: str, content_type: str, data: bytes, sha256: str, root: Path
) -> dict[str, Any]:
    task = load_task(tx, ref)
    refuse_archived(task)
    check_filename(filename)
    check_size(data)
    ensure_blob(tx, root, sha256, data)
    attachment_id = new_id()
    tx.execute(
        "INSERT INTO attachments (id, task_id, filename, content_type, size, sha256, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (attachment_id, task["id"], filename, content_type, len(data), sha256, tx.now, tx.now),
    )
    tx.record(
        events.ATTACHMENT_ADDED,
        events.attachment_added(attachment_id=attachment_id, filename=filename, content_type=content_type, size=len(data)),
        task_id=task["id"],
        project_id=task["project_id"],
    )
    return get_attachment(tx.conn, attachment_id)


def replace_attachment(
    tx: Tx,
    attachment_id: str,
    *,
    data: bytes,
    sha256: str,
    root: Path,
    content_type: str | None = None,
    filename: str | None = None,
) -> tuple[dict[str, Any], str | None]:
    """New content (and optionally type or name); returns (attachment, digest no longer used here)."""
    row = require_attachment(tx.conn, attachment_id)
    attachment_id = row["id"]  # a prefix names the full id from here on
    task = require_task(tx.conn, row["task_id"])
    refuse_archived(task)
    check_size(data)
    filename = check_filename(filename) if filename is not None else row["filename"]
    content_type = content_type or row["content_type"]
    if (sha256, filename, content_type) == (row["sha256"], row["filename"], row["content_type"]):
        return attachment_to_dict(row), None  # the same bytes again are not a change
    ensure_blob(tx, root, sha256, data)
    tx.execute(
        "UPDATE attachments SET filename = ?, content_type = ?, size = ?, sha256 = ?, updated_at = ? WHERE id = ?",
        (filename, content_type, len(data), sha256, tx.now, attachment_id),
    )
    tx.record(
        events.ATTACHMENT_UPDATED,
        events.attachment_updated(attachment_id=attachment_id, filename=filename, content_type=content_type, size=len(data)),
        task_id=task["id"],
        project_id=task["project_id"],
    )
    released = row["sha256"] if row["sha256"] != sha256 else None
    return get_attachment(tx.conn, attachment_id), released


def remove_attachment(tx: Tx, attachment_id: str) -> dict[str, Any]:
    row = require_attachment(tx.conn, attachment_id)
    attachment_id = row["id"]  # a prefix names the full id from here on
    task = require_task(tx.conn, row["task_id"])
    refuse_archived(task)
    tx.execute("DELETE FROM attachments WHERE id = ?", (attachment_id,))
    tx.record(
        events.ATTACHMENT_REMOVED,
        events.attachment_removed(
            attachment_id=attachment_id, filename=row["filename"], content_type=row["content_type"], size=row["size"]
        ),
        task_id=task["id"],
        project_id=task["project_id"],
    )
    return attachment_to_dict(row)


def purge_blob(tx: Tx, sha256: str, root: Path) -> bool:
    """Unlink a blob no row names any more. Writes no row: the removal was already recorded."""
    if tx.one("SELECT 1 FROM attachments WHERE sha256 = ? LIMIT 1", (sha256,)) is not None:
        return False
    if blobs_in_database(tx):
        tx.execute("DELETE FROM attachment_blobs WHERE sha256 = ?", (sha256,))
        return True
    _unlink_unless_pinned(root, sha256)
    return True
