"""``taskctl attachment``: upload, download, list, replace and remove (SPEC §4.4, ≤ 8 MiB each)."""

from __future__ import annotations

import contextlib
import os
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import click

from shared.limits import MAX_ATTACHMENT_BYTES

from .command import REF, Invocation, command, current, drop_none
from .errors import TaskctlError
from .http import Reply, segment
from .output import Column
from .render import short_time

MAX_BYTES = MAX_ATTACHMENT_BYTES
ATTACHMENT_COLUMNS = [
    Column("ID", lambda a: a.get("id")),
    Column("SIZE", lambda a: human_size(a.get("size"))),
    Column("TYPE", lambda a: a.get("content_type")),
    Column("UPDATED", lambda a: short_time(a.get("updated_at"))),
    Column("FILENAME", lambda a: a.get("filename"), elastic=True),
]


def human_size(size: Any) -> str:
    if not isinstance(size, int):
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024 or unit == "MiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


@click.group()
def attachment() -> None:
    """Upload, download, list and remove a task's attachments (at most 8 MiB each)."""


def _read_upload(path: str) -> bytes:
    source = Path(path)
    size = source.stat().st_size
    if size > MAX_BYTES:
        raise TaskctlError("PAYLOAD_TOO_LARGE", f"{path} is {human_size(size)}; an attachment is at most 8 MiB",
                           details={"size": size, "limit": MAX_BYTES})
    return source.read_bytes()


def _content_type(path: str, given: str | None) -> str:
    if given:
        return given
    import mimetypes

    guessed, _ = mimetypes.guess_type(path)
    return guessed or "application/octet-stream"


def _send(inv: Invocation, method: str, path: str, data: bytes, content_type: str, query: dict[str, Any], label: str) -> Any:
    """Send the bytes, with a progress bar on a terminal."""
    http = inv.http()
    show_bar = not inv.out.json and sys.stderr.isatty() and len(data) > 0
    headers = {"Content-Type": content_type}
    if not show_bar:
        return http.call(method, path, data=data, query=query, headers=headers)
    with click.progressbar(length=len(data), label=label, file=sys.stderr, show_percent=True) as bar:
        return http.call(method, path, data=data, query=query, headers=headers, progress=bar.update)


@command(attachment, "upload")
@click.argument("ref", type=REF)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option("--name", help="The attachment's file name (default: FILE's name).")
@click.option("--content-type", help="Default: guessed from the name.")
def upload(ref: str, file: str, name: str | None, content_type: str | None) -> None:
    """Attach FILE to a task."""
    inv = current()
    filename = name or os.path.basename(file)
    data = _read_upload(file)
    added = _send(inv, "POST", f"/api/v1/tasks/{segment(ref)}/attachments", data, _content_type(filename, content_type),
                  {"filename": filename}, f"uploading {filename}")
    inv.out.result(added, lambda a: inv.out.echo(f"attached {a['filename']} ({human_size(a['size'])}) as {a['id']}"))


@command(attachment, "replace")
@click.argument("attachment_id", metavar="ATTACHMENT_ID")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option("--name", help="Rename it at the same time.")
@click.option("--content-type", help="Default: guessed from the name.")
def replace(attachment_id: str, file: str, name: str | None, content_type: str | None) -> None:
    """Replace an attachment's content with FILE."""
    inv = current()
    data = _read_upload(file)
    updated = _send(inv, "PUT", f"/api/v1/attachments/{segment(attachment_id)}", data,
                    _content_type(name or file, content_type), drop_none({"filename": name}), f"uploading {file}")
    inv.out.result(updated, lambda a: inv.out.echo(f"replaced {a['id']} with {a['filename']} ({human_size(a['size'])})"))


def filename_from(reply: Reply, fallback: str) -> str:
    """The name in Content-Disposition (RFC 6266 ``filename*`` first), reduced to a base name."""
    header = reply.headers.get("content-disposition", "")
    name = None
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key.lower() == "filename*" and "''" in value:
            name = urllib.parse.unquote(value.split("''", 1)[1])
            break
        if key.lower() == "filename" and name is None:
            name = value.strip('"')
    base = os.path.basename(name or "")
    return base if base not in ("", ".", "..") else fallback


@command(attachment, "download")
@click.argument("attachment_id", metavar="ATTACHMENT_ID")
@click.option("-o", "--out", metavar="FILE|-", help="Where to write it (- for stdout; default: its name, here).")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def download(attachment_id: str, out: str | None, force: bool) -> None:
    """Download an attachment's bytes."""
    inv = current()
    if out == "-" and inv.out.json:
        raise click.UsageError("--json and --out - both want stdout; pick one")
    http = inv.http()
    reply = http.request_raw("GET", f"/api/v1/attachments/{segment(attachment_id)}", headers={"Accept": "*/*"})
    if reply.status >= 400:
        raise http.refusal(reply)
    data = reply.body if isinstance(reply.body, bytes) else str(reply.body).encode()
    if out == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    target = Path(out or filename_from(reply, attachment_id))
    save(target, data, force=force)
    inv.out.result({"id": attachment_id, "path": str(target), "size": len(data)},
                   lambda d: inv.out.echo(f"wrote {d['path']} ({human_size(d['size'])})"))


def save(target: Path, data: bytes, *, force: bool) -> None:
    """Write ``data`` to ``target`` owner-only, through the exports' atomic writer, never through a link.

    The name may be in a directory others can write, where a symlink planted beforehand would
    send a plain ``open`` to a file of their choosing: the writer renames its temp file over the
    name, so a link there is replaced, not followed. Without ``force`` the name is first claimed
    with ``O_CREAT | O_EXCL`` (which fails on any existing entry, a dangling link included), so an
    existing file is never replaced.
    """
    from services.hub.files import atomic_writer  # the owner-only atomic writer taskctl's exports use

    claimed = False
    try:
        if not force:
            try:
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
            except FileExistsError:
                raise TaskctlError("FILE_EXISTS", f"{target} exists", details={"path": str(target)},
                                   hint="pass --force to overwrite, or --out another path") from None
            claimed = True
        with atomic_writer(target) as handle:
            handle.write(data)
    except OSError as exc:
        if claimed:
            with contextlib.suppress(OSError):
                target.unlink(missing_ok=True)  # the empty name we claimed
        raise TaskctlError("VALIDATION_FAILED", f"cannot write {target}: {(exc.strerror or str(exc)).lower()}",
                           details={"path": str(target)}, hint="choose another --out") from None


@command(attachment, "list")
@click.argument("ref", type=REF)
def list_(ref: str) -> None:
    """List a task's attachments."""
    inv = current()
    page = inv.call("GET", f"/tasks/{segment(ref)}/attachments")
    inv.out.result(page, lambda p: inv.out.table(p["items"], ATTACHMENT_COLUMNS, empty="no attachments"))


@command(attachment, "remove")
@click.argument("attachment_id", metavar="ATTACHMENT_ID")
def remove(attachment_id: str) -> None:
    """Remove an attachment."""
    inv = current()
    removed = inv.call("DELETE", f"/attachments/{segment(attachment_id)}")
    inv.out.result(removed, lambda a: inv.out.echo(f"removed {a['filename']} ({a['id']})"))
