"""``taskctl session``: the agent sessions working a card (SPEC §4.4)."""

from __future__ import annotations

from typing import Any

import click

from .command import REF, actor_ref, command, current, drop_none
from .http import segment
from .output import Column
from .render import short_time, who

CLOSE_STATUSES = ("completed", "failed", "abandoned")
SESSION_COLUMNS = [
    Column("ID", lambda s: s.get("id")),
    Column("OWNER", lambda s: who(s.get("owner_kind"), s.get("owner_id"))),
    Column("SEG", lambda s: s.get("seg")),
    Column("PHASE", lambda s: s.get("phase")),
    Column("STATUS", lambda s: s.get("status")),
    Column("UPDATED", lambda s: short_time(s.get("updated_at"))),
]


@click.group()
def session() -> None:
    """Agent sessions working a card.

    A session's id is derived from the task, its owner and the segment, so registering again
    after a restart resumes the same session.
    """


@command(session, "register")
@click.argument("ref", type=REF)
@click.option("--seg", type=click.IntRange(min=0), default=0, show_default=True, help="Segment number; a new one is a new session.")
@click.option("--phase", required=True, help="What the session is doing (1–64 characters).")
@click.option("--owner", metavar="[KIND:]ID", help="Whose session (default: the acting actor).")
def register(ref: str, seg: int, phase: str, owner: str | None) -> None:
    """Register (or resume) an agent session on a task."""
    inv = current()
    pair = actor_ref(owner, "--owner")
    body: dict[str, Any] = {"seg": seg, "phase": phase}
    if pair:
        body["owner_kind"], body["owner_id"] = pair
    reply = inv.http().request_raw("POST", f"/api/v1/tasks/{segment(ref)}/sessions", json=body)
    if reply.status >= 400:
        raise inv.http().refusal(reply)
    verb = "registered" if reply.status == 201 else "resumed"
    inv.out.result(reply.body, lambda s: inv.out.echo(f"{verb} session {s['id']} ({s['phase']})"))


@command(session, "close")
@click.argument("ref", type=REF)
@click.argument("session_id", metavar="SESSION_ID")
@click.option("--status", type=click.Choice(CLOSE_STATUSES), default="completed", show_default=True)
def close(ref: str, session_id: str, status: str) -> None:
    """Close an open session."""
    inv = current()
    closed = inv.call("POST", f"/tasks/{segment(ref)}/sessions/{segment(session_id)}/close", {"status": status})
    inv.out.result(closed, lambda s: inv.out.echo(f"closed session {s['id']} ({s['status']})"))


@command(session, "list")
@click.argument("ref", type=REF)
@click.option("--status", type=click.Choice(("open", *CLOSE_STATUSES)), help="Only sessions in this status.")
def list_(ref: str, status: str | None) -> None:
    """List the sessions on a task."""
    inv = current()
    page = inv.call("GET", f"/tasks/{segment(ref)}/sessions", query=drop_none({"status": status}))
    inv.out.result(page, lambda p: inv.out.table(p["items"], SESSION_COLUMNS, empty="no sessions"))
