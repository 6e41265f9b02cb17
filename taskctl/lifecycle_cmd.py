"""The board's life over years: ``export state``, ``import state``, ``board backup``,
``board compact`` and ``board settings`` (docs/operations.md).

``export state`` streams ``GET /api/v1/state`` to a file (written beside it and renamed once the
``end`` line has arrived, so a cut stream never leaves a file that looks whole) or to stdout.
``import state`` sends a file to ``POST /api/v1/state``; the board checks every line before it
writes anything. The backup path is made absolute here: the board resolves nothing against its
own working directory.
"""

from __future__ import annotations

import http.client
import json as jsonlib
import os
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, Literal

import click

from .command import API, command, current, global_params
from .errors import TaskctlError
from .http import BoardHttp, NotSent, Reply, _decode, connect

#: Seconds a state import or export may take: a 50,000-task board moves in seconds, not minutes.
TRANSFER_TIMEOUT = 600.0
READ_CHUNK = 256 * 1024


# -- export state --------------------------------------------------------------------------------


@click.command("state")
@click.option("--out", "out", default="-", metavar="FILE|-", show_default=True,
              help="Write the export here (- for stdout); a file appears only once it is complete.")
def state(out: str) -> None:
    """The card state as JSON lines: projects, labels, actors, tasks (archived too), comments,
    relations, reports, acceptance items, sessions and attachments with their bytes.

    \b
    Not the activity log: that is the board's own history. The same board gives the same
    bytes apart from the header's time; `taskctl import state FILE` rebuilds it elsewhere.
    """
    inv = current()
    if out == "-":
        try:
            counts = _download(inv, sys.stdout.buffer)
        except BrokenPipeError:
            raise  # the reader left (`| head`): taskctl's quiet exit
        except OSError as exc:
            raise _cannot_write("stdout", exc) from None
        inv.out.note(f"exported {sum(counts.values())} rows")
        return
    target = Path(out).absolute()
    from services.hub.files import atomic_writer  # the owner-only atomic writer taskctl's exports use

    try:
        with atomic_writer(target) as handle:
            counts = _download(inv, handle)
    except OSError as exc:  # the file's disk (full, read-only), not the board: the writer left no temp file
        raise _cannot_write(str(target), exc) from None
    inv.out.result({"path": str(target), "counts": counts},
                   lambda r: inv.out.echo(f"exported {_summary(r['counts'])} to {r['path']}"))


def _download(inv: Any, sink: IO[bytes]) -> dict[str, int]:
    """Stream the export into ``sink``; the ``end`` line's counts, or STATE_INCOMPLETE."""
    board = inv.board()
    headers = BoardHttp(board, inv.who()).headers({"Accept": "application/x-ndjson"})
    try:
        conn = connect(board.url, TRANSFER_TIMEOUT)
    except NotSent as exc:
        raise TaskctlError("BOARD_UNREACHABLE", f"cannot reach the board at {board.url}: {exc}",
                           hint="is it running? nothing was written to the file") from None
    try:
        tail = b""
        # Only the reads are the board's: a write that fails (a full disk) is the sink's, and
        # goes up as the OSError it is, for the caller to name its file.
        for chunk in _chunks(board, conn, headers):
            sink.write(chunk)
            tail = (tail + chunk)[-4096:]
    finally:
        conn.close()
    last = tail.rstrip(b"\n").rpartition(b"\n")[2]
    try:
        end = jsonlib.loads(last)
    except ValueError:
        end = None
    if not isinstance(end, dict) or end.get("kind") != "end":
        raise TaskctlError("STATE_INCOMPLETE", "the export ended before its end line: the board stopped mid-way",
                           hint="run it again; the file was not written")
    counts: dict[str, int] = end["counts"]
    return counts


def _chunks(board: Any, conn: http.client.HTTPConnection, headers: dict[str, str | bytes]) -> Iterator[bytes]:
    """The export's bytes as they come; a failure to get them is BOARD_UNREACHABLE."""
    try:
        conn.request("GET", urllib.parse.urlsplit(board.url).path + API + "/state", headers=headers)
        response = conn.getresponse()
        if response.status != 200:
            raise BoardHttp(board).refusal(Reply(response.status, _decode(response, response.read())))
        while chunk := response.read1(READ_CHUNK):
            yield chunk
    except (OSError, http.client.HTTPException) as exc:
        # The stream is chunked: a board that dies mid-chunk is an IncompleteRead (an HTTP
        # protocol error, not an OSError), and is the same broken-off export.
        raise TaskctlError("BOARD_UNREACHABLE", f"the export from {board.url} broke off: {exc}",
                           hint="run it again; nothing was written to the file") from None


def _cannot_write(where: str, exc: OSError) -> TaskctlError:
    return TaskctlError("VALIDATION_FAILED", f"cannot write the export to {where}: "
                        f"{(exc.strerror or str(exc)).lower()}; nothing was written",
                        details={"path": where}, hint="free space there, or choose another --out")


def _summary(counts: dict[str, int]) -> str:
    return ", ".join(f"{count} {kind}{'s' if count != 1 else ''}" for kind, count in counts.items() if count) or "nothing"


# -- import state --------------------------------------------------------------------------------


@click.group("import")
def import_group() -> None:
    """Bring a state export into a board that has no projects yet."""


@command(import_group, "state")
@click.argument("source", metavar="FILE")
def import_state(source: str) -> None:
    """Import FILE (from `taskctl export state`; - for stdin) into this board, which must have
    no projects. Every line is checked first: a bad one is named and nothing is written.
    Ids, identifiers and per-project counters are kept; the board writes one
    import_completed event."""
    inv = current()
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {source!r}: {exc.strerror}") from None
    http = BoardHttp(inv.board(), inv.who(), timeout=TRANSFER_TIMEOUT)
    with http:
        result = http.call("POST", API + "/state", data=data, headers={"Content-Type": "application/x-ndjson"})
    inv.out.result(result, lambda r: inv.out.echo(
        f"imported {_summary(r['imported'])} at revision {r['revision']}"))


# -- board backup, compact, settings -------------------------------------------------------------


@click.command("backup")
@click.argument("target", metavar="FILE")
def backup(target: str) -> None:
    """Copy the board's database and its attachments to FILE while it keeps serving (a new file; fsynced).

    \b
    Restore it with `taskd restore FILE --data-dir DIR` while the board is stopped: the
    restored board gets a new board id, so every follower reloads instead of skipping, and
    its attachments are written back into the data directory.
    """
    inv = current()
    result = inv.call("POST", "/admin/backup", {"path": os.path.abspath(target)})
    inv.out.result(result, lambda r: inv.out.echo(
        f"backed up board {r['board_id']} at revision {r['revision']} to {r['path']} "
        f"({r['bytes']} bytes, {r.get('blobs', 0)} attachment blobs, {r['seconds']:.2f} s)"))


@click.command("compact")
@click.option("--older-than", "older_than", type=int, metavar="DAYS", help="Remove activity rows older than this.")
@click.option("--through", type=int, metavar="REVISION", help="Remove activity rows up to this revision.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
def compact(older_than: int | None, through: int | None, dry_run: bool) -> None:
    """Archive the oldest activity rows to <data_dir>/archive/, then remove them.

    \b
    Card state is never touched. Readers resuming below the new floor are told
    (410 CURSOR_EXPIRED) and reload; the newest row is always kept.
    """
    if (older_than is None) == (through is None):
        raise click.UsageError("give exactly one of --older-than DAYS or --through REVISION")
    inv = current()
    body: dict[str, Any] = {"dry_run": dry_run}
    body.update({"older_than_days": older_than} if older_than is not None else {"through": through})
    result = inv.call("POST", "/admin/compact", body)

    def human(r: dict[str, Any]) -> None:
        if not r["removed"]:
            inv.out.echo(f"nothing to remove; the floor stays at {r['previous_floor']}")
        elif r["dry_run"]:
            inv.out.echo(f"would remove {r['removed']} rows (floor {r['previous_floor']} → {r['floor']}) into {r['archive']}")
        else:
            inv.out.echo(f"removed {r['removed']} rows (floor {r['previous_floor']} → {r['floor']}); archived in {r['archive']}")

    inv.out.result(result, human)


OFF: Final = "off"

if TYPE_CHECKING:
    # click 8.4 made ParamType generic; older releases, which pyproject allows, cannot subscript it.
    _RetentionDaysBase = click.ParamType[int | Literal["off"]]
else:
    _RetentionDaysBase = click.ParamType


class RetentionDays(_RetentionDaysBase):
    """A number of days, or ``off``; the board judges the number (0 and below are refused)."""

    name = "DAYS|off"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | Literal["off"]:
        text = str(value).strip().lower()
        if text in ("off", "none"):
            return OFF
        try:
            return int(text)
        except ValueError:
            self.fail(f"{value!r} is neither a number of days nor off", param, ctx)


@click.command("settings")
@click.option("--event-retention-days", "retention", type=RetentionDays(), default=None,
              help="Compact activity rows older than this many days, daily; off keeps them all.")
def settings(retention: int | Literal["off"] | None) -> None:
    """Show or change the board-wide settings kept in the board's database."""
    inv = current()
    if retention is None:
        result = inv.call("GET", "/admin/settings")
    else:
        result = inv.call("PATCH", "/admin/settings", {"event_retention_days": None if retention == OFF else retention})

    def human(r: dict[str, Any]) -> None:
        days = r["event_retention_days"]
        inv.out.fields([("event_retention_days", "off (keep every row)" if days is None else days)])

    inv.out.result(result, human)


# Added to groups of other modules (taskctl/main.py EXTENSIONS): the global options come along.
for _command in (state, backup, compact, settings):
    _command.params.extend(global_params())
