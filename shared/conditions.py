"""The condition vocabulary (docs/conditions.md): which names exist, how they pair, which lane.

A condition is something the board notices about its own state — a column over its WIP limit, a
card whose blocker is open, a claim whose heartbeat stopped. Every name is also a declared event
(``shared.events``): a signal by default (an id-less ``event: signal`` frame), an activity row by
actor ``system`` when a project lists it in ``settings.persist_conditions``.
"""

from __future__ import annotations

from typing import Any, Final

from . import events as ev

#: Evaluated inside the transaction of the command that causes them, from the state it leaves.
INSTANT: Final[tuple[str, ...]] = (
    ev.WIP_EXCEEDED,
    ev.WIP_CLEARED,
    ev.LANE_DRAINED,
    ev.LANE_REFILLED,
    ev.CARD_BLOCKED,
    ev.CARD_UNBLOCKED,
    ev.TRANSITION_REJECTED,
)
#: Fired by the board's one timer at the moment a threshold is crossed.
TEMPORAL: Final[tuple[str, ...]] = (ev.STATUS_TIMEOUT, ev.CARD_IDLE, ev.CLAIM_STALE)
#: Every condition name, in catalogue order.
CONDITIONS: Final[tuple[str, ...]] = INSTANT + TEMPORAL
CONDITION_SET: Final[frozenset[str]] = frozenset(CONDITIONS)

#: A holding condition and the name that says it stopped holding. A temporal condition stops
#: holding silently (its card moved, heart-beat or was touched): the move itself is the news.
CLEARED_BY: Final[dict[str, str]] = {
    ev.WIP_EXCEEDED: ev.WIP_CLEARED,
    ev.LANE_DRAINED: ev.LANE_REFILLED,
    ev.CARD_BLOCKED: ev.CARD_UNBLOCKED,
}
#: Conditions that hold over time and so are listed by ``GET /breaches`` while they do.
HOLDING: Final[frozenset[str]] = frozenset(CLEARED_BY) | frozenset(TEMPORAL)

#: The SSE event name of a signal frame and the hub record's type (SPEC §6.1, §7.3).
SIGNAL: Final = "signal"
#: The keys of a signal's ``data``; ``task_id`` is null for a column's condition.
SIGNAL_KEYS: Final[tuple[str, ...]] = ("type", "project_id", "task_id", "changes", "at")

#: ``settings.monitors`` keys a project may set.
MONITOR_KEYS: Final[frozenset[str]] = frozenset(
    {"lanes", "emit_rejections", "max_time_in_status", "idle_after", "claim_stale_after"}
)
#: The smallest threshold, seconds: a timer finer than this would only measure the board's own jitter.
MIN_THRESHOLD_SECONDS: Final = 1.0


def signal_data(*, type_: str, project_id: str, task_id: str | None, changes: dict[str, Any], at: str) -> dict[str, Any]:
    """The ``data`` of an ``event: signal`` frame (and the hub's ``signal`` record)."""
    return {"type": type_, "project_id": project_id, "task_id": task_id, "changes": changes, "at": at}
