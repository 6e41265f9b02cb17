"""``taskctl comment``: add and list a task's comments (SPEC §4.4)."""

from __future__ import annotations

from typing import Any

import click

from shared import domain, limits

from .command import REF, command, current, drop_none, text_or_file
from .http import paginate
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
    added = inv.call("POST", f"/tasks/{ref}/comments", body)
    inv.out.result(added, lambda c: inv.out.echo(f"added {c['kind']} comment {c['id']} to {ref}"))


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
    path = f"/tasks/{ref}/comments"
    if all_pages:
        page: dict[str, Any] = {"items": list(paginate(inv.http(), "/api/v1" + path, query)), "next_cursor": None}
    else:
        page = inv.call("GET", path, query=query)

    def human(page: dict[str, Any]) -> None:
        inv.out.table(page["items"], COMMENT_COLUMNS, empty="no comments")
        next_cursor(inv.out, page, f"taskctl comment list {ref}")

    inv.out.result(page, human)
