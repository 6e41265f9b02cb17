"""``taskctl events tail``: follow the board's SSE stream directly and print one NDJSON record a line.

Records (SPEC §10): ``{"type":"open","after":N,"board_id":ID}``, ``{"type":"event","revision":R,"activity":{…}}``,
``{"type":"shutdown","reason":…}``, ``{"type":"eof","revision":N}`` and
``{"type":"error","code":…,"message":…,"resume_after":N}``, and, when ``--board-id`` names
another board than the one answering (restored from a backup: a new epoch),
``{"type":"reset","reason":"board_changed","board_id":…,"previous_board_id":…,"revision":N}``.
Exit 0 after a shutdown frame or the end of the stream, 1 after a stream error or a reset
(resume with ``--after N --board-id ID``).

Standard library HTTP plus the shared SSE parser: no aiohttp import, so the command starts fast.
"""

from __future__ import annotations

import http.client
import json as jsonlib
import sys
import urllib.parse
from collections.abc import Callable
from typing import IO, Any

import click

from shared.conditions import SIGNAL
from shared.limits import SSE_MAX_LINE
from shared.sse import SSEComment, SSEMessage, SSEParser, SSEProtocolError

from .command import TaskRef, command, current
from .discovery import Board
from .errors import TaskctlError, redact
from .http import NotSent, connect, encode_query

EVENTS_PATH = "/api/v1/events"
READ_CHUNK = 64 * 1024
USER_AGENT = "taskctl/0.1 (events tail)"

Emit = Callable[[dict[str, Any]], None]


@click.group("events")
def events() -> None:
    """Watch the board's live event stream."""


def ndjson_printer(stream: IO[str]) -> Emit:
    def emit(record: dict[str, Any]) -> None:
        stream.write(jsonlib.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        stream.flush()

    return emit


def _error(emit: Emit, code: str, message: str, resume_after: int | None) -> int:
    emit({"type": "error", "code": code, "message": redact(message), "resume_after": resume_after})
    return 1


def _meta(board: Board) -> dict[str, Any]:
    """The board's id and head revision: the ``open`` record names both (SPEC §7.2's epoch check)."""
    from .http import BoardHttp

    with BoardHttp(board) as http:
        meta: dict[str, Any] = http.call("GET", "/api/v1/meta")
    return meta


def tail_stream(
    board: Board,
    *,
    after: int,
    project: str | None = None,
    task: str | None = None,
    event_names: list[str] | None = None,
    emit: Emit,
    board_id: str | None = None,
    signals: bool = False,
) -> int:
    """Follow the stream from ``after`` until it ends; returns the exit code.

    With ``signals``, condition frames are emitted too, as ``{"type":"signal","signal":{…}}``
    (the hub's record): the standalone brief watcher re-renders on ``card_blocked`` /
    ``card_unblocked``. ``events tail`` prints facts only."""
    parts = urllib.parse.urlsplit(board.url)
    target = parts.path + EVENTS_PATH + encode_query({"after": after, "project": project, "task": task, "event": event_names})
    headers = {"Accept": "text/event-stream", "User-Agent": USER_AGENT}
    if board.token:
        headers["Authorization"] = f"Bearer {board.token}"
    parser = SSEParser(max_line=SSE_MAX_LINE, last_event_id=str(after))
    cursor = after
    try:
        # No read timeout: a quiet board sends only pings, and the user ends the tail with Ctrl-C.
        conn = connect(board.url, None)
    except NotSent as exc:
        return _error(emit, "BOARD_UNREACHABLE", f"cannot reach the board at {board.url}: {exc}", cursor)
    except TaskctlError as refused:  # BOARD_IMPOSTOR: another user's socket on the board's port
        return _error(emit, refused.code, refused.message, cursor)
    try:
        try:
            conn.request("GET", target, headers=headers)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            return _error(emit, "BOARD_UNREACHABLE", f"cannot reach the board at {board.url}: {exc}", cursor)
        if response.status != 200:
            raw = response.read()
            try:
                error = jsonlib.loads(raw)["error"]
                return _error(emit, str(error["code"]), str(error["message"]), cursor)
            except (ValueError, KeyError, TypeError):
                return _error(emit, "HTTP_ERROR", f"the board answered {response.status}", cursor)
        emit({"type": "open", "after": after, **({"board_id": board_id} if board_id else {})})
        while True:
            try:
                chunk = response.read1(READ_CHUNK)
            except (OSError, http.client.HTTPException) as exc:
                return _error(emit, "STREAM_BROKEN", f"the stream broke: {exc or type(exc).__name__}", cursor)
            if not chunk:
                emit({"type": "eof", "revision": cursor})
                return 0
            failure: SSEProtocolError | None
            try:
                items = parser.feed(chunk)
            except SSEProtocolError as exc:
                items, failure = exc.items, exc
            else:
                failure = None
            for item in items:
                if isinstance(item, SSEComment):
                    continue
                if item.event == "shutdown":
                    emit({"type": "shutdown", "reason": _reason(item)})
                    return 0
                if item.event == SIGNAL and signals and item.data is not None:
                    emit({"type": "signal", "signal": jsonlib.loads(item.data)})
                    continue
                if item.event is None and item.id is not None and item.id.isdigit():
                    cursor = int(item.id)
                    if item.data is not None:
                        emit({"type": "event", "revision": cursor, "activity": jsonlib.loads(item.data)})
            if failure is not None:
                return _error(emit, "STREAM_INVALID", str(failure), cursor)
    finally:
        conn.close()


def _reason(message: SSEMessage) -> str | None:
    """The board's word for why it ends the stream, when the ``shutdown`` data holds one."""
    try:
        data = jsonlib.loads(message.data or "{}")
    except ValueError:
        return None
    reason = data.get("reason") if isinstance(data, dict) else None
    return reason if isinstance(reason, str) else None


@command(events, "tail")
@click.option("--after", type=click.IntRange(min=0), help="Replay from this revision (default: the board's head).")
@click.option("--project", metavar="ID", help="Only this project's rows.")
@click.option("--task", type=TaskRef(), help="Only this task's rows (uuid or identifier).")
@click.option("--event", "event_names", multiple=True, metavar="NAME",
              help="Only these event names (repeat, or a comma list).")
@click.option("--board-id", "expected_board", metavar="ID",
              help="Resume only on this board (the open record's board_id); another one is a reset.")
def tail(
    after: int | None, project: str | None, task: str | None, event_names: tuple[str, ...], expected_board: str | None
) -> None:
    """Print the board's live event stream as NDJSON, one record a line.

    \b
    Exit 0 when the board ends the stream (shutdown or end of stream), 1 on a stream error;
    the error record's resume_after is the --after to continue from. Resume with the open
    record's board_id as --board-id too: a board restored from a backup has a new id, and
    its revisions past the backup are not the ones you saw. Then the tail prints
    {"type":"reset","reason":"board_changed",…} and exits 1: reload the state, follow anew.
    """
    emit = ndjson_printer(sys.stdout)
    names = [name for value in event_names for name in value.split(",") if name]
    try:
        board = current().board()
        meta = _meta(board)
    except TaskctlError as error:
        code = _error(emit, error.code, error.message, after)
        raise click.exceptions.Exit(code) from None
    if expected_board is not None and meta.get("board_id") != expected_board:
        emit({"type": "reset", "reason": "board_changed", "board_id": meta.get("board_id"),
              "previous_board_id": expected_board, "revision": meta.get("revision")})
        raise click.exceptions.Exit(1)
    start = after if after is not None else int(meta["revision"])
    code = tail_stream(board, after=start, project=project, task=task, event_names=names or None, emit=emit,
                       board_id=meta.get("board_id"))
    raise click.exceptions.Exit(code)
