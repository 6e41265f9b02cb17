"""Epic bookkeeping done by the board itself (actor ``system``): auto-start and rollup.

These run inside the transaction of the command that caused them (a child claimed or finished, a
blocker of the epic finished), so that change and the epic's follow-up commit or roll back together.
"""

from __future__ import annotations

from shared import domain, events

from ..conditions import rules
from ..dialect import Row
from ..queries.tasks import TaskRow
from ..store import SYSTEM_ACTOR, Tx
from .common import new_id, reload, set_status


def parent_epics(tx: Tx, task_id: str) -> list[Row]:
    return tx.all(
        "SELECT t.* FROM relations r JOIN tasks t ON t.id = r.source_id"
        " WHERE r.type = 'parent' AND r.target_id = ? AND t.kind = 'epic' ORDER BY t.number",
        (task_id,),
    )


def auto_start_parents(tx: Tx, child: Row, *, source: str) -> None:
    """Claiming a child starts its epic: backlog/todo → in_progress."""
    for epic in parent_epics(tx, child["id"]):
        if epic["status"] not in ("backlog", "todo") or epic["archived_at"] is not None:
            continue
        started_from = epic["status"]
        if epic["status"] == "backlog":
            # The graph has no backlog → in_progress edge; the epic passes through todo.
            set_status(tx, epic, "todo")
            epic = reload(tx, epic["id"])
        set_status(tx, epic, "in_progress")
        tx.record(
            events.EPIC_AUTO_START,
            events.epic_auto_start(from_=started_from, to="in_progress", child=child["identifier"], source=source),
            task_id=epic["id"],
            project_id=epic["project_id"],
            actor=SYSTEM_ACTOR,
        )


def after_terminal(tx: Tx, finished: TaskRow) -> None:
    """When an epic's last open child becomes terminal, summarise and deliver the epic — once no
    blocker of the epic is open either: the board's own delivery passes the gate a person's does
    (``DEPENDENCY_OPEN``), so an epic whose children are done waits for its last blocker, and the
    blocker's finish delivers it."""
    blocked = tx.all(
        "SELECT t.* FROM relations r JOIN tasks t ON t.id = r.target_id"
        " WHERE r.type = 'blocks' AND r.source_id = ? AND t.kind = 'epic' ORDER BY t.number",
        (finished["id"],),
    )
    seen: set[str] = set()
    for epic in [*parent_epics(tx, finished["id"]), *blocked]:
        if epic["id"] in seen:
            continue
        seen.add(epic["id"])
        _deliver_when_finished(tx, epic, finished)


def _deliver_when_finished(tx: Tx, epic: Row, finished: TaskRow) -> None:
    if epic["status"] not in ("in_progress", "blocked") or epic["archived_at"] is not None:
        return
    children = tx.all(
        "SELECT t.identifier, t.title, t.status FROM relations r JOIN tasks t ON t.id = r.target_id"
        " WHERE r.type = 'parent' AND r.source_id = ? ORDER BY t.number",
        (epic["id"],),
    )
    if not children or any(row["status"] not in domain.TERMINAL for row in children):
        return
    if rules.open_blockers(tx.conn, epic["id"]):
        return
    canceled = sum(1 for row in children if row["status"] == "canceled")
    lines = [f"All {len(children)} children are finished ({canceled} canceled):"]
    lines += [f"- {row['identifier']} {row['title']}: {row['status']}" for row in children]
    comment_id = new_id()
    tx.execute(
        "INSERT INTO comments (id, task_id, kind, body, actor_kind, actor_id, round, created_at)"
        " VALUES (?, ?, 'note', ?, ?, ?, ?, ?)",
        (comment_id, epic["id"], "\n".join(lines), SYSTEM_ACTOR.kind, SYSTEM_ACTOR.id, epic["delivery_round"], tx.now),
    )
    tx.record(
        events.COMMENT_ADDED,
        events.comment_added(comment_id=comment_id, kind="note"),
        task_id=epic["id"],
        project_id=epic["project_id"],
        actor=SYSTEM_ACTOR,
    )
    set_status(tx, epic, "in_review", delivered_by=SYSTEM_ACTOR.id)
    tx.record(
        events.TASK_DELIVERED,
        events.task_delivered(
            from_=epic["status"],
            to="in_review",
            round_=epic["delivery_round"],
            report_id=None,
            rollup=True,
            canceled=canceled,
            source=finished["identifier"],
        ),
        task_id=epic["id"],
        project_id=epic["project_id"],
        actor=SYSTEM_ACTOR,
    )
