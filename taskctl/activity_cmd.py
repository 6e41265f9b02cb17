"""``taskctl activity list``: the activity log with filters and a keyset cursor (SPEC §5)."""

from __future__ import annotations

import shlex
from typing import Any

import click

from shared import limits

from .command import REF, command, current, drop_none
from .render import ACTIVITY_COLUMNS, next_cursor


@click.group()
def activity() -> None:
    """Read the activity log: every change to the board, one row each, in revision order."""


@command(activity, "list")
@click.option("-p", "--project", envvar="TASKLOOM_PROJECT", help="Only this project (default: TASKLOOM_PROJECT).")
@click.option("-t", "--task", type=REF, help="Only this task (identifier or uuid).")
@click.option("-e", "--event", "events", multiple=True, help="Only these event names; repeat or separate with commas.")
@click.option("--by", "actor_filter", metavar="ACTOR_ID", help="Only rows written by this actor id.")
@click.option("--after", type=click.IntRange(min=0), metavar="REVISION", help="Only rows with a revision above this.")
@click.option("--order", type=click.Choice(("asc", "desc")), default="asc", show_default=True)
@click.option("--limit", type=click.IntRange(1, limits.PAGE_LIMIT_MAX), default=limits.PAGE_LIMIT_DEFAULT, show_default=True,
              help="Page size.")
@click.option("--cursor", help="Continue from a previous page's next cursor.")
def list_(project: str | None, task: str | None, events: tuple[str, ...], actor_filter: str | None,
          after: int | None, order: str, limit: int, cursor: str | None) -> None:
    """List activity rows, a page at a time; the next cursor is printed when there is more."""
    inv = current()
    names = [part.strip() for value in events for part in value.split(",") if part.strip()]
    query = drop_none({
        "project": project, "task": task, "event": names or None, "actor": actor_filter, "after": after,
        "order": order, "limit": limit, "cursor": cursor,
    })
    page: dict[str, Any] = inv.call("GET", "/activities", query=query)

    # The cursor continues this listing only: the next page's command repeats every filter.
    again = ["taskctl", "activity", "list"]
    for flag, value in (("-p", project), ("-t", task), ("-e", ",".join(names) or None), ("--by", actor_filter),
                        ("--after", after), ("--order", order if order != "asc" else None),
                        ("--limit", limit if limit != limits.PAGE_LIMIT_DEFAULT else None)):
        if value is not None:
            again += [flag, str(value)]

    def human(page: dict[str, Any]) -> None:
        inv.out.table(page["items"], ACTIVITY_COLUMNS, empty="no activity")
        next_cursor(inv.out, page, shlex.join(again))

    inv.out.result(page, human)
