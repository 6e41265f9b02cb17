"""Comment routes: list and add comments, and ask (the holder's question that parks the task)."""

from __future__ import annotations

from typing import Any

from shared import domain

from ..api import LIST_QUERY, PREFIX, Call, Created, F, Route
from ..commands import comments
from ..queries.comments import list_comments
from .tasks import IF_VERSION


async def list_(call: Call) -> Any:
    return await call.store.query(list_comments, call.path["ref"], **call.query)


async def add(call: Call) -> Any:
    return Created(await call.store.command(comments.add_comment, call.actor, call.path["ref"], **call.body))


async def ask(call: Call) -> Any:
    return await call.store.command(comments.ask_question, call.actor, call.path["ref"], **call.body)


TASK = f"{PREFIX}/tasks/{{ref}}"
ROUTES = [
    Route("GET", f"{TASK}/comments", list_, "List a task's comments, oldest first", query=LIST_QUERY),
    Route("POST", f"{TASK}/comments", add,
          "Comment on a task (201); a human comment on an awaiting task also resumes it to todo",
          body={
              "body": F("str", required=True, description="markdown text"),
              "kind": F("str", enum=domain.COMMENT_KINDS, description="default note"),
          },
          success=(201,)),
    Route("POST", f"{TASK}/ask", ask,
          "Ask a question as the claim holder: a question comment and in_progress → awaiting",
          body={"body": F("str", required=True, description="the question, markdown"), "if_version": IF_VERSION}),
]
