"""Conditions at their edges (docs/conditions.md): settings that cannot be honoured are refused
(a non-text name, a timeout on a terminal status), a refusal is reported whatever ref named the
card, a fired condition ends when its threshold no longer holds, ``/breaches`` is oldest first,
and the board's own epic rollup passes the dependency gate a person's delivery passes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.support.board import API, REPORT, BoardClient, RunningBoard, make_project, make_task
from tests.support.signals import RawStream

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def settings(client: BoardClient, value: dict[str, Any], project: str = "demo") -> None:
    await make_project(client, project)
    reply = await client.patch(f"{API}/projects/{project}", {"settings": value})
    assert reply.status == 200, reply.body


@pytest.mark.parametrize("value", [
    {"persist_conditions": [["wip_exceeded"]]},
    {"persist_conditions": [{"name": "wip_exceeded"}]},
])
async def test_a_non_string_persist_conditions_entry_is_a_400_not_a_500(client: BoardClient, value: dict[str, Any]) -> None:
    await make_project(client)
    reply = await client.patch(f"{API}/projects/demo", {"settings": value})
    assert reply.status == 400, (
        f"settings {value} must be 400 VALIDATION_FAILED naming persist_conditions (docs/conditions.md §5), "
        f"got {reply.status}: {reply.body}"
    )
    assert reply.error == "VALIDATION_FAILED" and reply.body["error"]["details"]["field"] == "persist_conditions", reply.body


async def test_transition_rejected_is_emitted_when_the_refused_claim_names_the_card_by_a_uuid_prefix(
    client: BoardClient, board: RunningBoard, session: aiohttp.ClientSession
) -> None:
    await settings(client, {"monitors": {"emit_rejections": True}})
    blocker = await make_task(client, title="blocker")
    target = await make_task(client, title="blocked")
    assert (await client.post(f"{API}/tasks/{blocker['id']}/relations", {"type": "blocks", "target": target["id"]})).status == 201
    stream = await RawStream.open(session, board.url, board.token)
    # The same refusal twice: once by a uuid prefix (a ref every other route accepts), once by the full id.
    short = target["id"][:8]
    by_prefix = await client.post(f"{API}/tasks/{short}/claim", {})
    assert by_prefix.status == 409 and by_prefix.error == "DEPENDENCY_OPEN", by_prefix.body
    by_id = await client.post(f"{API}/tasks/{target['id']}/claim", {})
    assert by_id.status == 409 and by_id.error == "DEPENDENCY_OPEN", by_id.body
    # Signals leave in commit order: once the second refusal's signal is here, the first one's would be too.
    await stream.signal("transition_rejected")
    rejected = [s for s in stream.signals("transition_rejected") if s["task_id"] == target["id"]]
    assert len(rejected) == 2, (
        f"a claim refused with 409 DEPENDENCY_OPEN must emit transition_rejected whatever ref named the card; "
        f"the claim by uuid prefix {short!r} emitted nothing (got {len(rejected)} signal(s): {rejected})"
    )


async def test_the_epic_rollup_does_not_deliver_an_epic_past_its_open_blockers(client: BoardClient) -> None:
    """§1.3: delivering a blocked card or moving it to in_review is refused with DEPENDENCY_OPEN
    unless forced with a reason. The board's own rollup delivers the epic when its last child
    finishes, and checks no blocker."""
    epic = await make_task(client, title="epic", kind="epic", acceptance_mode="none")
    child = await make_task(client, title="child", acceptance_mode="none")
    blocker = await make_task(client, title="blocker")
    assert (await client.post(f"{API}/tasks/{epic['id']}/relations", {"type": "parent", "target": child["id"]})).status == 201
    assert (await client.post(f"{API}/tasks/{blocker['id']}/relations", {"type": "blocks", "target": epic["id"]})).status == 201
    for path, body in (("claim", {}), ("deliver", {"body": REPORT}), ("move", {"to": "done"})):
        reply = await client.post(f"{API}/tasks/{child['id']}/{path}", body)
        assert reply.status == 200, (path, reply.body)
    after = (await client.get(f"{API}/tasks/{epic['id']}")).body
    # A person doing the same is refused:
    assert after["blocked_by"] == [blocker["identifier"]], after
    assert after["status"] != "in_review", (
        f"the epic is blocked by {after['blocked_by']} (open), yet the rollup delivered it to in_review without "
        "the DEPENDENCY_OPEN gate or a forced reason; its task_delivered row has no forced flag either"
    )


async def test_raising_a_status_timeout_past_the_time_spent_ends_the_fired_condition(
    client: BoardClient, board: RunningBoard, session: aiohttp.ClientSession
) -> None:
    """/breaches lists "each temporal condition that fired and still holds" (§4.3). The episode key
    of status_timeout is status@status_since only, not the threshold: a fired mark survives a
    settings change that makes the condition false, and /breaches keeps reporting the old max."""
    await settings(client, {"monitors": {"max_time_in_status": {"in_progress": 1}}})
    task = await make_task(client)
    stream = await RawStream.open(session, board.url, board.token)
    assert (await client.post(f"{API}/tasks/{task['id']}/claim", {})).status == 200
    fired = await stream.signal("status_timeout", timeout=5)
    assert fired["changes"]["max"] == 1
    await settings(client, {"monitors": {"max_time_in_status": {"in_progress": 86400}}})
    shown = (await client.get(f"{API}/tasks/{task['id']}")).body
    assert shown["status"] == "in_progress"
    breaches = (await client.get(f"{API}/breaches?project=demo")).body["items"]
    assert breaches == [], (
        "the card has been in_progress for about a second and the limit is now 86400 s, so status_timeout no longer "
        f"holds; /breaches still lists it with the old threshold: {breaches} (and the new 86400 s deadline is never armed)"
    )


async def test_breaches_across_projects_are_oldest_first(client: BoardClient) -> None:
    """§4.3: GET /breaches answers every condition that holds now, "oldest first"; without
    ?project= the marks are ordered by project id before their age."""
    await settings(client, {"monitors": {"lanes": ["todo"]}}, project="zeta")  # drained first: the older one
    older = (await client.get(f"{API}/breaches?project=zeta")).body["items"]
    assert [b["type"] for b in older] == ["lane_drained"], older
    # A later commit: its mark's since is not before the first one's.
    await settings(client, {"monitors": {"lanes": ["todo"]}}, project="alpha")
    items = (await client.get(f"{API}/breaches")).body["items"]
    assert [b["project_id"] for b in items] == ["zeta", "alpha"], (
        "GET /breaches must list the conditions oldest first; it lists "
        f"{[(b['project_id'], b['since']) for b in items]} (sorted by project id, then age)"
    )


async def test_a_status_timeout_on_a_terminal_status_is_refused(client: BoardClient) -> None:
    """A finished card has left the work: a timeout there could never fire, so the setting is
    refused naming its field (§5: what conditions cannot honour is a 400)."""
    await make_project(client)
    reply = await client.patch(f"{API}/projects/demo", {"settings": {"monitors": {"max_time_in_status": {"canceled": 1}}}})
    assert reply.status == 400 and reply.error == "VALIDATION_FAILED", reply.body
    assert reply.body["error"]["details"]["field"] == "monitors.max_time_in_status.canceled", reply.body


async def test_the_last_blocker_of_a_finished_epic_delivers_it(client: BoardClient) -> None:
    """The rollup the open blocker held back happens when that blocker finishes."""
    epic = await make_task(client, title="epic", kind="epic", acceptance_mode="none")
    child = await make_task(client, title="child", acceptance_mode="none")
    blocker = await make_task(client, title="blocker")
    assert (await client.post(f"{API}/tasks/{epic['id']}/relations", {"type": "parent", "target": child["id"]})).status == 201
    assert (await client.post(f"{API}/tasks/{blocker['id']}/relations", {"type": "blocks", "target": epic["id"]})).status == 201
    for path, body in (("claim", {}), ("deliver", {"body": REPORT}), ("move", {"to": "done"})):
        assert (await client.post(f"{API}/tasks/{child['id']}/{path}", body)).status == 200, path
    assert (await client.get(f"{API}/tasks/{epic['id']}")).body["status"] == "in_progress"

    assert (await client.post(f"{API}/tasks/{blocker['id']}/move", {"to": "canceled", "reason": "not needed after all"})).status == 200

    after = (await client.get(f"{API}/tasks/{epic['id']}")).body
    assert after["status"] == "in_review" and after["blocked_by"] == [], after
    delivered = [row for row in (await client.get(f"{API}/tasks/{epic['id']}/activities")).body["items"]
                 if row["event"] == "task_delivered"]
    assert [row["changes"].get("source") for row in delivered] == [blocker["identifier"]], delivered
