"""Comment commands: comment, and ask (a worker's question that parks the task) (SPEC §4.4).

A comment belongs to the task's current delivery round. A ``human`` comment on an ``awaiting``
task is the answer the worker waits for, so it also resumes the task (awaiting → todo) in the
same transaction: ``comment_added`` then ``task_resumed``.
"""

from __future__ import annotations

from typing import Any

from shared import domain, events, limits
from shared.errors import TaskloomError, validation

from ..dialect import Row
from ..queries.comments import comment_to_dict
from ..queries.tasks import task_resource
from ..store import Tx
from .common import check_text, load_task, new_id, refuse_archived, reload, set_status, written

#: ``awaiting_reason`` is the question's first line, cut to fit a card and its activity row.
AWAITING_REASON_MAX_CHARS = limits.CHANGES_TEXT_MAX_CHARS


def _check_body(body: str, what: str) -> str:
    if not body.strip():
        raise validation(f"{what} must not be empty", field="body")
    check_text(body, field="body", limit=limits.COMMENT_MAX_CHARS)
    return body


def _insert_comment(tx: Tx, task: Row, kind: str, body: str) -> str:
    """Write the comment row and its ``comment_added`` row; returns the comment id."""
    comment_id = new_id()
    tx.execute(
        "INSERT INTO comments (id, task_id, kind, body, actor_kind, actor_id, round, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (comment_id, task["id"], kind, body, tx.actor.kind, tx.actor.id, task["delivery_round"], tx.now),
    )
    tx.record(
        events.COMMENT_ADDED,
        events.comment_added(comment_id=comment_id, kind=kind),
        task_id=task["id"],
        project_id=task["project_id"],
    )
    return comment_id


def add_comment(tx: Tx, ref: str, *, body: str, kind: str = "note") -> dict[str, Any]:
    """Comment on a task; a human comment on an awaiting task resumes it."""
    task = load_task(tx, ref)
    refuse_archived(task)
    if kind not in domain.COMMENT_KINDS:
        raise validation(f"kind must be one of {', '.join(domain.COMMENT_KINDS)}", field="kind", value=kind)
    _check_body(body, "a comment")
    comment_id = _insert_comment(tx, task, kind, body)
    if task["status"] == "awaiting" and tx.actor.kind == events.HUMAN:
        set_status(tx, task, "todo")
        tx.record(
            events.TASK_RESUMED,
            events.task_resumed(comment_id=comment_id, from_="awaiting", to="todo"),
            task_id=task["id"],
            project_id=task["project_id"],
        )
    return comment_to_dict(written(tx.one("SELECT * FROM comments WHERE id = ?", (comment_id,))))


def awaiting_reason(question: str) -> str:
    """The question's first non-blank line, cut to ``AWAITING_REASON_MAX_CHARS``."""
    first = next(line.strip() for line in question.splitlines() if line.strip())
    if len(first) > AWAITING_REASON_MAX_CHARS:
        first = first[: AWAITING_REASON_MAX_CHARS - 1].rstrip() + "…"
    return first


def ask_question(tx: Tx, ref: str, *, body: str, if_version: int | None = None) -> dict[str, Any]:
    """The holder's question: a ``question`` comment and in_progress → awaiting, together."""
    task = load_task(tx, ref, if_version=if_version)
    refuse_archived(task)
    _check_body(body, "a question")
    identifier = task["identifier"]
    if task["status"] in domain.TERMINAL:
        raise TaskloomError(
            "TERMINAL_STATE",
            f"{identifier} is {task['status']}; nobody is working on it to ask",
            details={"status": task["status"]},
            hint=f"post a comment instead: taskctl comment add {identifier} --kind question '…'",
        )
    if task["status"] != "in_progress":
        raise TaskloomError(
            "INVALID_TRANSITION",
            f"{identifier} is {task['status']}; only an in_progress task can be parked on a question",
            details={"from": task["status"], "to": "awaiting"},
            hint=f"claim it first (taskctl task claim {identifier}), or post a comment with kind question",
        )
    if (task["claimed_by_kind"], task["claimed_by"]) != (tx.actor.kind, tx.actor.id):
        raise TaskloomError(
            "CLAIM_LOST",
            f"{tx.actor.id} does not hold {identifier}; only the holder asks",
            details={"claimed_by": task["claimed_by"], "claimed_by_kind": task["claimed_by_kind"]},
            hint=f"post a comment with kind question instead (taskctl comment add {identifier} --kind question '…')",
        )
    reason = awaiting_reason(body)
    comment_id = _insert_comment(tx, task, "question", body)
    set_status(tx, task, "awaiting", awaiting_reason=reason)
    tx.record(
        events.TASK_MOVED,
        events.task_moved(
            from_="in_progress",
            to="awaiting",
            delivery_round=task["delivery_round"],
            awaiting_reason=reason,
            question_comment_id=comment_id,
        ),
        task_id=task["id"],
        project_id=task["project_id"],
    )
    return task_resource(tx.conn, reload(tx, task["id"]))
