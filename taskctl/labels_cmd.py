"""``taskctl labels`` (list, gc) and ``taskctl actors`` (the assignee/reporter dictionary)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from shared import limits

from .command import command, current, drop_none, global_options
from .http import paginate
from .output import Column
from .render import next_cursor, short_time

LABEL_COLUMNS = [
    Column("PROJECT", lambda label: label.get("project_id")),
    Column("NAME", lambda label: label.get("name")),
    Column("USES", lambda label: label.get("use_count")),
    Column("LAST USED", lambda label: short_time(label.get("last_used_at"))),
    Column("ARCHIVED", lambda label: short_time(label.get("archived_at"))),
]
ACTOR_COLUMNS = [
    Column("KIND", lambda a: a.get("kind")),
    Column("ID", lambda a: a.get("id")),
    Column("USES", lambda a: a.get("use_count")),
    Column("FIRST SEEN", lambda a: short_time(a.get("first_seen_at"))),
    Column("LAST SEEN", lambda a: short_time(a.get("last_seen_at"))),
]


def _page(path: str, query: dict[str, Any], all_pages: bool) -> dict[str, Any]:
    inv = current()
    if all_pages:
        return {"items": list(paginate(inv.http(), "/api/v1" + path, query)), "next_cursor": None}
    page: dict[str, Any] = inv.call("GET", path, query=query)
    return page


@click.group()
def labels() -> None:
    """List labels and archive unused ones."""


@command(labels, "list")
@click.option("-p", "--project", envvar="TASKLOOM_PROJECT", help="Project id (default: TASKLOOM_PROJECT).")
@click.option("--archived", is_flag=True, help="Include archived labels.")
@click.option("--limit", type=click.IntRange(1, limits.PAGE_LIMIT_MAX), default=limits.PAGE_LIMIT_DEFAULT, show_default=True,
              help="Page size.")
@click.option("--cursor", help="Continue from a previous page's next cursor.")
@click.option("--all", "all_pages", is_flag=True, help="Follow the cursor through every page.")
def list_labels(project: str | None, archived: bool, limit: int, cursor: str | None, all_pages: bool) -> None:
    """List labels with their use counts."""
    inv = current()
    query = drop_none({"project": project, "archived": True if archived else None, "limit": limit, "cursor": cursor})
    page = _page("/labels", query, all_pages)

    def human(page: dict[str, Any]) -> None:
        inv.out.table(page["items"], LABEL_COLUMNS, empty="no labels")
        next_cursor(inv.out, page, "taskctl labels list")

    inv.out.result(page, human)


@command(labels, "gc")
@click.option("-p", "--project", envvar="TASKLOOM_PROJECT", help="Only this project (default: the whole board).")
@click.option("--ttl-days", type=click.IntRange(0, 36500), help="Archive unused labels last used this many days ago or more.")
@click.option("--dry-run", is_flag=True, help="Say what would happen; change nothing.")
def gc(project: str | None, ttl_days: int | None, dry_run: bool) -> None:
    """Recount label use and archive labels nobody uses any more."""
    inv = current()
    body = drop_none({"project": project, "ttl_days": ttl_days, "dry_run": True if dry_run else None})
    result = inv.call("POST", "/labels/gc", body)

    def human(r: dict[str, Any]) -> None:
        verb = "would archive" if r.get("dry_run") else "archived"
        archived = r.get("archived") or []
        inv.out.echo(f"{verb} {len(archived)} label(s){': ' + ', '.join(archived) if archived else ''}; "
                     f"kept {r.get('kept')}, repaired counts {r.get('mismatched')} (ttl {r.get('ttl_days')} days)")

    inv.out.result(result, human)


def _actor_filters(f: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed((
        click.option("--kind", help="Only actors of this kind (human, or a platform name)."),
        click.option("--limit", type=click.IntRange(1, limits.PAGE_LIMIT_MAX), default=limits.PAGE_LIMIT_DEFAULT,
                     show_default=True, help="Page size."),
        click.option("--cursor", help="Continue from a previous page's next cursor."),
        click.option("--all", "all_pages", is_flag=True, help="Follow the cursor through every page."),
    )):
        f = option(f)
    return f


def _list_actors(kind: str | None, limit: int, cursor: str | None, all_pages: bool) -> None:
    inv = current()
    page = _page("/actors", drop_none({"kind": kind, "limit": limit, "cursor": cursor}), all_pages)

    def human(page: dict[str, Any]) -> None:
        inv.out.table(page["items"], ACTOR_COLUMNS, empty="no actors yet")
        next_cursor(inv.out, page, "taskctl actors list")

    inv.out.result(page, human)


# `taskctl actors` and `taskctl actors list` both list: every other group reads its listing as `list`.
@click.group("actors", invoke_without_command=True)
@_actor_filters
@global_options
@click.pass_context
def actors(ctx: click.Context, kind: str | None, limit: int, cursor: str | None, all_pages: bool) -> None:
    """List the assignees and reporters the board knows (`taskctl actors` is `taskctl actors list`)."""
    if ctx.invoked_subcommand is None:
        _list_actors(kind, limit, cursor, all_pages)


@command(actors, "list")
@_actor_filters
def actors_list(kind: str | None, limit: int, cursor: str | None, all_pages: bool) -> None:
    """List the assignees and reporters the board knows."""
    _list_actors(kind, limit, cursor, all_pages)
