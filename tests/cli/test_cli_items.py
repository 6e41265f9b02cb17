"""The CLI's rough edges, each driven through the real ``taskctl`` against a real ``taskd``.

History as data, ``--parent``, ``deliver -f``, reasons as arguments, ``--json`` usage errors,
the activity pager's hint, a resuming comment that says so, ``actors list``.
"""

from __future__ import annotations

import json
import re

from tests.cli.conftest import Taskctl, activity_count, new_project
from tests.support.board import REPORT

WORKER = {"TASKLOOM_ACTOR": "worker-1", "TASKLOOM_ACTOR_KIND": "claude"}


def test_task_history_prints_the_briefs_timeline_and_json_entries(tc: Taskctl) -> None:
    project = new_project(tc)
    ref = f"{project.upper()}-0001"
    tc.ok("task", "create", "-p", project, "Write the guide")
    tc.ok("task", "claim", ref, env=WORKER)
    for _ in range(3):
        tc.ok("task", "heartbeat", ref, env=WORKER)

    data = tc.data("task", "history", ref)
    assert data["task"]["identifier"] == ref
    assert [entry["event"] for entry in data["items"]] == ["task_created", "task_claimed", "task_heartbeat"]
    assert len(data["items"][2]["activity_ids"]) == 3
    assert data["items"][1]["actor"] == {"kind": "claude", "id": "worker-1"}

    # The human lines are the brief's History lines without the bullet.
    shown = tc.ok("task", "history", ref).stdout.splitlines()
    exported = json.loads(tc.ok("--json", "task", "history", ref).stdout)["data"]
    assert len(shown) == len(exported["items"]) == 3
    assert re.fullmatch(r"\S+ · r\d+ · worker-1 \(claude\) · claimed \(todo → in_progress\)", shown[1]), shown
    assert shown[2].endswith(f"3 heartbeats, last at {exported['items'][2]['last_at']}")

    refused = tc.refused("NOT_FOUND", "task", "history", f"{project.upper()}-0999")
    assert "not found" in refused.stderr
    before = activity_count(tc.data_dir)
    tc.ok("task", "history", ref)
    assert activity_count(tc.data_dir) == before


def test_create_with_parent_makes_the_child_of_an_epic_in_one_step(tc: Taskctl) -> None:
    project = new_project(tc)
    prefix = project.upper()
    tc.ok("task", "create", "-p", project, "The epic", "-k", "epic")
    made = tc.data("task", "create", "-p", project, "A child", "--parent", f"{project}-1")
    assert made["identifier"] == f"{prefix}-0002"
    relations = tc.data("relation", "list", f"{prefix}-0002")["items"]
    assert [(r["type"], r["other"]["identifier"]) for r in relations] == [("parent", f"{prefix}-0001")]
    assert "child of " + f"{prefix}-0001" in tc.ok("task", "history", f"{prefix}-0002").stdout

    # A parent that is not an epic refuses the whole create: no task, no number used, no row.
    tc.ok("task", "create", "-p", project, "Plain task")
    before = activity_count(tc.data_dir)
    refused = tc.refused("RELATION_INVALID", "task", "create", "-p", project, "Orphan?", "--parent", f"{prefix}-0003")
    assert "only an epic can be a parent" in refused.stderr
    assert activity_count(tc.data_dir) == before
    assert [t["identifier"] for t in tc.data("task", "list", "-p", project)["items"]] == [
        f"{prefix}-0001", f"{prefix}-0002", f"{prefix}-0003",
    ]
    tc.refused("NOT_FOUND", "task", "create", "-p", project, "Lost", "--parent", f"{prefix}-0999")
    assert activity_count(tc.data_dir) == before


def test_deliver_takes_the_report_with_f_like_report_write(tc: Taskctl) -> None:
    project = new_project(tc)
    ref = f"{project.upper()}-0001"
    tc.ok("task", "create", "-p", project, "Ship it")
    tc.ok("task", "claim", ref, env=WORKER)
    delivered = tc.ok("task", "deliver", ref, "-f", "-", input=REPORT, env=WORKER)
    assert f"delivered {ref} [in_review]" in delivered.stdout
    reports = tc.data("report", "list", ref)["items"]
    assert len(reports) == 1 and reports[0]["body"] == REPORT
    report_file = tc.cwd / "report.md"
    report_file.write_text(REPORT)
    other = f"{project.upper()}-0002"
    tc.ok("task", "create", "-p", project, "Ship that")
    tc.ok("task", "claim", other, env=WORKER)
    assert "[in_review]" in tc.ok("task", "deliver", other, "--report-file", str(report_file), env=WORKER).stdout


def test_waive_and_reopen_take_the_reason_as_an_argument_or_an_option(tc: Taskctl) -> None:
    project = new_project(tc)
    ref = f"{project.upper()}-0001"
    tc.ok("task", "create", "-p", project, "Tiny fix", "--acceptance-mode", "none")
    tc.ok("task", "claim", ref, env=WORKER)
    assert "[in_review]" in tc.ok("task", "waive", ref, "a one-line typo fix", env=WORKER).stdout
    assert tc.data("task", "show", ref)["waiver_reason"] == "a one-line typo fix"
    tc.ok("task", "move", ref, "done")
    assert "[todo]" in tc.ok("task", "reopen", ref, "the typo is back in the footer").stdout
    tc.ok("task", "claim", ref, env=WORKER)
    tc.ok("task", "waive", ref, "--reason", "same typo, other page", env=WORKER)
    tc.ok("task", "move", ref, "done")
    tc.ok("task", "reopen", ref, "--reason", "and a third time, sadly")
    reasons = [row["changes"]["reason"] for row in tc.data("activity", "list", "--task", ref)["items"]
               if row["event"] in ("report_waived", "task_reopened")]
    assert reasons == ["a one-line typo fix", "the typo is back in the footer", "same typo, other page",
                       "and a third time, sadly"]

    before = activity_count(tc.data_dir)
    both = tc("task", "reopen", ref, "two reasons given", "--reason", "which one wins?")
    assert both.code == 2 and "not both" in both.stderr
    neither = tc("task", "reopen", ref)
    assert neither.code == 2 and "the reason is missing" in neither.stderr
    assert activity_count(tc.data_dir) == before


def test_json_usage_errors_are_an_envelope_on_stdout_with_exit_2(tc: Taskctl) -> None:
    before = activity_count(tc.data_dir)
    for args in (("--json", "task", "claim"), ("task", "claim", "--json", "--nope"), ("--json", "task", "move", "X-1", "sideways"),
                 ("--json", "task", "reopen", "X-1")):
        run = tc(*args)
        assert run.code == 2, str(run)
        envelope = json.loads(run.stdout)
        assert envelope["ok"] is False and envelope["error"]["code"] == "USAGE", str(run)
        assert envelope["error"]["message"] and envelope["error"]["hint"].startswith("see taskctl ")
        assert envelope["error"]["details"]["usage"].startswith("Usage: taskctl ")
        assert run.stderr == ""
    # Without --json, click's own text on stderr, stdout clean, still 2.
    plain = tc("task", "claim")
    assert plain.code == 2 and plain.stdout == "" and "Missing argument" in plain.stderr
    assert activity_count(tc.data_dir) == before


def test_the_activity_pagers_hint_repeats_the_filters(tc: Taskctl) -> None:
    project = new_project(tc)
    for title in ("one", "two", "three"):
        tc.ok("task", "create", "-p", project, title)
    out = tc.ok("activity", "list", "-p", project, "-e", "task_created", "--limit", "2", "--order", "desc").stdout
    hint = next(line for line in out.splitlines() if line.startswith("next cursor: "))
    cursor = hint.split()[2]
    command = hint.split("(", 1)[1].rstrip(")")
    assert command == (f"taskctl activity list -p {project} -e task_created --order desc --limit 2 --cursor {cursor}")
    # The hint as given continues the same listing: the last of the three creates, no other rows.
    rest = tc.data(*command.split()[1:])
    assert [row["event"] for row in rest["items"]] == ["task_created"] and rest["next_cursor"] is None


def test_a_human_comment_that_resumes_an_awaiting_card_says_so(tc: Taskctl) -> None:
    project = new_project(tc)
    ref = f"{project.upper()}-0001"
    tc.ok("task", "create", "-p", project, "Pick the shells")
    tc.ok("task", "claim", ref, env=WORKER)
    tc.ok("task", "ask", ref, "Which shells?", env=WORKER)
    out = tc.ok("comment", "add", ref, "bash and zsh").stdout
    assert f"resumed {ref}: awaiting → todo" in out
    assert tc.data("task", "show", ref)["status"] == "todo"
    # A comment that resumes nothing says nothing of the kind; the JSON says which is which.
    assert "resumed" not in tc.ok("comment", "add", ref, "thanks").stdout
    assert tc.data("comment", "add", ref, "noted")["resumed"] is False
    tc.ok("task", "claim", ref, env=WORKER)
    tc.ok("task", "ask", ref, "And fish?", env=WORKER)
    assert tc.data("comment", "add", ref, "no fish")["resumed"] is True
    # An agent's comment never resumes (SPEC §4.4), and the CLI does not claim it did.
    tc.ok("task", "claim", ref, env=WORKER)
    tc.ok("task", "ask", ref, "Really no fish?", env=WORKER)
    agent = tc.ok("comment", "add", ref, "asking myself", env=WORKER).stdout
    assert "resumed" not in agent and tc.data("task", "show", ref)["status"] == "awaiting"


def test_actors_list_works_as_actors_does(tc: Taskctl) -> None:
    project = new_project(tc)
    tc.ok("task", "create", "-p", project, "Assigned", "--assignee", "codex:bot-7")
    listed = tc.data("actors", "list", "--kind", "codex")["items"]
    assert ("codex", "bot-7") in [(a["kind"], a["id"]) for a in listed]
    assert tc.data("actors", "--kind", "codex")["items"] == listed
    human = tc.ok("actors", "list", "--kind", "codex").stdout
    assert "bot-7" in human


def test_a_uuid_prefix_names_a_task_from_the_shell(tc: Taskctl) -> None:
    project = new_project(tc)
    made = tc.data("task", "create", "-p", project, "Find me by my id")
    prefix = made["id"][:8]
    assert tc.data("task", "show", prefix)["identifier"] == made["identifier"]
    assert "claimed " + made["identifier"] in tc.ok("task", "claim", prefix, env=WORKER).stdout
    assert tc.data("task", "history", prefix.upper())["task"]["id"] == made["id"]
    short = tc.refused("NOT_FOUND", "task", "show", made["id"][:3])  # below the shortest prefix looked up
    assert made["id"][:3] in short.stderr
