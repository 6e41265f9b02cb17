"""Acceptance commands: add criteria, prune them with a reason, override the mode (SPEC §4.4).

Acceptance items are immutable rows; the list changes only by adding items or pruning them, and a
prune's audit row is written *before* the delete, because the schema trigger that guards the
delete looks for it (SPEC §3: the one case where the audit precedes the state change).

``revision`` in ``acceptance_changed`` (and in the ``GET`` view) is the acceptance list's own
version: how many times this task's list has changed (every add and every prune, the one being
written included). It starts at 0 for a task whose list never changed, so a reader can tell "the
list I saw" from "a newer list" without comparing items. It is kept on the task
(``tasks.acceptance_revision``), not counted from the log, so retention (SPEC §12) cannot move it
backwards. Changing the mode is not a list change: it bumps the task's ``version``, not this count.
"""

from __future__ import annotations

from typing import Any

from shared import domain, events, limits
from shared.errors import TaskloomError, not_found, validation

from ..dialect import Row
from ..queries.acceptance import acceptance_view, list_revision
from ..store import Tx
from .common import load_task, new_id, refuse_archived, require_reason

ITEM_MAX_CHARS = limits.ACCEPTANCE_ITEM_MAX_CHARS


def _entry(item_id: str, text: str) -> dict[str, Any]:
    """An item as an activity row names it: its text when short, else its id only (shared/limits.py)."""
    if len(text) <= limits.CHANGES_TEXT_MAX_CHARS:
        return {"id": item_id, "text": text}
    return {"id": item_id}


BUMP_LIST_REVISION = "UPDATE tasks SET acceptance_revision = acceptance_revision + 1 WHERE id = ?"


def _refuse_closed(task: Row) -> None:
    refuse_archived(task)
    if task["status"] in domain.TERMINAL:
        raise TaskloomError(
            "TERMINAL_STATE",
            f"{task['identifier']} is {task['status']}; its acceptance is settled",
            details={"status": task["status"]},
            hint=f"reopen it first (taskctl task reopen {task['identifier']} --reason '…')",
        )


def _clean_items(tx: Tx, task: Row, items: list[str]) -> list[str]:
    if len(items) > limits.MAX_ACCEPTANCE_ITEMS_PER_CHANGE:
        raise validation(
            f"at most {limits.MAX_ACCEPTANCE_ITEMS_PER_CHANGE} acceptance items are added at once",
            field="items", count=len(items), limit=limits.MAX_ACCEPTANCE_ITEMS_PER_CHANGE,
        )
    cleaned: list[str] = []
    for raw in items:
        text = raw.strip()
        if not text:
            raise validation("an acceptance item must not be empty", items=items)
        if len(text) > ITEM_MAX_CHARS:
            raise validation(f"an acceptance item is at most {ITEM_MAX_CHARS} characters", field="items", length=len(text))
        if text in cleaned:
            raise validation("the same acceptance item is given twice", duplicate=text)
        cleaned.append(text)
    existing = {row["text"] for row in tx.all("SELECT text FROM acceptance_items WHERE task_id = ?", (task["id"],))}
    already = [text for text in cleaned if text in existing]
    if already:
        raise TaskloomError(
            "CONFLICT",
            f"{task['identifier']} already has {len(already)} of these acceptance items",
            details={"duplicates": already},
        )
    return cleaned


def change_acceptance(
    tx: Tx,
    ref: str,
    *,
    items: list[str] | None = None,
    mode: str | None = None,
    reason: str | None = None,
    if_version: int | None = None,
) -> dict[str, Any]:
    """Add items (``acceptance_changed``) and/or change the mode (``acceptance_override``)."""
    task = load_task(tx, ref, if_version=if_version)
    _refuse_closed(task)
    if not items and mode is None:
        raise validation("nothing to change: give items, mode or both", fields=["items", "mode"])
    if mode is not None and mode not in domain.ACCEPTANCE_MODES:
        raise validation(f"mode must be one of {', '.join(domain.ACCEPTANCE_MODES)}", field="mode", value=mode)
    if reason is not None:
        if mode is None:
            raise validation("a reason explains a mode change; give mode too", field="reason")
        reason = require_reason(reason, "overriding the acceptance mode")
    added = _clean_items(tx, task, items or [])

    if added:
        # An aggregate always answers one row.
        top: int = tx.execute(
            "SELECT coalesce(max(position), 0) AS top FROM acceptance_items WHERE task_id = ?", (task["id"],)
        ).fetchone()["top"]
        entries = []
        for offset, text in enumerate(added, start=1):
            item_id = new_id()
            tx.execute(
                "INSERT INTO acceptance_items (id, task_id, position, text, created_at) VALUES (?, ?, ?, ?, ?)",
                (item_id, task["id"], top + offset, text, tx.now),
            )
            entries.append(_entry(item_id, text))
        tx.execute(BUMP_LIST_REVISION, (task["id"],))
        tx.record(
            events.ACCEPTANCE_CHANGED,
            events.acceptance_changed(added=entries, revision=list_revision(tx.conn, task["id"])),
            task_id=task["id"],
            project_id=task["project_id"],
        )
    current = task["acceptance_mode"]
    if mode is not None and mode != current:
        tx.execute(
            "UPDATE tasks SET acceptance_mode = ?, version = version + 1, updated_at = ? WHERE id = ?",
            (mode, tx.now, task["id"]),
        )
        tx.record(
            events.ACCEPTANCE_OVERRIDE,
            events.acceptance_override(from_=current, to=mode, reason=reason),
            task_id=task["id"],
            project_id=task["project_id"],
        )
        current = mode
    return acceptance_view(tx.conn, task, current)


def prune_acceptance(tx: Tx, ref: str, item_id: str, *, reason: str, if_version: int | None = None) -> dict[str, Any]:
    """Remove one item; the audit row goes first, as the schema's delete trigger demands."""
    task = load_task(tx, ref, if_version=if_version)
    _refuse_closed(task)
    reason = require_reason(reason, "pruning an acceptance item")
    item = tx.one("SELECT id, text FROM acceptance_items WHERE id = ? AND task_id = ?", (item_id, task["id"]))
    if item is None:
        raise not_found("acceptance_item", item_id)
    tx.record(
        events.ACCEPTANCE_PRUNED,
        events.acceptance_pruned(reason=reason, removed=[_entry(item["id"], item["text"])]),
        task_id=task["id"],
        project_id=task["project_id"],
    )
    tx.execute("DELETE FROM acceptance_items WHERE id = ?", (item["id"],))
    tx.execute(BUMP_LIST_REVISION, (task["id"],))
    return acceptance_view(tx.conn, task, task["acceptance_mode"])
