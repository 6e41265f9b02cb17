"""``taskctl task``: create, list, show, update and every lifecycle verb of a task (SPEC §4.4)."""

from __future__ import annotations

import os
from typing import Any

import click

from shared import domain, limits

from .command import (
    REF,
    Invocation,
    actor_ref,
    command,
    current,
    drop_none,
    json_object,
    read_text,
    text_or_file,
)
from .http import paginate, segment
from .render import TASK_COLUMNS, next_cursor, task_fields, task_line

PROJECT_HELP = "Project id (default: TASKLOOM_PROJECT)."


@click.group()
def task() -> None:
    """Create, list, claim, move, ask about and deliver tasks.

    A task is named by REF: its identifier (DEMO-0001) or its uuid.
    """


def _path(ref: str, verb: str = "") -> str:
    return f"/tasks/{segment(ref)}" + (f"/{verb}" if verb else "")


def _split(values: tuple[str, ...]) -> list[str]:
    """``-l a -l b,c`` → ``[a, b, c]``."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def project_for_create(inv: Invocation, given: str | None) -> str:
    """--project / TASKLOOM_PROJECT, else the project whose workspace holds the current directory."""
    if given:
        return given
    projects = inv.call("GET", "/projects")["items"]
    here = os.path.realpath(os.getcwd())
    matches = [
        p for p in projects
        if p.get("workspace_path") and (here == p["workspace_path"] or here.startswith(p["workspace_path"].rstrip("/") + "/"))
    ]
    if matches:
        return str(max(matches, key=lambda p: len(p["workspace_path"]))["id"])
    known = ", ".join(p["id"] for p in projects) or "none yet: taskctl project create ID"
    raise click.UsageError(f"which project? pass --project or set TASKLOOM_PROJECT (projects: {known})")


@command(task, "create")
@click.argument("title")
@click.option("-p", "--project", envvar="TASKLOOM_PROJECT", help=PROJECT_HELP + " Else the project whose workspace holds this directory.")
@click.option("-d", "--description", help="Markdown description.")
@click.option("--description-file", metavar="FILE|-", help="Read the description from FILE, or stdin for -.")
@click.option("-k", "--kind", type=click.Choice(domain.KINDS), help="task (default), epic, bug or review.")
@click.option("--priority", type=click.Choice(domain.PRIORITIES), help="Default medium.")
@click.option("--status", type=click.Choice(("backlog", "todo")), help="Start in backlog or todo (default todo).")
@click.option("-l", "--label", "labels", multiple=True, help="A label; repeat or separate with commas.")
@click.option("--assignee", metavar="[KIND:]ID", help="Assign it (kind human unless given).")
@click.option("--reporter", metavar="[KIND:]ID", help="Who reported it.")
@click.option("--acceptance-mode", type=click.Choice(domain.ACCEPTANCE_MODES), help="review (default) or none.")
@click.option("--meta", metavar="JSON", help="A JSON object of free-form metadata.")
@click.option("--idem", metavar="KEY", help="Idempotency key: a live task holding it is returned instead.")
@click.option("--parent", type=REF, metavar="EPIC", help="Create it as a child of this epic (one transaction).")
def create(title: str, project: str | None, description: str | None, description_file: str | None, kind: str | None,
           priority: str | None, status: str | None, labels: tuple[str, ...], assignee: str | None,
           reporter: str | None, acceptance_mode: str | None, meta: str | None, idem: str | None,
           parent: str | None) -> None:
    """Create a task titled TITLE."""
    inv = current()
    description = text_or_file(description, description_file, "description", required=False)
    assignee_pair = actor_ref(assignee, "--assignee")
    reporter_pair = actor_ref(reporter, "--reporter")
    body = drop_none({
        "project": project_for_create(inv, project),
        "title": title,
        "description": description,
        "kind": kind,
        "priority": priority,
        "status": status,
        "labels": _split(labels) or None,
        "assignee_kind": assignee_pair[0] if assignee_pair else None,
        "assignee_id": assignee_pair[1] if assignee_pair else None,
        "reporter_kind": reporter_pair[0] if reporter_pair else None,
        "reporter_id": reporter_pair[1] if reporter_pair else None,
        "acceptance_mode": acceptance_mode,
        "meta": json_object(meta, "--meta"),
        "idem": idem,
        "parent": parent,
    })
    reply = inv.http().request_raw("POST", "/api/v1/tasks", json=body)
    if reply.status >= 400:
        raise inv.http().refusal(reply)
    created = reply.status == 201
    inv.out.result(reply.body, lambda t: task_line(inv.out, "created" if created else "exists (idem key)", t))


@command(task, "list")
@click.option("-p", "--project", envvar="TASKLOOM_PROJECT", help=PROJECT_HELP)
@click.option("-s", "--status", "statuses", multiple=True, help="Only these statuses; repeat or separate with commas.")
@click.option("--assignee", metavar="ID", help="Only tasks assigned to this actor id.")
@click.option("--mine", is_flag=True, help="Only tasks assigned to me (the acting actor).")
@click.option("-l", "--label", help="Only tasks carrying this label.")
@click.option("-k", "--kind", type=click.Choice(domain.KINDS))
@click.option("--archived", is_flag=True, help="Include archived tasks.")
@click.option("--limit", type=click.IntRange(1, limits.PAGE_LIMIT_MAX), default=limits.PAGE_LIMIT_DEFAULT, show_default=True,
              help="Page size.")
@click.option("--cursor", help="Continue from a previous page's next cursor.")
@click.option("--all", "all_pages", is_flag=True, help="Follow the cursor through every page.")
def list_(project: str | None, statuses: tuple[str, ...], assignee: str | None, mine: bool, label: str | None,
          kind: str | None, archived: bool, limit: int, cursor: str | None, all_pages: bool) -> None:
    """List tasks in creation order, a page at a time."""
    inv = current()
    wanted = _split(statuses)
    bad = [s for s in wanted if s not in domain.STATUSES]
    if bad:
        raise click.BadParameter(f"unknown status {', '.join(bad)}; choose from {', '.join(domain.STATUSES)}",
                                 param_hint="'--status'")
    if mine and assignee:
        raise click.UsageError("--mine and --assignee name the assignee twice; give one")
    query = drop_none({
        "project": project, "status": wanted or None, "assignee": inv.who().id if mine else assignee,
        "label": label, "kind": kind, "archived": True if archived else None, "limit": limit, "cursor": cursor,
    })
    if all_pages:
        page: dict[str, Any] = {"items": list(paginate(inv.http(), "/api/v1/tasks", query)), "next_cursor": None}
    else:
        page = inv.call("GET", "/tasks", query=query)

    def human(page: dict[str, Any]) -> None:
        inv.out.table(page["items"], TASK_COLUMNS, empty="no tasks")
        next_cursor(inv.out, page, "taskctl task list")

    inv.out.result(page, human)


@command(task, "show")
@click.argument("ref", type=REF)
def show(ref: str) -> None:
    """Show one task."""
    inv = current()
    inv.out.result(inv.call("GET", _path(ref)), lambda t: task_fields(inv.out, t))


@command(task, "history")
@click.argument("ref", type=REF)
def history(ref: str) -> None:
    """A task's history, oldest first: the timeline its brief's History section shows.

    With --json: {"task": {id, identifier, status, revision}, "items": [entry, …]}, each entry
    {at, revision, actor: {kind, id}, event, text, changes, activity_ids, last_at} (docs/agents.md).
    """
    inv = current()

    def human(data: dict[str, Any]) -> None:
        if not data["items"]:
            inv.out.note(f"no history for {data['task']['identifier']}")
        for entry in data["items"]:
            revision = f" · r{entry['revision']}" if entry.get("revision") is not None else ""
            actor = entry["actor"]
            inv.out.echo(f"{entry['at']}{revision} · {actor['id']} ({actor['kind']}) · {entry['text']}")

    inv.out.result(inv.call("GET", _path(ref, "history")), human)


@command(task, "update")
@click.argument("ref", type=REF)
@click.option("--title")
@click.option("-d", "--description", help="Replace the description.")
@click.option("--description-file", metavar="FILE|-", help="Replace the description with FILE, or stdin for -.")
@click.option("--priority", type=click.Choice(domain.PRIORITIES))
@click.option("-k", "--kind", type=click.Choice(domain.KINDS))
@click.option("-l", "--label", "labels", multiple=True, help="Replace the labels (repeat or separate with commas).")
@click.option("--add-label", multiple=True, help="Add a label, keeping the others.")
@click.option("--remove-label", multiple=True, help="Remove a label, keeping the others.")
@click.option("--assignee", metavar="[KIND:]ID", help="Assign it.")
@click.option("--unassign", is_flag=True, help="Clear the assignee.")
@click.option("--reporter", metavar="[KIND:]ID")
@click.option("--meta", metavar="JSON", help="Replace the metadata with this JSON object.")
@click.option("--if-version", type=click.IntRange(min=1), metavar="N", help="Refuse (VERSION_CONFLICT) unless the task is at this version.")
def update(ref: str, title: str | None, description: str | None, description_file: str | None, priority: str | None,
           kind: str | None, labels: tuple[str, ...], add_label: tuple[str, ...], remove_label: tuple[str, ...],
           assignee: str | None, unassign: bool, reporter: str | None, meta: str | None, if_version: int | None) -> None:
    """Change a task's fields (never its status: use move, claim, deliver…)."""
    inv = current()
    if labels and (add_label or remove_label):
        raise click.UsageError("--label replaces the labels; do not mix it with --add-label/--remove-label")
    if assignee and unassign:
        raise click.UsageError("--assignee and --unassign contradict each other")
    body: dict[str, Any] = drop_none({
        "title": title,
        "description": text_or_file(description, description_file, "description", required=False),
        "priority": priority,
        "kind": kind,
        "meta": json_object(meta, "--meta"),
        "if_version": if_version,
    })
    if labels:
        body["labels"] = _split(labels)
    if add_label or remove_label:
        # Read-modify-write guarded by the version read, so a concurrent edit is not lost.
        task_now = inv.call("GET", _path(ref))
        drop = set(_split(remove_label))
        merged = [name for name in task_now["labels"] if name not in drop]
        merged += [name for name in _split(add_label) if name not in merged]
        body["labels"] = merged
        body.setdefault("if_version", task_now["version"])
    pair = actor_ref(assignee, "--assignee")
    if pair:
        body["assignee_kind"], body["assignee_id"] = pair
    if unassign:
        body["assignee_kind"] = body["assignee_id"] = None
    reporter_pair = actor_ref(reporter, "--reporter")
    if reporter_pair:
        body["reporter_kind"], body["reporter_id"] = reporter_pair
    if not set(body) - {"if_version"}:
        raise click.UsageError("nothing to update: give at least one field option (see --help)")
    inv.out.result(inv.call("PATCH", _path(ref), body), lambda t: task_line(inv.out, "updated", t))


IF_VERSION = click.option("--if-version", type=click.IntRange(min=1), metavar="N",
                          help="Refuse (VERSION_CONFLICT) unless the task is at this version.")


@command(task, "claim")
@click.argument("ref", type=REF)
@click.option("--steal", is_flag=True, help="Take a task assigned to someone else (needs --reason).")
@click.option("--reason", help="Why (at least 8 characters when stealing).")
@IF_VERSION
def claim(ref: str, steal: bool, reason: str | None, if_version: int | None) -> None:
    """Claim a task: todo → in_progress, or re-claim your own."""
    if steal and not reason:
        raise click.UsageError("--steal needs --reason (at least 8 characters)")
    inv = current()
    body = drop_none({"steal": True if steal else None, "reason": reason, "if_version": if_version})
    inv.out.result(inv.call("POST", _path(ref, "claim"), body), lambda t: task_line(inv.out, "claimed", t))


@command(task, "heartbeat")
@click.argument("ref", type=REF)
def heartbeat(ref: str) -> None:
    """Tell the board you are still working on a claimed task."""
    inv = current()
    inv.out.result(inv.call("POST", _path(ref, "heartbeat"), {}),
                   lambda t: inv.out.echo(f"heartbeat {t['identifier']} at {t['heartbeat_at']}"))


@command(task, "move")
@click.argument("ref", type=REF)
@click.argument("status", type=click.Choice(domain.STATUSES), metavar="STATUS")
@click.option("--reason", help="Why (stored as the awaiting or blocked reason).")
@IF_VERSION
def move(ref: str, status: str, reason: str | None, if_version: int | None) -> None:
    """Move a task to STATUS (todo → in_progress is a claim; in_review needs deliver or waive)."""
    inv = current()
    body = drop_none({"to": status, "reason": reason, "if_version": if_version})
    inv.out.result(inv.call("POST", _path(ref, "move"), body), lambda t: task_line(inv.out, "moved", t))


@command(task, "ask")
@click.argument("ref", type=REF)
@click.argument("question", required=False)
@click.option("-f", "--file", "source", metavar="FILE|-", help="Read the question from FILE, or stdin for -.")
@IF_VERSION
def ask(ref: str, question: str | None, source: str | None, if_version: int | None) -> None:
    """Ask a human a QUESTION about a task you hold: it waits in awaiting until answered."""
    inv = current()
    text = text_or_file(question, source, "question")
    body = drop_none({"body": text, "if_version": if_version})
    inv.out.result(inv.call("POST", _path(ref, "ask"), body), lambda t: task_line(inv.out, "asked about", t))


def reason_given(argument: str | None, option: str | None) -> str:
    """The reason as the argument or as ``--reason``: one of them, not both."""
    if argument is not None and option is not None:
        raise click.UsageError("give the reason as the argument or with --reason, not both")
    reason = argument if argument is not None else option
    if reason is None:
        raise click.UsageError(f"the reason is missing: give it as the argument or with --reason "
                               f"(at least {domain.MIN_REASON_CHARS} characters)")
    return reason


@command(task, "reopen")
@click.argument("ref", type=REF)
@click.argument("reason_text", metavar="[REASON]", required=False)
@click.option("--reason", help="Why it reopens (at least 8 characters); or give it as the argument.")
@IF_VERSION
def reopen(ref: str, reason_text: str | None, reason: str | None, if_version: int | None) -> None:
    """Reopen a done or canceled task (back to todo, next delivery round), saying why."""
    inv = current()
    body = drop_none({"reason": reason_given(reason_text, reason), "if_version": if_version})
    inv.out.result(inv.call("POST", _path(ref, "reopen"), body), lambda t: task_line(inv.out, "reopened", t))


@command(task, "archive")
@click.argument("ref", type=REF)
@IF_VERSION
def archive(ref: str, if_version: int | None) -> None:
    """Archive a done or canceled task (hidden from lists; labels released)."""
    inv = current()
    body = drop_none({"if_version": if_version})
    inv.out.result(inv.call("POST", _path(ref, "archive"), body), lambda t: task_line(inv.out, "archived", t))


@command(task, "deliver")
@click.argument("ref", type=REF)
@click.option("-f", "--report-file", "--file", "report_file", metavar="FILE|-",
              help="The delivery report (markdown), or - for stdin (as `report write -f`).")
@click.option("--report-id", help="Deliver with a report already written this round.")
@IF_VERSION
def deliver(ref: str, report_file: str | None, report_id: str | None, if_version: int | None) -> None:
    """Deliver a task for review: a report for this round and in_review, together.

    Without --report-file or --report-id the latest report of this round is used.
    `taskctl report template` prints a report the board accepts.
    """
    if report_file and report_id:
        raise click.UsageError("give --report-file or --report-id, not both")
    inv = current()
    body = drop_none({
        "body": read_text(report_file, "report") if report_file else None,
        "report_id": report_id,
        "if_version": if_version,
    })
    inv.out.result(inv.call("POST", _path(ref, "deliver"), body), lambda t: task_line(inv.out, "delivered", t))


@command(task, "waive")
@click.argument("ref", type=REF)
@click.argument("reason_text", metavar="[REASON]", required=False)
@click.option("--reason", help="Why no report (at least 8 characters); or give it as the argument.")
@IF_VERSION
def waive(ref: str, reason_text: str | None, reason: str | None, if_version: int | None) -> None:
    """Move a task to in_review without a report; the reason is stamped on it."""
    inv = current()
    body = drop_none({"reason": reason_given(reason_text, reason), "if_version": if_version})
    inv.out.result(inv.call("POST", _path(ref, "waive"), body), lambda t: task_line(inv.out, "waived report for", t))


@command(task, "candidates")
@click.option("-p", "--project", envvar="TASKLOOM_PROJECT", help=PROJECT_HELP)
@click.option("-l", "--label", help="Only tasks carrying this label.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="At most this many.")
def candidates(project: str | None, label: str | None, limit: int) -> None:
    """Tasks you could claim now, most urgent first: the board's ready rule, for you."""
    from .ready_cmd import ready_tasks

    inv = current()
    me = inv.who()
    ranked = ready_tasks(inv, project=project, actor=me.id, label=label, limit=limit)
    inv.out.result({"items": ranked, "next_cursor": None},
                   lambda page: inv.out.table(page["items"], TASK_COLUMNS, empty=f"nothing for {me} to claim"))


