"""The card-brief registry (SPEC §7.4), with no I/O: events in, actions out.

Every rule of a registration lives here: the four indexes, the ``watch`` checks that need the
hub's state, owner / viewer / covered, TTL and terminal cards, what is re-rendered when (the
cadence of ``cadence.py``, one batch at a time per registration and one render at a time in the
whole registry), what is persisted and how a persisted file comes back. Like ``protocol.Session``
(and h11's ``receive_data``), :meth:`Registry.handle` takes one event and returns the actions it
implies; time and the board's revision are passed in. It opens no socket, reads no clock and
touches no file, so each rule is tested without any (``tests/hub/test_registry_*.py``).

Two executors carry the actions out: the hub's (``registrations.py``: renders over HTTP, writes
files, persists off the event loop, sends records to sessions, runs one timer) and the standalone
watcher's (``taskctl export watch --standalone``: the same, synchronously, for one session).

The I/O an action asks for comes back as an event: :class:`CheckPaths` → :class:`PathsChecked`,
:class:`Render` → :class:`RenderDone`, :class:`Write` → :class:`WriteDone`. At most one
``Render``/``Write`` is outstanding at any time (renders and writes are serial across the hub),
and ``watch``/``watch-stop`` requests and rehydration are served one after the other, so two
requests never both pass the duplicate check before either is indexed.

Ownership. A *foreground* registration belongs to the session that made it: that session receives
its records, and its departure ends the registration, unless a viewer remains, which inherits it.
A second foreground session asking for a card already kept (the same card at the same path)
becomes a *viewer*: it gets that card's records and cannot retire it. A *detached* request for a
card already kept by a live detached registration drops that card as *covered*; one kept by a
foreground registration is refused, since a foreground watcher promises nothing beyond its
session. A path is kept for one card at a time.

Persistence: detached registrations are persisted (``version: 2``) after every change and
rehydrated on start: a terminal card is written once and dropped, a card the board no longer
knows (404) is dropped, and a card that cannot be rendered for now (board down) is kept and
re-rendered when the board link opens.
"""

from __future__ import annotations

import os.path
import secrets
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeAlias

from shared import hub_protocol as hp
from shared.timestamps import format_timestamp, parse_timestamp

from .briefs import dir_target, tasks_named, tasks_signalled
from .cadence import RefreshSchedule

Key = tuple[str, str]  # (task id, absolute path): one kept brief
#: One request's reply channel, chosen by the executor; a foreground watch's ticket is its session.
Ticket = int


@dataclass(frozen=True)
class Cadence:
    """When a marked card is re-rendered (``cadence.RefreshSchedule``), seconds."""

    debounce: float = hp.REFRESH_DEBOUNCE
    max_wait: float = hp.REFRESH_MAX_WAIT
    floor: float = hp.REFRESH_FLOOR


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


# -- events ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Watch:
    """A validated ``watch`` (``protocol.validate_watch``), answered on ``ticket``."""

    ticket: Ticket
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Stop:
    """``watch-stop``."""

    ticket: Ticket
    registration_id: str


@dataclass(frozen=True, slots=True)
class SessionClosed:
    """A foreground session is gone (or can take no more records)."""

    ticket: Ticket


@dataclass(frozen=True, slots=True)
class BoardEvent:
    """An activity row from the board's stream."""

    activity: dict[str, Any]


@dataclass(frozen=True, slots=True)
class BoardSignal:
    """A condition signal from the board's stream (id-less: it never moves a cursor)."""

    signal: dict[str, Any]


@dataclass(frozen=True, slots=True)
class BoardOpened:
    """The board link opened or reset: any card may have changed, every one re-renders."""


@dataclass(frozen=True, slots=True)
class Restore:
    """The persisted registrations as read at start; None when there is no file."""

    record: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class PathsChecked:
    """The answer to :class:`CheckPaths`: one problem (or None) per path, in order."""

    problems: tuple[str | None, ...]


@dataclass(frozen=True, slots=True)
class RenderDone:
    result: Rendered | RenderFailed


@dataclass(frozen=True, slots=True)
class WriteDone:
    error: OSError | None = None


@dataclass(frozen=True, slots=True)
class Tick:
    """The timer of the last :class:`ArmTimer` fired. ``batches=False`` ends due TTLs only."""

    batches: bool = True


@dataclass(frozen=True, slots=True)
class Flush:
    """Start every pending batch now, cadence or not (a standalone watcher's stream ended)."""


@dataclass(frozen=True, slots=True)
class Shutdown:
    """The hub is stopping: nothing more is rendered or persisted; waiting requests are refused."""


Event: TypeAlias = (
    Watch | Stop | SessionClosed | BoardEvent | BoardSignal | BoardOpened | Restore | PathsChecked | RenderDone
    | WriteDone | Tick | Flush | Shutdown
)


# -- actions -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """Write this record to the session (or requester) ``ticket``."""

    ticket: Ticket
    message: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Close:
    """Close the session ``ticket`` after what was sent to it."""

    ticket: Ticket


@dataclass(frozen=True, slots=True)
class Answer:
    """The request on ``ticket`` is served: a ``watch`` whose session now streams (``watching``),
    or a ``watch-stop`` whose answer is ``message``."""

    ticket: Ticket
    watching: bool = False
    message: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Refuse:
    ticket: Ticket
    refused: Refused


@dataclass(frozen=True, slots=True)
class CheckPaths:
    """Ask the filesystem whether each path can be a brief file (or, ``directory``, hold briefs)."""

    paths: tuple[str, ...]
    directory: bool = False


@dataclass(frozen=True, slots=True)
class Render:
    """``POST /api/v1/export`` for ``ref``; answer with :class:`RenderDone`."""

    ref: str


@dataclass(frozen=True, slots=True)
class Write:
    """Write the brief atomically (``briefs.write_brief``); answer with :class:`WriteDone`."""

    path: str
    markdown: str


@dataclass(frozen=True, slots=True)
class Persist:
    """Replace the registrations file with ``record``."""

    record: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ArmTimer:
    """Feed :class:`Tick` at ``at`` (the clock of ``now``); None: no timer is needed."""

    at: float | None


@dataclass(frozen=True, slots=True)
class Ended:
    registration_id: str
    reason: str  # done | ttl | stopped | owner_left
    detached: bool


@dataclass(frozen=True, slots=True)
class Changed:
    """The number of registrations may have changed (the hub's idle exit watches it)."""


@dataclass(frozen=True, slots=True)
class Restored:
    """Rehydration is over: ``watch-status`` may answer."""


@dataclass(frozen=True, slots=True)
class Batched:
    """A batch of ``registration_id`` ended; ``failed`` refreshes failed. Every event up to
    ``revision`` is in each brief it wrote (the standalone watcher's resume cursor)."""

    registration_id: str
    revision: int | None
    failed: int


@dataclass(frozen=True, slots=True)
class Note:
    """A log line."""

    level: str
    event: str
    fields: dict[str, Any] = field(default_factory=dict)


Action: TypeAlias = (
    Send | Close | Answer | Refuse | CheckPaths | Render | Write | Persist | ArmTimer | Ended | Changed | Restored
    | Batched | Note
)


# -- state -------------------------------------------------------------------------------------


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
class Viewer:
    """A foreground session: every card it watches, with the registration holding it and the ref
    as this session spelled it."""

    ticket: Ticket
    keys: dict[Key, tuple[Registration, str]] = field(default_factory=dict)
    #: In the order they came to it (its own first, then what it inherited): ends are ordered too.
    owned: dict[Registration, None] = field(default_factory=dict)
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
    owner: Viewer | None = None
    #: Sessions receiving this registration's records: the owner first, then viewers.
    watchers: list[Viewer] = field(default_factory=list)
    ended: bool = False
    #: When the TTL ends it, on the clock of ``now``.
    expiry: float | None = None
    batch: _Batch | None = None

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


# -- jobs: the steps between I/O ----------------------------------------------------------------


@dataclass(eq=False)
class _WatchJob:
    """One ``watch``: check the paths, render every ref, classify, write the first snapshots."""

    ticket: Ticket
    fields: dict[str, Any]
    wanted: list[tuple[str, str | None]]
    revision: int | None = None
    rendered: dict[str, Rendered] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    reason: str = ""
    paths: list[str | None] = field(default_factory=list)
    plan: list[_Planned] = field(default_factory=list)
    step: int = 0


@dataclass(eq=False)
class _Batch:
    """Re-render the marked cards of one registration."""

    reg: Registration
    revision: int | None = None
    cards: list[Card] = field(default_factory=list)
    step: int = -1
    rendered: Rendered | None = None
    failed: int = 0


@dataclass(eq=False)
class _RestoreJob:
    """Bring back one persisted registration: render and write each card, keep what lives."""

    reg: Registration
    cards: list[Card]
    revision: int | None = None
    kept: list[Card] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    step: int = -1
    rendered: Rendered | None = None


_Job: TypeAlias = _WatchJob | _Batch | _RestoreJob


def _iso(seconds: float | None) -> str | None:
    return None if seconds is None else format_timestamp(datetime.fromtimestamp(seconds, UTC))


def _new_id() -> str:
    return "w_" + secrets.token_hex(8)


class Registry:
    """Every registration of one hub (or one standalone watcher) and the rules between them."""

    def __init__(
        self,
        *,
        board: str,
        cadence: Cadence | None = None,
        persistent: bool = False,
        new_id: Callable[[], str] = _new_id,
    ) -> None:
        self.board = board
        self.cadence = cadence or Cadence()
        #: Whether detached registrations are persisted (a hub with a registrations file).
        self.persistent = persistent
        self._new_id = new_id
        self._by_id: dict[str, Registration] = {}
        self._by_key: dict[Key, Registration] = {}
        self._by_path: dict[str, Key] = {}
        self._by_task: dict[str, set[Registration]] = {}
        self._viewers: dict[Ticket, Viewer] = {}
        #: ``watch``/``watch-stop`` wait here while one is served or rehydration runs.
        self._requests: deque[Watch | Stop] = deque()
        self._registering: _WatchJob | None = None
        self._restoring = True
        self._entries: deque[Any] = deque()
        #: Jobs waiting to render; one runs at a time.
        self._jobs: deque[_Job] = deque()
        self._active: _Job | None = None
        self._armed: float | None = None
        self._timer_spent = False
        self.stopping = False
        self.restored = False
        # The event being handled.
        self._out: list[Action] = []
        self._now = 0.0
        self._wall = 0.0
        self._revision: int | None = None

    # -- queries ----------------------------------------------------------------------------------

    def count(self) -> int:
        return len(self._by_id)

    def registrations(self) -> list[Registration]:
        return list(self._by_id.values())

    def views(self) -> list[dict[str, Any]]:
        return [reg.view() for reg in self._by_id.values()]

    def watches(self, task_ids: Iterable[str]) -> bool:
        """Whether a brief of any of these tasks is kept."""
        return any(task_id in self._by_task for task_id in task_ids)

    def pending(self) -> bool:
        """Whether a refresh is waiting or running."""
        return any(reg.schedule.pending or reg.batch is not None for reg in self._by_id.values())

    def snapshot(self) -> dict[str, Any]:
        """What the registrations file holds: the detached registrations."""
        return {
            "version": hp.REGISTRATIONS_VERSION,
            "board": self.board,
            "registrations": [reg.persisted() for reg in self._by_id.values() if reg.detached],
        }

    # -- the one entry point --------------------------------------------------------------------

    def handle(self, event: Event, *, now: float, wall: float, revision: int | None) -> list[Action]:
        """The actions ``event`` implies, in order. ``now`` is a monotonic clock (the one
        :class:`ArmTimer` speaks), ``wall`` the epoch (timestamps, TTLs across restarts),
        ``revision`` the newest board revision seen (None before the board first answers)."""
        self._out = []
        self._now, self._wall, self._revision = now, wall, revision
        if isinstance(event, Watch | Stop):
            self._requests.append(event)
        elif isinstance(event, SessionClosed):
            viewer = self._viewers.get(event.ticket)
            if viewer is not None:
                self._session_closed(viewer)
        elif isinstance(event, BoardEvent):
            self._board_event(event.activity)
        elif isinstance(event, BoardSignal):
            self._mark(tasks_signalled(event.signal))
        elif isinstance(event, BoardOpened):
            for reg in self._by_id.values():
                reg.schedule.mark(now)
        elif isinstance(event, Restore):
            self._restore(event.record)
        elif isinstance(event, PathsChecked):
            self._paths_checked(event.problems)
        elif isinstance(event, RenderDone | WriteDone):
            self._step(event)
        elif isinstance(event, Tick):
            self._timer_spent = True  # whatever was armed has fired: say what comes next, even nothing
            self._tick(batches=event.batches)
        elif isinstance(event, Flush):
            for reg in list(self._by_id.values()):
                if reg.schedule.pending and reg.batch is None and not reg.ended:
                    self._queue_batch(reg)
        elif isinstance(event, Shutdown):
            self._shutdown()
        self._serve_requests()
        self._run_jobs()
        self._rearm()
        out, self._out = self._out, []
        return out

    def _emit(self, action: Action) -> None:
        self._out.append(action)

    def _note(self, event: str, level: str = "info", **fields: Any) -> None:
        self._emit(Note(level, event, fields))

    # -- the timer ------------------------------------------------------------------------------

    def _rearm(self) -> None:
        wake: float | None = None
        if not self.stopping:
            for reg in self._by_id.values():
                moments = [reg.expiry]
                if reg.batch is None:
                    moments.append(reg.schedule.due())
                for moment in moments:
                    if moment is not None and (wake is None or moment < wake):
                        wake = moment
        if wake != self._armed or self._timer_spent:
            self._armed, self._timer_spent = wake, False
            self._emit(ArmTimer(wake))

    def _tick(self, *, batches: bool) -> None:
        if self.stopping:
            return
        for reg in list(self._by_id.values()):
            if reg.expiry is not None and reg.expiry <= self._now and not reg.ended:
                reg.expiry = None
                self._note("registration_ttl", registration=reg.id, ttl_ms=reg.ttl_ms)
                self._end(reg, "ttl", hp.ttl(ttl_ms=reg.ttl_ms))
        if not batches:
            return
        for reg in list(self._by_id.values()):
            due = reg.schedule.due()
            if not reg.ended and reg.batch is None and due is not None and due <= self._now:
                self._queue_batch(reg)

    # -- board events ---------------------------------------------------------------------------

    def _board_event(self, activity: dict[str, Any]) -> None:
        if not self._by_id:
            return
        named = tasks_named(activity)
        if named is None:
            for reg in self._by_id.values():
                reg.schedule.mark(self._now)
            return
        self._mark(named)

    def _mark(self, task_ids: Iterable[str]) -> None:
        for task_id in task_ids:
            for reg in self._by_task.get(task_id, ()):
                reg.schedule.mark(self._now, (task_id,))

    # -- the job slot: one render or write at a time --------------------------------------------

    def _queue_batch(self, reg: Registration) -> None:
        reg.batch = _Batch(reg)
        self._jobs.append(reg.batch)

    def _run_jobs(self) -> None:
        while self._active is None and self._jobs and not self.stopping:
            job = self._jobs.popleft()
            self._active = job
            job.revision = self._revision
            if isinstance(job, _WatchJob):
                self._watch_next_render(job)
            elif isinstance(job, _Batch):
                self._batch_start(job)
            else:
                self._restore_next_card(job)

    def _finish(self, job: _Job) -> None:
        if self._active is job:
            self._active = None

    def _step(self, event: RenderDone | WriteDone) -> None:
        job = self._active
        if job is None:
            return  # an answer after the hub stopped
        if isinstance(job, _WatchJob):
            self._watch_step(job, event)
        elif isinstance(job, _Batch):
            self._batch_step(job, event)
        else:
            self._restore_step(job, event)

    # -- watch and watch-stop -------------------------------------------------------------------

    def _serve_requests(self) -> None:
        while self._requests and self._registering is None and not self._restoring:
            request = self._requests.popleft()
            if isinstance(request, Stop):
                self._stop_registration(request)
                continue
            if self.stopping:
                self._emit(Refuse(request.ticket, Refused(hp.NOT_AVAILABLE, "the hub is stopping; ask the next one")))
                continue
            fields = request.fields
            if fields["cards"] is not None:
                wanted: list[tuple[str, str | None]] = [(card["ref"], card["out"]) for card in fields["cards"]]
                check = CheckPaths(tuple(out for _, out in wanted if out is not None))
            else:
                wanted = [(ref, None) for ref in fields["refs"]]
                check = CheckPaths((fields["dir"],), directory=True)
            self._registering = _WatchJob(request.ticket, fields, wanted)
            self._emit(check)

    def _refuse(self, job: _WatchJob, refused: Refused) -> None:
        self._finish(job)
        self._registering = None
        self._emit(Refuse(job.ticket, refused))

    def _paths_checked(self, problems: tuple[str | None, ...]) -> None:
        job = self._registering
        if job is None:
            return
        if not job.paths:  # the request's own paths, before any render
            found = [problem for problem in problems if problem]
            if found:
                self._refuse(job, Refused(hp.VALIDATION_FAILED, "; ".join(found), field="paths", problems=found))
                return
            self._jobs.append(job)
            return
        self._classify_all(job, problems)

    def _watch_next_render(self, job: _WatchJob) -> None:
        if job.step < len(job.wanted):
            self._emit(Render(job.wanted[job.step][0]))
            return
        if job.missing:
            self._refuse(job, Refused(hp.NOT_FOUND, f"no such card: {', '.join(job.missing)}", refs=job.missing))
            return
        if job.unavailable:
            self._refuse(job, Refused(hp.BOARD_UNAVAILABLE, f"cannot render {', '.join(job.unavailable)}: {job.reason}",
                                      refs=job.unavailable))
            return
        # The paths each card goes to; a path derived from --dir is checked on disk first.
        derived = False
        for ref, out in job.wanted:
            if out is None:
                derived = True
                try:
                    job.paths.append(dir_target(job.fields["dir"], job.rendered[ref].identifier))
                except ValueError:
                    job.paths.append(None)
            else:
                job.paths.append(out)
        if derived:
            self._emit(CheckPaths(tuple(path for path in job.paths if path is not None)))
        else:
            self._classify_all(job, tuple(None for _ in job.paths))

    def _classify_all(self, job: _WatchJob, problems: tuple[str | None, ...]) -> None:
        """Each card in order: named once, a path that can hold it, then owner/viewer/covered."""
        checked = iter(problems)
        seen: dict[str, str] = {}
        for (ref, out), path in zip(job.wanted, job.paths, strict=True):
            card = job.rendered[ref]
            if card.task_id in seen:
                self._refuse(job, Refused(hp.VALIDATION_FAILED, f"{seen[card.task_id]} and {ref} name the same card",
                                          field="refs", refs=[seen[card.task_id], ref]))
                return
            seen[card.task_id] = ref
            if path is None:
                unexpected = f"unexpected card identifier {card.identifier!r}"
                self._refuse(job, Refused(hp.VALIDATION_FAILED, unexpected, field="paths", problems=[unexpected]))
                return
            if out is None and (problem := next(checked, None)):
                self._refuse(job, Refused(hp.VALIDATION_FAILED, problem, field="paths", problems=[problem]))
                return
            try:
                job.plan.append(self._classify(ref, card, path, job.fields["detach"]))
            except Refused as refused:
                self._refuse(job, refused)
                return
        job.step = 0
        self._watch_next_write(job)

    def _watch_next_write(self, job: _WatchJob) -> None:
        while job.step < len(job.plan):
            item = job.plan[job.step]
            if item.state != "covered":
                self._emit(Write(item.path, item.rendered.markdown))
                return
            job.step += 1
        self._finish(job)
        self._commit(job)
        self._registering = None

    def _watch_step(self, job: _WatchJob, event: RenderDone | WriteDone) -> None:
        if isinstance(event, RenderDone):
            ref = job.wanted[job.step][0]
            result = event.result
            if isinstance(result, RenderFailed):
                if result.permanent:
                    job.missing.append(ref)
                else:
                    job.unavailable.append(ref)
                    job.reason = result.message
            else:
                job.rendered[ref] = result
            job.step += 1
            self._watch_next_render(job)
            return
        item = job.plan[job.step]
        if event.error is not None:
            exc = event.error
            self._refuse(job, Refused(hp.WRITE_FAILED, f"cannot write {item.path}: {exc.strerror or exc}",
                                      path=item.path))
            return
        item.written = True
        job.step += 1
        self._watch_next_write(job)

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

    def _commit(self, job: _WatchJob) -> None:
        """Index what the plan registers and answer."""
        plan, fields, revision, ticket = job.plan, job.fields, job.revision, job.ticket
        detach = fields["detach"]
        for item in plan:
            # A holder may have ended while we rendered (TTL, its owner left): keep the card ourselves.
            if item.state in ("viewer", "covered") and (item.holder is None or item.holder.ended):
                item.state, item.holder = "registered", None
        fresh = [item for item in plan if item.state == "registered"]
        reg: Registration | None = None
        stamp = _iso(self._wall)
        if fresh:
            reg = Registration(
                id=self._new_id(), detached=detach, ttl_ms=fields["ttl_ms"], created_at=self._wall, cards={},
                schedule=self._schedule(),
            )
            cards = []
            for item in fresh:
                r = item.rendered
                cards.append(Card(item.ref, r.task_id, r.identifier, item.path, r.status,
                                  revision if item.written else None, stamp if item.written else None))
            self._add(reg, cards)
            # Events that reached the hub while we rendered were routed before this registration
            # existed; and a covered card whose holder ended meanwhile was never written by us.
            stale = self._revision != revision
            unwritten = [item.rendered.task_id for item in fresh if stale or not item.written]
            if unwritten:
                reg.schedule.mark(self._now, unwritten)
        for item in plan:
            if item.state == "viewer" and item.written and item.holder is not None:
                held = item.holder.cards.get(item.key)
                if held is not None:
                    held.status, held.revision, held.refreshed_at = item.rendered.status, revision, stamp
        viewer: Viewer | None = None
        if not detach:
            viewer = Viewer(ticket)
            self._viewers[ticket] = viewer
            if reg is not None:
                reg.owner = viewer
                reg.watchers.append(viewer)
                viewer.owned[reg] = None
            for item in plan:
                if item.state == "registered" and reg is not None:
                    viewer.keys[item.key] = (reg, item.ref)
                elif item.state == "viewer" and item.holder is not None:
                    viewer.keys[item.key] = (item.holder, item.ref)
                    if viewer not in item.holder.watchers:
                        item.holder.watchers.append(viewer)
        self._emit(Send(ticket, self._answer(plan, reg)))
        self._note("watch_registered", registration=reg.id if reg else None, detached=detach,
                   states={item.rendered.identifier: item.state for item in plan})
        if reg is not None and reg.detached:
            self._persist()
        self._emit(Changed())
        if viewer is None:
            self._emit(Answer(ticket))
            return
        for item in plan:
            if item.written:
                self._emit(Send(ticket, hp.refresh(ref=item.ref, path=item.path, revision=revision,
                                                   status=item.rendered.status)))
        if not viewer.keys:
            self._end_watcher(viewer, hp.done())
            self._emit(Answer(ticket))
            return
        self._emit(Answer(ticket, watching=True))

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

    def _stop_registration(self, request: Stop) -> None:
        reg = self._by_id.get(request.registration_id)
        if reg is None:
            self._emit(Refuse(request.ticket, Refused(hp.NOT_FOUND, f"no registration {request.registration_id!r}",
                                                      registration_id=request.registration_id)))
            return
        refs = [card.ref for card in reg.cards.values()]
        self._end(reg, "stopped", hp.shutdown(reason=hp.SHUTDOWN_WATCH_STOPPED))
        self._emit(Answer(request.ticket, message=hp.watch_stopped(registration_id=reg.id, refs=refs)))

    # -- batches --------------------------------------------------------------------------------

    def _batch_start(self, job: _Batch) -> None:
        reg = job.reg
        if reg.ended:
            self._batch_done(job)
            return
        everything, keys = reg.schedule.take(self._now)
        job.cards = [card for card in reg.cards.values() if everything or card.task_id in keys]
        self._batch_next(job)

    def _batch_next(self, job: _Batch) -> None:
        reg = job.reg
        while True:
            job.step += 1
            if job.step >= len(job.cards) or reg.ended:
                self._batch_done(job)
                return
            card = job.cards[job.step]
            if card.key in reg.cards:
                job.rendered = None
                self._emit(Render(card.task_id))
                return

    def _batch_done(self, job: _Batch) -> None:
        self._finish(job)
        job.reg.batch = None
        self._emit(Batched(job.reg.id, job.revision, job.failed))

    def _batch_step(self, job: _Batch, event: RenderDone | WriteDone) -> None:
        reg, card, revision = job.reg, job.cards[job.step], job.revision
        if isinstance(event, RenderDone):
            if isinstance(event.result, RenderFailed):
                self._refresh_failed(job, card, event.result.code, event.result.message)
            else:
                job.rendered = event.result
                self._emit(Write(card.path, event.result.markdown))
                return
        elif event.error is not None:
            exc = event.error
            self._refresh_failed(job, card, hp.WRITE_FAILED, f"cannot write {card.path}: {exc.strerror or exc}")
        elif not reg.ended and job.rendered is not None:
            status = job.rendered.status
            card.status, card.revision, card.refreshed_at, card.error = status, revision, _iso(self._wall), None
            self._tell(reg, card, lambda ref: hp.refresh(ref=ref, path=card.path, revision=revision, status=status))
            if status in hp.TERMINAL_STATUSES:
                self._drop_card(reg, card, reason=status)
        self._batch_next(job)

    def _refresh_failed(self, job: _Batch, card: Card, code: str, message: str) -> None:
        job.failed += 1
        card.error = {"code": code, "message": message}
        self._note("brief_refresh_failed", registration=job.reg.id, card=card.identifier, code=code, message=message)
        self._tell(job.reg, card, lambda ref: hp.refresh_failed(ref=ref, path=card.path, code=code, message=message))

    def _tell(self, reg: Registration, card: Card, build: Callable[[str], dict[str, Any]]) -> None:
        for watcher in list(reg.watchers):
            held = watcher.keys.get(card.key)
            if held is not None and not watcher.ended:
                self._emit(Send(watcher.ticket, build(held[1])))

    # -- the indexes ----------------------------------------------------------------------------

    def _schedule(self) -> RefreshSchedule:
        return RefreshSchedule(self.cadence.debounce, self.cadence.max_wait, self.cadence.floor)

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
            reg.expiry = self._now + max(0.0, expires_at - self._wall)

    def _drop_card(self, reg: Registration, card: Card, *, reason: str) -> None:
        """A card leaves its registration (terminal, gone); its watchers may be done."""
        self._unindex(reg, card)
        self._note("brief_dropped", registration=reg.id, card=card.identifier, reason=reason)
        if not reg.cards:
            self._end(reg, "done")
        elif reg.detached:
            self._persist()
        for watcher in list(reg.watchers):
            if watcher.keys.pop(card.key, None) is None:
                continue
            if watcher is not reg.owner and not any(holder is reg for holder, _ in watcher.keys.values()):
                reg.watchers.remove(watcher)  # it views nothing of this registration any more
            if not watcher.keys:
                self._end_watcher(watcher, hp.done())

    def _end(self, reg: Registration, reason: str, message: dict[str, Any] | None = None) -> None:
        """Retire a registration; its sessions get ``message`` (``ttl``, ``shutdown``) and close."""
        if reg.ended:
            return
        reg.ended = True
        reg.expiry = None
        for card in list(reg.cards.values()):
            self._unindex(reg, card)
        self._by_id.pop(reg.id, None)
        self._emit(Ended(reg.id, reason, reg.detached))
        if message is not None:
            for watcher in list(reg.watchers):
                self._end_watcher(watcher, message)
        if reg.detached:
            self._persist()
        self._emit(Changed())

    def _end_watcher(self, viewer: Viewer, message: dict[str, Any]) -> None:
        if viewer.ended:
            return
        viewer.ended = True
        self._emit(Send(viewer.ticket, message))
        self._emit(Close(viewer.ticket))
        self._session_closed(viewer)

    def _session_closed(self, viewer: Viewer) -> None:
        """A foreground session ended: it stops viewing; what it owned passes to a viewer, or ends."""
        if viewer.released:
            return
        viewer.released = True
        viewer.ended = True
        self._viewers.pop(viewer.ticket, None)
        involved = {holder for holder, _ in viewer.keys.values()} | set(viewer.owned)
        for reg in involved:
            if viewer in reg.watchers:
                reg.watchers.remove(viewer)
        for reg in list(viewer.owned):
            if reg.owner is not viewer or reg.ended:
                continue
            heir = next((w for w in reg.watchers if not w.ended), None)
            reg.owner = heir
            if heir is not None:
                heir.owned[reg] = None
                self._note("registration_handed_over", registration=reg.id)
            else:
                self._end(reg, "owner_left")
        viewer.owned.clear()

    def _persist(self) -> None:
        # While rehydration runs the file on disk is the record being restored, and the snapshot
        # would hold only what is restored so far: a stop then would lose the rest. The end of
        # rehydration writes one snapshot that has everything (``_restored``).
        if self.persistent and not self.stopping and not self._restoring:
            self._emit(Persist(self.snapshot()))

    # -- rehydration ----------------------------------------------------------------------------

    def _restore(self, record: dict[str, Any] | None) -> None:
        if not self._restoring:
            return
        if record is None:
            self._restored(persist=False)
            return
        if record.get("version") != hp.REGISTRATIONS_VERSION or not isinstance(record.get("registrations"), list):
            self._note("registrations_file_ignored", "warning", version=record.get("version"))
            self._restored(persist=False)
            return
        self._entries.extend(record["registrations"])
        self._restore_next_entry()

    def _restored(self, *, persist: bool) -> None:
        self._restoring = False
        if persist:
            self._persist()
            self._emit(Changed())
        self.restored = True
        self._emit(Restored())

    def _restore_next_entry(self) -> None:
        while self._entries and not self.stopping:
            parsed = self._parse(self._entries.popleft())
            if parsed is not None:
                self._jobs.append(_RestoreJob(*parsed))
                return
        self._entries.clear()
        self._restored(persist=True)

    def _parse(self, entry: Any) -> tuple[Registration, list[Card]] | None:
        try:
            cards = [
                Card(str(c["ref"]), str(c["task_id"]), str(c["identifier"]), str(c["path"]))
                for c in entry["cards"]
            ]
            reg = Registration(
                id=str(entry["registration_id"]), detached=True, ttl_ms=int(entry["ttl_ms"]),
                created_at=parse_timestamp(entry["created_at"]).timestamp(), cards={}, schedule=self._schedule(),
            )
            # Its end is written as a timestamp in every snapshot and status: one past the year
            # 9999 would fail each of those, rehydration's own first.
            _iso(reg.expires_at)
        except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError) as exc:
            # ArithmeticError: a ``ttl_ms`` of 1e400, which JSON reads as infinity.
            self._note("registration_unusable", "warning", entry=str(entry)[:200], error=repr(exc))
            return None
        if not cards or any(not os.path.isabs(c.path) or "\0" in c.path for c in cards) or reg.id in self._by_id:
            self._note("registration_unusable", "warning", registration=str(entry.get("registration_id")))
            return None
        if reg.expires_at is not None and reg.expires_at <= self._wall:
            self._note("registration_expired", registration=reg.id)
            return None
        return reg, cards

    def _restore_next_card(self, job: _RestoreJob) -> None:
        while True:
            job.step += 1
            if job.step >= len(job.cards):
                self._restore_done(job)
                return
            card = job.cards[job.step]
            if card.path in self._by_path:
                self._note("brief_dropped", "warning", registration=job.reg.id, card=card.identifier,
                           reason="path_kept_elsewhere")
                continue
            job.rendered = None
            self._emit(Render(card.task_id))
            return

    def _restore_step(self, job: _RestoreJob, event: RenderDone | WriteDone) -> None:
        card = job.cards[job.step]
        if isinstance(event, RenderDone):
            result = event.result
            if isinstance(result, RenderFailed):
                if result.permanent:
                    self._note("brief_dropped", registration=job.reg.id, card=card.identifier, reason="gone")
                else:
                    self._note("brief_deferred", registration=job.reg.id, card=card.identifier, reason=result.message)
                    job.kept.append(card)
                    job.deferred.append(card.task_id)
            else:
                job.rendered = result
                self._emit(Write(card.path, result.markdown))
                return
        elif event.error is not None:
            self._note("brief_deferred", registration=job.reg.id, card=card.identifier, reason=str(event.error))
            job.kept.append(card)
            job.deferred.append(card.task_id)
        elif job.rendered is not None:
            if job.rendered.status in hp.TERMINAL_STATUSES:
                self._note("brief_dropped", registration=job.reg.id, card=card.identifier, reason=job.rendered.status)
            else:
                card.status, card.revision, card.refreshed_at = job.rendered.status, job.revision, _iso(self._wall)
                job.kept.append(card)
        self._restore_next_card(job)

    def _restore_done(self, job: _RestoreJob) -> None:
        self._finish(job)
        reg = job.reg
        if not job.kept:
            self._note("registration_ended", registration=reg.id, reason="rehydrated_empty", detached=True)
        else:
            self._add(reg, job.kept)
            self._note("registration_rehydrated", registration=reg.id, cards=len(job.kept), deferred=len(job.deferred))
            deferred = job.deferred
            if self._revision != job.revision:  # events routed while we rendered missed this registration
                deferred = [card.task_id for card in job.kept]
            if deferred:
                reg.schedule.mark(self._now, deferred)
        self._restore_next_entry()

    # -- stopping -------------------------------------------------------------------------------

    def _shutdown(self) -> None:
        """Stop refreshing. Detached registrations stay on file for the next hub; foreground ones
        end with their sessions (the hub has said ``shutdown`` to those)."""
        self.stopping = True
        refused = Refused(hp.NOT_AVAILABLE, "the hub is stopping; ask the next one")
        if self._registering is not None:
            self._refuse(self._registering, refused)
        while self._requests:
            request = self._requests.popleft()
            if isinstance(request, Stop):
                self._stop_registration(request)
            else:
                self._emit(Refuse(request.ticket, refused))
        self._jobs.clear()
        self._active = None
        if self._restoring:
            self._entries.clear()
            self._restoring = False
            self.restored = True
            self._emit(Restored())
