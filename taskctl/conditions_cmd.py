"""``taskctl conditions``: what the board notices about its own state (docs/conditions.md).

``list`` reads ``GET /api/v1/breaches``: the conditions that hold now (a column over its WIP
limit, a dependency-blocked card, a claim whose heartbeat stopped, a card past its status's time
limit…). It is the catch-up for a consumer that missed signals; signals are never replayed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from .command import command, current, drop_none
from .errors import TaskctlError
from .http import segment
from .output import Column

BREACHES_PATH = "/breaches"


def _changes(item: Mapping[str, Any]) -> Mapping[str, Any]:
    """A condition's ``changes`` object; empty when the board sent none."""
    changes = item.get("changes")
    return changes if isinstance(changes, dict) else {}


def _subject(item: Mapping[str, Any]) -> str:
    """The card a condition is about (its identifier, once looked up), or the column."""
    changes = _changes(item)
    if item.get("task_id"):
        return str(item.get("identifier") or item["task_id"])
    return f"column {changes.get('status')}" if changes.get("status") else "project"


def _detail(item: Mapping[str, Any]) -> str:
    return " ".join(f"{key}={_text(value)}" for key, value in _changes(item).items())


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(part) for part in value) or "-"
    return str(value)


BREACH_COLUMNS = [
    Column("CONDITION", lambda b: b.get("type")),
    Column("PROJECT", lambda b: b.get("project_id")),
    Column("ON", _subject),
    Column("SINCE", lambda b: b.get("since")),
    Column("DETAIL", _detail, elastic=True),
]


@click.group("conditions")
def conditions() -> None:
    """Conditions the board sees holding now (WIP limits, blockers, stale claims, timeouts)."""


@command(conditions, "list")
@click.option("-p", "--project", envvar="TASKLOOM_PROJECT", help="Project id (default: TASKLOOM_PROJECT; else every project).")
def list_conditions(project: str | None) -> None:
    """What holds now, from GET /breaches: the catch-up after missed signals."""
    inv = current()
    page = inv.call("GET", BREACHES_PATH, query=drop_none({"project": project}))

    def human(found: dict[str, Any]) -> None:
        # A breach names its card by id; people read identifiers (one read per card shown).
        names: dict[str, str] = {}
        items = []
        for item in found.get("items", []):
            task_id = item.get("task_id")
            if isinstance(task_id, str) and task_id not in names:
                try:
                    names[task_id] = inv.call("GET", f"/tasks/{segment(task_id)}")["identifier"]
                except TaskctlError:
                    names[task_id] = task_id  # archived or gone since: the id is all there is
            items.append({**item, "identifier": names.get(task_id) if isinstance(task_id, str) else None})
        inv.out.table(items, BREACH_COLUMNS, empty="nothing holds")

    inv.out.result(page, human)
