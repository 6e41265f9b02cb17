"""The closed event vocabulary and typed constructors for each event's ``changes``.

One declared list; the contract tests prove every writer, every reader and ``docs/events.md``
name exactly these. ``changes`` keys are camelCase on the wire (they are the log's own format);
everything else in the API is snake_case.
"""

from __future__ import annotations

from typing import Any, Final

from .limits import CHANGES_TEXT_MAX_CHARS

PROJECT_CREATED: Final = "project_created"
PROJECT_UPDATED: Final = "project_updated"
TASK_CREATED: Final = "task_created"
TASK_UPDATED: Final = "task_updated"
TASK_CLAIMED: Final = "task_claimed"
TASK_HEARTBEAT: Final = "task_heartbeat"
TASK_MOVED: Final = "task_moved"
TASK_REOPENED: Final = "task_reopened"
TASK_RESUMED: Final = "task_resumed"
TASK_ARCHIVED: Final = "task_archived"
REPORT_WRITTEN: Final = "report_written"
TASK_DELIVERED: Final = "task_delivered"
REPORT_WAIVED: Final = "report_waived"
ACCEPTANCE_CHANGED: Final = "acceptance_changed"
ACCEPTANCE_PRUNED: Final = "acceptance_pruned"
ACCEPTANCE_OVERRIDE: Final = "acceptance_override"
EPIC_AUTO_START: Final = "epic_auto_start"
COMMENT_ADDED: Final = "comment_added"
RELATION_ADDED: Final = "relation_added"
RELATION_REMOVED: Final = "relation_removed"
LABEL_GC: Final = "label_gc"
SESSION_REGISTERED: Final = "session_registered"
SESSION_CLOSED: Final = "session_closed"
PROGRESS: Final = "progress"
ATTACHMENT_ADDED: Final = "attachment_added"
ATTACHMENT_UPDATED: Final = "attachment_updated"
ATTACHMENT_REMOVED: Final = "attachment_removed"
IMPORT_COMPLETED: Final = "import_completed"
# Conditions (shared/conditions.py): signals by default, activity rows by actor ``system`` when a
# project lists them in ``settings.persist_conditions``.
WIP_EXCEEDED: Final = "wip_exceeded"
WIP_CLEARED: Final = "wip_cleared"
LANE_DRAINED: Final = "lane_drained"
LANE_REFILLED: Final = "lane_refilled"
CARD_BLOCKED: Final = "card_blocked"
CARD_UNBLOCKED: Final = "card_unblocked"
TRANSITION_REJECTED: Final = "transition_rejected"
STATUS_TIMEOUT: Final = "status_timeout"
CARD_IDLE: Final = "card_idle"
CLAIM_STALE: Final = "claim_stale"

#: Every event name a row may carry, in catalogue order.
EVENTS: Final[tuple[str, ...]] = (
    PROJECT_CREATED,
    PROJECT_UPDATED,
    TASK_CREATED,
    TASK_UPDATED,
    TASK_CLAIMED,
    TASK_HEARTBEAT,
    TASK_MOVED,
    TASK_REOPENED,
    TASK_RESUMED,
    TASK_ARCHIVED,
    REPORT_WRITTEN,
    TASK_DELIVERED,
    REPORT_WAIVED,
    ACCEPTANCE_CHANGED,
    ACCEPTANCE_PRUNED,
    ACCEPTANCE_OVERRIDE,
    EPIC_AUTO_START,
    COMMENT_ADDED,
    RELATION_ADDED,
    RELATION_REMOVED,
    LABEL_GC,
    SESSION_REGISTERED,
    SESSION_CLOSED,
    PROGRESS,
    ATTACHMENT_ADDED,
    ATTACHMENT_UPDATED,
    ATTACHMENT_REMOVED,
    IMPORT_COMPLETED,
    WIP_EXCEEDED,
    WIP_CLEARED,
    LANE_DRAINED,
    LANE_REFILLED,
    CARD_BLOCKED,
    CARD_UNBLOCKED,
    TRANSITION_REJECTED,
    STATUS_TIMEOUT,
    CARD_IDLE,
    CLAIM_STALE,
)
EVENT_SET: Final[frozenset[str]] = frozenset(EVENTS)

#: Declared so rows an old importer wrote stay readable; nothing writes them any more.
#: (``import_completed`` is live again: the state import writes it, commands/state_import.py.)
HISTORICAL: Final[frozenset[str]] = frozenset({PROGRESS})

#: Rows that advance the cursor but are never sent as frames (SPEC §6.4).
WIRE_NOISE: Final[frozenset[str]] = frozenset({TASK_HEARTBEAT})

#: Events that carry no task (board-wide); every other event names the task it touches.
TASKLESS: Final[frozenset[str]] = frozenset({
    PROJECT_CREATED, PROJECT_UPDATED, LABEL_GC, IMPORT_COMPLETED,
    WIP_EXCEEDED, WIP_CLEARED, LANE_DRAINED, LANE_REFILLED,  # a column of a project, not a card
})

#: The actor kinds with meaning; every other kind names a platform an agent runs on.
HUMAN: Final = "human"
SYSTEM: Final = "system"

#: Task fields whose old and new values a ``task_updated`` row carries when short enough.
BEFORE_AFTER_MAX_CHARS: Final = CHANGES_TEXT_MAX_CHARS


def _compact(**fields: Any) -> dict[str, Any]:
    """Drop optional keys left as None so the wire carries only what happened."""
    return {key: value for key, value in fields.items() if value is not None}


def project_created(*, project: str) -> dict[str, Any]:
    return {"project": project}


def project_updated(*, project: str, fields: list[str]) -> dict[str, Any]:
    return {"project": project, "fields": list(fields)}


def task_created(
    *,
    identifier: str,
    status: str,
    priority: str,
    acceptance_mode: str,
    idem: str | None = None,
    dictionaries: dict[str, Any] | None = None,
    labels: list[str] | None = None,
) -> dict[str, Any]:
    return _compact(
        identifier=identifier,
        status=status,
        priority=priority,
        acceptance_mode=acceptance_mode,
        idem=idem,
        dictionaries=dictionaries,
        labels=labels,
    )


def task_updated(
    *,
    fields: list[str],
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    dictionaries: dict[str, Any] | None = None,
    labels: list[str] | None = None,
) -> dict[str, Any]:
    return _compact(fields=list(fields), before=before, after=after, dictionaries=dictionaries, labels=labels)


def task_claimed(
    *, from_: str, to: str, stole_from: str | None = None, reason: str | None = None, forced: bool | None = None
) -> dict[str, Any]:
    """``forced``: claimed past open blockers (``force`` + reason, SPEC §12)."""
    return _compact(**{"from": from_, "to": to, "stoleFrom": stole_from, "reason": reason, "forced": forced})


def task_heartbeat(*, heartbeat_at: str) -> dict[str, Any]:
    return {"heartbeatAt": heartbeat_at}


def task_moved(
    *,
    from_: str,
    to: str,
    delivery_round: int,
    awaiting_reason: str | None = None,
    blocked_reason: str | None = None,
    question_comment_id: str | None = None,
    forced: bool | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    return _compact(
        **{
            "from": from_,
            "to": to,
            "deliveryRound": delivery_round,
            "awaitingReason": awaiting_reason,
            "blockedReason": blocked_reason,
            "questionCommentId": question_comment_id,
            "forced": forced,
            "reason": reason,
        }
    )


def task_reopened(*, from_: str, to: str, reason: str, delivery_round: int) -> dict[str, Any]:
    return {"from": from_, "to": to, "reason": reason, "deliveryRound": delivery_round}


def task_resumed(*, comment_id: str, from_: str, to: str) -> dict[str, Any]:
    return {"commentId": comment_id, "from": from_, "to": to}


def task_archived(*, from_: str, archived_at: str, labels_released: list[str] | None = None) -> dict[str, Any]:
    return _compact(**{"from": from_, "archivedAt": archived_at, "labelsReleased": labels_released})


def report_written(*, round_: int, report_id: str, delivery_round: int) -> dict[str, Any]:
    return {"round": round_, "reportId": report_id, "deliveryRound": delivery_round}


def task_delivered(
    *,
    from_: str,
    to: str,
    round_: int,
    report_id: str | None,
    rollup: bool | None = None,
    canceled: int | None = None,
    source: str | None = None,
    forced: bool | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    changes = {"from": from_, "to": to, "round": round_, "reportId": report_id}
    changes.update(_compact(rollup=rollup, canceled=canceled, source=source, forced=forced, reason=reason))
    return changes


def report_waived(
    *, from_: str, to: str, round_: int, reason: str, delivery_round: int, forced: bool | None = None
) -> dict[str, Any]:
    changes = {"from": from_, "to": to, "round": round_, "reason": reason, "deliveryRound": delivery_round}
    changes.update(_compact(forced=forced))
    return changes


def acceptance_changed(*, added: list[dict[str, Any]], revision: int) -> dict[str, Any]:
    return {"added": list(added), "revision": revision}


def acceptance_pruned(*, reason: str, removed: list[dict[str, Any]]) -> dict[str, Any]:
    return {"reason": reason, "removed": list(removed)}


def acceptance_override(*, from_: str, to: str, reason: str | None = None) -> dict[str, Any]:
    return _compact(**{"from": from_, "to": to, "reason": reason})


def epic_auto_start(*, from_: str, to: str, child: str, source: str) -> dict[str, Any]:
    return {"from": from_, "to": to, "child": child, "source": source}


def comment_added(*, comment_id: str, kind: str) -> dict[str, Any]:
    return {"commentId": comment_id, "kind": kind}


def relation_added(*, relation_id: str, type_: str, source: str, target: str) -> dict[str, Any]:
    return {"relationId": relation_id, "type": type_, "source": source, "target": target}


def relation_removed(*, relation_id: str, type_: str, source: str, target: str) -> dict[str, Any]:
    return {"relationId": relation_id, "type": type_, "source": source, "target": target}


def label_gc(*, archived: list[str], kept: int, mismatched: int, reason: str, ttl_days: int) -> dict[str, Any]:
    return {"archived": list(archived), "kept": kept, "mismatched": mismatched, "reason": reason, "ttlDays": ttl_days}


def session_registered(*, session_id: str, seg: int, owner_kind: str, phase: str) -> dict[str, Any]:
    return {"sessionId": session_id, "seg": seg, "ownerKind": owner_kind, "phase": phase}


def session_closed(*, session_id: str, status: str) -> dict[str, Any]:
    return {"sessionId": session_id, "status": status}


def progress(*, line: str, seq: int) -> dict[str, Any]:
    return {"line": line, "seq": seq}


def _attachment(*, attachment_id: str, filename: str, content_type: str, size: int) -> dict[str, Any]:
    return {"attachmentId": attachment_id, "filename": filename, "content_type": content_type, "size": size}


attachment_added = _attachment
attachment_updated = _attachment
attachment_removed = _attachment


def import_completed(**counters: int) -> dict[str, Any]:
    return dict(counters)


# -- conditions (docs/conditions.md): the same ``changes`` travel as a signal's and as a row's --


def wip_exceeded(*, status: str, count: int, limit: int) -> dict[str, Any]:
    return {"status": status, "count": count, "limit": limit}


def wip_cleared(*, status: str, count: int, limit: int) -> dict[str, Any]:
    return {"status": status, "count": count, "limit": limit}


def lane_drained(*, status: str, count: int) -> dict[str, Any]:
    return {"status": status, "count": count}


def lane_refilled(*, status: str, count: int) -> dict[str, Any]:
    return {"status": status, "count": count}


def card_blocked(*, blockers: list[str], more: int = 0) -> dict[str, Any]:
    """``blockers``: identifiers of the open ``blocks`` sources; ``more``: how many of them a
    persisted row leaves out to stay within an activity row's size (absent when none)."""
    return {"blockers": list(blockers), **({"more": more} if more else {})}


def card_unblocked(*, blockers: list[str], more: int = 0) -> dict[str, Any]:
    """``blockers``: identifiers of the blockers that held the card last (now none is open);
    ``more`` as for :func:`card_blocked`."""
    return {"blockers": list(blockers), **({"more": more} if more else {})}


def transition_rejected(*, from_: str, to: str, code: str) -> dict[str, Any]:
    return {"from": from_, "to": to, "code": code}


def status_timeout(*, status: str, since: str, max_: float) -> dict[str, Any]:
    return {"status": status, "since": since, "max": max_}


def card_idle(*, since: str, threshold: float) -> dict[str, Any]:
    return {"since": since, "threshold": threshold}


def claim_stale(*, claimed_by: str, heartbeat_at: str, threshold: float) -> dict[str, Any]:
    return {"claimed_by": claimed_by, "heartbeat_at": heartbeat_at, "threshold": threshold}


#: Constructor per event name; the golden-fixture test walks this map.
CONSTRUCTORS: Final = {
    PROJECT_CREATED: project_created,
    PROJECT_UPDATED: project_updated,
    TASK_CREATED: task_created,
    TASK_UPDATED: task_updated,
    TASK_CLAIMED: task_claimed,
    TASK_HEARTBEAT: task_heartbeat,
    TASK_MOVED: task_moved,
    TASK_REOPENED: task_reopened,
    TASK_RESUMED: task_resumed,
    TASK_ARCHIVED: task_archived,
    REPORT_WRITTEN: report_written,
    TASK_DELIVERED: task_delivered,
    REPORT_WAIVED: report_waived,
    ACCEPTANCE_CHANGED: acceptance_changed,
    ACCEPTANCE_PRUNED: acceptance_pruned,
    ACCEPTANCE_OVERRIDE: acceptance_override,
    EPIC_AUTO_START: epic_auto_start,
    COMMENT_ADDED: comment_added,
    RELATION_ADDED: relation_added,
    RELATION_REMOVED: relation_removed,
    LABEL_GC: label_gc,
    SESSION_REGISTERED: session_registered,
    SESSION_CLOSED: session_closed,
    PROGRESS: progress,
    ATTACHMENT_ADDED: attachment_added,
    ATTACHMENT_UPDATED: attachment_updated,
    ATTACHMENT_REMOVED: attachment_removed,
    IMPORT_COMPLETED: import_completed,
    WIP_EXCEEDED: wip_exceeded,
    WIP_CLEARED: wip_cleared,
    LANE_DRAINED: lane_drained,
    LANE_REFILLED: lane_refilled,
    CARD_BLOCKED: card_blocked,
    CARD_UNBLOCKED: card_unblocked,
    TRANSITION_REJECTED: transition_rejected,
    STATUS_TIMEOUT: status_timeout,
    CARD_IDLE: card_idle,
    CLAIM_STALE: claim_stale,
}
