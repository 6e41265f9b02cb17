"""``taskctl export``: card briefs as markdown files (SPEC §8).

``export md`` asks the board to render every card (``POST /api/v1/export``) and writes each to
``<DIR>/<IDENTIFIER>.md`` atomically, leaving files that are already up to date alone;
``--check`` writes nothing and exits 3 when a file is missing or differs. Files in DIR that name
no current card (an archived card, say) are never deleted: the directory may hold other things.

``export watch`` keeps named briefs fresh (SPEC §7.4): through the hub by default (a
registration; ``--detach`` leaves it to the hub and exits), or ``--standalone`` on the board's
own stream, in this process, with no hub. Both print NDJSON records, one a line.
"""

from __future__ import annotations

import asyncio
import json as jsonlib
import os
import queue
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from shared import hub_protocol as hp

from .command import REF, command, current, drop_none, read_text
from .discovery import Board
from .errors import TaskctlError, redact
from .http import BoardHttp, paginate

#: Where ``export md`` writes when ``--out`` is not given (relative to the working directory).
DEFAULT_OUT = "taskloom-export"
#: SPEC §10: ``--check`` found a missing or different file.
EXIT_DIFFERENCES = 3
#: Tasks per ``GET /api/v1/tasks`` page (the API's maximum).
PAGE_LIMIT = 1000
#: What a card identifier looks like; anything else could name a path outside DIR.
_IDENTIFIER = re.compile(r"[A-Z0-9][A-Z0-9-]*-[0-9]+")


def brief_path(out_dir: Path, identifier: str) -> Path:
    """``<DIR>/<IDENTIFIER>.md``; an identifier that could leave the directory is refused."""
    if not _IDENTIFIER.fullmatch(identifier):
        raise TaskctlError("VALIDATION_FAILED", f"unexpected card identifier {identifier!r}",
                           details={"identifier": identifier})
    return out_dir / f"{identifier}.md"


def write_atomically(path: Path, data: bytes) -> None:
    """Owner-only, through the hub's writer: a reader sees the old file or the new one."""
    from services.hub.files import write_atomic

    write_atomic(path, data)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


class _NoProgress:
    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, steps: int) -> None:
        return None


def export_cards(
    cards: list[dict[str, Any]],
    render: Any,
    out_dir: Path,
    *,
    check: bool,
    progress: bool,
) -> dict[str, Any]:
    """Render each card with ``render(task_id)``; write the changed ones, or (``check``) only compare."""
    result: dict[str, Any] = {
        "dir": str(out_dir), "cards": len(cards), "written": [], "unchanged": 0, "missing": [], "differs": [],
    }
    if not check and cards:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TaskctlError("VALIDATION_FAILED", f"cannot create {out_dir}: {exc.strerror}",
                               details={"out": str(out_dir)}) from None
    bar: Any = (
        click.progressbar(length=len(cards), label="checking" if check else "exporting", file=sys.stderr)
        if progress and cards
        else _NoProgress()
    )
    with bar:
        for card in cards:
            answer = render(card["id"])
            path = brief_path(out_dir, answer["task"]["identifier"])
            wanted = answer["markdown"].encode("utf-8")
            current_bytes = _read(path)
            if current_bytes == wanted:
                result["unchanged"] += 1
            elif check:
                result["missing" if current_bytes is None else "differs"].append(str(path))
            else:
                try:
                    write_atomically(path, wanted)
                except OSError as exc:
                    raise TaskctlError("VALIDATION_FAILED", f"cannot write {path}: {exc.strerror}",
                                       details={"path": str(path)}) from None
                result["written"].append(str(path))
            bar.update(1)
    return result


@click.group()
def export() -> None:
    """Card briefs as markdown: the brief an agent reads to work (or resume) a card."""


@command(export, "md")
@click.option(
    "--out", "out_dir", default=DEFAULT_OUT, show_default=True, metavar="DIR",
    type=click.Path(file_okay=False, path_type=Path), help="Directory for the <IDENTIFIER>.md files.",
)
@click.option("--project", metavar="ID", help="Only this project's cards.")
@click.option("--check", is_flag=True, help="Write nothing; exit 3 when a file is missing or differs.")
def md(out_dir: Path, project: str | None, check: bool) -> None:
    """Write every card's brief to DIR/<IDENTIFIER>.md.

    Archived cards are left out. Each file is written atomically, and only when its content
    changed. With --check nothing is written: exit 0 when every file matches, 3 when one is
    missing or differs (each is named on stdout).
    """
    inv = current()
    http = inv.http()
    query = drop_none({"limit": PAGE_LIMIT, "project": project})
    cards = list(paginate(http, "/api/v1/tasks", query))
    result = export_cards(
        cards,
        lambda task_id: http.call("POST", "/api/v1/export", {"ref": task_id}),
        out_dir,
        check=check,
        progress=not inv.out.json and sys.stderr.isatty(),
    )
    stale = result["missing"] + result["differs"]

    def human(data: dict[str, Any]) -> None:
        if check:
            for path in data["missing"]:
                inv.out.echo(f"missing  {path}")
            for path in data["differs"]:
                inv.out.echo(f"differs  {path}")
            count = data["cards"]
            verdict = f"{len(stale)} of {count} briefs are stale" if stale else f"all {count} briefs match"
            inv.out.note(f"{verdict} in {data['dir']}")
        else:
            inv.out.note(
                f"exported {data['cards']} cards to {data['dir']}: "
                f"{len(data['written'])} written, {data['unchanged']} unchanged"
            )

    inv.out.result(result, human)
    if check and stale:
        click.get_current_context().exit(EXIT_DIFFERENCES)


# -- export watch ----------------------------------------------------------------------------

#: The hub's cadence knobs; the standalone watcher honours the same ones (seconds).
CADENCE_ENV = {
    "debounce": ("TASKLOOM_HUB_REFRESH_DEBOUNCE", hp.REFRESH_DEBOUNCE),
    "max_wait": ("TASKLOOM_HUB_REFRESH_MAX_WAIT", hp.REFRESH_MAX_WAIT),
    "floor": ("TASKLOOM_HUB_REFRESH_FLOOR", hp.REFRESH_FLOOR),
}
#: Records that end a foreground watch with exit 0.
_CLEAN_END = frozenset({"done", "ttl", "shutdown", "eof"})

Emit = Callable[[dict[str, Any]], None]


def _printer() -> Emit:
    def emit(record: dict[str, Any]) -> None:
        sys.stdout.write(redact(jsonlib.dumps(record, ensure_ascii=False, separators=(",", ":"))) + "\n")
        sys.stdout.flush()

    return emit


def _run(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def _cadence() -> dict[str, float]:
    values = {}
    for name, (variable, default) in CADENCE_ENV.items():
        try:
            values[name] = max(0.0, float(os.environ.get(variable, default)))
        except ValueError:
            raise click.UsageError(f"{variable} must be a number of seconds") from None
    return values


def _cards_json(source: str) -> list[dict[str, str]]:
    """``[{ref, out}, …]`` (or ``{"cards": […]}``) from FILE or stdin; relative paths are made absolute."""
    try:
        parsed = jsonlib.loads(read_text(source, "cards file"))
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--cards-json") from None
    if isinstance(parsed, dict) and set(parsed) == {"cards"}:
        parsed = parsed["cards"]
    if not isinstance(parsed, list) or not parsed:
        raise click.BadParameter("expected a non-empty list of {ref, out}", param_hint="--cards-json")
    cards = []
    for index, card in enumerate(parsed):
        if not isinstance(card, dict) or not isinstance(card.get("ref"), str) or not isinstance(card.get("out"), str):
            raise click.BadParameter(f"entry {index} is not {{ref, out}}", param_hint="--cards-json")
        cards.append({**card, "out": os.path.abspath(card["out"])})
    return cards


def watch_message(
    refs: tuple[str, ...], out_file: str | None, out_dir: str | None, cards_json: str | None,
    ttl: float | None, detach: bool,
) -> dict[str, Any]:
    """The hub's ``watch`` request for the command line's spelling (SPEC §7.4)."""
    chosen = [name for name, value in (("--out", out_file), ("--dir", out_dir), ("--cards-json", cards_json)) if value]
    if len(chosen) != 1:
        raise click.UsageError("name where the briefs go: one of --out FILE, --dir DIR or --cards-json FILE")
    ttl_ms = None if ttl is None else round(ttl * 60_000)
    if cards_json:
        if refs:
            raise click.UsageError("--cards-json names the cards itself; give no REF")
        return hp.watch(cards=_cards_json(cards_json), ttl_ms=ttl_ms, detach=detach or None)
    if not refs:
        raise click.UsageError("name at least one card (REF)")
    if out_file:
        if len(refs) != 1:
            raise click.UsageError("--out FILE keeps one card; use --dir DIR for several")
        return hp.watch(ref=refs[0], out=os.path.abspath(out_file), ttl_ms=ttl_ms, detach=detach or None)
    return hp.watch(refs=list(refs), dir=os.path.abspath(out_dir or "."), ttl_ms=ttl_ms, detach=detach or None)


@command(export, "watch")
@click.argument("refs", nargs=-1, type=REF)
@click.option("--out", "out_file", metavar="FILE", help="Keep one card's brief in FILE.")
@click.option("--dir", "out_dir", metavar="DIR", help="Keep each card's brief in DIR/.taskloom/<IDENTIFIER>/card.md.")
@click.option("--cards-json", metavar="FILE", help='A JSON list of {"ref": …, "out": …} (- for stdin).')
@click.option("--ttl", type=click.FloatRange(min=0), metavar="MIN",
              help="End after this many minutes (default 120; 0 = until every card is done or canceled).")
@click.option("--detach", is_flag=True, help="Register with the hub, print the registration id, exit.")
@click.option("--standalone", is_flag=True, help="Follow the board's stream directly, in this process, without the hub.")
@click.option("--after", type=click.IntRange(min=0), help="With --standalone: resume the stream after this revision.")
@click.option("--status", is_flag=True, help="List the hub's registrations.")
@click.option("--stop", "stop_id", metavar="ID", help="End the registration ID.")
def watch(
    refs: tuple[str, ...],
    out_file: str | None,
    out_dir: str | None,
    cards_json: str | None,
    ttl: float | None,
    detach: bool,
    standalone: bool,
    after: int | None,
    status: bool,
    stop_id: str | None,
) -> None:
    """Keep card briefs fresh on disk while the cards change.

    \b
    Through the local hub by default (started when none runs): the first briefs are written
    before the command says `registered`, then each change to a card re-renders its brief
    (atomically: a reader sees the old file or the new one). A card that reaches done or
    canceled is written once more and dropped.

    \b
    Foreground: prints NDJSON records (registered, refresh, heartbeat, done, ttl, shutdown,
    error); exit 0 on done, ttl or shutdown, 1 on error. The registration ends with this process.
    --detach: the hub keeps the briefs (across hub restarts) until the cards are done or the
    TTL passes; prints the registration id and exits 0.
    --standalone: no hub; exit 0 on done/ttl/shutdown/eof, 1 on a stream error, whose record
    names the revision to resume from with --after.

    \b
    --status lists the hub's registrations; --stop ID ends one.
    """
    inv = current()
    if status or stop_id:
        if refs or out_file or out_dir or cards_json or detach or standalone or after is not None or (status and stop_id):
            raise click.UsageError("--status and --stop ID take no other option")
        _status_or_stop(inv, stop_id)
        return
    if after is not None and not standalone:
        raise click.UsageError("--after goes with --standalone (the hub keeps its own cursor)")
    if detach and standalone:
        raise click.UsageError("--detach leaves the briefs to the hub; --standalone runs without one")
    message = watch_message(refs, out_file, out_dir, cards_json, ttl, detach)
    board = inv.board()
    if standalone:
        code = standalone_watch(inv.http(), board, message, after=after, emit=_printer(), cadence=_cadence())
        raise click.exceptions.Exit(code)
    if not board.token:
        raise TaskctlError("UNAUTHORIZED", "no board token: the hub needs it", hint="set TASKLOOM_TOKEN or pass --token")
    from services.hub import client

    if detach:
        answer = _hub(lambda: client.request_once(board.url, board.token or "", message))
        _refused(answer)
        _print_registered(inv, answer)
        return
    raise click.exceptions.Exit(_run(_foreground(inv, board, message)))


def _hub(call: Callable[[], Any]) -> Any:
    from services.hub import client

    try:
        return _run(call())
    except (client.HubUnavailable, client.HubError, OSError, TimeoutError) as exc:
        raise TaskctlError("HUB_UNAVAILABLE", f"cannot use the hub: {exc}",
                           hint="see `taskctl events hub`; --standalone works without one") from None


def _refused(answer: dict[str, Any]) -> None:
    if answer.get("type") == "error":
        raise TaskctlError(str(answer.get("code")), str(answer.get("message")), details=answer.get("details") or {})


def _print_registered(inv: Any, answer: dict[str, Any]) -> None:
    def human(data: dict[str, Any]) -> None:
        handle = data.get("registration_id")
        if handle:
            inv.out.echo(handle)
        for card in data.get("cards", []):
            inv.out.note(f"{card['identifier']} → {card['path']} ({card['state']}, {card['status']})")
        if not handle:
            inv.out.note(f"no new registration: {data.get('reason')}")

    inv.out.result({key: value for key, value in answer.items() if key != "type"}, human)


async def _foreground(inv: Any, board: Board, message: dict[str, Any]) -> int:
    from services.hub import client

    emit = _printer()
    try:
        async for record in client.watch_stream(board.url, board.token or "", message):
            emit(record)
            kind = record.get("type")
            if kind == "error":
                inv.out.note(f"error: {record.get('code')}: {record.get('message')}")
                return 1
            if kind in _CLEAN_END:
                return 0
    except (client.HubUnavailable, client.HubError, OSError, TimeoutError) as exc:
        emit({"type": "error", "code": "HUB_LOST", "message": redact(f"{type(exc).__name__}: {exc}")})
        return 1
    return 1


def _status_or_stop(inv: Any, stop_id: str | None) -> None:
    from services.hub import client

    board = inv.board()
    if not board.token:
        raise TaskctlError("UNAUTHORIZED", "no board token: the hub needs it", hint="set TASKLOOM_TOKEN or pass --token")
    request = hp.watch_stop(stop_id) if stop_id else hp.watch_status()
    answer = _hub(lambda: client.request_once(board.url, board.token or "", request))
    _refused(answer)
    if stop_id:
        inv.out.result({k: v for k, v in answer.items() if k != "type"},
                       f"stopped {stop_id} ({', '.join(answer.get('refs') or []) or 'no cards'})")
        return
    registrations = answer.get("registrations") or []

    def human(rows: list[dict[str, Any]]) -> None:
        if not rows:
            inv.out.note("no registrations")
            return
        for row in rows:
            mode = "detached" if row["detached"] else f"foreground, {row['viewers']} viewer(s)"
            until = row.get("expires_at") or "the cards are done"
            inv.out.echo(f"{row['registration_id']}  {mode}, until {until}")
            for card in row["cards"]:
                state = card["error"]["code"] if card.get("error") else (card.get("status") or "pending")
                inv.out.echo(f"  {card['identifier']:<12} {state:<12} r{card.get('revision')}  {card['path']}")

    inv.out.result(registrations, human)


# -- the standalone watcher -------------------------------------------------------------------


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

    def run(self, event: Any) -> None:
        """Feed ``event`` and everything its actions lead to, I/O done in place."""
        events = deque([event])
        while events:
            actions = self.registry.handle(events.popleft(), now=time.monotonic(), wall=time.time(),
                                           revision=self.cursor)
            for action in actions:
                answer = self._perform(action)
                if answer is not None:
                    events.append(answer)

    def _perform(self, action: Any) -> Any:
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

    def _render(self, ref: str) -> Any:
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

    def read() -> None:
        try:
            tail_stream(board, after=start, emit=inbox.put)
        except Exception as exc:  # the reader must always leave a last record
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


def _reply(status: int, body: Any) -> Any:
    from .http import Reply

    return Reply(status, body, {})
