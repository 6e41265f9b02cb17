"""Turn a stream of wake-worthy events into spaced continue turns (SPEC §9, coalescing).

A pure state machine on a caller-supplied monotonic clock: the caller ``add``s events, sleeps
until ``due``, asks ``take`` for the batch, then reports what became of it (``turn_ran``,
``turn_refused`` or ``turn_skipped``). Nothing added is lost except a batch the caller skips.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: Quiet time after the last event before a turn fires: a burst becomes one turn.
DEBOUNCE: Final = 0.3
#: Longest a turn waits after its first event, so a steady trickle cannot starve it.
MAX_WAIT: Final = 2.0
#: At most one event-triggered turn per this many seconds, counted from the last turn that ran.
MIN_INTERVAL: Final = 60.0
#: Retry delay when the supervisor holds the continue lock.
LOCK_RETRY: Final = 5.0


@dataclass(frozen=True, slots=True)
class Turn:
    """One continue turn: the highest revision it covers and its distinct event names, in order."""

    revision: int
    events: tuple[str, ...]


class Coalescer:
    """Batches wake events into turns: debounced, capped, rate-limited, retried when locked out.

    The fire time of a pending batch is ``min(last + debounce, first + max_wait)``, pushed later
    to ``last_ran + min_interval`` and, after a refusal, to ``refused_at + lock_retry``.
    """

    def __init__(
        self,
        *,
        debounce: float = DEBOUNCE,
        max_wait: float = MAX_WAIT,
        min_interval: float = MIN_INTERVAL,
        lock_retry: float = LOCK_RETRY,
    ) -> None:
        for name, value in (
            ("debounce", debounce),
            ("max_wait", max_wait),
            ("min_interval", min_interval),
            ("lock_retry", lock_retry),
        ):
            if value < 0:
                raise ValueError(f"{name} must not be negative, got {value!r}")
        self._debounce = debounce
        self._max_wait = max_wait
        self._min_interval = min_interval
        self._lock_retry = lock_retry
        # The pending batch; a dict is an insertion-ordered set of event names.
        self._events: dict[str, None] = {}
        self._revision = 0
        self._first_at: float | None = None
        self._last_at: float | None = None
        self._retry_at: float | None = None
        self._ran_at: float | None = None

    @property
    def pending(self) -> bool:
        """True while a batch waits for a turn."""
        return self._first_at is not None

    @property
    def names(self) -> tuple[str, ...]:
        """The wake names of the batch waiting for a turn, oldest first."""
        return tuple(self._events)

    def add(self, now: float, revision: int, event: str) -> None:
        """Record a wake-worthy event seen at ``now``."""
        if self._first_at is None:
            self._first_at = now
            self._revision = revision
        else:
            # Replay after a reconnect may repeat older revisions; the turn covers the highest.
            self._revision = max(self._revision, revision)
        self._last_at = now
        self._events.setdefault(event, None)

    def due(self, now: float) -> float | None:
        """The earliest time, not before ``now``, at which ``take`` hands out a turn; None if idle."""
        fire_at = self._fire_at()
        return None if fire_at is None else max(fire_at, now)

    def take(self, now: float) -> Turn | None:
        """Hand out the pending batch as a turn if it is due at ``now``, else None."""
        fire_at = self._fire_at()
        if fire_at is None or now < fire_at:
            return None
        turn = Turn(revision=self._revision, events=tuple(self._events))
        self._events = {}
        self._revision = 0
        self._first_at = self._last_at = self._retry_at = None
        return turn

    def turn_ran(self, now: float) -> None:
        """Record that a turn ran at ``now``; the next one waits ``min_interval`` from here."""
        self._ran_at = now

    def turn_refused(self, now: float, turn: Turn) -> None:
        """Put back a turn the continue lock refused; it retries at ``now + lock_retry``."""
        # The refused names are older than anything added since the take, so they lead.
        merged = dict.fromkeys(turn.events)
        merged.update(self._events)
        self._events = merged
        if self._first_at is None:
            self._first_at = self._last_at = now
            self._revision = turn.revision
        else:
            self._revision = max(self._revision, turn.revision)
        # The retry time dominates the debounce: events arriving meanwhile join the retry and
        # cannot push it later, because max_wait has already run out for the refused batch.
        self._retry_at = now + self._lock_retry

    def turn_skipped(self, now: float, turn: Turn) -> None:
        """Accept that a turn was dropped for want of a live resident pool; the window is untouched.

        A skipped turn ran nothing, so it does not start ``min_interval``: the next event may
        wake a turn as soon as a pool is back, instead of up to a minute later. The batch is
        dropped, not put back: with no pool nothing could be dispatched, and the continue clock
        stays the patrol path (reference §5.4).
        """
        del now, turn  # part of the protocol; deliberately no state change

    def _fire_at(self) -> float | None:
        """When the pending batch may fire, ignoring the current time; None if nothing is pending."""
        if self._first_at is None or self._last_at is None:
            return None
        fire_at = min(self._last_at + self._debounce, self._first_at + self._max_wait)
        if self._ran_at is not None:
            fire_at = max(fire_at, self._ran_at + self._min_interval)
        if self._retry_at is not None:
            fire_at = max(fire_at, self._retry_at)
        return fire_at
