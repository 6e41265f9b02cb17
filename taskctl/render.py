"""Human renderings of board resources: the table columns and the one-line summaries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .output import Column, Output, priority_colour, status_colour


def who(kind: Any, actor_id: Any) -> str | None:
    if actor_id is None:
        return None
    return f"{kind}:{actor_id}" if kind and kind != "human" else str(actor_id)


def short_time(stamp: Any) -> str | None:
    """``2025-01-02T03:04:05.678Z`` → ``2025-01-02 03:04:05``."""
    if not isinstance(stamp, str):
        return None
    return stamp.replace("T", " ")[:19]


TASK_COLUMNS = [
    Column("ID", lambda t: t.get("identifier")),
    Column("STATUS", lambda t: t.get("status"), status_colour),
    Column("PRIORITY", lambda t: t.get("priority"), priority_colour),
    Column("KIND", lambda t: t.get("kind")),
    Column("ASSIGNEE", lambda t: who(t.get("assignee_kind"), t.get("assignee_id"))),
    Column("LABELS", lambda t: t.get("labels")),
    Column("TITLE", lambda t: t.get("title"), elastic=True),
]


def task_line(out: Output, verb: str, task: Mapping[str, Any]) -> None:
    """``claimed DEMO-0001 [in_progress] Write the docs``."""
    status = out.style(str(task.get("status")), fg=status_colour(str(task.get("status"))))
    out.echo(f"{verb} {task.get('identifier')} [{status}] {task.get('title')}")


def task_fields(out: Output, task: Mapping[str, Any]) -> None:
    out.fields(
        [
            ("identifier", task.get("identifier")),
            ("title", task.get("title")),
            ("status", task.get("status")),
            ("priority", task.get("priority")),
            ("kind", task.get("kind")),
            ("project", task.get("project_id")),
            ("labels", task.get("labels")),
            ("assignee", who(task.get("assignee_kind"), task.get("assignee_id"))),
            ("reporter", who(task.get("reporter_kind"), task.get("reporter_id"))),
            ("claimed by", who(task.get("claimed_by_kind"), task.get("claimed_by"))),
            ("heartbeat", short_time(task.get("heartbeat_at"))),
            ("awaiting", task.get("awaiting_reason")),
            ("blocked", task.get("blocked_reason")),
            ("round", task.get("delivery_round")),
            ("delivered by", task.get("delivered_by")),
            ("acceptance", task.get("acceptance_mode")),
            ("waiver", task.get("waiver_reason")),
            ("archived", short_time(task.get("archived_at"))),
            ("version", task.get("version")),
            ("revision", task.get("revision")),
            ("created", short_time(task.get("created_at"))),
            ("updated", short_time(task.get("updated_at"))),
            ("id", task.get("id")),
            ("meta", task.get("meta") or None),
        ]
    )
    description = (task.get("description") or "").strip()
    if description:
        out.echo()
        out.echo(description)


def next_cursor(out: Output, page: Mapping[str, Any], command: str) -> None:
    cursor = page.get("next_cursor")
    if cursor:
        out.echo(f"next cursor: {cursor}  ({command} --cursor {cursor})")


def describe_changes(event: str, changes: Mapping[str, Any]) -> str:
    """A short human summary of an activity row's ``changes``."""
    if "from" in changes and "to" in changes:
        text = f"{changes['from']} → {changes['to']}"
        for key in ("reason", "awaitingReason", "blockedReason", "stoleFrom"):
            if changes.get(key):
                text += f" ({key}: {changes[key]})"
        return text
    if event == "task_updated":
        before, after = changes.get("before") or {}, changes.get("after") or {}
        parts = []
        for name in changes.get("fields", []):
            if name in after:
                parts.append(f"{name}: {before.get(name)!s} → {after[name]!s}")
            else:
                parts.append(name)
        return "; ".join(parts)
    if event == "comment_added":
        return f"{changes.get('kind', 'note')} comment"
    if event == "task_created":
        return f"{changes.get('identifier', '')} {changes.get('status', '')}".strip()
    if event in ("relation_added", "relation_removed"):
        return f"{changes.get('type')}"
    if event.startswith("attachment_"):
        return str(changes.get("filename", ""))
    if event.startswith("session_"):
        return str(changes.get("phase") or changes.get("status") or "")
    if event == "task_heartbeat":
        return ""
    compact = {k: v for k, v in changes.items() if not isinstance(v, (dict, list))}
    return ", ".join(f"{k}={v}" for k, v in compact.items())


ACTIVITY_COLUMNS = [
    Column("REV", lambda a: a.get("revision")),
    Column("WHEN", lambda a: short_time(a.get("created_at"))),
    Column("ACTOR", lambda a: who(a.get("actor_kind"), a.get("actor_id"))),
    Column("EVENT", lambda a: a.get("event")),
    Column("TASK", lambda a: a.get("task") or (a.get("task_id") or "")[:8] or "-"),
    Column("CHANGES", lambda a: describe_changes(str(a.get("event")), a.get("changes") or {}), elastic=True),
]
