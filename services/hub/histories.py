"""Histories the board replaced: cursors from them are never replayed from the new ring (SPEC §7.2).

A board restored from a backup (a new ``board_id``, or the same one answering ``CURSOR_AHEAD``)
numbers its new rows from the restore point on, so a revision between that point and the
highest one of the replaced history names two different rows. A follower that was away at the
restore comes back with such a cursor; replaying the new board's ring after it would skip the
new rows up to it without a word. The hub remembers each replaced range and answers a cursor
inside it with ``reset``, unless the follower names the board its cursor belongs to and that is
not the replaced one. A spurious reset costs a rescan; a replay across histories loses events.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

#: Replaced ranges kept; restores are rare, and the oldest ranges are the least likely cursors.
MAX_REPLACED: Final = 64


@dataclass(frozen=True, slots=True)
class Replaced:
    """Revisions in ``(base, upto]`` of board ``board_id`` were replaced (``reason``: the reset's)."""

    base: int
    upto: int
    board_id: str | None
    reason: str


class ReplacedHistories:
    def __init__(self, limit: int = MAX_REPLACED) -> None:
        self._ranges: deque[Replaced] = deque(maxlen=limit)

    def replaced(self, *, base: int, upto: int | None, board_id: str | None, reason: str) -> None:
        """The board restarted its history at ``base``; the hub had seen it up to ``upto``."""
        if upto is not None and upto > base:
            self._ranges.append(Replaced(base, upto, board_id, reason))

    def reset_reason(self, after: int, board_id: str | None) -> str | None:
        """Why ``after`` (of ``board_id``, None when the follower did not say) cannot be replayed."""
        for replaced in reversed(self._ranges):
            if replaced.base < after <= replaced.upto and board_id in (None, replaced.board_id):
                return replaced.reason
        return None
