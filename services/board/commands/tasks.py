"""Task commands: create, update, claim, heartbeat, move, reopen, archive (SPEC §4.4)."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

import orjson

from shared import domain, events, limits
from shared.errors import TaskloomError, validation
from shared.json_bounds import check_free_form
from shared.timestamps import parse_timestamp

from ..conditions import rules
from ..dialect import Row
from ..queries.projects import require_project
from ..queries.tasks import task_resource, task_to_dict
from ..store import Tx
from . import relations, rollup
from .common import (
    apply_labels,
    as_written,
    check_actor,
    check_reason,
    check_text,
    dumps,
    load_task,
    new_id,
    normalise_labels,
    refuse_archived,
    reload,
    require_reason,
    set_status,
    stamped,
    touch_actor,
    write_task,
    written,
)

#: Task fields ``update`` may patch; status has its own commands.
UPDATABLE = (
    "title", "description", "priority", "kind", "labels",
    "assignee_kind", "assignee_id", "reporter_kind", "reporter_id", "meta",
)
_COLUMNS = {"labels": "labels_json", "meta": "meta_json"}
#: Moves the dependency gate holds back while a blocker is open (SPEC §12).
FINISHING = frozenset({"in_review", "done"})


def _choice(value: str, allowed: tuple[str, ...], field: str) -> str:
    if value not in allowed:
        raise validation(f"{field} must be one of {', '.join(allowed)}", **{field: value})
    return value


def _pair(kind: str | None, actor_id: str | None, field: str) -> tuple[str | None, str | None]:
    if (kind is None) != (actor_id is None):
        raise validation(f"{field}_kind and {field}_id go together", **{f"{field}_kind": kind, f"{field}_id": actor_id})
    check_actor(kind, actor_id, field)
    if kind is not None:
        domain.check_actor_kind(kind, f"{field}_kind")
    return kind, actor_id


def _title(raw: str | None) -> str:
    title = (raw or "").strip()
    if not title:
        raise validation("title must not be empty", title=raw)
    if len(title) > domain.TITLE_MAX_CHARS:
        raise validation(f"title is at most {domain.TITLE_MAX_CHARS} characters", length=len(title))
    return title


def _refuse_unparenting(tx: Tx, task: Row, kind: str) -> None:
    """An epic with children stays an epic: its children would hang off a parent that is not one."""
    if task["kind"] != "epic" or kind == "epic":
        return
    children = tx.execute("SELECT count(*) FROM relations WHERE type = 'parent' AND source_id = ?", (task["id"],)).fetchone()[0]
    if children:
        raise TaskloomError(
            "RELATION_INVALID",
            f"{task['identifier']} is the parent of {children} task{'s' if children > 1 else ''}; an epic with"
            " children stays an epic",
            details={"kind": kind, "children": children},
            hint=f"remove its parent relations first (taskctl relation list {task['identifier']})",
        )


def derive_idem(kind: str, assignee_kind: str | None, assignee_id: str | None, meta: dict[str, Any]) -> str | None:
    """The implicit idempotency key: kind|assignee|source, when the caller names a source."""
    source = meta.get("source")
    if not isinstance(source, str) or not source:
        return None
    key = f"{kind}|{assignee_kind or ''}:{assignee_id or ''}|{source}"
    if len(key) > limits.IDEM_MAX_CHARS:
        # The same source still names the same key; the activity row stays small.
        key = f"{kind}|{assignee_kind or ''}:{assignee_id or ''}|sha256:{hashlib.sha256(source.encode()).hexdigest()}"
    return key


def _check_fields(description: str | None = None, meta: Any = None, idem: str | None = None) -> None:
    """Bounds of shared/limits.py on the free-text and free-form fields (the API checks them too)."""
    check_text(description, field="description", limit=limits.DESCRIPTION_MAX_CHARS)
    check_text(idem, field="idem", limit=limits.IDEM_MAX_CHARS)
    if meta is not None:
        check_free_form(meta, field="meta")


def create_task(
    tx: Tx,
    *,
    project: str,
    title: str,
    description: str = "",
    kind: str = "task",
    priority: str = "medium",
    status: str = "todo",
    labels: list[str] | None = None,
    assignee_kind: str | None = None,
    assignee_id: str | None = None,
    reporter_kind: str | None = None,
    reporter_id: str | None = None,
    acceptance_mode: str = "review",
    meta: dict[str, Any] | None = None,
    idem: str | None = None,
    parent: str | None = None,
) -> tuple[dict[str, Any], bool]:
    """Create a task; returns (task, created). A live task holding the idem key is returned as is.

    ``parent`` names an epic: the child's ``parent`` relation is added in the same transaction, so
    a parent the rules refuse (not an epic, another project, too deep) leaves no orphan behind.
    """
    project_row = require_project(tx.conn, project)
    title = _title(title)
    _choice(kind, domain.KINDS, "kind")
    _choice(priority, domain.PRIORITIES, "priority")
    _choice(acceptance_mode, domain.ACCEPTANCE_MODES, "acceptance_mode")
    if status not in ("backlog", "todo"):
        raise validation("a task starts in backlog or todo", status=status)
    _pair(assignee_kind, assignee_id, "assignee")
    _pair(reporter_kind, reporter_id, "reporter")
    _check_fields(description, meta, idem)
    meta = meta or {}
    label_names = normalise_labels(labels or [])
    idem = idem or derive_idem(kind, assignee_kind, assignee_id, meta)
    if idem is not None:
        holder = tx.one(
            "SELECT * FROM tasks WHERE idem = ? AND project_id = ? AND status NOT IN ('done', 'canceled')",
            (idem, project),
        )
        if holder is not None:
            return task_resource(tx.conn, holder), False

    number = project_row["next_number"]
    identifier = f"{project_row['prefix']}-{number:04d}"
    tx.execute("UPDATE projects SET next_number = next_number + 1 WHERE id = ?", (project,))
    dictionaries: dict[str, Any] = {}
    if assignee_kind is not None and assignee_id is not None:
        dictionaries["assignee"] = touch_actor(tx, assignee_kind, assignee_id)
    if reporter_kind is not None and reporter_id is not None:
        dictionaries["reporter"] = touch_actor(tx, reporter_kind, reporter_id)
    apply_labels(tx, project, [], label_names)
    task_id = new_id()
    # RETURNING gives the row with the schema's defaults, as the insert's statement left it: the
    # stamp of its revision, by an AFTER trigger, is added by ``stamped`` below.
    inserted = written(tx.one(
        "INSERT INTO tasks (id, project_id, number, identifier, title, description, kind, priority, status,"
        " labels_json, assignee_kind, assignee_id, reporter_kind, reporter_id, acceptance_mode, idem, meta_json,"
        " created_at, updated_at, status_since) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " RETURNING *",
        (
            task_id, project, number, identifier, title, description, kind, priority, status, dumps(label_names),
            assignee_kind, assignee_id, reporter_kind, reporter_id, acceptance_mode, idem, dumps(meta),
            tx.now, tx.now, tx.now,
        ),
    ))
    revision = tx.record(
        events.TASK_CREATED,
        events.task_created(
            identifier=identifier,
            status=status,
            priority=priority,
            acceptance_mode=acceptance_mode,
            idem=idem,
            dictionaries=dictionaries or None,
            labels=label_names or None,
        ),
        task_id=task_id,
        project_id=project,
    )
    if parent is not None:
        # The relation stamps the child again: read back what it left.
        relations.add_relation(tx, parent, type="parent", target=task_id)
        return task_resource(tx.conn, reload(tx, task_id)), True
    # Nothing can point ``blocks`` at a task that did not exist before this command: no blockers to read.
    return task_resource(tx.conn, stamped(as_written(inserted, {}), revision), blockers=[]), True


def _short(value: Any) -> bool:
    text = value if isinstance(value, str) else dumps(value)
    return len(text) <= events.BEFORE_AFTER_MAX_CHARS


def update_task(tx: Tx, ref: str, *, if_version: int | None = None, **patch: Any) -> dict[str, Any]:
    """Patch fields (never status); a no-op patch writes nothing."""
    task = load_task(tx, ref, if_version=if_version)
    refuse_archived(task)
    unknown = set(patch) - set(UPDATABLE)
    if unknown:
        raise validation("unknown task fields", fields=sorted(unknown))
    current = task_to_dict(task)
    _check_fields(patch.get("description"), patch.get("meta"))
    if "title" in patch:
        patch["title"] = _title(patch["title"])
    if "priority" in patch:
        _choice(patch["priority"], domain.PRIORITIES, "priority")
    if "kind" in patch:
        _choice(patch["kind"], domain.KINDS, "kind")
        _refuse_unparenting(tx, task, patch["kind"])
    if "labels" in patch:
        patch["labels"] = normalise_labels(patch["labels"] or [])
    for who in ("assignee", "reporter"):
        kind = patch.get(f"{who}_kind", current[f"{who}_kind"])
        actor_id = patch.get(f"{who}_id", current[f"{who}_id"])
        _pair(kind, actor_id, who)

    changed = [name for name in UPDATABLE if name in patch and patch[name] != current[name]]
    if not changed:
        return task_resource(tx.conn, task)
    dictionaries: dict[str, Any] = {}
    for who in ("assignee", "reporter"):
        if f"{who}_kind" in changed or f"{who}_id" in changed:
            kind = patch.get(f"{who}_kind", current[f"{who}_kind"])
            actor_id = patch.get(f"{who}_id", current[f"{who}_id"])
            if kind is not None and actor_id is not None:
                dictionaries[who] = touch_actor(tx, kind, actor_id)
    if "labels" in changed:
        apply_labels(tx, task["project_id"], current["labels"], patch["labels"])

    values = {_COLUMNS.get(name, name): (dumps(patch[name]) if name in _COLUMNS else patch[name]) for name in changed}
    values.update(version=task["version"] + 1, updated_at=tx.now)
    updated = write_task(tx, task, values)

    shown = [name for name in changed if _short(current[name]) and _short(patch[name])]
    revision = tx.record(
        events.TASK_UPDATED,
        events.task_updated(
            fields=changed,
            before={name: current[name] for name in shown} or None,
            after={name: patch[name] for name in shown} or None,
            dictionaries=dictionaries or None,
            labels=patch["labels"] if "labels" in changed else None,
        ),
        task_id=task["id"],
        project_id=task["project_id"],
    )
    return task_resource(tx.conn, stamped(updated, revision))


def _age_seconds(tx: Tx, stamp: str | None) -> float:
    if stamp is None:
        return float("inf")
    return (parse_timestamp(tx.now) - parse_timestamp(stamp)) / timedelta(seconds=1)


def claim_task(
    tx: Tx,
    ref: str,
    *,
    steal: bool = False,
    force: bool = False,
    reason: str | None = None,
    if_version: int | None = None,
    fresh_seconds: float = domain.CLAIM_FRESH_SECONDS,
    stale_seconds: float = domain.CLAIM_STALE_SECONDS,
) -> dict[str, Any]:
    """todo → in_progress, or a re-claim of in_progress, judged by heartbeat freshness."""
    task = load_task(tx, ref, if_version=if_version)
    refuse_archived(task)
    check_reason(reason)
    me = tx.actor
    if task["kind"] == "epic":
        raise TaskloomError("NOT_CLAIMABLE", f"{task['identifier']} is an epic; claim its children", details={"kind": "epic"})
    stole_from: str | None = None
    # Checked before the claim rules: a blocked card is not work yet, whoever holds it (SPEC §12).
    forced = rules.refuse_open_blockers(tx.conn, task, action="claiming", force=force, reason=reason)
    if task["status"] == "todo":
        assignee = task["assignee_id"]
        if assignee is not None and (task["assignee_kind"], assignee) != (me.kind, me.id):
            if not steal:
                raise TaskloomError(
                    "NOT_ASSIGNEE",
                    f"{task['identifier']} is assigned to {assignee}",
                    details={"assignee_id": assignee, "assignee_kind": task["assignee_kind"]},
                    hint="pass steal with a reason of at least 8 characters to take it",
                )
            reason = require_reason(reason, "taking a task assigned to someone else")
            stole_from = assignee
    elif task["status"] == "in_progress":
        holder = (task["claimed_by_kind"], task["claimed_by"])
        age = _age_seconds(tx, task["heartbeat_at"])
        if holder == (me.kind, me.id):
            if age <= fresh_seconds:
                return task_resource(tx.conn, task)  # a same-actor re-claim is not a new fact
        elif age <= stale_seconds:
            raise TaskloomError(
                "EXECUTION_ACTIVE",
                f"{task['identifier']} is held by {task['claimed_by']} (last heartbeat {task['heartbeat_at']})",
                details={"claimed_by": task["claimed_by"], "heartbeat_at": task["heartbeat_at"]},
            )
        else:
            stole_from = task["claimed_by"]
            reason = (reason or "").strip() or "claim went stale"
    else:
        raise TaskloomError(
            "NOT_CLAIMABLE",
            f"{task['identifier']} is {task['status']}; only todo or in_progress tasks can be claimed",
            details={"status": task["status"]},
        )

    columns = dict(
        claimed_by=me.id, claimed_by_kind=me.kind, claimed_at=tx.now, heartbeat_at=tx.now,
        assignee_kind=me.kind, assignee_id=me.id,
    )
    if task["status"] == "todo":
        claimed = set_status(tx, task, "in_progress", **columns)
    else:
        columns.update(version=task["version"] + 1, updated_at=tx.now)
        claimed = write_task(tx, task, columns)
    touch_actor(tx, me.kind, me.id)
    revision = tx.record(
        events.TASK_CLAIMED,
        events.task_claimed(
            from_=task["status"], to="in_progress", stole_from=stole_from,
            reason=reason if stole_from or forced else None, forced=True if forced else None,
        ),
        task_id=task["id"],
        project_id=task["project_id"],
    )
    rollup.auto_start_parents(tx, task, source="claim")
    # The epics' auto-start leaves this row as written.
    return task_resource(tx.conn, stamped(claimed, revision))


def heartbeat_task(tx: Tx, ref: str) -> dict[str, Any]:
    """The holder says it is still working; wire noise on the stream, but it moves the cursor."""
    task = load_task(tx, ref)
    if task["status"] != "in_progress" or (task["claimed_by_kind"], task["claimed_by"]) != (tx.actor.kind, tx.actor.id):
        raise TaskloomError(
            "CLAIM_LOST",
            f"{tx.actor.id} does not hold {task['identifier']}",
            details={"status": task["status"], "claimed_by": task["claimed_by"]},
            hint=f"claim it again (taskctl task claim {task['identifier']})",
        )
    beaten = write_task(tx, task, {"heartbeat_at": tx.now})
    revision = tx.record(
        events.TASK_HEARTBEAT, events.task_heartbeat(heartbeat_at=tx.now), task_id=task["id"], project_id=task["project_id"]
    )
    return task_resource(tx.conn, stamped(beaten, revision))


def check_move(task: Row, to: str) -> None:
    """Refuse a move the graph or the terminal rule forbids, with the command that would do it."""
    _choice(to, domain.STATUSES, "to")
    current = task["status"]
    if current in domain.TERMINAL:
        raise TaskloomError(
            "TERMINAL_STATE",
            f"{task['identifier']} is {current}; reopen it first",
            details={"from": current, "to": to},
            hint=f"taskctl task reopen {task['identifier']} --reason '…'",
        )
    if not domain.can_move(current, to):
        raise TaskloomError(
            "INVALID_TRANSITION",
            f"{task['identifier']} cannot move from {current} to {to}",
            details={"from": current, "to": to, "allowed": sorted(domain.TRANSITIONS[current])},
        )


def has_current_report(tx: Tx, task: Row) -> Row | None:
    return tx.one(
        "SELECT * FROM reports WHERE task_id = ? AND round = ? ORDER BY created_at DESC LIMIT 1",
        (task["id"], task["delivery_round"]),
    )


def check_approval(tx: Tx, task: Row) -> None:
    """``in_review → done`` under mode review needs an independent current-round ``confirm``."""
    if task["acceptance_mode"] != "review":
        return
    # The approval must come after the delivery it approves: a confirm written earlier in the round
    # reviewed work that was still changing. Revision order is the log's only order.
    # The JSON inside the activity rows is read here, not in SQL (each engine spells that differently).
    delivered_at = 0
    for row in tx.all(
        "SELECT revision, event, changes_json FROM task_activities"
        " WHERE task_id = ? AND event IN ('task_delivered', 'report_waived', 'task_moved') ORDER BY revision",
        (task["id"],),
    ):
        if row["event"] != "task_moved" or orjson.loads(row["changes_json"]).get("to") == "in_review":
            delivered_at = row["revision"]
    confirms = {
        row["id"]
        for row in tx.all("SELECT id, actor_id FROM comments WHERE task_id = ? AND kind = 'confirm' AND round = ?",
                          (task["id"], task["delivery_round"]))
        if row["actor_id"] != task["delivered_by"]
    }
    approved = bool(confirms) and any(
        orjson.loads(row["changes_json"]).get("commentId") in confirms
        for row in tx.all(
            "SELECT changes_json FROM task_activities WHERE task_id = ? AND event = 'comment_added' AND revision > ?",
            (task["id"], delivered_at),
        )
    )
    if not approved:
        raise TaskloomError(
            "APPROVAL_REQUIRED",
            f"{task['identifier']} needs an approving confirm comment from someone other than who delivered it",
            details={"round": task["delivery_round"], "delivered_by": task["delivered_by"]},
            hint=f"taskctl comment add {task['identifier']} --kind confirm 'LGTM'",
        )


def move_task(
    tx: Tx,
    ref: str,
    *,
    to: str,
    force: bool = False,
    reason: str | None = None,
    if_version: int | None = None,
) -> dict[str, Any]:
    task = load_task(tx, ref, if_version=if_version)
    refuse_archived(task)
    check_reason(reason)
    if to == task["status"]:
        return task_resource(tx.conn, task)
    check_move(task, to)
    # Finishing waits for the blockers too; leaving for todo, blocked or canceled never does.
    forced = (
        rules.refuse_open_blockers(tx.conn, task, action=f"moving to {to}", force=force, reason=reason)
        if to in FINISHING else None
    )
    if task["status"] == "todo" and to == "in_progress":
        raise TaskloomError(
            "INVALID_TRANSITION",
            "todo → in_progress is a claim",
            details={"from": "todo", "to": to},
            hint=f"taskctl task claim {task['identifier']}",
        )
    if to == "in_review" and has_current_report(tx, task) is None and task["waiver_reason"] is None:
        raise TaskloomError(
            "REPORT_REQUIRED",
            f"{task['identifier']} needs a delivery report for round {task['delivery_round']} or a waiver",
            details={"round": task["delivery_round"]},
            hint=f"taskctl task deliver {task['identifier']} --report-file REPORT.md",
        )
    if task["status"] == "in_review" and to == "done":
        check_approval(tx, task)
    columns: dict[str, Any] = {}
    if to == "awaiting":
        columns["awaiting_reason"] = reason
    if to == "blocked":
        columns["blocked_reason"] = reason
    if to == "in_review":
        columns["delivered_by"] = tx.actor.id
    moved = set_status(tx, task, to, **columns)
    revision = tx.record(
        events.TASK_MOVED,
        events.task_moved(
            from_=task["status"],
            to=to,
            delivery_round=moved["delivery_round"],
            awaiting_reason=reason if to == "awaiting" else None,
            blocked_reason=reason if to == "blocked" else None,
            forced=True if forced else None,
            reason=forced,
        ),
        task_id=task["id"],
        project_id=task["project_id"],
    )
    moved = stamped(moved, revision)
    if to in domain.TERMINAL:
        rollup.after_terminal(tx, moved)
    # The epic rollup does not touch this task's row: ``moved`` is current.
    return task_resource(tx.conn, moved)


def reopen_task(tx: Tx, ref: str, *, reason: str, if_version: int | None = None) -> dict[str, Any]:
    task = load_task(tx, ref, if_version=if_version)
    refuse_archived(task)
    check_reason(reason)
    if task["status"] not in domain.TERMINAL:
        raise TaskloomError(
            "INVALID_TRANSITION",
            f"{task['identifier']} is {task['status']}; only done or canceled tasks reopen",
            details={"from": task["status"], "to": "todo"},
        )
    reason = require_reason(reason, "reopening")
    next_round = task["delivery_round"] + 1
    reopened = set_status(
        tx, task, "todo", delivery_round=next_round, terminal_at=None, waiver_reason=None, delivered_by=None
    )
    revision = tx.record(
        events.TASK_REOPENED,
        events.task_reopened(from_=task["status"], to="todo", reason=reason, delivery_round=next_round),
        task_id=task["id"],
        project_id=task["project_id"],
    )
    return task_resource(tx.conn, stamped(reopened, revision))


def archive_task(tx: Tx, ref: str, *, quiet_seconds: float = 0.0, if_version: int | None = None) -> dict[str, Any]:
    """Hide a terminal task from the board once it has been quiet; its labels are released."""
    task = load_task(tx, ref, if_version=if_version)
    refuse_archived(task)
    if task["status"] not in domain.TERMINAL:
        raise TaskloomError(
            "INVALID_TRANSITION",
            f"{task['identifier']} is {task['status']}; only done or canceled tasks are archived",
            details={"status": task["status"]},
        )
    quiet = _age_seconds(tx, task["terminal_at"])
    if quiet < quiet_seconds:
        raise validation(
            f"{task['identifier']} became {task['status']} {int(quiet)} s ago; archive waits {int(quiet_seconds)} s",
            quiet_seconds=quiet_seconds,
        )
    labels = task_to_dict(task)["labels"]
    apply_labels(tx, task["project_id"], labels, [])
    archived = write_task(tx, task, {"archived_at": tx.now, "version": task["version"] + 1, "updated_at": tx.now})
    revision = tx.record(
        events.TASK_ARCHIVED,
        events.task_archived(from_=task["status"], archived_at=tx.now, labels_released=labels or None),
        task_id=task["id"],
        project_id=task["project_id"],
    )
    return task_resource(tx.conn, stamped(archived, revision))
