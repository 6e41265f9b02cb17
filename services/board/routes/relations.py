"""Relation routes: list both directions, add (the path task is the source), remove."""

from __future__ import annotations

from typing import Any

from shared import domain

from ..api import PREFIX, Call, Created, F, Route
from ..commands import relations
from ..queries.relations import list_relations

TASK = f"{PREFIX}/tasks/{{ref}}"
ADD_BODY = {
    "type": F("str", required=True, enum=domain.RELATION_TYPES,
              description="path task <type> target; for parent the path task is the epic"),
    "target": F("str", required=True, description="the other task, by uuid or identifier"),
}


async def list_(call: Call) -> Any:
    return await call.store.query(list_relations, call.path["ref"], **call.query)


async def add(call: Call) -> Any:
    return Created(await call.store.command(relations.add_relation, call.actor, call.path["ref"], **call.body))


async def remove(call: Call) -> Any:
    return await call.store.command(relations.remove_relation, call.actor, call.path["ref"], call.path["id"])


ROUTES = [
    Route("GET", f"{TASK}/relations", list_, "List a task's relations in both directions",
          query={"type": F("str", enum=domain.RELATION_TYPES)}),
    Route("POST", f"{TASK}/relations", add, "Relate the task (source) to a target; the activity hangs off the target",
          body=ADD_BODY, success=(201,)),
    Route("DELETE", f"{TASK}/relations/{{id}}", remove, "Remove one of the task's relations"),
]
