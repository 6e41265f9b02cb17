"""Every other group of SPEC §10 through the real taskctl: what it prints and what it writes."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from tests.cli.conftest import Taskctl, activity_count, new_project


def rows(text: str) -> list[list[str]]:
    """A printed table as cells (columns are separated by two or more spaces)."""
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines() if line.strip()]


def test_project_show_update_and_readme(tc: Taskctl, tmp_path: Path) -> None:
    project = new_project(tc, "proj")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    updated = tc.data("project", "update", project, "--name", "Project X", "--workspace", str(workspace),
                      "--settings", '{"wip": {"in_progress": 3}}')
    assert (updated["name"], updated["workspace_path"]) == ("Project X", str(workspace.resolve()))
    assert updated["settings"] == {"wip": {"in_progress": 3}}
    tc.ok("project", "readme", project, "--set", "-", input="# Project X\n\nHow we work.\n")
    assert tc.ok("project", "readme", project).stdout == "# Project X\n\nHow we work.\n"
    shown = tc.ok("project", "show", project).stdout
    assert re.search(r"^name\s+Project X$", shown, re.M)
    listed = rows(tc.ok("project", "list").stdout)
    assert listed[0] == ["ID", "PREFIX", "NAME", "WORKSPACE"]
    assert [project, project.upper(), "Project X", str(workspace.resolve())] in listed
    # Inside the workspace, task create needs no --project.
    inside = workspace / "sub"
    inside.mkdir()
    made = Taskctl(tc.env, inside, tc.runs).data("task", "create", "Filed from the workspace")
    assert made["project_id"] == project


def test_update_labels_assignee_and_candidates(tc: Taskctl) -> None:
    project = new_project(tc, "cand")
    make = lambda *a: tc.data("task", "create", "-p", project, *a)["identifier"]  # noqa: E731
    low = make("Low one", "--priority", "low")
    urgent = make("Urgent one", "--priority", "urgent", "-l", "ops")
    theirs = make("Someone else's", "--priority", "urgent", "--assignee", "bob")
    epic = make("An epic", "--kind", "epic", "--priority", "urgent")
    mine = make("Mine", "--priority", "high", "--assignee", "claude:worker-1")
    ranked = tc.data("task", "candidates", "-p", project, env={"TASKLOOM_ACTOR": "worker-1", "TASKLOOM_ACTOR_KIND": "claude"})
    assert [t["identifier"] for t in ranked["items"]] == [urgent, mine, low]
    assert theirs not in str(ranked) and epic not in str(ranked)
    for_ann = tc.ok("task", "candidates", "-p", project).stdout
    assert [r[0] for r in rows(for_ann)[1:]] == [urgent, low]

    labelled = tc.data("task", "update", urgent, "--add-label", "Infra", "--remove-label", "ops")
    assert labelled["labels"] == ["infra"] and labelled["version"] == 2
    assigned = tc.data("task", "update", low, "--assignee", "claude:worker-2", "--title", "Low, renamed")
    assert (assigned["assignee_kind"], assigned["assignee_id"], assigned["title"]) == ("claude", "worker-2", "Low, renamed")
    cleared = tc.data("task", "update", low, "--unassign")
    assert cleared["assignee_id"] is None
    row = tc.data("activity", "list", "--task", low, "--event", "task_updated", "--order", "desc", "--limit", "1")
    assert row["items"][0]["changes"]["fields"] == ["assignee_kind", "assignee_id"]

    assigned_list = tc.data("task", "list", "-p", project, "--assignee", "bob")["items"]
    assert [t["identifier"] for t in assigned_list] == [theirs]
    mine_list = tc.data("task", "list", "-p", project, "--mine", env={"TASKLOOM_ACTOR": "worker-1"})["items"]
    assert [t["identifier"] for t in mine_list] == [mine]


def test_task_list_pages_with_a_cursor(tc: Taskctl) -> None:
    project = new_project(tc, "page")
    made = [tc.data("task", "create", "-p", project, f"Task {n}")["identifier"] for n in range(3)]
    first = tc.ok("task", "list", "-p", project, "--limit", "2").stdout
    cursor = re.search(r"^next cursor: (\S+)", first, re.M).group(1)  # type: ignore[union-attr]
    second = tc.data("task", "list", "-p", project, "--limit", "2", "--cursor", cursor)
    assert [t["identifier"] for t in second["items"]] == made[2:] and second["next_cursor"] is None
    everything = tc.data("task", "list", "-p", project, "--limit", "1", "--all")
    assert [t["identifier"] for t in everything["items"]] == made


def test_relations_add_list_remove(tc: Taskctl) -> None:
    project = new_project(tc, "rel")
    first = tc.data("task", "create", "-p", project, "First")["identifier"]
    second = tc.data("task", "create", "-p", project, "Second")["identifier"]
    added = tc.ok("relation", "add", first, "blocks", second)
    assert f"added {first} blocks {second}" in added.stdout
    listed = tc.data("relation", "list", second)["items"]
    assert [(r["type"], r["direction"], r["other"]["identifier"]) for r in listed] == [("blocks", "incoming", first)]
    table = rows(tc.ok("relation", "list", first).stdout)
    assert table[1][1:4] == ["blocks", "outgoing", second]
    before = activity_count(tc.data_dir)
    tc.refused("RELATION_EXISTS", "relation", "add", first, "blocks", second)
    assert activity_count(tc.data_dir) == before
    removed = tc.ok("relation", "remove", first, listed[0]["id"])
    assert "removed blocks" in removed.stdout
    assert tc.data("relation", "list", first)["items"] == []


def test_acceptance_add_list_prune_and_mode(tc: Taskctl) -> None:
    project = new_project(tc, "acc")
    ref = tc.data("task", "create", "-p", project, "With criteria")["identifier"]
    view = tc.data("acceptance", "add", ref, "Docs updated", "Tests green")
    assert [i["text"] for i in view["items"]] == ["Docs updated", "Tests green"] and view["mode"] == "review"
    table = tc.ok("acceptance", "list", ref).stdout
    assert table.startswith("mode review, list revision 1")
    before = activity_count(tc.data_dir)
    tc.refused("VALIDATION_FAILED", "acceptance", "prune", ref, "1", "--reason", "meh")
    assert activity_count(tc.data_dir) == before
    pruned = tc.data("acceptance", "prune", ref, "1", "--reason", "docs are out of scope")
    assert [i["text"] for i in pruned["items"]] == ["Tests green"]
    assert tc("acceptance", "prune", ref, "9", "--reason", "not there at all").code == 2
    moded = tc.data("acceptance", "mode", ref, "none", "--reason", "a trivial chore")
    assert moded["mode"] == "none"
    events = [r["event"] for r in tc.data("activity", "list", "--task", ref)["items"]]
    assert events[-3:] == ["acceptance_changed", "acceptance_pruned", "acceptance_override"]


def test_sessions_register_resume_list_close(tc: Taskctl) -> None:
    project = new_project(tc, "ses")
    ref = tc.data("task", "create", "-p", project, "Worked by an agent")["identifier"]
    agent = {"TASKLOOM_ACTOR": "worker-1", "TASKLOOM_ACTOR_KIND": "claude"}
    first = tc.ok("session", "register", ref, "--phase", "planning", env=agent)
    assert first.stdout.startswith("registered session ses_")
    again = tc.data("session", "register", ref, "--phase", "coding", env=agent)
    assert again["phase"] == "coding" and again["id"] in first.stdout  # a resume keeps the id
    table = rows(tc.ok("session", "list", ref).stdout)
    assert table[1][:5] == [again["id"], "claude:worker-1", "0", "coding", "open"]
    closed = tc.data("session", "close", ref, again["id"], "--status", "completed", env=agent)
    assert closed["status"] == "completed"
    assert tc.data("session", "list", ref, "--status", "open")["items"] == []


def test_attachments_upload_download_list_remove(tc: Taskctl, tmp_path: Path) -> None:
    project = new_project(tc, "att")
    ref = tc.data("task", "create", "-p", project, "With a file")["identifier"]
    source = tmp_path / "notes.txt"
    payload = "line\n" * 40_000  # 200 KB: several upload chunks
    source.write_text(payload)
    added = tc.data("attachment", "upload", ref, str(source))
    assert (added["filename"], added["size"], added["content_type"]) == ("notes.txt", len(payload), "text/plain")
    listed = rows(tc.ok("attachment", "list", ref).stdout)
    assert listed[1][0] == added["id"] and listed[1][-1] == "notes.txt"

    out_dir = tmp_path / "down"
    out_dir.mkdir()
    fetched = Taskctl(tc.env, out_dir, tc.runs).ok("attachment", "download", added["id"])
    assert (out_dir / "notes.txt").read_text() == payload and "wrote notes.txt" in fetched.stdout
    again = Taskctl(tc.env, out_dir, tc.runs).refused("FILE_EXISTS", "attachment", "download", added["id"])
    assert "--force" in again.stderr
    piped = tc.ok("attachment", "download", added["id"], "--out", "-")
    assert piped.stdout == payload

    replacement = tmp_path / "notes-v2.md"
    replacement.write_text("# v2\n")
    replaced = tc.data("attachment", "replace", added["id"], str(replacement), "--name", "notes.md")
    assert (replaced["filename"], replaced["size"]) == ("notes.md", 5)
    removed = tc.ok("attachment", "remove", added["id"])
    assert "removed notes.md" in removed.stdout
    assert tc.data("attachment", "list", ref)["items"] == []
    tc.refused("NOT_FOUND", "attachment", "download", added["id"])


def test_reports_write_list_and_template(tc: Taskctl) -> None:
    template = tc.ok("report", "template").stdout
    assert template.startswith("## Summary") and "<replace:" in template
    assert tc.data("report", "template")["required_sections"] == ["Summary", "Changes", "Verification"]
    project = new_project(tc, "rep")
    ref = tc.data("task", "create", "-p", project, "Reported")["identifier"]
    tc.ok("task", "claim", ref)
    before = activity_count(tc.data_dir)
    refused = tc.refused("REPORT_INVALID", "report", "write", ref, "-f", "-", input=template)
    assert "placeholder" in refused.stderr
    assert activity_count(tc.data_dir) == before
    filled = re.sub(r"<replace:[^>]*>", "done", template)
    written = tc.data("report", "write", ref, "-f", "-", input=filled)
    assert written["round"] == 1
    assert tc.data("task", "deliver", ref)["status"] == "in_review"  # the latest report of the round
    listing = rows(tc.ok("report", "list", ref).stdout)
    assert listing[1][:2] == [written["id"], "1"]
    assert filled.strip() in tc.ok("report", "list", ref, "--full").stdout


def test_labels_and_actors(tc: Taskctl) -> None:
    project = new_project(tc, "lab")
    tc.ok("task", "create", "-p", project, "Labelled", "-l", "alpha", "-l", "beta", "--assignee", "codex:bot-1")
    listed = tc.data("labels", "list", "-p", project)["items"]
    assert [(label["name"], label["use_count"]) for label in listed] == [("alpha", 1), ("beta", 1)]
    table = rows(tc.ok("labels", "list", "-p", project).stdout)
    assert table[0][:3] == ["PROJECT", "NAME", "USES"] and table[1][:3] == [project, "alpha", "1"]
    gc = tc.data("labels", "gc", "-p", project, "--ttl-days", "0", "--dry-run")
    assert gc["dry_run"] is True and gc["archived"] == []
    assert "would archive 0 label(s)" in tc.ok("labels", "gc", "-p", project, "--dry-run").stdout
    actors = tc.data("actors", "--kind", "codex")["items"]
    assert ("codex", "bot-1") in [(a["kind"], a["id"]) for a in actors]


def test_activity_list_filters_and_cursor(tc: Taskctl) -> None:
    project = new_project(tc, "act")
    ref = tc.data("task", "create", "-p", project, "Busy")["identifier"]
    for n in range(3):
        tc.ok("comment", "add", ref, f"note {n}")
    page = tc.data("activity", "list", "-p", project, "--event", "comment_added", "--limit", "2")
    assert [r["event"] for r in page["items"]] == ["comment_added"] * 2 and page["next_cursor"]
    rest = tc.data("activity", "list", "-p", project, "--event", "comment_added", "--limit", "2",
                   "--cursor", page["next_cursor"])
    assert len(rest["items"]) == 1 and rest["next_cursor"] is None
    human = tc.ok("activity", "list", "-p", project, "--limit", "2").stdout
    assert re.search(rf"^next cursor: \S+  \(taskctl activity list -p {project} --limit 2 --cursor \S+\)$", human, re.M)
    table = rows(human)
    assert table[0] == ["REV", "WHEN", "ACTOR", "EVENT", "TASK", "CHANGES"]
    assert table[1][2:4] == ["ann", "project_created"]
    by_other = tc.data("activity", "list", "-p", project, "--by", "nobody")
    assert by_other["items"] == []
    head = page["items"][-1]["revision"]
    after = tc.data("activity", "list", "-p", project, "--after", str(head))["items"]
    assert all(r["revision"] > head for r in after) and len(after) == 1


def test_open_prints_a_working_one_time_login_link(tc: Taskctl) -> None:
    link = tc.ok("open", "--print").stdout.strip()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/login\?code=\S+", link)
    assert tc.data("open", "--print")["opened"] is False

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kw):  # type: ignore[no-untyped-def]
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        opener.open(link)
        raise AssertionError("the login link should redirect")
    except urllib.error.HTTPError as answer:
        assert answer.code == 302 and "taskloom_session_" in answer.headers.get("Set-Cookie", "")
    try:
        opener.open(link)
        raise AssertionError("a login link works once")
    except urllib.error.HTTPError as answer:
        assert answer.code == 401
