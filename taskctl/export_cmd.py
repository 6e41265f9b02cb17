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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from shared import hub_protocol as hp

from .command import REF, command, current, drop_none, read_text
from .context import Board, BoardHttp, TaskctlError, current_token, paginate, redact

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
        async for record in client.watch_stream(board.url, lambda: current_token(board), message):
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


@dataclass
class _Kept:
    ref: str
    task_id: str
    identifier: str
    path: str


def _render(http: BoardHttp, ref: str) -> tuple[int, Any]:
    return http.request("POST", "/api/v1/export", {"ref": ref})


def standalone_watch(
    http: BoardHttp,
    board: Board,
    message: dict[str, Any],
    *,
    after: int | None,
    emit: Emit,
    cadence: dict[str, float],
) -> int:
    """The direct-SSE watcher: same checks, records and cadence as a hub registration, one process.

    Returns the exit code. The stream is read by a thread (``events tail``'s reader) into a queue;
    this thread keeps the cadence and does every render and write, one at a time.
    """
    from services.hub.briefs import dir_target, path_problem, tasks_named, write_brief
    from services.hub.cadence import RefreshSchedule
    from services.hub.protocol import RequestInvalid, validate_watch

    from .events_cmd import tail_stream

    try:
        fields = validate_watch(message)
    except RequestInvalid as exc:
        raise TaskctlError("VALIDATION_FAILED", str(exc), details=exc.details) from None
    if fields["cards"] is not None:
        wanted: list[tuple[str, str | None]] = [(card["ref"], card["out"]) for card in fields["cards"]]
        problems = [problem for _, out in wanted if out and (problem := path_problem(out))]
    else:
        wanted = [(ref, None) for ref in fields["refs"]]
        problems = [problem] if (problem := path_problem(fields["dir"], directory=True)) else []
    if problems:
        raise TaskctlError("VALIDATION_FAILED", "; ".join(problems), details={"problems": problems})
    start = after if after is not None else int(http.call("GET", "/api/v1/meta")["revision"])
    rendered: dict[str, dict[str, Any]] = {}
    missing = []
    for ref, _ in wanted:
        status, body = _render(http, ref)
        if status == 404:
            missing.append(ref)
        elif status != 200:
            raise http.refusal(_reply(status, body))
        else:
            rendered[ref] = body
    if missing:
        raise TaskctlError("NOT_FOUND", f"no such card: {', '.join(missing)}", details={"refs": missing})
    kept: list[_Kept] = []
    seen: dict[str, str] = {}
    for ref, out in wanted:
        task = rendered[ref]["task"]
        if task["id"] in seen:
            raise TaskctlError("VALIDATION_FAILED", f"{seen[task['id']]} and {ref} name the same card",
                               details={"refs": [seen[task["id"]], ref]})
        seen[task["id"]] = ref
        path = out or dir_target(fields["dir"], task["identifier"])
        if out is None and (problem := path_problem(path)):
            raise TaskctlError("VALIDATION_FAILED", problem, details={"problems": [problem]})
        kept.append(_Kept(ref, task["id"], task["identifier"], path))

    live: dict[str, _Kept] = {}
    records = []
    for card in kept:
        answer = rendered[card.ref]
        try:
            write_brief(card.path, answer["markdown"].encode("utf-8"))
        except OSError as exc:
            raise TaskctlError("WRITE_FAILED", f"cannot write {card.path}: {exc.strerror or exc}",
                               details={"path": card.path}) from None
        records.append(hp.refresh(ref=card.ref, path=card.path, revision=start, status=answer["task"]["status"]))
        if answer["task"]["status"] not in hp.TERMINAL_STATUSES:
            live[card.task_id] = card
    emit(hp.registered(
        registration_id=None, refs=[card.ref for card in live.values()], reused=False, running=bool(live),
        reason=None if live else hp.REASON_TERMINAL,
    ))
    for record in records:
        emit(record)
    if not live:
        emit(hp.done())  # every card is terminal: no stream is ever opened
        return 0

    inbox: queue.Queue[dict[str, Any]] = queue.Queue()

    def read() -> None:
        try:
            tail_stream(board, after=start, emit=inbox.put)
        except Exception as exc:  # the reader must always leave a last record
            inbox.put({"type": "error", "code": "STREAM_INVALID", "message": f"{type(exc).__name__}: {exc}"})

    threading.Thread(target=read, name="taskctl-watch-stream", daemon=True).start()
    schedule = RefreshSchedule(cadence["debounce"], cadence["max_wait"], cadence["floor"])
    ttl_ms = fields["ttl_ms"]
    deadline = time.monotonic() + ttl_ms / 1000 if ttl_ms else None
    cursor = safe = start

    def batch() -> None:
        nonlocal safe
        everything, keys = schedule.take(time.monotonic())
        at = cursor
        clean = True
        for card in [c for c in live.values() if everything or c.task_id in keys]:
            try:
                status, body = _render(http, card.task_id)
                if status != 200:
                    raise http.refusal(_reply(status, body))
                write_brief(card.path, body["markdown"].encode("utf-8"))
            except (TaskctlError, OSError) as exc:
                clean = False
                if isinstance(exc, TaskctlError):
                    code, text = exc.code, exc.message
                else:
                    code, text = hp.WRITE_FAILED, f"cannot write {card.path}: {exc.strerror or exc}"
                emit(hp.refresh_failed(ref=card.ref, path=card.path, code=code, message=text))
                continue
            emit(hp.refresh(ref=card.ref, path=card.path, revision=at, status=body["task"]["status"]))
            if body["task"]["status"] in hp.TERMINAL_STATUSES:
                del live[card.task_id]
        if clean:
            safe = at

    while True:
        now = time.monotonic()
        waits = [moment - now for moment in (schedule.due(), deadline) if moment is not None]
        try:
            record = inbox.get(timeout=max(0.0, min(waits)) if waits else None)
        except queue.Empty:
            record = None
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            emit(hp.ttl(ttl_ms=ttl_ms))
            return 0
        kind = record.get("type") if record else None
        if kind == "event":
            cursor = record["revision"]
            named = tasks_named(record["activity"])
            hit = None if named is None else named & live.keys()
            if named is None or hit:
                schedule.mark(now, hit)
            elif not schedule.pending:
                safe = cursor
        elif kind == "open":
            emit(record)
        elif kind in ("shutdown", "eof"):
            if schedule.pending:
                batch()
            emit({**record, "revision": safe})
            return 0
        elif kind == "error":
            emit({"type": "error", "code": record.get("code"), "message": record.get("message"), "resume_after": safe})
            return 1
        due = schedule.due()
        if due is not None and time.monotonic() >= due:
            batch()
            if not live:
                emit(hp.done())
                return 0


def _reply(status: int, body: Any) -> Any:
    from .context import Reply

    return Reply(status, body, {})
