"""The loop subscriber's event loop: follow the hub → classify → coalesce → run a continue turn.

Phases: publish ``starting`` → follow the hub and drive turns until SIGTERM/SIGINT → stop
following, let a running turn finish (``stop_grace``; a second signal abandons it at once) →
publish ``stopped`` → exit 0.

The hub is reached through ``OpenStream``: a callable that opens one connection resuming after a
revision and yields its records (``open``, ``event``, ``signal``, ``heartbeat``, ``reset``,
``idle``, ``shutdown``, ``eof``, ``error``; docs/hub-protocol.md) until that connection ends.
A ``signal`` (a board condition: ``card_unblocked``, ``claim_stale``…) may wake the loop but never
moves the cursor: it has no revision and is never replayed. This module
owns everything around it: its own 1 s → 30 s reconnect ladder (reset by each ``open``), the
cursor it resumes from, and a silence timeout (the hub heartbeats every 15 s; three missed
heartbeats and the connection is presumed dead). It imports no other service (SPEC §2): taskctl
hands it a stream built on the hub client, and with it ``cursor_board``, the hub client's word on
which board the cursor counts in, which the state file keeps beside the cursor so that a restart
names it in its first ``follow``.

An ``error UNAUTHORIZED`` (the hub's board refused its token, or a hub we started exited for
that reason) publishes ``unauthorized`` instead of ``reconnecting``: the token was most likely
rotated. ``OpenStream`` re-reads the token on every call, so the next attempt goes to the hub
keyed by the current token, and its ``open`` publishes ``streaming`` again.

It never writes board state: its only output is the ``--on-wake`` command and its state file.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from typing import Any, Final

import structlog

from shared import hub_protocol as hp

from .classify import LoopIdentity, UnknownNames, classify, classify_signal
from .coalesce import Coalescer, Turn
from .process import Backoff, ShutdownSignals

# The intervals and Timing live in the subscriber's table; re-exported where they were.
from .settings import RECONNECT_MAX as RECONNECT_MAX
from .settings import RECONNECT_MIN as RECONNECT_MIN
from .settings import SILENCE_TIMEOUT as SILENCE_TIMEOUT
from .settings import STATE_FLUSH as STATE_FLUSH
from .settings import STOP_GRACE as STOP_GRACE
from .settings import Timing
from .state import RECONNECTING, STARTING, STOPPED, STREAMING, UNAUTHORIZED, Publisher, utc_now
from .turns import RAN, REFUSED, TurnResult, TurnRunner, waiting_for

#: The pseudo event name a ``reset`` record puts in ``TASKLOOM_WAKE_EVENTS``: rescan everything.
RESET_WAKE: Final = "reset"

Record = dict[str, Any]
#: Opens one hub connection that resumes after the given revision (None: live from the head).
OpenStream = Callable[[int | None], AsyncGenerator[Record, None]]
#: The ``board_id`` of the board the cursor counts in, as the stream's hub client knows it after
#: the records it has yielded (None: unknown); published with the cursor.
CursorBoardId = Callable[[], str | None]

log = structlog.get_logger("taskloom.subscriber")


class _ConnectionEnded(Exception):
    """The hub ended this connection on purpose (``shutdown``, ``idle``, ``eof``, ``error``)."""

    def __init__(self, reason: str, *, at_once: bool = False, unauthorized: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.at_once = at_once
        self.unauthorized = unauthorized


class Subscriber:
    def __init__(
        self,
        open_stream: OpenStream,
        who: LoopIdentity,
        turns: TurnRunner,
        publisher: Publisher,
        *,
        timing: Timing = Timing(),
        after: int | None = None,
        replay: tuple[str, ...] = (),
        cursor_board: CursorBoardId = lambda: None,
    ) -> None:
        self._open = open_stream
        #: Which board ``cursor`` counts in: saved with it, so a restart can name it to the hub.
        self._cursor_board = cursor_board
        self.who = who
        self.turns = turns
        self.publisher = publisher
        self.timing = timing
        #: The last revision seen; the next connection resumes after it.
        self.cursor = after
        self.coalescer = Coalescer(
            debounce=timing.debounce,
            max_wait=timing.max_wait,
            min_interval=timing.min_interval,
            lock_retry=timing.lock_retry,
        )
        self.unknown = UnknownNames()
        self.counts = {"ran": 0, "refused": 0, "skipped": 0}
        self.reconnects = 0
        self._changed = asyncio.Event()
        self._stop = asyncio.Event()
        self._abandon = asyncio.Event()
        self._turn_idle = asyncio.Event()
        self._turn_idle.set()
        self._opened = False
        #: Whether a connection of this run has opened before: the next to open follows a gap.
        self._followed = False
        #: We started live while the hub had not reached the board: writes made before it did
        #: may never reach us, so the first known revision brings one rescan wake.
        self._blind_start = False
        #: The cursor from before the oldest wake not yet served by a turn: a stop with a wake
        #: pending publishes this, so a restart replays that wake instead of losing it.
        self._floor: int | None = None
        #: The floor of the wakes the running turn serves: a kill before it ends replays them.
        self._serving_floor: int | None = None
        self._serving: tuple[str, ...] = ()
        #: The floor and wakes of a turn the stop terminated: owed again, whatever the driver records.
        self._cut_floor: int | None = None
        self._cut: tuple[str, ...] = ()
        #: Wake names a previous run had waiting or in a running turn when it stopped (or was
        #: killed): queued again at start, as replaying from ``resume_after`` cannot bring back a
        #: wake from a signal, which has no revision.
        self._replay = replay
        self._clock = asyncio.get_running_loop().time

    # -- lifecycle ----------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop following; a running turn may finish (up to ``stop_grace``)."""
        self._stop.set()

    def abandon(self) -> None:
        """Stop now: a running turn is terminated instead of awaited."""
        self._stop.set()
        self._abandon.set()

    async def run_until_signalled(self) -> int:
        """``run`` with SIGINT/SIGTERM wired: the first stops cleanly, the second abandons."""

        def abandon() -> None:
            log.info("signal_received", signal=signals.received[-1].name, abandon=True)
            self.abandon()

        def stop() -> None:
            log.info("signal_received", signal=signals.received[-1].name, abandon=False)
            self.request_stop()

        signals = ShutdownSignals(stop=stop, force=abandon)
        with signals:
            return await self.run()

    async def run(self) -> int:
        """Follow and drive turns until ``request_stop``; 0 on a clean stop, 1 if a part failed."""
        waiting = waiting_for(self.turns.state_dir)
        self.publisher.set_state(STARTING, revision=self.cursor, board_id=self._cursor_board(), resume_after=None,
                                 started_at=utc_now(), pending=False,
                                 turns=dict(self.counts), reconnects=0, last_wake_at=None, last_turn=None,
                                 waiting_for=waiting)
        log.info("subscriber_starting", agents=sorted(self.who.agents), director=self.who.director, after=self.cursor)
        for name in self._replay:
            log.info("wake", name=name, reason="pending_at_last_stop")
            self._add_wake(self.cursor or 0, name)
        if waiting is not None:
            # Said once at start, in words: otherwise the first sign is a skipped turn a minute later.
            log.warning("waiting_for_resident_pool", file=waiting["file"], reason=waiting["reason"],
                        hint="turns are skipped until the supervisor lists a live pid in this file")
        follower = asyncio.create_task(self._follow(), name="follow-hub")
        driver = asyncio.create_task(self._drive(), name="drive-turns")
        flusher = asyncio.create_task(self._flush_periodically(), name="flush-state")
        stopper = asyncio.create_task(self._stop.wait(), name="stop")
        code = 0
        try:
            done, _ = await asyncio.wait({follower, driver, stopper}, return_when=asyncio.FIRST_COMPLETED)
            for task in done - {stopper}:
                if not task.cancelled() and task.exception() is not None:
                    log.error("subscriber_failed", part=task.get_name(), exc_info=task.exception())
                    code = 1
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
            await self._finish_turn()
            for task in (driver, flusher, stopper):
                task.cancel()
            await asyncio.gather(driver, flusher, stopper, return_exceptions=True)
            resume = self.cursor
            kept = self._resume_after()
            if kept is not None:
                resume = min(kept, self.cursor if self.cursor is not None else kept)
                log.info("pending_wake_kept", resume_after=resume, reason="stopping")
            self.publisher.set_state(STOPPED, revision=resume, pending=self.coalescer.pending, stopped_at=utc_now(),
                                     resume_after=kept, pending_wakes=self._pending_names())
            log.info("subscriber_stopped", revision=resume, turns=self.counts)
        return code

    async def _finish_turn(self) -> None:
        """Let a running turn end within ``stop_grace``, or at once on ``abandon``; then stop it."""
        if self._turn_idle.is_set():
            return
        log.info("turn_finishing", grace=self.timing.stop_grace, abandon=self._abandon.is_set())
        idle = asyncio.create_task(self._turn_idle.wait())
        abandon = asyncio.create_task(self._abandon.wait())
        try:
            await asyncio.wait({idle, abandon}, timeout=self.timing.stop_grace, return_when=asyncio.FIRST_COMPLETED)
        finally:
            idle.cancel()
            abandon.cancel()
            await asyncio.gather(idle, abandon, return_exceptions=True)
        if not self._turn_idle.is_set():
            log.warning("turn_abandoned", reason="stopping")
            # Terminated, the turn did not run to its end: its wakes stay owed to the next start
            # (resume_after, pending_wakes), as after a SIGKILL. Kept apart, because the driver
            # may still record the turn as ended (and so served) once its command is gone.
            self._cut_floor, self._cut = self._serving_floor, self._serving
            await self.turns.stop()

    # -- following the hub --------------------------------------------------------------------

    async def _follow(self) -> None:
        ladder = Backoff(self.timing.reconnect_min, self.timing.reconnect_max)
        while True:
            self._opened = False
            at_once = unauthorized = False
            try:
                await self._one_connection()
                reason = "closed"
            except _ConnectionEnded as ended:
                reason, at_once, unauthorized = ended.reason, ended.at_once, ended.unauthorized
            except Exception as exc:  # noqa: BLE001 - the hub client raises its own kinds; all mean "try again"
                reason = f"{type(exc).__name__}: {exc}"
                # The hub client's error for a refused token carries the hub protocol's code.
                unauthorized = getattr(exc, "code", None) == hp.UNAUTHORIZED
            if self._opened:
                ladder.reset()  # a good connection starts the ladder over
            # The hub said goodbye on purpose (an upgrade's `events hub --stop`): replace it now.
            wait = 0.0 if self._opened and at_once else ladder.next()
            self.reconnects += 1
            self.publisher.set_state(UNAUTHORIZED if unauthorized else RECONNECTING, revision=self.cursor,
                                     reconnects=self.reconnects, last_problem=reason, retry_in=wait)
            log.warning("hub_unauthorized" if unauthorized else "hub_connection_lost", reason=reason,
                        retry_in=wait, revision=self.cursor)
            if wait:
                await asyncio.sleep(wait)

    async def _one_connection(self) -> None:
        stream = self._open(self.cursor)
        try:
            while True:
                try:
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
                    # cancellation that arrives as the record does, and the subscriber would
                    # then outlive its stop.
                    async with asyncio.timeout(self.timing.silence_timeout):
                        record = await anext(stream)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    # Not a record in three heartbeats: a hung hub or a half-open socket.
                    raise _ConnectionEnded(f"silent for {self.timing.silence_timeout:g} s") from None
                if isinstance(record, dict):
                    self._handle(record)
        finally:
            await stream.aclose()

    def _handle(self, record: Record) -> None:
        kind = record.get("type")
        # The hub client has read this record already: the board it names now is that of the
        # cursor this record leaves, so both go into the same write of the state file.
        self.publisher.update(board_id=self._cursor_board())
        revision = record.get("revision")
        if isinstance(revision, bool) or not isinstance(revision, int):
            revision = None
        if kind == "open":
            self._opened = True
            if self._followed:
                # Our own link to the hub was down (a silence timeout, a laptop's sleep, a hub
                # that went away): a card_unblocked or claim_stale the hub sent meanwhile reached
                # nobody, and the replay brings rows back, never signals. One wake, as for the
                # hub's own gap below, so the supervisor reads /breaches now.
                log.info("wake", name=hp.SIGNALS_MISSED, reason="hub_link_reopened")
                self._add_wake(self.cursor or 0, hp.SIGNALS_MISSED)
            self._followed = True
            if self.cursor is None and revision is not None:
                self._advance(revision)  # a live start: everything after the head is new to us
            elif self.cursor is None:
                self._blind_start = True
            self.publisher.set_state(STREAMING, revision=self.cursor, retry_in=None)
            log.info("hub_open", revision=revision, replay=record.get("replay"), after=self.cursor)
        elif kind == "event":
            activity = record.get("activity")
            if isinstance(activity, dict):
                self._classify(activity, revision if revision is not None else self.cursor or 0)
            # Only after the event is dealt with: a resumed connection must not skip it.
            if revision is not None:
                self._advance(revision)
        elif kind == "signal":
            body = record.get("signal")
            if isinstance(body, dict):
                self._classify_signal(body)
        elif kind == hp.SIGNALS_MISSED:
            # The hub's board link was down (a board restart): a card_unblocked or claim_stale
            # sent or fired meanwhile reached nobody, and no replay brings a signal back. One
            # wake, so the supervisor reads /breaches now rather than at its next patrol.
            log.info("wake", name=hp.SIGNALS_MISSED, reason="board_link_reopened")
            self._add_wake(self.cursor or 0, hp.SIGNALS_MISSED)  # the wake's name in TASKLOOM_WAKE_EVENTS
        elif kind == "heartbeat":
            if revision is not None:
                self._advance(revision)
        elif kind == "reset":
            # The hub could not replay the gap (ring too short, another board): rescan = one wake.
            self._blind_start = False  # this wake is the rescan
            log.warning("hub_reset", reason=record.get("reason"), revision=revision)
            self._add_wake(revision if revision is not None else self.cursor or 0, RESET_WAKE)
            if revision is not None:
                self.cursor = revision
                self.publisher.update(revision=revision)
        elif kind == "shutdown":
            raise _ConnectionEnded(f"hub shutdown ({record.get('reason')})", at_once=True)
        elif kind == "idle":
            raise _ConnectionEnded("hub idle")
        elif kind == "eof":
            raise _ConnectionEnded("hub eof")
        elif kind == "error":
            code = record.get("code")
            # UNAUTHORIZED after open: the hub's board refused its token and the hub is going
            # away on purpose; the next attempt re-reads the token, so it may go at once.
            raise _ConnectionEnded(f"hub error {code}: {record.get('message')}",
                                   at_once=code == hp.UNAUTHORIZED, unauthorized=code == hp.UNAUTHORIZED)
        # Anything else is a newer hub's record: ignored, like unknown event names.

    def _advance(self, revision: int) -> None:
        if self._blind_start:
            self._blind_start = False
            log.info("head_learned_late", revision=revision)
            self._add_wake(revision, RESET_WAKE)
        if self.cursor is None or revision > self.cursor:
            self.cursor = revision
            self.publisher.update(revision=revision)

    def _classify(self, activity: Record, revision: int) -> None:
        name = activity.get("event")
        decision = classify(activity, self.who)
        if decision.reason == "unknown":
            if isinstance(name, str) and self.unknown.first_sighting(name):
                log.warning("unknown_event_ignored", name=name, revision=revision)
            return
        if not decision.wake:
            log.debug("event_ignored", name=name, revision=revision, reason=decision.reason,
                      actor=activity.get("actor_id"))
            return
        log.info("wake", name=name, revision=revision, reason=decision.reason,
                 actor_kind=activity.get("actor_kind"), actor=activity.get("actor_id"))
        self._add_wake(revision, str(name))

    def _classify_signal(self, signal: Record) -> None:
        name = signal.get("type")
        decision = classify_signal(signal, self.who)
        if decision.reason == "unknown":
            if isinstance(name, str) and self.unknown.first_sighting(name):
                log.warning("unknown_signal_ignored", name=name)
            return
        if not decision.wake:
            log.debug("signal_ignored", name=name, reason=decision.reason, task=signal.get("task_id"))
            return
        log.info("wake", name=name, signal=True, reason=decision.reason, task=signal.get("task_id"),
                 project=signal.get("project_id"))
        # The turn covers the state the board had when it noticed: everything up to our cursor.
        self._add_wake(self.cursor or 0, str(name))

    def _add_wake(self, revision: int, name: str) -> None:
        """Queue a wake; called before the cursor moves past ``revision``."""
        if self.cursor is not None:
            self._floor = self.cursor if self._floor is None else min(self._floor, self.cursor)
        self.coalescer.add(self._clock(), revision, name)
        self._publish_pending()
        self._changed.set()

    def _resume_after(self) -> int | None:
        """Where a restart must resume while a wake waits for its turn or is being served by one:
        below that wake's event, so a subscriber killed now (SIGKILL, the OOM killer, a host
        reset: no clean stop to say so) replays it rather than resuming past it. None when none."""
        floors = [self._cut_floor, self._serving_floor, self._floor if self.coalescer.pending else None]
        return min((floor for floor in floors if floor is not None), default=None)

    def _pending_names(self) -> list[str]:
        """The names of the wakes a restart must queue again: those of a turn the stop terminated
        or of the running turn, then those waiting (each once)."""
        return list(dict.fromkeys((*self._cut, *self._serving, *self.coalescer.names)))

    def _publish_pending(self) -> None:
        self.publisher.update(pending=self.coalescer.pending, resume_after=self._resume_after(),
                              pending_wakes=self._pending_names())

    # -- turns --------------------------------------------------------------------------------

    async def _drive(self) -> None:
        while not self._stop.is_set():
            self._changed.clear()
            now = self._clock()
            due = self.coalescer.due(now)
            if due is None or due > now:
                try:
                    await asyncio.wait_for(self._changed.wait(), None if due is None else due - now)
                except TimeoutError:
                    pass
                continue
            turn = self.coalescer.take(now)
            if turn is None:
                continue
            # The taken wakes are this turn's now: the floor of the waiting ones starts afresh.
            self._serving_floor, self._floor, self._serving = self._floor, None, turn.events
            self._publish_pending()
            self._turn_idle.clear()
            try:
                result = await self.turns.run(turn, on_start=self._turn_started)
            finally:
                self._turn_idle.set()
            self._turn_done(turn, result)

    def _turn_started(self, turn: Turn, started: float) -> None:
        log.info("turn_started", revision=turn.revision, events=list(turn.events))
        self.publisher.update(last_wake_at=utc_now(), turn_running=True, pending=self.coalescer.pending)
        self.publisher.flush()

    def _turn_done(self, turn: Turn, result: TurnResult) -> None:
        now = self._clock()
        self.counts[result.outcome] += 1
        if result.outcome == RAN:
            self.coalescer.turn_ran(result.started if result.started is not None else now)
            (log.info if result.exit_code == 0 else log.warning)(
                "turn_ran", revision=turn.revision, events=list(turn.events), exit_code=result.exit_code,
                seconds=round(result.seconds or 0.0, 3), detail=result.reason,
            )
        elif result.outcome == REFUSED:
            self.coalescer.turn_refused(now, turn)
            log.info("turn_refused", revision=turn.revision, reason=result.reason, retry_in=self.timing.lock_retry)
        else:
            self.coalescer.turn_skipped(now, turn)
            log.info("turn_skipped", revision=turn.revision, events=list(turn.events), reason=result.reason)
        if result.outcome == REFUSED and self._serving_floor is not None:
            # Put back with its wakes: the refused turn's floor is the older.
            self._floor = self._serving_floor if self._floor is None else min(self._floor, self._serving_floor)
        self._serving_floor, self._serving = None, ()
        self._publish_pending()
        self.publisher.update(
            waiting_for=waiting_for(self.turns.state_dir),
            turns=dict(self.counts),
            turn_running=False,
            last_turn={
                "revision": turn.revision,
                "events": list(turn.events),
                "outcome": result.outcome,
                "reason": result.reason,
                "exit_code": result.exit_code,
                "at": utc_now(),
            },
        )
        self.publisher.flush()

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.timing.state_flush)
            self.publisher.flush()
