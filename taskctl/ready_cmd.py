"""``taskctl task ready``: the board's queue of claimable work (docs/conditions.md).

The rule is the board's (``GET /api/v1/tasks?ready=true``): todo, not an epic, no open blocker,
not claimed by someone fresh, and (with ``--for``) unassigned or assigned to that actor, in
priority order.
taskctl never re-derives it: ``task ready`` and ``task candidates`` both print the board's answer,
so the queue an agent supervisor reads cannot disagree with the claim check.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import click

from shared import limits

from .command import Invocation, current, drop_none, global_options
from .http import paginate
from .render import TASK_COLUMNS

TASKS_PATH = "/api/v1/tasks"
PROJECT_HELP = "Project id (default: TASKLOOM_PROJECT)."


def ready_tasks(inv: Invocation, *, project: str | None, actor: str | None, label: str | None = None,
                limit: int | None = None) -> list[dict[str, Any]]:
    """The board's ready queue, in its order; ``actor`` (an id) keeps the cards unassigned or theirs."""
    query = drop_none({
        "ready": "true",
        "project": project,
        "for": actor,
        "label": label,
        "limit": limits.PAGE_LIMIT_MAX if limit is None else min(limit, limits.PAGE_LIMIT_MAX),
    })
    found: Iterable[dict[str, Any]] = paginate(inv.http(), TASKS_PATH, query, limit=limit)
    return list(found)


def _actor_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise click.BadParameter("name an actor id", ctx, param)
    return value.strip() if value is not None else None


@click.command("ready")
@click.option("-p", "--project", envvar="TASKLOOM_PROJECT", help=PROJECT_HELP)
@click.option("--for", "for_actor", metavar="ACTOR", callback=_actor_id,
              help="Only cards unassigned or assigned to this actor id; without it, any assignee.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="At most this many.")
@global_options
def ready(project: str | None, for_actor: str | None, limit: int) -> None:
    """Claimable work, most urgent first: the board's ready rule (no open blocker, no fresh claim)."""
    inv = current()
    items = ready_tasks(inv, project=project, actor=for_actor, limit=limit)
    inv.out.result({"items": items, "next_cursor": None},
                   lambda page: inv.out.table(page["items"], TASK_COLUMNS, empty="nothing is ready"))
