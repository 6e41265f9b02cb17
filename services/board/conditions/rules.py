"""The one dependency rule (SPEC §12): who blocks a card, and which cards are ready to claim.

A card is *blocked by dependency* while a ``blocks`` relation points at it from a source that is
not terminal. A card is *ready* when it is ``todo``, not an epic, not archived, has no open
blocker, is not held by a fresh claim, and — when asked for an actor — is unassigned or assigned
to that actor. ``ready``, the task list filters, ``/breaches``, the claim/deliver/move gates and
the instant ``card_blocked`` condition all read these clauses; nothing else restates them.

The same gate, with the epic rollup, makes one card *wait* for another to finish: :data:`WAITS`
says which relations do and which end waits, for the relations command's refusal of a waiting
ring and the state import's (docs/conditions.md §1.4).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Final

from shared import domain
from shared.errors import TaskloomError
from shared.timestamps import format_timestamp, parse_timestamp

from ..dialect import Connection, Row

#: Terminal statuses as SQL literals (the rule's "not done/canceled").
_TERMINAL_SQL: Final = ", ".join(f"'{status}'" for status in sorted(domain.TERMINAL))

#: The open blockers of the card whose id is the parameter, by identifier.
OPEN_BLOCKERS_SQL: Final = (
    "SELECT b.identifier FROM relations r JOIN tasks b ON b.id = r.source_id"
    f" WHERE r.type = 'blocks' AND r.target_id = ? AND b.status NOT IN ({_TERMINAL_SQL})"
    " ORDER BY b.identifier"
)

#: The column a task row carries ``blocks_pointed_clause`` in (``queries.tasks.find_task``, the
#: conditions' card read).
POINTED_AT: Final = "_blocked_some"

#: Urgent first; the list's creation order (rowid) breaks ties.
PRIORITY_RANK_SQL: Final = (
    "CASE priority WHEN 'urgent' THEN 0 WHEN 'high' THEN 1 WHEN 'medium' THEN 2 ELSE 3 END"
)


#: The relations that make one card wait for another to finish, each as (the waiter's column, the
#: awaited card's column): an epic waits for its children (the rollup delivers it when they are
#: all finished), a blocked card for its blockers (the gate holds it until they are). No other
#: relation makes a card wait.
WAITS: Final[dict[str, tuple[str, str]]] = {
    "parent": ("source_id", "target_id"),
    "blocks": ("target_id", "source_id"),
}

#: Whether the card whose id is the first parameter waits, however indirectly, for the card whose
#: id is the second: a walk along :data:`WAITS` from waiter to awaited. The seed is read from
#: tasks, not bound bare: its type (and collation) is then the column's.
WAITS_FOR_SQL: Final = (
    "WITH RECURSIVE walk(id) AS (SELECT id FROM tasks WHERE id = ? UNION"
    " SELECT CASE r.type"
    + "".join(f" WHEN '{type_}' THEN r.{awaited}" for type_, (_, awaited) in WAITS.items())
    + " END FROM relations r JOIN walk w ON "
    + " OR ".join(f"(r.type = '{type_}' AND r.{waiter} = w.id)" for type_, (waiter, _) in WAITS.items())
    + ") SELECT 1 FROM walk WHERE id = ?"
)


def waits(relation: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(waiter, awaited)`` of one relation row, by :data:`WAITS`; None when it makes nobody wait."""
    ends = WAITS.get(relation["type"])
    return None if ends is None else (relation[ends[0]], relation[ends[1]])


def blocks_pointed_clause(task: str = "tasks") -> str:
    """True for a row of ``task`` that some ``blocks`` relation points at, open or not: where it
    is false the card has no open blocker, and nobody need look for one."""
    return f"EXISTS (SELECT 1 FROM relations r WHERE r.type = 'blocks' AND r.target_id = {task}.id)"


def blocked_clause(task: str = "tasks") -> str:
    """True for a row of ``task`` (a table name or alias) with an open blocker."""
    return (
        "EXISTS (SELECT 1 FROM relations r JOIN tasks b ON b.id = r.source_id"
        f" WHERE r.type = 'blocks' AND r.target_id = {task}.id AND b.status NOT IN ({_TERMINAL_SQL}))"
    )


def fresh_cutoff(now: str, fresh_seconds: float) -> str:
    """The oldest heartbeat that still counts as fresh at ``now`` (timestamps compare as text)."""
    return format_timestamp(parse_timestamp(now) - timedelta(seconds=fresh_seconds))


def ready_clause(
    *, now: str, fresh_seconds: float = domain.CLAIM_FRESH_SECONDS, for_actor: str | None = None, task: str = "tasks"
) -> tuple[str, list[Any]]:
    """The ready rule as a WHERE fragment and its parameters."""
    sql = (
        f"{task}.status = 'todo' AND {task}.kind <> 'epic' AND {task}.archived_at IS NULL"
        f" AND NOT {blocked_clause(task)}"
        f" AND ({task}.claimed_by IS NULL OR {task}.heartbeat_at IS NULL OR {task}.heartbeat_at < ?)"
    )
    params: list[Any] = [fresh_cutoff(now, fresh_seconds)]
    if for_actor is not None:
        sql += f" AND ({task}.assignee_id IS NULL OR {task}.assignee_id = ?)"
        params.append(for_actor)
    return sql, params


def open_blockers(conn: Connection, task_id: str) -> list[str]:
    """Identifiers of the open ``blocks`` sources of one card, sorted."""
    return [row[0] for row in conn.execute(OPEN_BLOCKERS_SQL, (task_id,))]


def refuse_open_blockers(
    conn: Connection, task: Row, *, action: str, force: bool, reason: str | None
) -> str | None:
    """The gate of claim, deliver and finishing moves: ``409 DEPENDENCY_OPEN`` while a blocker is
    open, unless ``force`` comes with a reason of at least 8 characters (``422 REASON_REQUIRED``
    without one: the same request passes on a card with no open blocker). Returns that reason
    when the gate was forced (the caller audits it as ``forced``/``reason``), else None."""
    blockers = open_blockers(conn, task["id"])
    if not blockers:
        return None
    if not force:
        raise TaskloomError(
            "DEPENDENCY_OPEN",
            f"{task['identifier']} is blocked by {', '.join(blockers)}; {action} waits until they are done or canceled",
            details={"blockers": blockers, "action": action},
            hint=f"finish the blockers first, or pass force with a reason of at least {domain.MIN_REASON_CHARS} characters",
        )
    text = (reason or "").strip()
    if len(text) < domain.MIN_REASON_CHARS:
        raise TaskloomError(
            "REASON_REQUIRED",
            f"forcing {action} past open blockers needs a reason of at least {domain.MIN_REASON_CHARS} characters",
            details={"field": "reason", "reason": reason, "blockers": blockers, "action": action},
            hint=f"say why in reason ({domain.MIN_REASON_CHARS} characters or more), or finish the blockers first",
        )
    return text
