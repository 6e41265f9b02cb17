"""``taskctl comment``: add and list a task's comments (SPEC §4.4)."""

from __future__ import annotations

from typing import Any

import click

from shared import domain, limits

from .command import REF, command, current, drop_none, text_or_file
from .http import paginate, segment
from .output import Column
from .render import next_cursor, short_time, who

COMMENT_COLUMNS = [
    Column("WHEN", lambda c: short_time(c.get("created_at"))),
    Column("ACTOR", lambda c: who(c.get("actor_kind"), c.get("actor_id"))),
    Column("KIND", lambda c: c.get("kind")),
    Column("ROUND", lambda c: c.get("round")),
    Column("BODY", lambda c: c.get("body"), elastic=True),
]


@click.group()
def comment() -> None:
    """Add and list comments on a task.

    A human comment on an awaiting task answers its question and resumes it (awaiting → todo).
    A confirm comment from someone other than the deliverer approves a delivery.
    """


@command(comment, "add")
@click.argument("ref", type=REF)
@click.argument("text", required=False)
@click.option("-f", "--file", "source", metavar="FILE|-", help="Read the comment from FILE, or stdin for -.")
@click.option("-k", "--kind", type=click.Choice(domain.COMMENT_KINDS), help="Default note.")
def add(ref: str, text: str | None, source: str | None, kind: str | None) -> None:
    """Comment on a task with TEXT."""
    inv = current()
    body = drop_none({"body": text_or_file(text, source, "comment"), "kind": kind})
    added = inv.call("POST", f"/tasks/{segment(ref)}/comments", body)
    resumed = _resumed_by(inv, ref, added)
    added = {**added, "resumed": resumed is not None}

    def human(c: dict[str, Any]) -> None:
        inv.out.echo(f"added {c['kind']} comment {c['id']} to {ref}")
        if resumed is not None:
            inv.out.echo(f"resumed {ref}: {resumed.get('from', 'awaiting')} → {resumed.get('to', 'todo')} "
                         "(this answer lets its worker pick it up again)")

    inv.out.result(added, human)


#: How far back the comment's own rows are looked for: the resume is written right after it.
RESUME_LOOKBACK = 10


def _resumed_by(inv: Any, ref: str, added: dict[str, Any]) -> dict[str, Any] | None:
    """The ``task_resumed`` changes this comment caused (a human's answer to an awaiting task), if any.

    The board resumes in the comment's own transaction and names the comment in the row, so this
    is a read of what happened, not a guess from the status.
    """
    if added.get("actor_kind") != "human":
        return None  # only a human's comment resumes (SPEC §4.4)
    rows = inv.call("GET", f"/tasks/{segment(ref)}/activities", query={"order": "desc", "limit": RESUME_LOOKBACK})["items"]
    for row in rows:
        changes = row.get("changes") or {}
        if row.get("event") == "task_resumed" and changes.get("commentId") == added.get("id"):
            return dict(changes)
    return None


@command(comment, "list")
@click.argument("ref", type=REF)
@click.option("--limit", type=click.IntRange(1, limits.PAGE_LIMIT_MAX), default=limits.PAGE_LIMIT_DEFAULT, show_default=True,
              help="Page size.")
@click.option("--cursor", help="Continue from a previous page's next cursor.")
@click.option("--all", "all_pages", is_flag=True, help="Follow the cursor through every page.")
def list_(ref: str, limit: int, cursor: str | None, all_pages: bool) -> None:
    """List a task's comments, oldest first."""
    inv = current()
    query = drop_none({"limit": limit, "cursor": cursor})
    path = f"/tasks/{segment(ref)}/comments"
    if all_pages:
        page: dict[str, Any] = {"items": list(paginate(inv.http(), "/api/v1" + path, query)), "next_cursor": None}
    else:
        page = inv.call("GET", path, query=query)

    def human(page: dict[str, Any]) -> None:
        inv.out.table(page["items"], COMMENT_COLUMNS, empty="no comments")
        next_cursor(inv.out, page, f"taskctl comment list {ref}")

    inv.out.result(page, human)
