"""The replay ring: the last ``RING_SIZE`` event lines, ready to write (SPEC §7.3).

It is a latency aid, not a durable queue: a cursor older than the ring gets ``None`` (the caller
sends a ``reset`` and starts live). ``base`` is the revision from which the ring is complete:
every event with ``revision > base`` that the hub has seen is still held.
"""

from __future__ import annotations

from bisect import bisect_right

from shared.hub_protocol import RING_SIZE


class Ring:
    def __init__(self, capacity: int = RING_SIZE, *, base: int | None = None) -> None:
        if capacity < 1:
            raise ValueError("a ring holds at least one frame")
        self.capacity = capacity
        self.base = base
        # Two parallel lists with a moving start: bisect needs a sequence with O(1) indexing, and
        # trimming in bulk keeps append amortised O(1).
        self._revisions: list[int] = []
        self._lines: list[bytes] = []
        self._start = 0

    def __len__(self) -> int:
        return len(self._revisions) - self._start

    @property
    def last(self) -> int | None:
        """The newest revision held, or None when empty."""
        return self._revisions[-1] if len(self) else None

    def restart(self, base: int | None) -> None:
        """Forget everything: the ring is complete from ``base`` on (a new board, a reset)."""
        self._revisions.clear()
        self._lines.clear()
        self._start = 0
        self.base = base

    def append(self, revision: int, line: bytes) -> None:
        """Hold one event line; revisions must increase (the board's order, SPEC §1.2)."""
        if len(self) and revision <= self._revisions[-1]:
            raise ValueError(f"revision {revision} is not after {self._revisions[-1]}")
        self._revisions.append(revision)
        self._lines.append(line)
        if len(self) > self.capacity:
            # The oldest frame leaves: the ring is now complete only from its revision on.
            self.base = self._revisions[self._start]
            self._start += 1
            if self._start >= self.capacity:
                del self._revisions[: self._start]
                del self._lines[: self._start]
                self._start = 0

    def covers(self, after: int) -> bool:
        """Whether every event with ``revision > after`` that the hub has seen is held."""
        return self.base is not None and after >= self.base

    def since(self, after: int, limit: int | None = None) -> list[tuple[int, bytes]] | None:
        """The held events with ``revision > after``, oldest first; None when the ring cannot tell."""
        if not self.covers(after):
            return None
        index = bisect_right(self._revisions, after, self._start)
        end = len(self._revisions) if limit is None else min(len(self._revisions), index + limit)
        return list(zip(self._revisions[index:end], self._lines[index:end], strict=True))
