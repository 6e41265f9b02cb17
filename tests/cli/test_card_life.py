"""A whole card life driven through the real taskctl against a real taskd, as people and agents do it.

create → claim → heartbeat → ask → a human comment resumes → deliver with a report → review
approval → done → reopen → archive; once read as a person reads it, once as a script does.
"""

from __future__ import annotations

import re

from tests.cli.conftest import Taskctl, activity_count

WORKER = {"TASKLOOM_ACTOR": "worker-1", "TASKLOOM_ACTOR_KIND": "claude"}
REPORT = """\
## Summary

Writes the install guide the issue asked for.

## Changes

- docs/install.md: the new guide

## Verification

- make test: green
"""


def test_card_life_for_people(taskctl: Taskctl) -> None:
    out = taskctl.ok("project", "create", "demo", "--name", "Demo")
    assert "created project demo" in out.stdout and "DEMO-0001" in out.stdout

    created = taskctl.ok("task", "create", "-p", "demo", "Write the install guide", "-l", "docs,Needs Review",
                         "--priority", "high")
    assert created.stdout.strip() == "created DEMO-0001 [todo] Write the install guide"

    listing = taskctl.ok("task", "list", "-p", "demo").stdout.splitlines()
    assert re.split(r"\s{2,}", listing[0]) == ["ID", "STATUS", "PRIORITY", "KIND", "ASSIGNEE", "LABELS", "TITLE"]
    assert re.split(r"\s{2,}", listing[1]) == ["DEMO-0001", "todo", "high", "task", "-", "docs,needs-review",
                                               "Write the install guide"]
    # Aligned: every column starts at the same offset in the header and the row.
    assert listing[0].index("STATUS") == listing[1].index("todo")

    # The worker's side: claim (demo-1 is read as DEMO-0001), heartbeat, ask.
    assert "claimed DEMO-0001 [in_progress]" in taskctl.ok("task", "claim", "demo-1", env=WORKER).stdout
    assert taskctl.ok("task", "heartbeat", "DEMO-0001", env=WORKER).stdout.startswith("heartbeat DEMO-0001 at ")
    asked = taskctl.ok("task", "ask", "DEMO-0001", "-f", "-", input="Which shells must the guide cover?\n", env=WORKER)
    assert "[awaiting]" in asked.stdout
    shown = taskctl.ok("task", "show", "DEMO-0001").stdout
    assert re.search(r"^status\s+awaiting$", shown, re.M)
    assert re.search(r"^awaiting\s+Which shells must the guide cover\?$", shown, re.M)

    # A human answer resumes it.
    taskctl.ok("comment", "add", "DEMO-0001", "bash and zsh are enough")
    assert re.search(r"^status\s+todo$", taskctl.ok("task", "show", "DEMO-0001").stdout, re.M)
    comments = taskctl.ok("comment", "list", "DEMO-0001").stdout
    assert "question" in comments and "bash and zsh are enough" in comments

    # Deliver with the report on stdin; the worker cannot approve its own delivery.
    taskctl.ok("task", "claim", "DEMO-0001", env=WORKER)
    delivered = taskctl.ok("task", "deliver", "DEMO-0001", "--report-file", "-", input=REPORT, env=WORKER)
    assert "delivered DEMO-0001 [in_review]" in delivered.stdout
    before = activity_count(taskctl.data_dir)
    refused = taskctl.refused("APPROVAL_REQUIRED", "task", "move", "DEMO-0001", "done", env=WORKER)
    assert "hint: taskctl comment add DEMO-0001 --kind confirm" in refused.stderr
    assert activity_count(taskctl.data_dir) == before

    # A reviewer approves; done; reopened for a regression; canceled and archived.
    taskctl.ok("comment", "add", "DEMO-0001", "--kind", "confirm", "Reads well, approved.")
    assert "moved DEMO-0001 [done]" in taskctl.ok("task", "move", "DEMO-0001", "done").stdout
    reopened = taskctl.ok("task", "reopen", "DEMO-0001", "--reason", "zsh section is missing")
    assert "reopened DEMO-0001 [todo]" in reopened.stdout
    assert re.search(r"^round\s+2$", taskctl.ok("task", "show", "DEMO-0001").stdout, re.M)
    taskctl.ok("task", "move", "DEMO-0001", "canceled")
    assert "archived DEMO-0001 [canceled]" in taskctl.ok("task", "archive", "DEMO-0001").stdout
    assert "DEMO-0001" not in taskctl.ok("task", "list", "-p", "demo").stdout
    assert "DEMO-0001" in taskctl.ok("task", "list", "-p", "demo", "--archived").stdout

    history = taskctl.ok("activity", "list", "--task", "DEMO-0001").stdout
    for event in ("task_created", "task_claimed", "task_moved", "comment_added", "task_resumed",
                  "report_written", "task_delivered", "task_reopened", "task_archived"):
        assert event in history
    assert "task_heartbeat" in history  # the log keeps it; only the live stream drops it


def test_card_life_for_scripts(taskctl: Taskctl) -> None:
    project = taskctl.data("project", "create", "ops")
    assert project["id"] == "ops" and project["prefix"] == "OPS"

    task = taskctl.data("task", "create", "--project", "ops", "Rotate the logs", "--kind", "bug",
                        "--idem", "rotate-logs", "--meta", '{"source": "cron"}')
    assert (task["identifier"], task["status"], task["kind"], task["version"]) == ("OPS-0001", "todo", "bug", 1)
    assert task["meta"] == {"source": "cron"}
    again = taskctl.data("task", "create", "--project", "ops", "Rotate the logs (again)", "--idem", "rotate-logs")
    assert again["id"] == task["id"]  # idempotent create returns the live task

    claimed = taskctl.data("task", "claim", task["id"], env=WORKER)
    assert (claimed["status"], claimed["claimed_by_kind"], claimed["claimed_by"]) == ("in_progress", "claude", "worker-1")
    beat = taskctl.data("task", "heartbeat", "OPS-0001", env=WORKER)
    assert beat["heartbeat_at"] >= claimed["heartbeat_at"]
    asked = taskctl.data("task", "ask", "OPS-0001", "Keep a week or a month?", env=WORKER)
    assert (asked["status"], asked["awaiting_reason"]) == ("awaiting", "Keep a week or a month?")

    answer = taskctl.data("comment", "add", "OPS-0001", "A week.")
    assert (answer["kind"], answer["actor_kind"], answer["actor_id"]) == ("note", "human", "ann")
    assert taskctl.data("task", "show", "OPS-0001")["status"] == "todo"

    taskctl.data("task", "claim", "OPS-0001", env=WORKER)
    delivered = taskctl.data("task", "deliver", "OPS-0001", "--report-file", "-", input=REPORT, env=WORKER)
    assert (delivered["status"], delivered["delivered_by"]) == ("in_review", "worker-1")
    reports = taskctl.data("report", "list", "OPS-0001")["items"]
    assert [(r["round"], r["actor_id"]) for r in reports] == [(1, "worker-1")] and reports[0]["body"] == REPORT

    refused = taskctl("--json", "task", "move", "OPS-0001", "done", env=WORKER)
    assert refused.code == 1 and refused.stderr == ""
    error = refused.json
    assert error["ok"] is False and error["error"]["code"] == "APPROVAL_REQUIRED"
    assert set(error["error"]) == {"code", "message", "details", "hint"}

    taskctl.data("comment", "add", "OPS-0001", "--kind", "confirm", "Approved.")
    done = taskctl.data("task", "move", "OPS-0001", "done")
    assert done["status"] == "done"
    reopened = taskctl.data("task", "reopen", "OPS-0001", "--reason", "the rotation broke journald")
    assert (reopened["status"], reopened["delivery_round"]) == ("todo", 2)
    taskctl.data("task", "move", "OPS-0001", "canceled")
    archived = taskctl.data("task", "archive", "OPS-0001")
    assert archived["archived_at"] is not None

    page = taskctl.data("activity", "list", "--task", "OPS-0001", "--limit", "1000")
    events = [row["event"] for row in page["items"]]
    assert events[:2] == ["task_created", "task_claimed"]
    assert events[-4:] == ["task_moved", "task_reopened", "task_moved", "task_archived"]
    resumed = next(row for row in page["items"] if row["event"] == "task_resumed")
    assert resumed["changes"]["from"] == "awaiting" and resumed["actor_id"] == "ann"
    assert [row["revision"] for row in page["items"]] == sorted(row["revision"] for row in page["items"])
