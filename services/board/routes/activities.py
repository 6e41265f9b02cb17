"""Activity log routes: board-wide and per task, filtered and keyset-paged."""

from __future__ import annotations

from typing import Any

from ..api import LIST_QUERY, PREFIX, Call, F, Route
from ..queries import activities
from ..queries.tasks import require_task

BOARD_QUERY = {
    **LIST_QUERY,
    "after": F("int", minimum=0, description="only rows with revision > after"),
    "order": F("str", enum=("asc", "desc")),
    "project": F("str"),
    "task": F("str", description="task uuid or identifier"),
    "event": F("list", description="comma-separated event names"),
    "actor": F("str", description="actor id"),
}
TASK_QUERY = {**LIST_QUERY, "after": BOARD_QUERY["after"], "order": BOARD_QUERY["order"]}


def _board_page(conn: Any, query: dict[str, Any]) -> dict[str, Any]:
    task = query.pop("task", None)
    if task is not None:
        query["task_id"] = require_task(conn, task)["id"]
    if "event" in query:
        query["events"] = query.pop("event")
    return activities.list_activities(conn, **query)


def _task_page(conn: Any, ref: str, query: dict[str, Any]) -> dict[str, Any]:
    return activities.list_activities(conn, task_id=require_task(conn, ref)["id"], **query)


async def board_activities(call: Call) -> Any:
    return await call.store.query(_board_page, dict(call.query))


async def task_activities(call: Call) -> Any:
    return await call.store.query(_task_page, call.path["ref"], dict(call.query))


ROUTES = [
    Route("GET", f"{PREFIX}/activities", board_activities, "List activity rows board-wide", query=BOARD_QUERY),
    Route("GET", f"{PREFIX}/tasks/{{ref}}/activities", task_activities, "List a task's activity rows", query=TASK_QUERY),
]
