"""Project commands: create, update, readme (SPEC §4.2)."""

from __future__ import annotations

import re
from typing import Any

from shared import domain, events, limits
from shared.errors import TaskloomError, validation
from shared.json_bounds import check_free_form

from ..conditions import config as conditions_config
from ..queries.projects import get_project, require_project
from ..store import Tx
from .common import check_text, dumps

#: A project id; matched whole (``$`` alone would let a final newline through to the CHECK).
SLUG_BODY = r"[a-z0-9][a-z0-9-]{0,31}"
_SLUG = re.compile(SLUG_BODY)
UPDATABLE = ("name", "workspace_path", "meta", "settings")


def _check_workspace(path: str | None) -> None:
    if path is not None and len(path.encode()) > limits.WORKSPACE_PATH_MAX_BYTES:
        raise validation(f"workspace_path is at most {limits.WORKSPACE_PATH_MAX_BYTES} bytes of UTF-8",
                         field="workspace_path", length=len(path.encode()), limit=limits.WORKSPACE_PATH_MAX_BYTES)
    if path is not None and not path.startswith("/"):
        raise validation("workspace_path must be absolute", workspace_path=path)


def _check_free_fields(readme: str | None, meta: Any, settings: Any) -> None:
    check_text(readme, field="readme", limit=limits.README_MAX_CHARS)
    for name, value in (("meta", meta), ("settings", settings)):
        if value is not None:
            check_free_form(value, field=name)
    if settings is not None:
        conditions_config.check(settings)  # WIP limits, monitors, persist_conditions (SPEC §12)


def _check_name(name: str | None) -> None:
    if name is not None and len(name) > domain.PROJECT_NAME_MAX_CHARS:
        raise validation(f"name is at most {domain.PROJECT_NAME_MAX_CHARS} characters", length=len(name))


def _refuse_taken_workspace(tx: Tx, path: str | None, project_id: str) -> None:
    holder = tx.one("SELECT id FROM projects WHERE workspace_path = ? AND id <> ?", (path, project_id)) if path else None
    if holder is not None:
        raise TaskloomError(
            "CONFLICT",
            f"project {holder['id']!r} already uses this workspace_path",
            details={"workspace_path": path, "project": holder["id"]},
        )


def create_project(
    tx: Tx,
    *,
    id: str,
    name: str | None = None,
    workspace_path: str | None = None,
    readme: str = "",
    meta: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if not _SLUG.fullmatch(id):
        raise validation("project id must be a slug: a-z, 0-9 and '-', at most 32 characters", id=id)
    _check_workspace(workspace_path)
    _check_name(name)
    _check_free_fields(readme, meta, settings)
    if tx.one("SELECT 1 FROM projects WHERE id = ?", (id,)):
        raise TaskloomError("CONFLICT", f"project {id!r} already exists", details={"id": id})
    prefix = id.upper().replace("-", "")
    if tx.one("SELECT 1 FROM projects WHERE prefix = ?", (prefix,)):
        raise TaskloomError("CONFLICT", f"identifier prefix {prefix!r} is taken", details={"prefix": prefix})
    _refuse_taken_workspace(tx, workspace_path, id)
    tx.execute(
        "INSERT INTO projects (id, name, prefix, workspace_path, readme, meta_json, settings_json, created_at,"
        " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (id, name or id, prefix, workspace_path, readme, dumps(meta or {}), dumps(settings or {}), tx.now, tx.now),
    )
    tx.record(events.PROJECT_CREATED, events.project_created(project=id), task_id=None, project_id=id)
    return get_project(tx.conn, id)


def update_project(tx: Tx, project_id: str, **patch: Any) -> dict[str, Any]:
    current = get_project(tx.conn, project_id)
    unknown = set(patch) - set(UPDATABLE) - {"readme"}
    if unknown:
        raise validation("unknown project fields", fields=sorted(unknown))
    if "workspace_path" in patch:
        _check_workspace(patch["workspace_path"])
        _refuse_taken_workspace(tx, patch["workspace_path"], project_id)
    if "name" in patch:
        _check_name(patch["name"])
    _check_free_fields(patch.get("readme"), patch.get("meta"), patch.get("settings"))
    changed = [name for name, value in patch.items() if current[name] != value]
    if not changed:
        return current
    columns = {"meta": "meta_json", "settings": "settings_json"}
    values = {columns.get(name, name): (dumps(patch[name]) if name in columns else patch[name]) for name in changed}
    if "name" in values and not values["name"]:
        raise validation("name must not be empty", name=values["name"])
    assignments = ", ".join(f"{column} = :{column}" for column in values)
    tx.execute(
        f"UPDATE projects SET {assignments}, updated_at = :now WHERE id = :id",
        {**values, "now": tx.now, "id": project_id},
    )
    tx.record(
        events.PROJECT_UPDATED,
        events.project_updated(project=project_id, fields=changed),
        task_id=None,
        project_id=project_id,
    )
    return get_project(tx.conn, project_id)


def set_readme(tx: Tx, project_id: str, readme: str) -> dict[str, Any]:
    require_project(tx.conn, project_id)
    return update_project(tx, project_id, readme=readme)
