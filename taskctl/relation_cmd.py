"""``taskctl relation``: link two tasks, list and remove links (SPEC §4.4)."""

from __future__ import annotations

from typing import Any

import click

from shared import domain

from .command import REF, command, current, drop_none
from .http import segment
from .output import Column, status_colour
from .render import short_time

RELATION_COLUMNS = [
    Column("ID", lambda r: r.get("id")),
    Column("TYPE", lambda r: r.get("type")),
    Column("DIRECTION", lambda r: r.get("direction")),
    Column("OTHER", lambda r: (r.get("other") or {}).get("identifier")),
    Column("STATUS", lambda r: (r.get("other") or {}).get("status"), status_colour),
    Column("CREATED", lambda r: short_time(r.get("created_at"))),
    Column("TITLE", lambda r: (r.get("other") or {}).get("title"), elastic=True),
]


@click.group()
def relation() -> None:
    """Link tasks: REF TYPE TARGET reads "REF blocks TARGET", "EPIC parent CHILD"…

    \b
    blocks     REF must be done before TARGET
    related    the two belong together (no direction)
    parent     REF is an epic and TARGET one of its children
    review_of  REF reviews TARGET
    """


@command(relation, "add")
@click.argument("ref", type=REF)
@click.argument("type_", metavar="TYPE", type=click.Choice(domain.RELATION_TYPES))
@click.argument("target", type=REF)
def add(ref: str, type_: str, target: str) -> None:
    """Relate REF to TARGET with TYPE."""
    inv = current()
    added = inv.call("POST", f"/tasks/{segment(ref)}/relations", {"type": type_, "target": target})
    inv.out.result(added, lambda r: inv.out.echo(f"added {ref} {type_} {target} ({r['id']})"))


@command(relation, "list")
@click.argument("ref", type=REF)
@click.option("--type", "type_", type=click.Choice(domain.RELATION_TYPES), help="Only this type.")
def list_(ref: str, type_: str | None) -> None:
    """List a task's relations in both directions."""
    inv = current()
    page: dict[str, Any] = inv.call("GET", f"/tasks/{segment(ref)}/relations", query=drop_none({"type": type_}))
    inv.out.result(page, lambda p: inv.out.table(p["items"], RELATION_COLUMNS, empty="no relations"))


@command(relation, "remove")
@click.argument("ref", type=REF)
@click.argument("relation_id", metavar="RELATION_ID")
def remove(ref: str, relation_id: str) -> None:
    """Remove one of REF's relations (its id from `relation list`)."""
    inv = current()
    removed = inv.call("DELETE", f"/tasks/{segment(ref)}/relations/{segment(relation_id)}")
    inv.out.result(removed, lambda r: inv.out.echo(f"removed {r.get('type', 'relation')} {relation_id}"))
