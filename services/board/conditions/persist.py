"""The durable lane: a condition a project lists in ``settings.persist_conditions`` becomes an
activity row by actor ``system`` — in the causing command's transaction (instant) or in the
timer's own (temporal) — so it replays through ``?after=`` and appears in ``/activities``.

One ``tx.record`` per name, each with its typed constructor, so the contract tests see every
writer and the golden fixtures cover every row.
"""

from __future__ import annotations

from typing import Any

from shared import events

from ..store import SYSTEM_ACTOR, Tx
from .signals import Signal


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
            tx.record(events.CARD_BLOCKED, events.card_blocked(blockers=c["blockers"]), **where)
        case events.CARD_UNBLOCKED:
            tx.record(events.CARD_UNBLOCKED, events.card_unblocked(blockers=c["blockers"]), **where)
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
