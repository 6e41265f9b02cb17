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
