"""Task routes: list, create, show, patch, and the lifecycle verbs."""

from __future__ import annotations

from typing import Any

from shared import domain
from shared.errors import TaskloomError, validation

from ..api import LIST_QUERY, PREFIX, Call, Created, F, Route
from ..commands import tasks
from ..commands.common import normalise_label
from ..keys import CONDITIONS
from ..queries.tasks import get_task, list_tasks
from ..store import utc_now

IF_VERSION = F("int", minimum=1, description="refuse with 409 VERSION_CONFLICT unless the task is at this version")

CREATE_BODY = {
    "project": F("str", required=True),
    "title": F("str", required=True),
    "description": F("str"),
    "kind": F("str", enum=domain.KINDS),
    "priority": F("str", enum=domain.PRIORITIES),
    "status": F("str", enum=("backlog", "todo")),
    "labels": F("list", items="str"),
    "assignee_kind": F("str", nullable=True),
    "assignee_id": F("str", nullable=True),
    "reporter_kind": F("str", nullable=True),
    "reporter_id": F("str", nullable=True),
    "acceptance_mode": F("str", enum=domain.ACCEPTANCE_MODES),
    "meta": F("dict"),
    "idem": F("str", description="idempotency key; a live task holding it is returned instead"),
    "parent": F("str", description="an epic (uuid or identifier): the new task is created as its child"),
}
PATCH_BODY = {
    **{name: CREATE_BODY[name] for name in tasks.UPDATABLE},
    "title": F("str"),
    "if_version": IF_VERSION,
}
LIST_TASKS_QUERY = {
    **LIST_QUERY,
    "project": F("str"),
    "status": F("list", enum=domain.STATUSES, description="comma-separated statuses"),
    "assignee": F("str", description="assignee id"),
    "label": F("str"),
    "kind": F("str", enum=domain.KINDS),
    "q": F("str", description="text search: every word, in the title, identifier or description"
           " (case-insensitive in A-Z, other letters as written)"),
    "archived": F("bool", description="include archived tasks"),
    "blocked": F("bool", description="only cards with (true) or without (false) an open blocker"),
    "ready": F("bool", description="the claimable queue in priority order: todo, not an epic, no open blocker,"
               " no fresh claim"),
    "for": F("str", description="with ready=true: only cards unassigned or assigned to this actor id"),
}
#: Overrides the dependency gate (409 DEPENDENCY_OPEN) with a reason; audited as forced/reason.
FORCE = F("bool", description="claim or finish although a blocker is open; needs a reason of at least 8 characters")


async def list_(call: Call) -> Any:
    query = dict(call.query)
    query["include_archived"] = query.pop("archived", False)
    if "for" in query:
        query["for_actor"] = query.pop("for")
    if query.get("ready"):
        query.update(now=utc_now(), fresh_seconds=call.settings.claim_fresh_seconds)
    if "label" in query:
        query["label"] = normalise_label(query["label"])  # the name as stored, or a clear 400
    return await call.store.query(list_tasks, **query)


async def create(call: Call) -> Any:
    task, created = await call.store.command(tasks.create_task, call.actor, **call.body)
    return Created(task) if created else task


async def show(call: Call) -> Any:
    return await call.store.query(get_task, call.path["ref"])


#: Fields a PATCH sends together: a lone half would be judged against what the task holds, so the
#: same body would be valid on one task and refused on another (the OpenAPI document says "both").
PAIRS = (("assignee_kind", "assignee_id"), ("reporter_kind", "reporter_id"))


def refuse_half_pairs(body: dict[str, Any]) -> None:
    for kind, ident in PAIRS:
        if (kind in body) != (ident in body):
            raise validation(
                f"{kind} and {ident} go together: send both (both null to clear)", fields=[kind, ident]
            )


async def patch(call: Call) -> Any:
    refuse_half_pairs(call.body)
    return await call.store.command(tasks.update_task, call.actor, call.path["ref"], **call.body)


async def reporting_rejections(call: Call, to: str, run: Any) -> Any:
    """Run a move-like command; a refusal becomes ``transition_rejected`` where the project asks
    for it (in a transaction of its own: the refused one rolled back)."""
    try:
        return await run
    except TaskloomError as error:
        if error.status in (409, 422):
            await call.request.app[CONDITIONS].rejected(call.path["ref"], to, error.code)
        raise


async def claim(call: Call) -> Any:
    settings = call.settings
    return await reporting_rejections(call, "in_progress", call.store.command(
        tasks.claim_task,
        call.actor,
        call.path["ref"],
        fresh_seconds=settings.claim_fresh_seconds,
        stale_seconds=settings.claim_stale_seconds,
        **call.body,
    ))


async def heartbeat(call: Call) -> Any:
    return await call.store.command(tasks.heartbeat_task, call.actor, call.path["ref"])


async def move(call: Call) -> Any:
    return await reporting_rejections(
        call, call.body["to"], call.store.command(tasks.move_task, call.actor, call.path["ref"], **call.body)
    )


async def reopen(call: Call) -> Any:
    return await call.store.command(tasks.reopen_task, call.actor, call.path["ref"], **call.body)


async def archive(call: Call) -> Any:
    return await call.store.command(
        tasks.archive_task, call.actor, call.path["ref"], quiet_seconds=call.settings.archive_quiet_seconds, **call.body
    )


TASK = f"{PREFIX}/tasks/{{ref}}"
ROUTES = [
    Route("GET", f"{PREFIX}/tasks", list_, "List tasks", query=LIST_TASKS_QUERY),
    Route("POST", f"{PREFIX}/tasks", create, "Create a task (201), or return the live task holding its idem key (200)",
          body=CREATE_BODY, success=(200, 201)),
    Route("GET", TASK, show, "Show a task by uuid or identifier"),
    Route("PATCH", TASK, patch, "Update a task's fields (never its status)", body=PATCH_BODY),
    Route("POST", f"{TASK}/claim", claim, "Claim a task (todo → in_progress, or re-claim)",
          body={"steal": F("bool"), "force": FORCE, "reason": F("str"), "if_version": IF_VERSION}),
    Route("POST", f"{TASK}/heartbeat", heartbeat, "Tell the board the holder is still working", body={}),
    Route("POST", f"{TASK}/move", move, "Move a task to another status",
          body={"to": F("str", required=True, enum=domain.STATUSES), "force": FORCE, "reason": F("str"),
                "if_version": IF_VERSION}),
    Route("POST", f"{TASK}/reopen", reopen, "Reopen a done or canceled task",
          body={"reason": F("str", required=True), "if_version": IF_VERSION}),
    Route("POST", f"{TASK}/archive", archive, "Archive a terminal task", body={"if_version": IF_VERSION}),
]
