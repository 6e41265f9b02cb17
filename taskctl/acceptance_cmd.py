"""``taskctl acceptance``: a task's acceptance items and mode (SPEC §4.4)."""

from __future__ import annotations

from typing import Any

import click

from shared import domain

from .command import REF, command, current, drop_none
from .http import segment
from .output import Column

ITEM_COLUMNS = [
    Column("#", lambda i: i.get("position")),
    Column("ID", lambda i: i.get("id")),
    Column("TEXT", lambda i: i.get("text"), elastic=True),
]


@click.group()
def acceptance() -> None:
    """A task's acceptance items and mode.

    Mode review (the default) needs an approving confirm comment from someone other than the
    deliverer before in_review → done; mode none does not.
    """


def _show(inv: Any, view: dict[str, Any]) -> None:
    inv.out.echo(f"mode {view['mode']}, list revision {view['revision']}")
    inv.out.table(view["items"], ITEM_COLUMNS, empty="no acceptance items")


@command(acceptance, "list")
@click.argument("ref", type=REF)
def list_(ref: str) -> None:
    """Show a task's acceptance mode and items."""
    inv = current()
    inv.out.result(inv.call("GET", f"/tasks/{segment(ref)}/acceptance"), lambda v: _show(inv, v))


@command(acceptance, "add")
@click.argument("ref", type=REF)
@click.argument("items", nargs=-1, required=True)
def add(ref: str, items: tuple[str, ...]) -> None:
    """Add acceptance ITEMS (one argument each) to a task."""
    inv = current()
    inv.out.result(inv.call("POST", f"/tasks/{segment(ref)}/acceptance", {"items": list(items)}), lambda v: _show(inv, v))


@command(acceptance, "prune")
@click.argument("ref", type=REF)
@click.argument("item")
@click.option("--reason", required=True, help="Why the item goes (at least 8 characters).")
def prune(ref: str, item: str, reason: str) -> None:
    """Remove ITEM (its id, or its # from `acceptance list`); the reason is audited."""
    inv = current()
    item_id = item
    if item.isdigit():
        items = inv.call("GET", f"/tasks/{segment(ref)}/acceptance")["items"]
        found = [i for i in items if str(i.get("position")) == item]
        if not found:
            raise click.BadParameter(f"{ref} has no acceptance item #{item}", param_hint="ITEM")
        item_id = found[0]["id"]
    view = inv.call("DELETE", f"/tasks/{segment(ref)}/acceptance/{segment(item_id)}", query={"reason": reason})
    inv.out.result(view, lambda v: _show(inv, v))


@command(acceptance, "mode")
@click.argument("ref", type=REF)
@click.argument("mode", type=click.Choice(domain.ACCEPTANCE_MODES), metavar="MODE")
@click.option("--reason", help="Why the mode changes (at least 8 characters).")
def mode(ref: str, mode: str, reason: str | None) -> None:
    """Set a task's acceptance MODE: review or none."""
    inv = current()
    view = inv.call("POST", f"/tasks/{segment(ref)}/acceptance", drop_none({"mode": mode, "reason": reason}))
    inv.out.result(view, lambda v: _show(inv, v))
