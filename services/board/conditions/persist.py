"""The durable lane: a condition a project lists in ``settings.persist_conditions`` becomes an
activity row by actor ``system`` — in the causing command's transaction (instant) or in the
timer's own (temporal) — so it replays through ``?after=`` and appears in ``/activities``.

One ``tx.record`` per name, each with its typed constructor, so the contract tests see every
writer and the golden fixtures cover every row.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from shared import events
from shared.limits import MAX_CHANGES_BYTES

from ..store import SYSTEM_ACTOR, Tx
from .signals import Signal

#: What a persisted blocker list may take of an activity row's changes: a card may have thousands
#: of open blockers, and the row is written in the transaction of the command that changed them —
#: a row too large would refuse that command (a blocker could not be finished). The signal and
#: ``/breaches`` keep the whole list.
BLOCKERS_BYTES: Final = MAX_CHANGES_BYTES // 2


def _within_a_row(blockers: list[str]) -> tuple[list[str], int]:
    """The first blockers whose JSON fits :data:`BLOCKERS_BYTES`, and how many are left out."""
    used = 2  # the brackets
    for count, identifier in enumerate(blockers):
        used += len(orjson.dumps(identifier)) + 1
        if used > BLOCKERS_BYTES:
            return blockers[:count], len(blockers) - count
    return blockers, 0


def record(tx: Tx, signal: Signal) -> None:
    c: dict[str, Any] = signal.changes
    where: dict[str, Any] = {"task_id": signal.task_id, "project_id": signal.project_id, "actor": SYSTEM_ACTOR}
    match signal.type:
        case events.WIP_EXCEEDED:
            tx.record(events.WIP_EXCEEDED, events.wip_exceeded(status=c["status"], count=c["count"], limit=c["limit"]), **where)
        case events.WIP_CLEARED:
            tx.record(events.WIP_CLEARED, events.wip_cleared(status=c["status"], count=c["count"], limit=c["limit"]), **where)
        case events.LANE_DRAINED:
            tx.record(events.LANE_DRAINED, events.lane_drained(status=c["status"], count=c["count"]), **where)
        case events.LANE_REFILLED:
            tx.record(events.LANE_REFILLED, events.lane_refilled(status=c["status"], count=c["count"]), **where)
        case events.CARD_BLOCKED:
            listed, more = _within_a_row(c["blockers"])
            tx.record(events.CARD_BLOCKED, events.card_blocked(blockers=listed, more=more), **where)
        case events.CARD_UNBLOCKED:
            listed, more = _within_a_row(c["blockers"])
            tx.record(events.CARD_UNBLOCKED, events.card_unblocked(blockers=listed, more=more), **where)
        case events.TRANSITION_REJECTED:
            tx.record(
                events.TRANSITION_REJECTED, events.transition_rejected(from_=c["from"], to=c["to"], code=c["code"]), **where
            )
        case events.STATUS_TIMEOUT:
            tx.record(
                events.STATUS_TIMEOUT, events.status_timeout(status=c["status"], since=c["since"], max_=c["max"]), **where
            )
        case events.CARD_IDLE:
            tx.record(events.CARD_IDLE, events.card_idle(since=c["since"], threshold=c["threshold"]), **where)
        case events.CLAIM_STALE:
            tx.record(
                events.CLAIM_STALE,
                events.claim_stale(claimed_by=c["claimed_by"], heartbeat_at=c["heartbeat_at"], threshold=c["threshold"]),
                **where,
            )
        case _:
            raise ValueError(f"not a condition: {signal.type!r}")
