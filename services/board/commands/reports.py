"""Report commands: write a report, deliver, waive (SPEC §4.4).

A report is markdown (``report_format``) for the task's current delivery round. It may be written
while the task is ``in_progress`` or ``blocked``, the two statuses that can enter ``in_review``:
a report describes work about to be delivered, so a task in review, waiting or not started has
none to write. Anyone may write or deliver; ``delivered_by`` records who delivered (or waived), and
the independent-approval rule (``tasks.check_approval``) holds that actor to it.
"""

from __future__ import annotations

from typing import Any

from shared import domain, events
from shared.errors import TaskloomError, not_found, validation

from ..conditions import rules
from ..dialect import Row
from ..queries.reports import report_to_dict
from ..queries.tasks import task_resource
from ..report_format import check_report
from ..store import Tx
from .common import check_reason, load_task, new_id, refuse_archived, reload, require_reason, set_status, written
from .tasks import check_move

#: The statuses a report may be written in: the ones with an edge to in_review.
WRITABLE_STATUSES = ("in_progress", "blocked")


def _check_body(body: str) -> None:
    problems = check_report(body)
    if problems:
        raise TaskloomError(
            "REPORT_INVALID",
            f"the report is not acceptable: {'; '.join(problems)}",
            details={"problems": problems},
            hint="start from the template: taskctl report template (or GET /api/v1/reports/template)",
        )


def _insert_report(tx: Tx, task: Row, body: str) -> str:
    """Write the report row and its ``report_written`` row; returns the report id."""
    report_id = new_id()
    tx.execute(
        "INSERT INTO reports (id, task_id, round, body, actor_kind, actor_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (report_id, task["id"], task["delivery_round"], body, tx.actor.kind, tx.actor.id, tx.now),
    )
    tx.record(
        events.REPORT_WRITTEN,
        events.report_written(round_=task["delivery_round"], report_id=report_id, delivery_round=task["delivery_round"]),
        task_id=task["id"],
        project_id=task["project_id"],
    )
    return report_id


def write_report(tx: Tx, ref: str, *, body: str) -> dict[str, Any]:
    """Write a report for the current round without delivering it."""
    task = load_task(tx, ref)
    refuse_archived(task)
    _check_body(body)
    identifier = task["identifier"]
    if task["status"] in domain.TERMINAL:
        raise TaskloomError(
            "TERMINAL_STATE",
            f"{identifier} is {task['status']}; reopen it first",
            details={"status": task["status"]},
            hint=f"taskctl task reopen {identifier} --reason '…'",
        )
    if task["status"] not in WRITABLE_STATUSES:
        raise TaskloomError(
            "INVALID_TRANSITION",
            f"{identifier} is {task['status']}; a report is written while the task is in_progress or blocked",
            details={"status": task["status"], "allowed": list(WRITABLE_STATUSES)},
            hint=f"claim it first (taskctl task claim {identifier})" if task["status"] == "todo" else None,
        )
    report_id = _insert_report(tx, task, body)
    return report_to_dict(written(tx.one("SELECT * FROM reports WHERE id = ?", (report_id,))))


def _latest_report(tx: Tx, task: Row) -> Row | None:
    return tx.one(
        "SELECT * FROM reports WHERE task_id = ? AND round = ? ORDER BY rowid DESC LIMIT 1",
        (task["id"], task["delivery_round"]),
    )


def _named_report(tx: Tx, task: Row, report_id: str) -> Row:
    report = tx.one("SELECT * FROM reports WHERE id = ? AND task_id = ?", (report_id, task["id"]))
    if report is None:
        raise not_found("report", report_id)
    if report["round"] != task["delivery_round"]:
        raise TaskloomError(
            "REPORT_REQUIRED",
            f"report {report_id} belongs to round {report['round']}; {task['identifier']} is in round"
            f" {task['delivery_round']}",
            details={"report_round": report["round"], "round": task["delivery_round"]},
            hint="write a report for the current round",
        )
    return report


def deliver_task(
    tx: Tx,
    ref: str,
    *,
    body: str | None = None,
    report_id: str | None = None,
    force: bool = False,
    reason: str | None = None,
    if_version: int | None = None,
) -> dict[str, Any]:
    """Move to in_review with a current-round report: the one given, the one named, or the latest."""
    task = load_task(tx, ref, if_version=if_version)
    refuse_archived(task)
    if body is not None and report_id is not None:
        raise validation("give a report body or a report_id, not both", fields=["body", "report_id"])
    if body is not None:
        _check_body(body)
    check_move(task, "in_review")
    check_reason(reason)
    if reason is not None and not force:
        raise validation("reason goes with force (delivering past open blockers)", fields=["reason", "force"])
    forced = rules.refuse_open_blockers(tx.conn, task, action="delivery", force=force, reason=reason)
    if body is not None:
        report_id = _insert_report(tx, task, body)
    elif report_id is not None:
        report_id = _named_report(tx, task, report_id)["id"]
    else:
        latest = _latest_report(tx, task)
        if latest is None:
            raise TaskloomError(
                "REPORT_REQUIRED",
                f"{task['identifier']} has no report for round {task['delivery_round']}",
                details={"round": task["delivery_round"]},
                hint=f"send the report with the delivery (taskctl task deliver {task['identifier']} --report-file"
                " REPORT.md), or waive it with a reason",
            )
        report_id = latest["id"]
    set_status(tx, task, "in_review", delivered_by=tx.actor.id)
    tx.record(
        events.TASK_DELIVERED,
        events.task_delivered(
            from_=task["status"], to="in_review", round_=task["delivery_round"], report_id=report_id,
            forced=True if forced else None, reason=forced,
        ),
        task_id=task["id"],
        project_id=task["project_id"],
    )
    return task_resource(tx.conn, reload(tx, task["id"]))


def waive_report(
    tx: Tx, ref: str, *, reason: str, force: bool = False, if_version: int | None = None
) -> dict[str, Any]:
    """Move to in_review without a report; the reason is stamped on the task for the reviewer."""
    task = load_task(tx, ref, if_version=if_version)
    refuse_archived(task)
    reason = require_reason(reason, "waiving the report")
    check_move(task, "in_review")
    forced = rules.refuse_open_blockers(tx.conn, task, action="delivery", force=force, reason=reason)
    # The waiver is a delivery: the one who waived may not approve it alone.
    set_status(tx, task, "in_review", waiver_reason=reason, delivered_by=tx.actor.id)
    tx.record(
        events.REPORT_WAIVED,
        events.report_waived(
            from_=task["status"],
            to="in_review",
            round_=task["delivery_round"],
            reason=reason,
            delivery_round=task["delivery_round"],
            forced=True if forced else None,
        ),
        task_id=task["id"],
        project_id=task["project_id"],
    )
    return task_resource(tx.conn, reload(tx, task["id"]))
