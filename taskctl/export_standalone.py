"""``taskctl export watch --standalone``: the hub's registry (``services/hub/registry.py``) for
one session, in this process, on the board's own stream, with no hub (SPEC §7.4)."""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import click

from shared import hub_protocol as hp

from .discovery import Board
from .errors import TaskctlError
from .export_watch import Emit
from .http import BoardHttp, Reply

if TYPE_CHECKING:
    from services.hub.registry import Action, Event, Rendered, RenderFailed

#: The hub's cadence knobs; the standalone watcher honours the same ones (seconds).
CADENCE_ENV = {
    "debounce": ("TASKLOOM_HUB_REFRESH_DEBOUNCE", hp.REFRESH_DEBOUNCE),
    "max_wait": ("TASKLOOM_HUB_REFRESH_MAX_WAIT", hp.REFRESH_MAX_WAIT),
    "floor": ("TASKLOOM_HUB_REFRESH_FLOOR", hp.REFRESH_FLOOR),
}


def cadence_from_env() -> dict[str, float]:
    values = {}
    for name, (variable, default) in CADENCE_ENV.items():
        try:
            values[name] = max(0.0, float(os.environ.get(variable, default)))
        except ValueError:
            raise click.UsageError(f"{variable} must be a number of seconds") from None
    return values


def _export(http: BoardHttp, ref: str) -> tuple[int, Any]:
    return http.request("POST", "/api/v1/export", {"ref": ref})


#: The one session of a standalone watcher (the registry's reply channel).
_SESSION = 1


class _Standalone:
    """The hub's registry (``services/hub/registry.py``) for one session, carried out in this
    process: renders and writes one at a time, synchronously, with the board's own stream."""

    def __init__(self, http: BoardHttp, board: Board, *, emit: Emit, cadence: dict[str, float],
                 after: int | None) -> None:
        from services.hub.registry import Cadence, Registry

        self.http = http
        self.board = board
        self.emit = emit
        self.registry = Registry(board=board.url, cadence=Cadence(**cadence))
        self.after = after
        #: The newest revision read (the registry's ``revision``); the resume cursor is ``safe``.
        self.cursor: int | None = None
        self.safe: int | None = None
        self.wake: float | None = None
        #: Set once the registry has answered ``registered`` (a render problem is then a record).
        self.answered = False
        #: The session was closed: how the run ends (``done``, ``ttl``), exit 0.
        self.ended: str | None = None
        #: The stream's own end record will close the run: a ``done`` from the last batch is not sent.
        self.flushing = False
        self._last: str | None = None

    def run(self, event: Event) -> None:
        """Feed ``event`` and everything its actions lead to, I/O done in place."""
        events: deque[Event] = deque([event])
        while events:
            actions = self.registry.handle(events.popleft(), now=time.monotonic(), wall=time.time(),
                                           revision=self.cursor)
            for action in actions:
                answer = self._perform(action)
                if answer is not None:
                    events.append(answer)

    def _perform(self, action: Action) -> Event | None:
        from services.hub import registry as rg
        from services.hub.briefs import path_problem, write_brief

        if isinstance(action, rg.CheckPaths):
            problems = tuple(path_problem(path, directory=action.directory) for path in action.paths)
            if self.cursor is None and not any(problems):
                # Where the stream starts: the first snapshots hold everything up to it.
                self.cursor = self.after if self.after is not None else int(self.http.call("GET", "/api/v1/meta")["revision"])
                self.safe = self.cursor
            return rg.PathsChecked(problems)
        if isinstance(action, rg.Render):
            return rg.RenderDone(self._render(action.ref))
        if isinstance(action, rg.Write):
            try:
                write_brief(action.path, action.markdown.encode("utf-8"))
            except OSError as exc:
                return rg.WriteDone(exc)
            return rg.WriteDone()
        if isinstance(action, rg.Refuse):
            refused = action.refused
            raise TaskctlError(refused.code, refused.message, details=refused.details)
        if isinstance(action, rg.Send):
            self._send(action.message)
        elif isinstance(action, rg.Close):
            if not self.flushing or self._last == "ttl":
                self.ended = self._last or "done"
        elif isinstance(action, rg.ArmTimer):
            self.wake = action.at
        elif isinstance(action, rg.Batched) and action.failed == 0:
            self.safe = action.revision
        return None

    def _send(self, record: dict[str, Any]) -> None:
        kind = record.get("type")
        self._last = kind
        if kind == "registered":
            # No hub, no registration to name: what runs and why, as a hub's foreground answer says.
            self.answered = True
            record = hp.registered(
                registration_id=None, refs=record["refs"], reused=False, running=record["running"],
                reason=None if record["running"] else hp.REASON_TERMINAL,
            )
        elif kind == "done" and self.flushing:
            return
        self.emit(record)

    def _render(self, ref: str) -> Rendered | RenderFailed:
        from services.hub.registry import Rendered, RenderFailed

        try:
            status, body = _export(self.http, ref)
            if status == 200:
                task = body["task"]
                return Rendered(str(body["markdown"]), str(task["id"]), str(task["identifier"]), str(task["status"]))
            if status == 404 and not self.answered:
                return RenderFailed("NOT_FOUND", f"no such card: {ref}", permanent=True)
            raise self.http.refusal(_reply(status, body))
        except TaskctlError as exc:
            if not self.answered:
                raise  # before ``registered`` the command itself fails, as any other command would
            return RenderFailed(exc.code, exc.message, permanent=False)


def standalone_watch(
    http: BoardHttp,
    board: Board,
    message: dict[str, Any],
    *,
    after: int | None,
    emit: Emit,
    cadence: dict[str, float],
) -> int:
    """The direct-SSE watcher: the hub's registry and records, for one session, in one process.

    Returns the exit code. The stream is read by a thread (``events tail``'s reader) into a queue;
    this thread feeds the registry and does every render and write, one at a time.
    """
    from services.hub import registry as rg
    from services.hub.briefs import tasks_named
    from services.hub.protocol import RequestInvalid, validate_watch

    from .events_cmd import tail_stream

    try:
        fields = validate_watch(message)
    except RequestInvalid as exc:
        raise TaskctlError("VALIDATION_FAILED", str(exc), details=exc.details) from None
    watcher = _Standalone(http, board, emit=emit, cadence=cadence, after=after)
    watcher.run(rg.Restore(None))  # nothing persists: a standalone watcher is a foreground one
    watcher.run(rg.Watch(_SESSION, {**fields, "detach": False}))
    if watcher.ended:
        return 0  # every card is terminal: no stream is ever opened

    inbox: queue.Queue[dict[str, Any]] = queue.Queue()
    start = watcher.cursor
    assert start is not None, "registering checks the request's own paths first: that sets the cursor, or refuses"

    def read() -> None:
        try:
            tail_stream(board, after=start, emit=inbox.put, signals=True)
        except Exception as exc:  # noqa: BLE001 - the reader must always leave a last record
            inbox.put({"type": "error", "code": "STREAM_INVALID", "message": f"{type(exc).__name__}: {exc}"})

    threading.Thread(target=read, name="taskctl-watch-stream", daemon=True).start()
    while True:
        wait = None if watcher.wake is None else max(0.0, watcher.wake - time.monotonic())
        try:
            record: dict[str, Any] | None = inbox.get(timeout=wait)
        except queue.Empty:
            record = None
        watcher.run(rg.Tick(batches=False))  # a TTL that has passed ends the run first
        if watcher.ended:
            return 0
        kind = record.get("type") if record else None
        if record is not None and kind == "event":
            watcher.cursor = record["revision"]
            named = tasks_named(record["activity"])
            if named is not None and not watcher.registry.watches(named) and not watcher.registry.pending():
                watcher.safe = watcher.cursor  # nothing of ours changed: every brief includes it
            watcher.run(rg.BoardEvent(record["activity"]))
        elif record is not None and kind == "signal":
            watcher.run(rg.BoardSignal(record["signal"]))  # a blocker finished or reopened
        elif record is not None and kind == "open":
            emit(record)
        elif record is not None and kind in ("shutdown", "eof"):
            watcher.flushing = True
            watcher.run(rg.Flush())  # pending refreshes are attempted first
            emit({**record, "revision": watcher.safe})
            return 0
        elif record is not None and kind == "error":
            emit({"type": "error", "code": record.get("code"), "message": record.get("message"),
                  "resume_after": watcher.safe})
            return 1
        watcher.run(rg.Tick())
        if watcher.ended:
            return 0


def _reply(status: int, body: Any) -> Reply:
    return Reply(status, body, {})
