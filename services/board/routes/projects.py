"""Project routes: list, create, show, patch, readme."""

from __future__ import annotations

from typing import Any

from ..api import PREFIX, Call, Created, F, Route
from ..commands import projects
from ..queries.projects import get_project, list_projects

PROJECT_BODY = {
    "id": F("str", required=True, description="slug: a-z, 0-9, '-'; the identifier prefix is its upper case"),
    "name": F("str"),
    "workspace_path": F("str", nullable=True, description="absolute path of the project's workspace"),
    "readme": F("str"),
    "meta": F("dict"),
    "settings": F("dict"),
}
PATCH_BODY = {name: spec for name, spec in PROJECT_BODY.items() if name not in ("id", "readme")}


async def list_(call: Call) -> Any:
    return await call.store.query(list_projects)


async def create(call: Call) -> Any:
    return Created(await call.store.command(projects.create_project, call.actor, **call.body))


async def show(call: Call) -> Any:
    return await call.store.query(get_project, call.path["id"])


async def patch(call: Call) -> Any:
    return await call.store.command(projects.update_project, call.actor, call.path["id"], **call.body)


async def put_readme(call: Call) -> Any:
    return await call.store.command(projects.set_readme, call.actor, call.path["id"], call.body["readme"])


ROUTES = [
    Route("GET", f"{PREFIX}/projects", list_, "List projects"),
    Route("POST", f"{PREFIX}/projects", create, "Create a project (201)", body=PROJECT_BODY, success=(201,)),
    Route("GET", f"{PREFIX}/projects/{{id}}", show, "Show a project"),
    Route("PATCH", f"{PREFIX}/projects/{{id}}", patch, "Update a project", body=PATCH_BODY),
    Route("PUT", f"{PREFIX}/projects/{{id}}/readme", put_readme, "Replace a project's readme",
          body={"readme": F("str", required=True)}),
]
