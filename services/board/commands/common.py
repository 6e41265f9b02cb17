"""Helpers shared by the commands: lookups, optimistic concurrency, labels and the actor dictionary.

The helpers that write (``touch_actor``, ``apply_labels``, ``set_status``) hand their audit to
the calling command, which appends the activity row; ``tests/contract`` names them as exempt.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import orjson

from shared import domain, limits
from shared.errors import TaskloomError, validation

from ..conditions import card
from ..dialect import Row
from ..queries.tasks import TaskRow, require_task
from ..store import Tx

LABEL_MAX_CHARS = limits.LABEL_MAX_CHARS
_LABEL_SPACES = re.compile(r"\s+")
_LABEL_ALLOWED = re.compile(r"^[a-z0-9][a-z0-9._:/-]*$")


def new_id() -> str:
    return str(uuid.uuid4())


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def load_task(tx: Tx, ref: str, *, if_version: int | None = None) -> Row:
    """The task a write targets, refusing a stale ``if_version`` before anything is written."""
    task = require_task(tx.conn, ref)
    if if_version is not None and if_version != task["version"]:
        raise TaskloomError(
            "VERSION_CONFLICT",
            f"{task['identifier']} is at version {task['version']}, not {if_version}",
            details={"expected": if_version, "actual": task["version"]},
            hint=f"re-read the task (taskctl task show {task['identifier']}) and retry",
        )
    return task


def check_text(value: str | None, *, field: str, limit: int) -> None:
    """Refuse text longer than its limit in ``shared/limits.py``, naming the field."""
    if value is not None and len(value) > limit:
        raise validation(f"{field} is at most {limit} characters", field=field, length=len(value), limit=limit)


def check_reason(reason: str | None, *, field: str = "reason") -> None:
    """A reason is written into the activity row, so it is bounded like one."""
    check_text(reason, field=field, limit=limits.REASON_MAX_CHARS)


def require_reason(reason: str | None, what: str) -> str:
    check_reason(reason)
    text = (reason or "").strip()
    if len(text) < domain.MIN_REASON_CHARS:
        raise validation(f"{what} needs a reason of at least {domain.MIN_REASON_CHARS} characters", reason=reason)
    return text


def refuse_archived(task: Row) -> None:
    if task["archived_at"] is not None:
        raise TaskloomError("TERMINAL_STATE", f"{task['identifier']} is archived", details={"task": task["id"]})


def normalise_label(raw: str) -> str:
    name = _LABEL_SPACES.sub("-", raw.strip().lower())
    if not name or len(name) > LABEL_MAX_CHARS or not _LABEL_ALLOWED.match(name):
        raise validation(
            f"label {raw!r} is not valid: use letters, digits and . _ : / - (at most {LABEL_MAX_CHARS})",
            label=raw,
        )
    return name


def normalise_labels(raw: list[str]) -> list[str]:
    """Normalised, de-duplicated, in the order first given."""
    seen: dict[str, None] = {}
    for item in raw:
        seen.setdefault(normalise_label(item), None)
    if len(seen) > limits.MAX_LABELS_PER_TASK:
        raise validation(
            f"a task has at most {limits.MAX_LABELS_PER_TASK} labels", field="labels", count=len(seen),
            limit=limits.MAX_LABELS_PER_TASK,
        )
    return list(seen)


def apply_labels(tx: Tx, project_id: str, before: list[str], after: list[str]) -> None:
    """Move the per-project use counts from ``before`` to ``after`` (audited by the caller)."""
    for name in after:
        if name in before:
            continue
        tx.execute(
            "INSERT INTO labels (project_id, name, use_count, created_at, last_used_at) VALUES (?, ?, 1, ?, ?)"
            " ON CONFLICT (project_id, name) DO UPDATE SET use_count = labels.use_count + 1,"
            " last_used_at = excluded.last_used_at, archived_at = NULL",
            (project_id, name, tx.now, tx.now),
        )
    for name in before:
        if name in after:
            continue
        tx.execute(
            "UPDATE labels SET use_count = CASE WHEN use_count > 0 THEN use_count - 1 ELSE 0 END, last_used_at = ?"
            " WHERE project_id = ? AND name = ?",
            (tx.now, project_id, name),
        )


def touch_actor(tx: Tx, kind: str, actor_id: str) -> dict[str, str]:
    """Record an assignee/reporter in the dictionary (audited by the caller's task event)."""
    if not kind.strip() or not actor_id.strip():
        raise validation("an actor needs both a kind and an id", kind=kind, id=actor_id)
    check_actor(kind, actor_id, "actor")
    domain.check_actor_kind(kind, "kind")
    tx.execute(
        "INSERT INTO actors (kind, id, use_count, first_seen_at, last_seen_at) VALUES (?, ?, 1, ?, ?)"
        " ON CONFLICT (kind, id) DO UPDATE SET use_count = actors.use_count + 1, last_seen_at = excluded.last_seen_at",
        (kind, actor_id, tx.now, tx.now),
    )
    return {"kind": kind, "id": actor_id}


def check_actor(kind: str | None, actor_id: str | None, field: str) -> None:
    """Actor names travel in activity rows (dictionaries, stoleFrom): bounded like the headers."""
    check_text(kind, field=f"{field}_kind", limit=limits.ACTOR_KIND_MAX_CHARS)
    check_text(actor_id, field=f"{field}_id", limit=limits.ACTOR_ID_MAX_CHARS)


def set_status(tx: Tx, task: TaskRow, to: str, **columns: Any) -> dict[str, Any]:
    """Write a status change and its bookkeeping columns (audited by the caller); returns the
    row as written (``as_written``), to be ``stamped`` with the revision of the caller's row.

    Leaving ``in_review`` for anything but ``done`` starts the next delivery round; entering a
    terminal status stamps ``terminal_at`` and ends any claim.
    """
    # status_since: when the card entered this status (status_timeout's clock, docs/conditions.md).
    values: dict[str, Any] = {"status": to, "version": task["version"] + 1, "updated_at": tx.now, "status_since": tx.now}
    if task["status"] == "in_review" and to != "done":
        values["delivery_round"] = task["delivery_round"] + 1
        values["waiver_reason"] = None
        values["delivered_by"] = None
    if to in domain.TERMINAL:
        values["terminal_at"] = tx.now
    if to in domain.TERMINAL or to in ("todo", "backlog"):
        values.update(claimed_by=None, claimed_by_kind=None, claimed_at=None, heartbeat_at=None)
    if to != "awaiting":
        values["awaiting_reason"] = None
    if to != "blocked":
        values["blocked_reason"] = None
    values.update(columns)
    return write_task(tx, task, values)


def write_task(tx: Tx, task: TaskRow, values: dict[str, Any]) -> dict[str, Any]:
    """``UPDATE tasks SET values`` on ``task`` (audited by the caller); returns the row as written.

    The update returns the card as the conditions judge it (``conditions.card``), left in
    ``Tx.cards`` for the command hook, which then need not read it again.
    """
    assignments = ", ".join(f"{name} = :{name}" for name in values)
    # All rows, not one: SQLite finishes an UPDATE … RETURNING only once its rows are read.
    returned = tx.all(
        f"UPDATE tasks SET {assignments} WHERE id = :_id RETURNING {card.TERMS}", {**values, "_id": task["id"]}
    )
    if returned:
        tx.cards[task["id"]] = returned[0]
    return as_written(task, values)


def as_written(task: TaskRow, values: dict[str, Any]) -> dict[str, Any]:
    """``task`` after ``UPDATE tasks SET values``, as reading the row again would return it once
    ``stamped`` has given it the revision its update took (``None`` until then).

    ``task`` was read in this transaction, which holds the write lock, so no other writer changed
    it in between, and the update changed nothing else but the stamp: building the row here saves
    a second read of it per command.
    """
    row = dict(task) if isinstance(task, dict) else dict(zip(task.keys(), task))
    row.update(values)
    row["revision"] = None
    return row


def stamped(row: dict[str, Any], revision: int) -> dict[str, Any]:
    """``row`` (``as_written``) with the revision its update was stamped with, from ``revision``, the
    revision of the first activity row the command appended after writing it.

    On either engine the stamp trigger of a task update takes the next global revision once (the
    schema's ``tasks_stamp_update``, or ``tasks_stamp_insert`` for the row ``INSERT … RETURNING``
    gave) and that activity row the one after: nothing in between bumps
    it (the actor and label tables have no stamp). Reading the revision back instead would be one
    more statement on the writer for every command.
    """
    row["revision"] = revision - 1
    return row


def written(row: Row | None) -> Row:
    """A row this transaction has just written, read back: its absence is a bug, never a refusal."""
    if row is None:
        raise RuntimeError("a row written in this transaction is missing")
    return row


def reload(tx: Tx, task_id: str) -> Row:
    return require_task(tx.conn, task_id)
