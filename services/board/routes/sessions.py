"""Agent session routes: list, register (or resume), close."""

from __future__ import annotations

from typing import Any

from ..api import PREFIX, Call, Created, F, Route
from ..commands import sessions
from ..queries.sessions import list_sessions

TASK = f"{PREFIX}/tasks/{{ref}}"
REGISTER_BODY = {
    "seg": F("int", required=True, minimum=0, description="segment number; a new segment is a new session"),
    "phase": F("str", required=True, description=f"what the session is doing (1–{sessions.PHASE_MAX_CHARS} characters)"),
    "owner_kind": F("str", description="defaults to the actor's kind; goes with owner_id"),
    "owner_id": F("str", description="defaults to the actor's id; goes with owner_kind"),
}
STATUSES = ("open", *sessions.CLOSE_STATUSES)


async def list_(call: Call) -> Any:
    return await call.store.query(list_sessions, call.path["ref"], **call.query)


async def register(call: Call) -> Any:
    session, created = await call.store.command(sessions.register_session, call.actor, call.path["ref"], **call.body)
    return Created(session) if created else session


async def close(call: Call) -> Any:
    return await call.store.command(
        sessions.close_session, call.actor, call.path["ref"], call.path["id"], **call.body
    )


ROUTES = [
    Route("GET", f"{TASK}/sessions", list_, "List the agent sessions on a task",
          query={"status": F("str", enum=STATUSES)}),
    Route("POST", f"{TASK}/sessions", register,
          "Register an agent session (201), or resume an open one and update its phase (200)", body=REGISTER_BODY,
          success=(200, 201)),
    Route("POST", f"{TASK}/sessions/{{id}}/close", close, "Close an open session",
          body={"status": F("str", required=True, enum=sessions.CLOSE_STATUSES)}),
]
