"""Card-brief registrations (SPEC §7.4): keep named card files fresh from the hub's one board stream.

A registration is a set of cards, each kept at one path. An event naming a watched task marks
that card; an event with no task (and every board (re)connect) marks every card. Marked cards
are re-rendered through the board's ``POST /api/v1/export`` on the cadence of ``cadence.py`` and
written atomically (``briefs.write_brief``). Renders and writes are serial across the hub (one
lock), and registration is serialised (another lock), so two requests never both pass the
duplicate check before either is indexed.

Ownership (SPEC §7.4). A *foreground* registration belongs to the session that made it: that
session's :class:`Watcher` receives its records, and its departure ends the registration, unless
a viewer remains, which inherits it. A second foreground session asking for a card already kept
(the same card at the same path) becomes a *viewer*: it gets that card's records and cannot retire
it. A *detached* request for a card already kept by a live detached registration drops that card
as *covered*; one kept by a foreground registration is refused, since a foreground watcher
promises nothing beyond its session. A path is kept for one card at a time.

Persistence: detached registrations are written to ``hub-<key>.registrations.json``
(``version: 2``) after every change and rehydrated on start: a terminal card is written once and
dropped, a card the board no longer knows (404) is dropped, and a card that cannot be rendered
for now (board down) is kept and re-rendered when the board link opens.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import orjson
import structlog

from shared import hub_protocol as hp
from shared.timestamps import format_timestamp, parse_timestamp

from .briefs import dir_target, path_problem, protected_problem, tasks_named, write_brief
from .cadence import RefreshSchedule
from .pointer import read_json, write_json_atomic

log = structlog.get_logger("taskhub")

#: One export request may take this long before the render counts as failed, seconds.
EXPORT_TIMEOUT = 15.0

Key = tuple[str, str]  # (task id, absolute path): one kept brief


@dataclass(frozen=True)
class WatchSettings:
    debounce: float = hp.REFRESH_DEBOUNCE
    max_wait: float = hp.REFRESH_MAX_WAIT
    floor: float = hp.REFRESH_FLOOR
    #: Where detached registrations persist; None keeps them in memory only.
    path: Path | None = None
    #: Directories no brief may be written into (the runtime directory, the board's data
    #: directory); the registrations file's directory and the data directory the board reports
    #: are added to them.
    protected: tuple[Path, ...] = ()


class Refused(Exception):
    """A ``watch``/``watch-stop`` the hub will not serve; nothing was registered (nor written)."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def message_line(self, kind: str) -> dict[str, Any]:
        return hp.error(self.code, self.message, type=kind, **self.details)


class RenderFailed(Exception):
    def __init__(self, code: str, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        #: The card is gone (404): no retry will help.
        self.permanent = permanent


@dataclass(frozen=True)
class Rendered:
    markdown: str
    task_id: str
    identifier: str
    status: str


class Stream(Protocol):
    """What a foreground session offers: the hub's ``Connection``."""

    def send(self, message: dict[str, Any]) -> None: ...

    def close_after_flush(self) -> None: ...


@dataclass(eq=False)
class Card:
    ref: str  # as the registering caller spelled it
    task_id: str
    identifier: str
    path: str
    status: str | None = None
    #: The hub revision this file is known to reflect (every event up to it is in the brief).
    revision: int | None = None
    refreshed_at: str | None = None
    error: dict[str, str] | None = None

    @property
    def key(self) -> Key:
        return (self.task_id, self.path)

    def view(self) -> dict[str, Any]:
        return {
            "ref": self.ref, "task_id": self.task_id, "identifier": self.identifier, "path": self.path,
            "status": self.status, "revision": self.revision, "refreshed_at": self.refreshed_at, "error": self.error,
        }


@dataclass(eq=False)
class Watcher:
    """A foreground session's view: every card it watches, with the registration holding it and
    the ref as this session spelled it."""

    stream: Stream
    keys: dict[Key, tuple[Registration, str]] = field(default_factory=dict)
    owned: set[Registration] = field(default_factory=set)
    ended: bool = False
    released: bool = False


@dataclass(eq=False)
class Registration:
    id: str
    detached: bool
    ttl_ms: int
    created_at: float  # wall clock, seconds
    cards: dict[Key, Card]
    schedule: RefreshSchedule
    owner: Watcher | None = None
    #: Sessions receiving this registration's records: the owner first, then viewers.
    watchers: list[Watcher] = field(default_factory=list)
    ended: bool = False
    timer: asyncio.TimerHandle | None = None
    expiry: asyncio.TimerHandle | None = None
    batch: asyncio.Task[None] | None = None

    @property
    def expires_at(self) -> float | None:
        return self.created_at + self.ttl_ms / 1000 if self.ttl_ms else None

    def persisted(self) -> dict[str, Any]:
        return {
            "registration_id": self.id,
            "created_at": _iso(self.created_at),
            "ttl_ms": self.ttl_ms,
            "expires_at": _iso(self.expires_at),
            "cards": [
                {"ref": c.ref, "task_id": c.task_id, "identifier": c.identifier, "path": c.path}
                for c in self.cards.values()
            ],
        }

    def view(self) -> dict[str, Any]:
        return {
            "registration_id": self.id,
            "detached": self.detached,
            "refs": [card.ref for card in self.cards.values()],
            "ttl_ms": self.ttl_ms,
            "created_at": _iso(self.created_at),
            "expires_at": _iso(self.expires_at),
            "owner": self.owner is not None,
            "viewers": sum(1 for w in self.watchers if w is not self.owner),
            "cards": [card.view() for card in self.cards.values()],
        }


@dataclass
class _Planned:
    ref: str
    rendered: Rendered
    path: str
    state: str  # registered | viewer | covered | terminal
    holder: Registration | None = None
    written: bool = False

    @property
    def key(self) -> Key:
        return (self.rendered.task_id, self.path)


def _iso(seconds: float | None) -> str | None:
    return None if seconds is None else format_timestamp(datetime.fromtimestamp(seconds, UTC))


def _seconds(text: str) -> float:
    return parse_timestamp(text).timestamp()


def _now_iso() -> str:
    return _iso(time.time()) or ""


class Registrations:
    """Every registration of one hub, their indexes, the two locks and the board client."""

    def __init__(
        self,
        board_url: str,
        board_token: str,
        *,
        settings: WatchSettings | None = None,
        revision: Callable[[], int | None] = lambda: None,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self._url = board_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {board_token}", "Accept": "application/json"}
        self.settings = settings or WatchSettings()
        self._revision = revision
        self._on_change = on_change
        self._by_id: dict[str, Registration] = {}
        self._by_key: dict[Key, Registration] = {}
        self._by_path: dict[str, Key] = {}
        self._by_task: dict[str, set[Registration]] = {}
        self._register_lock = asyncio.Lock()
        self._render_lock = asyncio.Lock()
        self._http: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping = False
        #: The board's data directory as ``GET /api/v1/board/status`` reported it ("" if it did not).
        self._board_data_dir: str | None = None
        #: Set once the persisted registrations are back (``watch-status`` answers after it).
        self.rehydrated = asyncio.Event()
        #: Renders and writes done (the bench and the tests read these).
        self.renders = 0
        self.writes = 0

    def count(self) -> int:
        return len(self._by_id)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Rehydrate persisted detached registrations; new ``watch`` requests wait for it."""
        await self._register_lock.acquire()
        self._spawn(self._rehydrate())

    async def stop(self) -> None:
        """Stop refreshing. Detached registrations stay in the file for the next hub; foreground
        ones end with their sessions (the hub has said ``shutdown`` to those)."""
        self._stopping = True
        for reg in self._by_id.values():
            for handle in (reg.timer, reg.expiry):
                if handle is not None:
                    handle.cancel()
        tasks = [task for task in self._tasks if not task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("registrations_task_failed", error=repr(task.exception()))

    # -- the board ----------------------------------------------------------------------------

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(
                headers=self._headers, timeout=aiohttp.ClientTimeout(total=EXPORT_TIMEOUT)
            )
        return self._http

    async def render(self, ref: str) -> Rendered:
        """The board's brief of one card; ``RenderFailed`` says whether trying again can help."""
        try:
            async with self._session().post(f"{self._url}/api/v1/export", json={"ref": ref}) as response:
                body = await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise RenderFailed(hp.BOARD_UNAVAILABLE, f"cannot reach the board: {type(exc).__name__}: {exc}",
                               permanent=False) from None
        self.renders += 1
        try:
            data = orjson.loads(body)
            if status == 200:
                task = data["task"]
                return Rendered(str(data["markdown"]), str(task["id"]), str(task["identifier"]), str(task["status"]))
            code, message = str(data["error"]["code"]), str(data["error"]["message"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise RenderFailed(hp.BOARD_UNAVAILABLE, f"the board answered {status} without a Taskloom body",
                               permanent=False) from None
        if status == 404:
            raise RenderFailed(hp.NOT_FOUND, message, permanent=True)
        raise RenderFailed(hp.BOARD_UNAVAILABLE, f"the board answered {status} {code}: {message}", permanent=False)

    async def protected_dirs(self) -> tuple[str, ...]:
        """Where no brief may go: our own state and the board's, whatever the request says."""
        if self._board_data_dir is None:
            try:
                async with self._session().get(f"{self._url}/api/v1/board/status") as response:
                    body = await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError, OSError):
                status, body = 0, b""  # the board is down: ask again next time
            if status:
                try:
                    reported = orjson.loads(body).get("data_dir") if status == 200 else None
                except (orjson.JSONDecodeError, AttributeError):
                    reported = None
                self._board_data_dir = reported if isinstance(reported, str) else ""
        return self._own_dirs() + ((self._board_data_dir,) if self._board_data_dir else ())

    def _own_dirs(self) -> tuple[str, ...]:
        dirs = [str(directory) for directory in self.settings.protected]
        if self.settings.path is not None:
            dirs.append(str(self.settings.path.parent))
        return tuple(dirs)

    async def _write(self, path: str, markdown: str) -> bool:
        written = await asyncio.get_running_loop().run_in_executor(None, write_brief, path, markdown.encode("utf-8"))
        if written:
            self.writes += 1
        return written

    # -- events from the board link -------------------------------------------------------------

    def board_event(self, activity: dict[str, Any]) -> None:
        if not self._by_id:
            return
        named = tasks_named(activity)
        if named is None:
            self.mark_all()
            return
        now = asyncio.get_running_loop().time()
        for task_id in named:
            for reg in self._by_task.get(task_id, ()):
                reg.schedule.mark(now, (task_id,))
                self._arm(reg)

    def mark_all(self) -> None:
        """Every card of every registration re-renders (a task-less event, a board (re)connect)."""
        now = asyncio.get_running_loop().time()
        for reg in self._by_id.values():
            reg.schedule.mark(now)
            self._arm(reg)

    # -- the refresh loop ---------------------------------------------------------------------

    def _arm(self, reg: Registration) -> None:
        if reg.ended or self._stopping or reg.batch is not None:
            return  # a running batch re-arms when it ends
        due = reg.schedule.due()
        if due is None:
            return
        if reg.timer is not None:
            if reg.timer.when() == due:
                return
            reg.timer.cancel()
        reg.timer = asyncio.get_running_loop().call_at(due, self._start_batch, reg)

    def _start_batch(self, reg: Registration) -> None:
        reg.timer = None
        if reg.ended or self._stopping:
            return
        reg.batch = self._spawn(self._batch(reg))

    async def _batch(self, reg: Registration) -> None:
        try:
            async with self._render_lock:
                if reg.ended:
                    return
                everything, keys = reg.schedule.take(asyncio.get_running_loop().time())
                cards = [card for card in reg.cards.values() if everything or card.task_id in keys]
                revision = self._revision()
                for card in cards:
                    if reg.ended:
                        break
                    if card.key in reg.cards:
                        await self._refresh(reg, card, revision)
        finally:
            reg.batch = None
            if not reg.ended:
                self._arm(reg)

    async def _refresh(self, reg: Registration, card: Card, revision: int | None) -> None:
        try:
            rendered = await self.render(card.task_id)
            await self._write(card.path, rendered.markdown)
        except (RenderFailed, OSError) as exc:
            if isinstance(exc, RenderFailed):
                code, message = exc.code, exc.message
            else:
                code, message = hp.WRITE_FAILED, f"cannot write {card.path}: {exc.strerror or exc}"
            card.error = {"code": code, "message": message}
            log.info("brief_refresh_failed", registration=reg.id, card=card.identifier, code=code, message=message)
            self._tell(reg, card, lambda ref: hp.refresh_failed(ref=ref, path=card.path, code=code, message=message))
            return
        if reg.ended:
            return
        card.status, card.revision, card.refreshed_at, card.error = rendered.status, revision, _now_iso(), None
        self._tell(reg, card, lambda ref: hp.refresh(ref=ref, path=card.path, revision=revision, status=rendered.status))
        if rendered.status in hp.TERMINAL_STATUSES:
            self._drop_card(reg, card, reason=rendered.status)

    def _tell(self, reg: Registration, card: Card, build: Callable[[str], dict[str, Any]]) -> None:
        for watcher in list(reg.watchers):
            held = watcher.keys.get(card.key)
            if held is not None and not watcher.ended:
                watcher.stream.send(build(held[1]))

    # -- the registry -------------------------------------------------------------------------

    def _index(self, reg: Registration, card: Card) -> None:
        reg.cards[card.key] = card
        self._by_key[card.key] = reg
        self._by_path[card.path] = card.key
        self._by_task.setdefault(card.task_id, set()).add(reg)

    def _unindex(self, reg: Registration, card: Card) -> None:
        reg.cards.pop(card.key, None)
        if self._by_key.get(card.key) is reg:
            del self._by_key[card.key]
            self._by_path.pop(card.path, None)
        holders = self._by_task.get(card.task_id)
        if holders is not None:
            if not any(c.task_id == card.task_id for c in reg.cards.values()):
                holders.discard(reg)
            if not holders:
                del self._by_task[card.task_id]

    def _add(self, reg: Registration, cards: Iterable[Card]) -> None:
        for card in cards:
            self._index(reg, card)
        self._by_id[reg.id] = reg
        expires_at = reg.expires_at
        if expires_at is not None:
            delay = max(0.0, expires_at - time.time())
            reg.expiry = asyncio.get_running_loop().call_later(delay, self._expire, reg)

    def _expire(self, reg: Registration) -> None:
        reg.expiry = None
        log.info("registration_ttl", registration=reg.id, ttl_ms=reg.ttl_ms)
        self._end(reg, "ttl", hp.ttl(ttl_ms=reg.ttl_ms))

    def _drop_card(self, reg: Registration, card: Card, *, reason: str) -> None:
        """A card leaves its registration (terminal, gone); its watchers may be done."""
        self._unindex(reg, card)
        log.info("brief_dropped", registration=reg.id, card=card.identifier, reason=reason)
        if not reg.cards:
            self._end(reg, "done")
        elif reg.detached:
            self._persist()
        for watcher in list(reg.watchers):
            if watcher.keys.pop(card.key, None) is not None and not watcher.keys:
                self._end_watcher(watcher, hp.done())

    def _end(self, reg: Registration, reason: str, message: dict[str, Any] | None = None) -> None:
        """Retire a registration; its sessions get ``message`` (``ttl``, ``shutdown``) and close."""
        if reg.ended:
            return
        reg.ended = True
        for handle in (reg.timer, reg.expiry):
            if handle is not None:
                handle.cancel()
        reg.timer = reg.expiry = None
        for card in list(reg.cards.values()):
            self._unindex(reg, card)
        self._by_id.pop(reg.id, None)
        log.info("registration_ended", registration=reg.id, reason=reason, detached=reg.detached)
        if message is not None:
            for watcher in list(reg.watchers):
                self._end_watcher(watcher, message)
        if reg.detached:
            self._persist()
        self._on_change()

    def _end_watcher(self, watcher: Watcher, message: dict[str, Any]) -> None:
        if watcher.ended:
            return
        watcher.ended = True
        watcher.stream.send(message)
        watcher.stream.close_after_flush()
        self.session_closed(watcher)

    def session_closed(self, watcher: Watcher) -> None:
        """A foreground session ended: it stops viewing; what it owned passes to a viewer, or ends."""
        if watcher.released:
            return
        watcher.released = True
        watcher.ended = True
        involved = {holder for holder, _ in watcher.keys.values()} | watcher.owned
        for reg in involved:
            if watcher in reg.watchers:
                reg.watchers.remove(watcher)
        for reg in watcher.owned:
            if reg.owner is not watcher or reg.ended:
                continue
            heir = next((w for w in reg.watchers if not w.ended), None)
            reg.owner = heir
            if heir is not None:
                heir.owned.add(reg)
                log.info("registration_handed_over", registration=reg.id)
            else:
                self._end(reg, "owner_left")
        watcher.owned.clear()

    # -- requests -----------------------------------------------------------------------------

    async def watch(self, fields: dict[str, Any], stream: Stream) -> Watcher | None:
        """Serve one validated ``watch``: check, render, write the first snapshots, then answer
        ``registered`` on ``stream`` (and, for a foreground request, the records that follow).

        Returns the session's :class:`Watcher` for a foreground request that is still running.
        Raises :class:`Refused` with nothing registered and nothing written.
        """
        async with self._register_lock:
            if self._stopping:
                raise Refused(hp.NOT_AVAILABLE, "the hub is stopping; ask the next one")
            plan, revision = await self._plan(fields)
            return self._commit(plan, fields, stream, revision)

    async def _plan(self, fields: dict[str, Any]) -> tuple[list[_Planned], int | None]:
        detach = fields["detach"]
        protected = await self.protected_dirs()
        if fields["cards"] is not None:
            wanted = [(card["ref"], card["out"]) for card in fields["cards"]]
            problems = [
                problem for _, out in wanted
                if (problem := protected_problem(out, protected) or path_problem(out))
            ]
        else:
            wanted = [(ref, None) for ref in fields["refs"]]
            problem = protected_problem(fields["dir"], protected) or path_problem(fields["dir"], directory=True)
            problems = [problem] if problem else []
        if problems:
            raise Refused(hp.VALIDATION_FAILED, "; ".join(problems), field="paths", problems=problems)
        async with self._render_lock:
            revision = self._revision()
            rendered: dict[str, Rendered] = {}
            missing: list[str] = []
            unavailable: list[str] = []
            reason = ""
            for ref, _ in wanted:
                try:
                    rendered[ref] = await self.render(ref)
                except RenderFailed as exc:
                    if exc.permanent:
                        missing.append(ref)
                    else:
                        unavailable.append(ref)
                        reason = exc.message
            if missing:
                raise Refused(hp.NOT_FOUND, f"no such card: {', '.join(missing)}", refs=missing)
            if unavailable:
                raise Refused(hp.BOARD_UNAVAILABLE, f"cannot render {', '.join(unavailable)}: {reason}",
                              refs=unavailable)
            plan: list[_Planned] = []
            seen: dict[str, str] = {}
            for ref, out in wanted:
                card = rendered[ref]
                if card.task_id in seen:
                    raise Refused(hp.VALIDATION_FAILED, f"{seen[card.task_id]} and {ref} name the same card",
                                  field="refs", refs=[seen[card.task_id], ref])
                seen[card.task_id] = ref
                if out is None:
                    path = dir_target(fields["dir"], card.identifier)
                    if problem := protected_problem(path, protected) or path_problem(path):
                        raise Refused(hp.VALIDATION_FAILED, problem, field="paths", problems=[problem])
                else:
                    path = out
                plan.append(self._classify(ref, card, path, detach))
            for item in plan:
                if item.state == "covered":
                    continue
                try:
                    await self._write(item.path, item.rendered.markdown)
                except OSError as exc:
                    raise Refused(hp.WRITE_FAILED, f"cannot write {item.path}: {exc.strerror or exc}",
                                  path=item.path) from None
                item.written = True
        return plan, revision

    def _classify(self, ref: str, card: Rendered, path: str, detach: bool) -> _Planned:
        key = (card.task_id, path)
        kept = self._by_path.get(path)
        if kept is not None and kept != key:
            other = self._by_key[kept]
            raise Refused(hp.WATCH_CONFLICT, f"{path} is kept for another card by registration {other.id}",
                          path=path, registration_id=other.id)
        holder = self._by_key.get(key)
        if card.status in hp.TERMINAL_STATUSES:
            return _Planned(ref, card, path, "terminal", holder)
        if holder is None:
            return _Planned(ref, card, path, "registered")
        if not detach:
            return _Planned(ref, card, path, "viewer", holder)
        if holder.detached:
            return _Planned(ref, card, path, "covered", holder)
        raise Refused(
            hp.WATCH_CONFLICT,
            f"{ref} at {path} is kept by a foreground watcher (registration {holder.id}), which ends with its "
            "session; stop it or watch in the foreground",
            path=path, registration_id=holder.id,
        )

    def _commit(self, plan: list[_Planned], fields: dict[str, Any], stream: Stream, revision: int | None) -> Watcher | None:
        """Index what the plan registers and answer; no ``await`` here, so nothing moves underneath."""
        detach = fields["detach"]
        for item in plan:
            # A holder may have ended while we rendered (TTL, its owner left): keep the card ourselves.
            if item.state in ("viewer", "covered") and (item.holder is None or item.holder.ended):
                item.state, item.holder = "registered", None
        fresh = [item for item in plan if item.state == "registered"]
        reg: Registration | None = None
        if fresh:
            reg = Registration(
                id="w_" + secrets.token_hex(8),
                detached=detach,
                ttl_ms=fields["ttl_ms"],
                created_at=time.time(),
                cards={},
                schedule=RefreshSchedule(self.settings.debounce, self.settings.max_wait, self.settings.floor),
            )
            now = _now_iso()
            cards = []
            for item in fresh:
                r = item.rendered
                cards.append(Card(item.ref, r.task_id, r.identifier, item.path, r.status,
                                  revision if item.written else None, now if item.written else None))
            self._add(reg, cards)
            # Events that reached the hub while we rendered were routed before this registration
            # existed; and a covered card whose holder ended meanwhile was never written by us.
            stale = self._revision() != revision
            unwritten = [item.rendered.task_id for item in fresh if stale or not item.written]
            if unwritten:
                reg.schedule.mark(asyncio.get_running_loop().time(), unwritten)
                self._arm(reg)
        for item in plan:
            if item.state == "viewer" and item.written and item.holder is not None:
                held = item.holder.cards.get(item.key)
                if held is not None:
                    held.status, held.revision, held.refreshed_at = item.rendered.status, revision, _now_iso()
        watcher: Watcher | None = None
        if not detach:
            watcher = Watcher(stream)
            if reg is not None:
                reg.owner = watcher
                reg.watchers.append(watcher)
                watcher.owned.add(reg)
            for item in plan:
                if item.state == "registered" and reg is not None:
                    watcher.keys[item.key] = (reg, item.ref)
                elif item.state == "viewer" and item.holder is not None:
                    watcher.keys[item.key] = (item.holder, item.ref)
                    if watcher not in item.holder.watchers:
                        item.holder.watchers.append(watcher)
        stream.send(self._answer(plan, reg))
        log.info(
            "watch_registered",
            registration=reg.id if reg else None,
            detached=detach,
            states={item.rendered.identifier: item.state for item in plan},
        )
        if reg is not None and reg.detached:
            self._persist()
        self._on_change()
        if watcher is None:
            return None
        for item in plan:
            if item.written:
                stream.send(hp.refresh(ref=item.ref, path=item.path, revision=revision, status=item.rendered.status))
        if not watcher.keys:
            self._end_watcher(watcher, hp.done())
            return None
        return watcher

    @staticmethod
    def _answer(plan: list[_Planned], reg: Registration | None) -> dict[str, Any]:
        cards = [
            {
                "ref": item.ref, "task_id": item.rendered.task_id, "identifier": item.rendered.identifier,
                "path": item.path, "status": item.rendered.status, "state": item.state,
                "registration_id": reg.id if item.state == "registered" and reg else (item.holder.id if item.holder else None),
            }
            for item in plan
        ]
        if reg is not None:
            refs = [item.ref for item in plan if item.state == "registered"]
            return hp.registered(registration_id=reg.id, refs=refs, reused=False, running=True, cards=cards)
        viewed = [item for item in plan if item.state == "viewer"]
        if viewed:
            holder = viewed[0].holder
            return hp.registered(
                registration_id=holder.id if holder else None, refs=[item.ref for item in viewed], reused=True,
                running=True, reason=hp.REASON_VIEWER, cards=cards,
            )
        if any(item.state == "covered" for item in plan):
            return hp.registered(registration_id=None, refs=[], reused=True, running=True,
                                 reason=hp.REASON_COVERED, cards=cards)
        return hp.registered(registration_id=None, refs=[], reused=False, running=False,
                             reason=hp.REASON_TERMINAL, cards=cards)

    async def status(self) -> dict[str, Any]:
        """``watch-status``; a hub that is still rehydrating answers once it has finished."""
        await self.rehydrated.wait()
        return hp.watch_status([reg.view() for reg in self._by_id.values()])

    async def stop_registration(self, registration_id: str) -> dict[str, Any]:
        """``watch-stop``: end a registration now; its sessions get ``shutdown``."""
        async with self._register_lock:
            reg = self._by_id.get(registration_id)
            if reg is None:
                raise Refused(hp.NOT_FOUND, f"no registration {registration_id!r}", registration_id=registration_id)
            refs = [card.ref for card in reg.cards.values()]
            self._end(reg, "stopped", hp.shutdown(reason=hp.SHUTDOWN_WATCH_STOPPED))
            return hp.watch_stopped(registration_id=registration_id, refs=refs)

    # -- persistence --------------------------------------------------------------------------

    def _persist(self) -> None:
        path = self.settings.path
        if path is None or self._stopping:
            return
        record = {
            "version": hp.REGISTRATIONS_VERSION,
            "board": self._url,
            "registrations": [reg.persisted() for reg in self._by_id.values() if reg.detached],
        }
        try:
            write_json_atomic(path, record)
        except OSError as exc:
            log.error("registrations_not_saved", path=str(path), error=str(exc))

    async def _rehydrate(self) -> None:
        """Bring back the detached registrations a previous hub (of any generation) persisted."""
        try:
            path = self.settings.path
            record = read_json(path) if path is not None else None
            if record is None:
                return
            if record.get("version") != hp.REGISTRATIONS_VERSION or not isinstance(record.get("registrations"), list):
                log.warning("registrations_file_ignored", path=str(path), version=record.get("version"))
                return
            for entry in record["registrations"]:
                reg = self._parse(entry)
                if reg is None:
                    continue
                await self._rehydrate_one(reg)
            self._persist()
            self._on_change()
        finally:
            self.rehydrated.set()
            self._register_lock.release()

    def _parse(self, entry: Any) -> tuple[Registration, list[Card]] | None:
        try:
            cards = [
                Card(str(c["ref"]), str(c["task_id"]), str(c["identifier"]), str(c["path"]))
                for c in entry["cards"]
            ]
            ttl_ms = int(entry["ttl_ms"])
            reg = Registration(
                id=str(entry["registration_id"]),
                detached=True,
                ttl_ms=ttl_ms,
                created_at=_seconds(entry["created_at"]),
                cards={},
                schedule=RefreshSchedule(self.settings.debounce, self.settings.max_wait, self.settings.floor),
            )
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("registration_unusable", entry=str(entry)[:200], error=repr(exc))
            return None
        if not cards or any(not os.path.isabs(c.path) for c in cards) or reg.id in self._by_id:
            log.warning("registration_unusable", registration=str(entry.get("registration_id")))
            return None
        own = self._own_dirs()
        if any(protected_problem(c.path, own) for c in cards):
            # Written by a hub that did not check: keeping it would clobber our own state again.
            log.warning("registration_unusable", registration=reg.id, reason="protected_path")
            return None
        if reg.expires_at is not None and reg.expires_at <= time.time():
            log.info("registration_expired", registration=reg.id)
            return None
        return reg, cards

    async def _rehydrate_one(self, parsed: tuple[Registration, list[Card]]) -> None:
        reg, cards = parsed
        kept: list[Card] = []
        deferred: list[str] = []
        async with self._render_lock:
            revision = self._revision()
            for card in cards:
                if card.path in self._by_path:
                    log.warning("brief_dropped", registration=reg.id, card=card.identifier, reason="path_kept_elsewhere")
                    continue
                try:
                    rendered = await self.render(card.task_id)
                except RenderFailed as exc:
                    if exc.permanent:
                        log.info("brief_dropped", registration=reg.id, card=card.identifier, reason="gone")
                        continue
                    log.info("brief_deferred", registration=reg.id, card=card.identifier, reason=exc.message)
                    kept.append(card)
                    deferred.append(card.task_id)
                    continue
                try:
                    await self._write(card.path, rendered.markdown)
                except OSError as exc:
                    log.info("brief_deferred", registration=reg.id, card=card.identifier, reason=str(exc))
                    kept.append(card)
                    deferred.append(card.task_id)
                    continue
                if rendered.status in hp.TERMINAL_STATUSES:
                    log.info("brief_dropped", registration=reg.id, card=card.identifier, reason=rendered.status)
                    continue
                card.status, card.revision, card.refreshed_at = rendered.status, revision, _now_iso()
                kept.append(card)
        if not kept:
            log.info("registration_ended", registration=reg.id, reason="rehydrated_empty", detached=True)
            return
        self._add(reg, kept)
        log.info("registration_rehydrated", registration=reg.id, cards=len(kept), deferred=len(deferred))
        if self._revision() != revision:  # events routed while we rendered missed this registration
            deferred = [card.task_id for card in kept]
        if deferred:
            reg.schedule.mark(asyncio.get_running_loop().time(), deferred)
            self._arm(reg)
