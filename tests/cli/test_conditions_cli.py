"""``taskctl task ready``, ``task candidates`` and ``conditions list`` against a real ``taskd``.

The ready rule is the board's (``GET /api/v1/tasks?ready=true``); taskctl only prints it. So each
test compares what taskctl printed with what the board answers to the same question, and with
the rule itself, in both directions: a blocker is ready, the card it blocks is not.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.support.board import TaskdProcess

from .conftest import Taskctl, activity_count, new_project

WORKER = {"TASKLOOM_ACTOR": "worker-1", "TASKLOOM_ACTOR_KIND": "claude"}


def rows(text: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines() if line.strip()]


def board_get(taskd: TaskdProcess, path: str, **params: Any) -> Any:
    reply = httpx.get(f"{taskd.url}/api/v1{path}", params=params, timeout=10,
                      headers={"Authorization": f"Bearer {taskd.token}"})
    assert reply.status_code == 200, reply.text
    return reply.json()


def idents(items: list[dict[str, Any]]) -> list[str]:
    return [item["identifier"] for item in items]


@pytest.fixture
def world(tc: Taskctl) -> dict[str, str]:
    """A project with one card of every kind the ready rule must sort out."""
    project = new_project(tc, "ready")

    def make(*args: str) -> str:
        return tc.data("task", "create", "-p", project, *args)["identifier"]

    cards = {
        "blocker": make("The blocker", "--priority", "high"),
        "blocked": make("Waits for the blocker", "--priority", "urgent"),
        "low": make("Low and free", "--priority", "low"),
        "theirs": make("Bob's", "--priority", "urgent", "--assignee", "bob"),
        "mine": make("Worker's own", "--priority", "medium", "--assignee", "claude:worker-1"),
        "epic": make("An epic", "--kind", "epic", "--priority", "urgent"),
        "claimed": make("Claimed and fresh", "--priority", "urgent"),
        "backlog": make("Not yet", "--status", "backlog"),
    }
    tc.ok("relation", "add", cards["blocker"], "blocks", cards["blocked"])
    tc.ok("task", "claim", cards["claimed"], env={"TASKLOOM_ACTOR": "worker-2", "TASKLOOM_ACTOR_KIND": "claude"})
    return {"project": project, **cards}


def test_ready_lists_the_blocker_not_the_blocked_and_equals_the_boards_answer(
    tc: Taskctl, shared_taskd: TaskdProcess, world: dict[str, str]
) -> None:
    project = world["project"]
    ready = tc.data("task", "ready", "-p", project)["items"]
    assert idents(ready) == idents(board_get(shared_taskd, "/tasks", ready="true", project=project)["items"])
    # Todo, no open blocker, no fresh claim, not an epic; most urgent first. Without --for,
    # whoever the card is assigned to.
    assert idents(ready) == [world["theirs"], world["blocker"], world["mine"], world["low"]]

    for_worker = tc.data("task", "ready", "-p", project, "--for", "worker-1")["items"]
    assert idents(for_worker) == [world["blocker"], world["mine"], world["low"]]
    assert idents(for_worker) == idents(
        board_get(shared_taskd, "/tasks", ready="true", project=project, **{"for": "worker-1"})["items"])

    printed = rows(tc.ok("task", "ready", "-p", project).stdout)
    assert printed[0][:2] == ["ID", "STATUS"] and [row[0] for row in printed[1:]] == idents(ready)


def test_candidates_are_the_ready_queue_of_the_caller(tc: Taskctl, world: dict[str, str]) -> None:
    project = world["project"]
    candidates = tc.data("task", "candidates", "-p", project, env=WORKER)["items"]
    assert idents(candidates) == idents(tc.data("task", "ready", "-p", project, "--for", "worker-1")["items"])
    assert world["blocked"] not in idents(candidates) and world["epic"] not in idents(candidates)
    for_ann = tc.data("task", "candidates", "-p", project)["items"]  # ann is human: mine is not hers
    assert idents(for_ann) == [world["blocker"], world["low"]]


def test_the_blocked_card_becomes_ready_when_its_blocker_is_done_with(
    tc: Taskctl, shared_taskd: TaskdProcess, world: dict[str, str]
) -> None:
    project = world["project"]
    held = tc.data("conditions", "list", "-p", project)
    assert held == board_get(shared_taskd, "/breaches", project=project)
    blocked = [item for item in held["items"] if item["type"] == "card_blocked"]
    assert len(blocked) == 1 and blocked[0]["changes"]["blockers"] == [world["blocker"]]
    table = rows(tc.ok("conditions", "list", "-p", project).stdout)
    assert table[0] == ["CONDITION", "PROJECT", "ON", "SINCE", "DETAIL"]
    assert [row[:3] for row in table[1:] if row[0] == "card_blocked"] == [["card_blocked", project, world["blocked"]]]

    tc.ok("task", "move", world["blocker"], "canceled")
    ready = idents(tc.data("task", "ready", "-p", project)["items"])
    assert ready == [world["blocked"], world["theirs"], world["mine"], world["low"]]
    after = tc.data("conditions", "list", "-p", project)
    assert [item for item in after["items"] if item["type"] == "card_blocked"] == []
    assert after == board_get(shared_taskd, "/breaches", project=project)


def test_conditions_list_without_a_project_covers_every_project(
    tc: Taskctl, shared_taskd: TaskdProcess, world: dict[str, str]
) -> None:
    everything = tc.data("conditions", "list")
    assert everything == board_get(shared_taskd, "/breaches")
    assert any(item["project_id"] == world["project"] for item in everything["items"])


@pytest.mark.parametrize("bad", ["", "  "])
def test_an_empty_for_is_a_usage_error_and_writes_nothing(tc: Taskctl, world: dict[str, str], bad: str) -> None:
    before = activity_count(tc.data_dir)
    run = tc("task", "ready", "-p", world["project"], "--for", bad)
    assert run.code == 2 and "name an actor id" in run.stderr, str(run)
    assert activity_count(tc.data_dir) == before


def test_an_unknown_project_is_refused_by_the_queue_and_the_catch_up(tc: Taskctl) -> None:
    """A mistyped project is named, not answered with an empty queue that reads "nothing to do"."""
    before = activity_count(tc.data_dir)
    tc.refused("NOT_FOUND", "task", "ready", "-p", "no-such-project")
    tc.refused("NOT_FOUND", "conditions", "list", "-p", "no-such-project")
    assert activity_count(tc.data_dir) == before
