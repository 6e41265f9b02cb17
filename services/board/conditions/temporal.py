"""Temporal conditions judged from a card's state: when each would cross, and what it would say.

An *episode* names the state a deadline was computed from (the status and when it was entered,
the last activity, the claim and its heartbeat). A mark with the same episode means "fired
already"; a mark whose episode no longer matches is stale. Both the timer (at start and when a
deadline comes) and the command hook (after every commit) use these functions, so a deadline is
computed one way only.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any, Final, NamedTuple

from shared import conditions, domain, events

from ..dialect import Row
from .config import ProjectConditions

#: Condition rows do not count as activity on a card: a persisted ``card_idle`` must not restart
#: the idle clock it reports on.
_NOT_ACTIVITY: Final = ", ".join(f"'{name}'" for name in conditions.CONDITIONS)


class Episode(NamedTuple):
    """One deadline and the state it was computed from. A tuple, and what it would say is built
    only when asked (the timer firing it): the command hook builds one per deadline per command
    and needs only the type, the key and the deadline."""

    type: str
    key: str
    deadline: float  # POSIX seconds
    #: When the state began: the status was entered, the last activity, the last heartbeat.
    since: str
    threshold: float
    #: The status (``status_timeout``) or the claimant (``claim_stale``).
    subject: str | None = None

    @property
    def changes(self) -> dict[str, Any]:
        if self.type == events.STATUS_TIMEOUT:
            assert self.subject is not None
            return events.status_timeout(status=self.subject, since=self.since, max_=_seconds(self.threshold))
        if self.type == events.CARD_IDLE:
            return events.card_idle(since=self.since, threshold=_seconds(self.threshold))
        assert self.subject is not None
        return events.claim_stale(claimed_by=self.subject, heartbeat_at=self.since, threshold=_seconds(self.threshold))


def _seconds(value: float) -> float | int:
    """A threshold as the settings gave it: 2 stays 2 on the wire, 1.5 stays 1.5."""
    return int(value) if float(value).is_integer() else value


@functools.lru_cache(maxsize=4096)
def posix(stamp: str) -> float:
    """POSIX seconds of a stored timestamp; ``fromisoformat`` is C, ``strptime`` is not (the hook
    reads several stamps per command)."""
    return datetime.fromisoformat(stamp).timestamp()


def last_activity(conn: Any, task_id: str) -> str | None:
    row = conn.execute(
        f"SELECT created_at FROM task_activities WHERE task_id = ? AND event NOT IN ({_NOT_ACTIVITY})"
        " ORDER BY id DESC LIMIT 1",
        (task_id,),
    ).fetchone()
    return None if row is None else str(row[0])


def episodes(
    conn: Any, task: Row, config: ProjectConditions, *, claim_fresh_seconds: float, active_at: str | None = None,
    idle_fired: str | None = None,
) -> list[Episode]:
    """The temporal conditions that apply to ``task`` now, each with its deadline. ``active_at``:
    the card's last activity when the caller knows it (the command just wrote a row for it).
    ``idle_fired``: the episode of the card's fired ``card_idle`` mark, if it holds one — the last
    activity it fired on. The mark is dropped by the next activity on the card, so while it is held
    nothing happened since; the log may no longer show it (retention trimmed that row), and the
    idle clock must not move back to an older row or to the card's creation and fire again."""
    if task["archived_at"] is not None or task["status"] in domain.TERMINAL:
        return []
    found: list[Episode] = []
    status = task["status"]
    if status in config.max_time_in_status:
        limit = config.max_time_in_status[status]
        since = task["status_since"] or task["updated_at"]
        found.append(Episode(events.STATUS_TIMEOUT, f"{status}@{since}", posix(since) + limit, since, limit, status))
    if config.idle_after is not None:
        since = active_at or last_activity(conn, task["id"]) or task["created_at"]
        if idle_fired is not None and idle_fired > since:  # stamps of one format: text order is time order
            since = idle_fired
        found.append(Episode(events.CARD_IDLE, since, posix(since) + config.idle_after, since, config.idle_after))
    if status == "in_progress" and task["claimed_by"] is not None and task["heartbeat_at"] is not None:
        threshold = config.claim_stale_after if config.claim_stale_after is not None else claim_fresh_seconds
        beat = task["heartbeat_at"]
        found.append(Episode(
            events.CLAIM_STALE, f"{task['claimed_by_kind']}:{task['claimed_by']}@{beat}", posix(beat) + threshold, beat,
            threshold, task["claimed_by"],
        ))
    return found
