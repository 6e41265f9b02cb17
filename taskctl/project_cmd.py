"""``taskctl project``: create, list, show, update and the readme (SPEC §4.2)."""

from __future__ import annotations

import os
from typing import Any

import click

from .command import command, current, drop_none, json_object, read_text
from .http import segment
from .output import Column
from .render import short_time

PROJECT_COLUMNS = [
    Column("ID", lambda p: p.get("id")),
    Column("PREFIX", lambda p: p.get("prefix")),
    Column("NAME", lambda p: p.get("name")),
    Column("WORKSPACE", lambda p: p.get("workspace_path"), elastic=True),
]


@click.group()
def project() -> None:
    """Create, list, show and update projects.

    A project id is a slug (a-z, 0-9, '-'); its upper case, without dashes, prefixes the
    identifiers of its tasks (project demo → DEMO-0001).
    """


def _workspace(path: str | None) -> str | None:
    return os.path.realpath(path) if path else None


def project_fields(inv: Any, p: dict[str, Any]) -> None:
    inv.out.fields(
        [
            ("id", p.get("id")),
            ("name", p.get("name")),
            ("prefix", p.get("prefix")),
            ("workspace", p.get("workspace_path")),
            ("settings", p.get("settings") or None),
            ("meta", p.get("meta") or None),
            ("revision", p.get("revision")),
            ("created", short_time(p.get("created_at"))),
            ("updated", short_time(p.get("updated_at"))),
        ]
    )


@command(project, "create")
@click.argument("project_id", metavar="ID")
@click.option("--name", help="Display name (default: the id).")
@click.option("--workspace", type=click.Path(file_okay=False), help="The project's working directory (made absolute).")
@click.option("--readme-file", metavar="FILE|-", help="The readme (markdown), or - for stdin.")
@click.option("--meta", metavar="JSON", help="A JSON object of free-form metadata.")
@click.option("--settings", metavar="JSON", help="A JSON object of settings (WIP limits, monitors).")
def create(project_id: str, name: str | None, workspace: str | None, readme_file: str | None, meta: str | None,
           settings: str | None) -> None:
    """Create the project ID."""
    inv = current()
    body = drop_none({
        "id": project_id,
        "name": name,
        "workspace_path": _workspace(workspace),
        "readme": read_text(readme_file, "readme") if readme_file else None,
        "meta": json_object(meta, "--meta"),
        "settings": json_object(settings, "--settings"),
    })
    created = inv.call("POST", "/projects", body)
    inv.out.result(created, lambda p: inv.out.echo(f"created project {p['id']} (tasks are {p['prefix']}-0001, …)"))


@command(project, "list")
def list_() -> None:
    """List projects."""
    inv = current()
    inv.out.result(inv.call("GET", "/projects"),
                   lambda page: inv.out.table(page["items"], PROJECT_COLUMNS, empty="no projects yet"))


@command(project, "show")
@click.argument("project_id", metavar="ID")
def show(project_id: str) -> None:
    """Show a project."""
    inv = current()
    inv.out.result(inv.call("GET", f"/projects/{segment(project_id)}"), lambda p: project_fields(inv, p))


@command(project, "update")
@click.argument("project_id", metavar="ID")
@click.option("--name")
@click.option("--workspace", type=click.Path(file_okay=False), help="Set the working directory.")
@click.option("--no-workspace", is_flag=True, help="Clear the working directory.")
@click.option("--meta", metavar="JSON", help="Replace the metadata with this JSON object.")
@click.option("--settings", metavar="JSON", help="Replace the settings with this JSON object.")
def update(project_id: str, name: str | None, workspace: str | None, no_workspace: bool, meta: str | None,
           settings: str | None) -> None:
    """Change a project's name, workspace, metadata or settings."""
    if workspace and no_workspace:
        raise click.UsageError("--workspace and --no-workspace contradict each other")
    inv = current()
    body: dict[str, Any] = drop_none({
        "name": name,
        "workspace_path": _workspace(workspace),
        "meta": json_object(meta, "--meta"),
        "settings": json_object(settings, "--settings"),
    })
    if no_workspace:
        body["workspace_path"] = None
    if not body:
        raise click.UsageError("nothing to update: give at least one option (see --help)")
    updated = inv.call("PATCH", f"/projects/{segment(project_id)}", body)
    inv.out.result(updated, lambda p: inv.out.echo(f"updated project {p['id']}"))


@command(project, "readme")
@click.argument("project_id", metavar="ID")
@click.option("--set", "source", metavar="FILE|-", help="Replace the readme with FILE, or stdin for -.")
def readme(project_id: str, source: str | None) -> None:
    """Print a project's readme, or replace it with --set."""
    inv = current()
    if source is None:
        found = inv.call("GET", f"/projects/{segment(project_id)}")
        inv.out.result({"id": found["id"], "readme": found["readme"]}, lambda r: inv.out.echo(r["readme"], nl=False))
        return
    updated = inv.call("PUT", f"/projects/{segment(project_id)}/readme", {"readme": read_text(source, "readme")})
    inv.out.result(updated, lambda p: inv.out.echo(f"updated the readme of {p['id']}"))
