"""Card-brief registrations (SPEC §7.4): the hub's executor of the registry's actions.

The rules are in ``registry.py`` (events in, actions out, no I/O). This module carries the actions
out for the hub: it renders through the board's ``POST /api/v1/export``, checks and writes brief
files (``briefs.path_problem``, ``briefs.write_brief``, in the default thread pool), persists the
registrations file off the event loop (one writer task, latest snapshot wins, written atomically),
sends records to sessions and runs the registry's one timer.

A change is announced only once it is durable: while a snapshot of the registrations file is being
written, records and answers wait for it (in order), and so does the count the hub reports, so a
client that got ``registered`` or ``watch-stopped`` (or saw a TTL end) finds it on disk.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os.path
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import orjson
import structlog

from shared import hub_protocol as hp

from . import registry as rg
from .board_link import OwnListenerConnector
from .briefs import path_problem, protected_problem, write_brief
from .pointer import read_json, write_json_atomic
from .port_owner import ForeignListener
from .registry import Refused, Rendered, RenderFailed

__all__ = ["EXPORT_TIMEOUT", "Refused", "Registrations", "RenderFailed", "Rendered", "Watcher", "WatchSettings"]

log = structlog.get_logger("taskhub")

#: One export request may take this long before the render counts as failed, seconds.
EXPORT_TIMEOUT = 15.0


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


class Stream(Protocol):
    """What a foreground session offers: the hub's ``Connection``."""

    def send(self, message: dict[str, Any]) -> None: ...

    def push_refresh(self, message: dict[str, Any]) -> None:
        """A ``refresh`` record: news about a brief already on disk, which a session that is not
        reading may miss (its outbox stays bounded); every other record goes through ``send``."""

    def close_after_flush(self) -> None: ...


@dataclass(eq=False)
class Watcher:
    """A foreground session's handle on the registry (its ticket)."""

    ticket: rg.Ticket
    stream: Stream


class _SnapshotWriter:
    """Writes the registrations file in a thread, one write at a time; only the newest snapshot
    submitted meanwhile is written next (each is the whole state)."""

    def __init__(self, path: Path, on_idle: Callable[[], None]) -> None:
        self._path = path
        self._on_idle = on_idle
        self._latest: dict[str, Any] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        return self._task is not None

    def submit(self, record: dict[str, Any]) -> None:
        self._latest = record
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            while self._latest is not None:
                record, self._latest = self._latest, None
                try:
                    await asyncio.to_thread(write_json_atomic, self._path, record)
                except OSError as exc:
                    log.error("registrations_not_saved", path=str(self._path), error=str(exc))
        finally:
            self._task = None
            self._on_idle()

    async def idle(self) -> None:
        while self._task is not None:
            await asyncio.shield(self._task)


class Registrations:
    """The hub's registry, and the board client, files and timer that serve it."""

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
        self.registry = rg.Registry(
            board=self._url,
            cadence=rg.Cadence(self.settings.debounce, self.settings.max_wait, self.settings.floor),
            persistent=self.settings.path is not None,
        )
        #: Held around every render and write (they are serial: the registry asks for one at a time).
        self._render_lock = asyncio.Lock()
        self._http: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._tickets = itertools.count(1)
        self._streams: dict[rg.Ticket, Stream] = {}
        self._pending: dict[rg.Ticket, asyncio.Future[rg.Answer]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._writer = _SnapshotWriter(self.settings.path, self._durable) if self.settings.path else None
        #: What waits for the registrations file to be written (see the module's docstring).
        self._outbox: deque[Callable[[], None]] = deque()
        self._held = False
        self._draining = False
        self._count = 0
        self._stopping = False
        #: The board's data directory as ``GET /api/v1/board/status`` reported it ("" if it did not).
        self._board_data_dir: str | None = None
        #: Set once the persisted registrations are back (``watch-status`` answers after it).
        self.rehydrated = asyncio.Event()
        #: Renders and writes done (the bench and the tests read these).
        self.renders = 0
        self.writes = 0
        #: When the latest renders began (monotonic): the refresh floor is measured here, where it
        #: is kept, not where a follower's delivery jitter would blur it.
        self.render_starts: deque[float] = deque(maxlen=1024)

    def count(self) -> int:
        return self._count

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Rehydrate persisted detached registrations; new ``watch`` requests wait for it."""
        self._spawn(self._rehydrate())

    async def _rehydrate(self) -> None:
        path = self.settings.path
        try:
            record = await asyncio.to_thread(read_json, path) if path is not None else None
            kept = self._without_protected(record)
        except Exception:  # a file of a shape nobody foresaw: ignored, as an unreadable one is
            log.exception("registrations_file_unusable", path=str(path))
            kept = None
        # Always fed, or rehydration would never end and every ``watch`` would wait for it.
        self._feed(rg.Restore(kept))

    def _without_protected(self, record: dict[str, Any] | None) -> dict[str, Any] | None:
        """Entries with a brief inside our own state were written by a hub that did not check:
        keeping them would clobber that state again."""
        if record is None or not isinstance(record.get("registrations"), list):
            return record
        own = self._own_dirs()
        kept = []
        for entry in record["registrations"]:
            try:
                paths = [str(card["path"]) for card in entry["cards"]]
            except (KeyError, TypeError, ValueError):
                kept.append(entry)  # the registry says why it is unusable
                continue
            try:
                protected = any(protected_problem(path, own) for path in paths if os.path.isabs(path))
            except ValueError:  # a path no file can have (a NUL in it): the entry cannot be used
                log.warning("registration_unusable", registration=str(entry.get("registration_id")),
                            reason="unusable_path")
                continue
            if protected:
                log.warning("registration_unusable", registration=str(entry.get("registration_id")),
                            reason="protected_path")
                continue
            kept.append(entry)
        return {**record, "registrations": kept}

    async def stop(self) -> None:
        """Stop refreshing. Detached registrations stay in the file for the next hub; foreground
        ones end with their sessions (the hub has said ``shutdown`` to those)."""
        self._stopping = True
        self._feed(rg.Shutdown())
        tasks = [task for task in self._tasks if not task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._writer is not None:
            await self._writer.idle()
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

    # -- feeding the registry and carrying out what it says -------------------------------------

    def _feed(self, event: rg.Event, *, now: float | None = None) -> None:
        clock = asyncio.get_running_loop().time()
        actions = self.registry.handle(
            event, now=clock if now is None else max(now, clock), wall=time.time(), revision=self._revision()
        )
        if self._writer is not None and any(isinstance(action, rg.Persist) for action in actions):
            self._held = True  # everything this event announces waits for the file
        count = self.registry.count()
        self._deliver(lambda: setattr(self, "_count", count))
        for action in actions:
            self._perform(action)

    def _perform(self, action: rg.Action) -> None:
        if isinstance(action, rg.Send):
            stream = self._streams.get(action.ticket)
            if stream is not None:
                send = stream.push_refresh if action.message.get("type") == "refresh" else stream.send
                self._deliver(functools.partial(send, action.message))
        elif isinstance(action, rg.Close):
            stream = self._streams.pop(action.ticket, None)
            if stream is not None:
                self._deliver(stream.close_after_flush)
        elif isinstance(action, rg.Answer | rg.Refuse):
            future = self._pending.pop(action.ticket, None)
            watching = isinstance(action, rg.Answer) and action.watching
            if not watching:
                self._streams.pop(action.ticket, None)
            elif future is None or future.done():
                # The request's caller is gone (its task was cancelled): so is the session.
                self._streams.pop(action.ticket, None)
                asyncio.get_running_loop().call_soon(self._feed, rg.SessionClosed(action.ticket))
            if future is not None and not future.done():
                if isinstance(action, rg.Refuse):
                    future.set_exception(action.refused)
                else:
                    future.set_result(action)
        elif isinstance(action, rg.CheckPaths):
            self._spawn(self._check(action))
        elif isinstance(action, rg.Render):
            self._spawn(self._render_step(action.ref))
        elif isinstance(action, rg.Write):
            self._spawn(self._write_step(action.path, action.markdown))
        elif isinstance(action, rg.Persist):
            if self._writer is not None:
                self._writer.submit(action.record)
        elif isinstance(action, rg.ArmTimer):
            self._arm(action.at)
        elif isinstance(action, rg.Ended):
            log.info("registration_ended", registration=action.registration_id, reason=action.reason,
                     detached=action.detached)
        elif isinstance(action, rg.Changed):
            self._deliver(self._on_change)
        elif isinstance(action, rg.Restored):
            self._deliver(self.rehydrated.set)
        elif isinstance(action, rg.Note):
            getattr(log, action.level)(action.event, **action.fields)
        # rg.Batched: the hub has no use for the batch's cursor.

    def _deliver(self, deed: Callable[[], None]) -> None:
        self._outbox.append(deed)
        self._drain()

    def _drain(self) -> None:
        if self._draining:
            return
        self._draining = True
        try:
            while self._outbox and not self._held:
                self._outbox.popleft()()
        finally:
            self._draining = False

    def _durable(self) -> None:
        """The registrations file holds the newest snapshot: what waited for it goes out."""
        self._held = False
        self._drain()

    async def _settled(self) -> None:
        if self._writer is not None:
            await self._writer.idle()

    def _arm(self, at: float | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if at is not None and not self._stopping:
            self._timer = asyncio.get_running_loop().call_at(at, self._fire, at)

    def _fire(self, at: float) -> None:
        self._timer = None
        self._feed(rg.Tick(), now=at)

    # -- the I/O the registry asks for ----------------------------------------------------------

    async def _check(self, action: rg.CheckPaths) -> None:
        protected = await self.protected_dirs()
        problems = tuple(
            protected_problem(path, protected) or path_problem(path, directory=action.directory)
            for path in action.paths
        )
        self._feed(rg.PathsChecked(problems))

    async def protected_dirs(self) -> tuple[str, ...]:
        """Where no brief may go: our own state and the board's, whatever the request says."""
        if self._board_data_dir is None:
            try:
                async with self._session().get(f"{self._url}/api/v1/board/status") as response:
                    body = await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError, OSError, ForeignListener):
                status, body = 0, b""
            # Only a board that is serving says where its files are. Any other answer (the board
            # down, its database away, a token it no longer takes) is no word on it: remembered as
            # "no data directory", it let every later watch write a brief over the board's token.
            if status == 200:
                try:
                    reported = orjson.loads(body).get("data_dir")
                except (orjson.JSONDecodeError, AttributeError):
                    reported = None
                self._board_data_dir = reported if isinstance(reported, str) else ""
        return self._own_dirs() + ((self._board_data_dir,) if self._board_data_dir else ())

    def _own_dirs(self) -> tuple[str, ...]:
        dirs = [str(directory) for directory in self.settings.protected]
        if self.settings.path is not None:
            dirs.append(str(self.settings.path.parent))
        return tuple(dirs)

    async def _render_step(self, ref: str) -> None:
        async with self._render_lock:
            try:
                result: Rendered | RenderFailed = await self.render(ref)
            except RenderFailed as exc:
                result = exc
        self._feed(rg.RenderDone(result))

    async def _write_step(self, path: str, markdown: str) -> None:
        async with self._render_lock:
            try:
                await self._write(path, markdown)
            except OSError as exc:
                self._feed(rg.WriteDone(exc))
                return
        self._feed(rg.WriteDone())

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(
                headers=self._headers, timeout=aiohttp.ClientTimeout(total=EXPORT_TIMEOUT),
                connector=OwnListenerConnector(),  # another user's socket on the board's port gets no token
            )
        return self._http

    async def render(self, ref: str) -> Rendered:
        """The board's brief of one card; ``RenderFailed`` says whether trying again can help."""
        self.render_starts.append(time.monotonic())
        try:
            async with self._session().post(f"{self._url}/api/v1/export", json={"ref": ref}) as response:
                body = await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError, OSError, ForeignListener) as exc:
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

    async def _write(self, path: str, markdown: str) -> bool:
        written = await asyncio.get_running_loop().run_in_executor(None, write_brief, path, markdown.encode("utf-8"))
        if written:
            self.writes += 1
        return written

    # -- events from the board link -------------------------------------------------------------

    def board_event(self, activity: dict[str, Any]) -> None:
        if self.registry.count():
            self._feed(rg.BoardEvent(activity))

    def board_signal(self, signal: dict[str, Any]) -> None:
        """A condition signal: ``card_blocked`` / ``card_unblocked`` re-render that card's briefs."""
        if self.registry.count():
            self._feed(rg.BoardSignal(signal))

    def mark_all(self) -> None:
        """Every card of every registration re-renders (a task-less event, a board (re)connect)."""
        self._feed(rg.BoardOpened())

    # -- requests -----------------------------------------------------------------------------

    async def _ask(self, event: Callable[[rg.Ticket], rg.Event], stream: Stream | None) -> rg.Answer:
        ticket = next(self._tickets)
        future: asyncio.Future[rg.Answer] = asyncio.get_running_loop().create_future()
        self._pending[ticket] = future
        if stream is not None:
            self._streams[ticket] = stream
        self._feed(event(ticket))
        try:
            return await future
        finally:
            self._pending.pop(ticket, None)
            await self._settled()

    async def watch(self, fields: dict[str, Any], stream: Stream) -> Watcher | None:
        """Serve one validated ``watch``: check, render, write the first snapshots, then answer
        ``registered`` on ``stream`` (and, for a foreground request, the records that follow).

        Returns the session's :class:`Watcher` for a foreground request that is still running.
        Raises :class:`Refused` with nothing registered and nothing written.
        """
        answer = await self._ask(lambda ticket: rg.Watch(ticket, fields), stream)
        return Watcher(answer.ticket, stream) if answer.watching else None

    async def stop_registration(self, registration_id: str) -> dict[str, Any]:
        """``watch-stop``: end a registration now; its sessions get ``shutdown``."""
        answer = await self._ask(lambda ticket: rg.Stop(ticket, registration_id), None)
        assert answer.message is not None
        return answer.message

    async def status(self) -> dict[str, Any]:
        """``watch-status``; a hub that is still rehydrating answers once it has finished."""
        await self.rehydrated.wait()
        return hp.watch_status(self.registry.views())

    def session_closed(self, watcher: Watcher) -> None:
        """A foreground session ended: it stops viewing; what it owned passes to a viewer, or ends."""
        self._streams.pop(watcher.ticket, None)
        self._feed(rg.SessionClosed(watcher.ticket))
