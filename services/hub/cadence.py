"""When a card brief is re-rendered: debounce, maximum wait, floor between batches (SPEC §7.4).

Pure: the caller passes the time in and owns the timer. The registry (``registry.py``) keeps one
schedule per registration and says when its executor's timer must fire, so the hub (asyncio) and
the standalone watcher (a thread and a queue) share one rule, tested without a clock.

A batch is due ``debounce`` after the last mark (a burst settles into one render), but never later
than ``max_wait`` after the first unserved mark (a steady trickle cannot starve the file), and
never sooner than ``floor`` after the previous batch started (a busy card costs at most one
render per floor). Marks that arrive while a batch runs belong to the next batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class RefreshSchedule:
    debounce: float
    max_wait: float
    floor: float
    first_mark: float | None = None
    last_mark: float | None = None
    last_batch: float | None = None
    #: Keys (task ids) waiting for the next batch; ``everything`` stands for every key.
    keys: set[str] = field(default_factory=set)
    everything: bool = False

    @property
    def pending(self) -> bool:
        return self.first_mark is not None

    def mark(self, now: float, keys: Iterable[str] | None = None) -> None:
        """Something changed: ``keys`` (task ids), or every card when ``keys`` is None."""
        if keys is None:
            self.everything = True
        else:
            self.keys.update(keys)
        if self.first_mark is None:
            self.first_mark = now
        self.last_mark = now

    def due(self) -> float | None:
        """When the next batch should start, or None when nothing waits."""
        if self.first_mark is None or self.last_mark is None:
            return None
        at = min(self.last_mark + self.debounce, self.first_mark + self.max_wait)
        if self.last_batch is not None:
            at = max(at, self.last_batch + self.floor)
        return at

    def take(self, now: float) -> tuple[bool, set[str]]:
        """Start a batch: returns ``(everything, keys)`` and clears them."""
        taken = (self.everything, self.keys)
        self.keys = set()
        self.everything = False
        self.first_mark = self.last_mark = None
        self.last_batch = now
        return taken
