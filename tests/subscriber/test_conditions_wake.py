"""The loop subscriber and the board's conditions (docs/conditions.md, issue 17 §5).

The rule: ``card_unblocked`` and ``claim_stale`` wake the loop; ``status_timeout`` wakes it only
for the statuses named by ``--wake-on-timeout``; every other condition is ignored. The same rule
holds whether the condition came as a ``signal`` record or, persisted, as an activity row.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.subscriber.classify import (
    CONDITION_CONDITIONAL,
    CONDITION_IGNORE,
    CONDITION_WAKE,
    CONDITIONS,
    LoopIdentity,
    classify,
    classify_signal,
)
from shared import conditions as shared_conditions
from shared import events as ev
from tests.support.board import BoardClient, TaskdProcess
from tests.support.waiting import async_wait_until

from .test_loop_e2e import SubscriberProcess, activity_rows

#: Every condition name, read once from the shared vocabulary (shared/conditions.py).
ALL_CONDITIONS = shared_conditions.CONDITIONS

LOOP = LoopIdentity(agents=frozenset({"worker-1"}), director="Director")
REVIEWER = LoopIdentity(agents=frozenset({"worker-1"}), wake_on_timeout=frozenset({"in_review"}))

CHANGES: dict[str, dict[str, Any]] = {
    "wip_exceeded": {"status": "in_progress", "count": 4, "limit": 3},
    "wip_cleared": {"status": "in_progress", "count": 3, "limit": 3},
    "lane_drained": {"status": "todo", "count": 0},
    "lane_refilled": {"status": "todo", "count": 1},
    "card_blocked": {"blockers": ["DEMO-0001"]},
    "card_unblocked": {"blockers": ["DEMO-0001"]},
    "transition_rejected": {"from": "todo", "to": "done", "code": "INVALID_TRANSITION"},
    "status_timeout": {"status": "in_review", "since": "2026-05-04T09:00:00Z", "max": 86400},
    "card_idle": {"since": "2026-05-04T09:00:00Z", "threshold": 3600},
    "claim_stale": {"claimed_by": "worker-1", "heartbeat_at": "2026-05-04T09:00:00Z", "threshold": 600},
}


def signal(name: str, **changes: Any) -> dict[str, Any]:
    return {"type": name, "project_id": "demo", "task_id": "5c2c0000-0000-4000-8000-000000000000",
            "changes": changes or CHANGES[name], "at": "2026-05-04T09:14:10.402Z"}


def test_every_condition_name_sits_in_exactly_one_list() -> None:
    lists = {"wake": CONDITION_WAKE, "conditional": CONDITION_CONDITIONAL, "ignore": CONDITION_IGNORE}
    for name in ALL_CONDITIONS:
        holders = [list_name for list_name, names in lists.items() if name in names]
        assert len(holders) == 1, f"{name} is in {holders or 'no list'}"
    assert CONDITIONS == shared_conditions.CONDITION_SET, "the lists name a condition the board does not declare"
    assert shared_conditions.CONDITION_SET <= ev.EVENT_SET  # so a persisted one is classified as a row too
    assert set(CHANGES) == CONDITIONS


def test_the_lists_are_the_rule_of_the_issue() -> None:
    assert CONDITION_WAKE == {"card_unblocked", "claim_stale"}
    assert CONDITION_CONDITIONAL == {"status_timeout"}


@pytest.mark.parametrize("name", ALL_CONDITIONS)
def test_each_signal_wakes_or_not_by_the_rule(name: str) -> None:
    decision = classify_signal(signal(name), LOOP)
    assert decision.wake is (name in CONDITION_WAKE), decision
    assert classify_signal(signal(name), REVIEWER).wake is (name in CONDITION_WAKE or name == "status_timeout")


@pytest.mark.parametrize("name", ALL_CONDITIONS)
def test_a_persisted_condition_row_decides_as_its_signal_does(name: str) -> None:
    # A persisting project writes the condition as an activity row by ``system``: that is the
    # board noticing, so board-housekeeping suppression must not swallow it.
    row = {"event": name, "actor_kind": "system", "actor_id": "system", "task_id": "t", "project_id": "demo",
           "changes": CHANGES[name]}
    for who in (LOOP, REVIEWER):
        assert classify(row, who) == classify_signal(signal(name), who)


def test_status_timeout_wakes_only_for_the_named_statuses() -> None:
    both = LoopIdentity(agents=frozenset({"w"}), wake_on_timeout=frozenset({"in_review", "blocked"}))
    assert classify_signal(signal("status_timeout", status="in_review", since="x", max=1), both).reason == "timeout"
    assert classify_signal(signal("status_timeout", status="blocked", since="x", max=1), both).wake
    assert classify_signal(signal("status_timeout", status="awaiting", since="x", max=1), both).reason == "status"
    assert not classify_signal(signal("status_timeout", status="in_review", since="x", max=1), LOOP).wake


def test_a_stale_claim_of_this_loops_own_agent_still_wakes_it() -> None:
    # The dead worker may be this loop's own: its card is work again all the same.
    stale = signal("claim_stale", claimed_by="worker-1", heartbeat_at="x", threshold=1)
    assert classify_signal(stale, LOOP).reason == "stale_claim"


@pytest.mark.parametrize("body", [
    {},
    {"type": None},
    {"type": ["claim_stale"]},
    {"type": "claim_stale_v2"},
    {"type": "task_created"},  # an event name is not a signal
    {"type": "status_timeout", "changes": "in_review"},
    {"type": "status_timeout", "changes": {"status": ["in_review"]}},
])
def test_a_malformed_or_unknown_signal_never_wakes_and_never_raises(body: dict[str, Any]) -> None:
    assert not classify_signal(body, REVIEWER).wake


# -- a real taskd, a real hub, a real `taskctl loop subscribe` ------------------------------------

API = "/api/v1"
#: The project's claim freshness window and status timeouts, seconds (thresholds down to 1 s work).
STALE_AFTER = 1


@pytest.fixture(params=[[]])
async def live_board(taskd: TaskdProcess, request: pytest.FixtureRequest) -> AsyncIterator[tuple[TaskdProcess, BoardClient]]:
    """A board whose project ``demo`` watches claims and two statuses; ``request.param`` lists the
    conditions it persists as activity rows instead of signals."""
    taskd.start()
    async with aiohttp.ClientSession() as session:
        client = BoardClient(taskd.url, taskd.token, session)
        created = await client.post(f"{API}/projects", {"id": "demo", "name": "Demo", "settings": {
            "monitors": {"claim_stale_after": STALE_AFTER, "max_time_in_status": {"blocked": 1, "backlog": 1}},
            "persist_conditions": request.param,
        }})
        assert created.status == 201, created.body
        yield taskd, client


@pytest.fixture
async def loop_process(live_board: tuple[TaskdProcess, BoardClient], tmp_path: Path) -> AsyncIterator[SubscriberProcess]:
    async with SubscriberProcess.with_this_pool(tmp_path / "sub", live_board[0]) as process:
        yield process


@pytest.mark.parametrize("live_board", [[], [ev.CLAIM_STALE]], ids=["signal", "persisted"], indirect=True)
async def test_a_worker_that_stops_heart_beating_wakes_the_loop_once(
    live_board: tuple[TaskdProcess, BoardClient], loop_process: SubscriberProcess
) -> None:
    taskd, client = live_board
    persisted = bool((await client.get(f"{API}/projects/demo")).body["settings"]["persist_conditions"])
    await loop_process.start()
    await loop_process.ready()
    made = await client.post(f"{API}/tasks", {"project": "demo", "title": "Dig the well"})
    assert made.status == 201, made.body
    task = made.body
    assert (await loop_process.wait_wakes(1))[0]["events"] == "task_created"

    # Another loop's worker claims and beats once, then dies. The claim itself wakes no one.
    worker = client.as_actor("claude", "worker-9")
    assert (await worker.post(f"{API}/tasks/{task['id']}/claim")).status == 200
    assert (await worker.post(f"{API}/tasks/{task['id']}/heartbeat")).status == 200
    [_, stale] = await loop_process.wait_wakes(2, timeout=10 + STALE_AFTER)
    assert stale["events"] == "claim_stale", stale
    head = (await client.get(f"{API}/meta")).body["revision"]
    # A signal has no revision: the turn covers the cursor the loop had. A persisted one is the
    # newest row, so the turn covers exactly it.
    assert stale["revision"] == head
    rows = activity_rows(taskd.data_dir)
    assert any(kind == "system" and event == "claim_stale" for kind, _, event in rows) is persisted

    # Once: the next turn is the marker's own, with no second claim_stale before or in it.
    assert (await client.post(f"{API}/tasks", {"project": "demo", "title": "Marker"})).status == 201
    [_, _, marker] = await loop_process.wait_wakes(3)
    assert marker["events"] == "task_created", marker
    assert await loop_process.terminate() == 0


def ignored_signals(process: SubscriberProcess) -> list[dict[str, Any]]:
    """The ``signal_ignored`` lines of the subscriber's JSON log (it runs with ``-v``)."""
    found = []
    for line in process.log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "signal_ignored":
            found.append(record)
    return found


async def test_status_timeout_wakes_only_for_the_statuses_it_was_asked_to(
    live_board: tuple[TaskdProcess, BoardClient], loop_process: SubscriberProcess
) -> None:
    _, client = live_board
    await loop_process.start("--wake-on-timeout", "blocked", "-v")
    await loop_process.ready()
    parked = await client.post(f"{API}/tasks", {"project": "demo", "title": "Someday", "status": "backlog"})
    assert parked.status == 201, parked.body
    assert (await loop_process.wait_wakes(1))[0]["events"] == "task_created"

    # backlog times out after 1 s: the signal reaches the loop, which lets it pass.
    async def backlog_ignored() -> bool:
        return any(r.get("name") == "status_timeout" and r.get("reason") == "status" for r in ignored_signals(loop_process))

    await async_wait_until(backlog_ignored, timeout=10, what="the backlog timeout to reach the loop and be ignored")
    assert len(loop_process.wakes()) == 1

    stuck = await client.post(f"{API}/tasks", {"project": "demo", "title": "Stuck"})
    assert stuck.status == 201
    assert (await loop_process.wait_wakes(2))[1]["events"] == "task_created"
    moved = await client.post(f"{API}/tasks/{stuck.body['id']}/move", {"to": "blocked", "reason": "waiting on ops"})
    assert moved.status == 200, moved.body
    # The move wakes the loop (300 ms debounce); a second later blocked times out: its own turn.
    turns = await loop_process.wait_wakes(4, timeout=10)
    assert [turn["events"] for turn in turns[2:]] == ["task_moved", "status_timeout"], turns
    assert await loop_process.terminate() == 0


def test_loop_install_passes_wake_on_timeout_to_the_subscriber_unit(tmp_path: Path) -> None:
    from services.subscriber import units

    from .test_units import by_role, values

    plain = values(tmp_path)
    asked = values(tmp_path, wake_on_timeout=("in_review", "blocked"))
    for supervisor in units.SUPERVISORS:
        before = units.program_argv(supervisor, by_role(units.render(supervisor, plain))["subscriber"].text)
        argv = units.program_argv(supervisor, by_role(units.render(supervisor, asked))["subscriber"].text)
        assert "--wake-on-timeout" not in before and "" not in before
        at = argv.index("--on-wake")
        assert argv[at - 4:at] == ["--wake-on-timeout", "in_review", "--wake-on-timeout", "blocked"], argv
        assert [word for word in argv if word not in ("--wake-on-timeout", "in_review", "blocked")] == before


def test_an_unknown_timeout_status_is_a_usage_error(tmp_path: Path) -> None:
    import subprocess

    from tests.support.board import VENV_BIN

    done = subprocess.run(
        [str(VENV_BIN / "taskctl"), "loop", "subscribe", "--url", "http://127.0.0.1:9", "--agent", "w", "--on-wake", "true",
         "--state-dir", str(tmp_path / "loop"), "--wake-on-timeout", "in_reveiw"],
        check=False, capture_output=True, text=True, timeout=30, env={**os.environ, "TASKLOOM_TOKEN": "tl_x"},
    )
    assert done.returncode == 2 and "not a status: in_reveiw" in done.stderr, done
    assert not (tmp_path / "loop").exists(), "nothing was written"
