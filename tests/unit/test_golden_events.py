"""Golden fixtures freeze the wire: each event's ``changes`` and the activity frame, byte for byte.

A fixture change is a compatibility change for every consumer (board page, hub, loop, card
briefs), so drift fails by default. After a deliberate change, regenerate and review the diff:

    TASKLOOM_REGENERATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_golden_events.py
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

import shared.fixtures
from services.board.queries.activities import ACTIVITY_COLUMNS, to_frame
from services.board.sqlite_store import SqliteStore
from services.board.store import Actor, Tx
from shared import events

FIXTURES = Path(shared.fixtures.__file__).parent
EVENT_FIXTURES = FIXTURES / "events"
FRAME_FIXTURE = FIXTURES / "activity_frame.json"
REGENERATE = os.environ.get("TASKLOOM_REGENERATE_GOLDEN") == "1"
DUMP_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE

TASK_ID = "3f2b8c1e-9d4a-4e7b-8a61-0c5d2e7f9a13"
OTHER_TASK_ID = "d41c7a90-5e2f-4b18-9c63-8f0e2a7d5b14"
COMMENT_ID = "b7e41f02-6c3d-4a8e-9f15-2d0a7c9e4b86"
REPORT_ID = "0a9c7e25-41d3-4b6f-8e2a-5c1f9d3b7e60"
ITEM_ID = "e5d3a1c7-2b9f-4f60-a8e4-7c0b6d2f1a39"
RELATION_ID = "6c1e9a4f-8d2b-4e37-b5a0-3f7c1d9e2b84"
SESSION_ID = "ses_5d1c0b9e2a7f4e36"
ATTACHMENT_ID = "9b2f4d6a-1c8e-4a3b-b7d5-e0f2a4c6b8d1"
NOW = "2025-03-14T09:26:53.589Z"

#: Fixed, realistic arguments per event; every optional key is filled so the fixture shows it.
GOLDEN_ARGS: dict[str, dict[str, Any]] = {
    events.PROJECT_CREATED: {"project": "demo"},
    events.PROJECT_UPDATED: {"project": "demo", "fields": ["name", "workspace_path"]},
    events.TASK_CREATED: {
        "identifier": "DEMO-0042",
        "status": "todo",
        "priority": "high",
        "acceptance_mode": "review",
        "idem": "task|claude:worker-1|ci:nightly-42",
        "dictionaries": {"assignee": {"kind": "claude", "id": "worker-1"}, "reporter": {"kind": "human", "id": "ann"}},
        "labels": ["docs", "needs-review"],
    },
    events.TASK_UPDATED: {
        "fields": ["title", "priority", "assignee_kind", "assignee_id", "labels"],
        "before": {"title": "Write the docs", "priority": "medium", "assignee_kind": None, "assignee_id": None,
                   "labels": ["docs"]},
        "after": {"title": "Write the user docs", "priority": "high", "assignee_kind": "codex",
                  "assignee_id": "worker-2", "labels": ["docs", "needs-review"]},
        "dictionaries": {"assignee": {"kind": "codex", "id": "worker-2"}},
        "labels": ["docs", "needs-review"],
    },
    events.TASK_CLAIMED: {"from_": "in_progress", "to": "in_progress", "stole_from": "worker-1",
                          "reason": "claim went stale", "forced": True},
    events.TASK_HEARTBEAT: {"heartbeat_at": NOW},
    events.TASK_MOVED: {
        "from_": "in_progress",
        "to": "awaiting",
        "delivery_round": 2,
        "awaiting_reason": "which locale is the default?",
        "blocked_reason": "waiting on CI",
        "question_comment_id": COMMENT_ID,
        "forced": True,
        "reason": "the blocker is fixed on a branch",
    },
    events.TASK_REOPENED: {"from_": "done", "to": "todo", "reason": "the fix regressed on main", "delivery_round": 3},
    events.TASK_RESUMED: {"comment_id": COMMENT_ID, "from_": "awaiting", "to": "todo"},
    events.TASK_ARCHIVED: {"from_": "done", "archived_at": NOW, "labels_released": ["docs", "needs-review"]},
    events.REPORT_WRITTEN: {"round_": 2, "report_id": REPORT_ID, "delivery_round": 2},
    events.TASK_DELIVERED: {
        "from_": "in_progress",
        "to": "in_review",
        "round_": 1,
        "report_id": REPORT_ID,
        "rollup": True,
        "canceled": 1,
        "source": "DEMO-0043",
        "forced": True,
        "reason": "the blocker is fixed on a branch",
    },
    events.REPORT_WAIVED: {"from_": "blocked", "to": "in_review", "round_": 1,
                           "reason": "trivial typo, nothing to report", "delivery_round": 1, "forced": True},
    events.ACCEPTANCE_CHANGED: {"added": [{"id": ITEM_ID, "text": "the README explains login"}], "revision": 118},
    events.ACCEPTANCE_PRUNED: {"reason": "duplicated by item 2",
                               "removed": [{"id": ITEM_ID, "text": "the README explains login"}]},
    events.ACCEPTANCE_OVERRIDE: {"from_": "review", "to": "none", "reason": "spike; nothing to approve"},
    events.EPIC_AUTO_START: {"from_": "todo", "to": "in_progress", "child": "DEMO-0043", "source": "claim"},
    events.COMMENT_ADDED: {"comment_id": COMMENT_ID, "kind": "question"},
    events.RELATION_ADDED: {"relation_id": RELATION_ID, "type_": "blocks", "source": OTHER_TASK_ID, "target": TASK_ID},
    events.RELATION_REMOVED: {"relation_id": RELATION_ID, "type_": "blocks", "source": OTHER_TASK_ID,
                              "target": TASK_ID},
    events.LABEL_GC: {"archived": ["old-sprint", "wontfix"], "kept": 12, "mismatched": 1,
                      "reason": "unused for longer than the TTL", "ttl_days": 30},
    events.SESSION_REGISTERED: {"session_id": SESSION_ID, "seg": 2, "owner_kind": "claude", "phase": "implement"},
    events.SESSION_CLOSED: {"session_id": SESSION_ID, "status": "completed"},
    events.PROGRESS: {"line": "ran the migration on staging", "seq": 7},
    events.ATTACHMENT_ADDED: {"attachment_id": ATTACHMENT_ID, "filename": "trace.log", "content_type": "text/plain",
                              "size": 48213},
    events.ATTACHMENT_UPDATED: {"attachment_id": ATTACHMENT_ID, "filename": "trace.log", "content_type": "text/plain",
                                "size": 51377},
    events.ATTACHMENT_REMOVED: {"attachment_id": ATTACHMENT_ID, "filename": "trace.log", "content_type": "text/plain",
                                "size": 51377},
    events.IMPORT_COMPLETED: {"projects": 2, "tasks": 41, "comments": 17, "reports": 5, "skipped": 0},
    events.WIP_EXCEEDED: {"status": "in_progress", "count": 4, "limit": 3},
    events.WIP_CLEARED: {"status": "in_progress", "count": 3, "limit": 3},
    events.LANE_DRAINED: {"status": "todo", "count": 0},
    events.LANE_REFILLED: {"status": "todo", "count": 1},
    events.CARD_BLOCKED: {"blockers": ["DEMO-0041", "DEMO-0043"], "more": 1200},
    events.CARD_UNBLOCKED: {"blockers": ["DEMO-0041"], "more": 1200},
    events.TRANSITION_REJECTED: {"from_": "todo", "to": "in_progress", "code": "DEPENDENCY_OPEN"},
    events.STATUS_TIMEOUT: {"status": "in_review", "since": NOW, "max_": 86400},
    events.CARD_IDLE: {"since": NOW, "threshold": 3600},
    events.CLAIM_STALE: {"claimed_by": "worker-1", "heartbeat_at": NOW, "threshold": 600},
}


def golden_changes(event: str) -> dict[str, Any]:
    return events.CONSTRUCTORS[event](**GOLDEN_ARGS[event])


def encode(value: Any) -> bytes:
    return orjson.dumps(value, option=DUMP_OPTIONS)


def check_or_write(path: Path, data: bytes) -> None:
    if REGENERATE:
        path.write_bytes(data)
        return
    assert path.exists(), f"missing golden fixture {path.name}; regenerate with TASKLOOM_REGENERATE_GOLDEN=1"
    assert path.read_bytes() == data, (
        f"{path.name} drifted from its constructor: a wire change every consumer sees. If it is deliberate, "
        "regenerate with TASKLOOM_REGENERATE_GOLDEN=1 and review the diff"
    )


def test_every_event_has_a_constructor_and_golden_arguments() -> None:
    assert set(events.CONSTRUCTORS) == events.EVENT_SET
    assert set(GOLDEN_ARGS) == events.EVENT_SET


@pytest.mark.parametrize("event", events.EVENTS)
def test_golden_arguments_fill_every_optional_key(event: str) -> None:
    parameters = inspect.signature(events.CONSTRUCTORS[event]).parameters.values()
    named = {p.name for p in parameters if p.kind is not inspect.Parameter.VAR_KEYWORD}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        assert GOLDEN_ARGS[event], f"{event} takes free-form counters; the fixture should show some"
    else:
        assert set(GOLDEN_ARGS[event]) == named, f"{event}: fill every parameter, optional ones included"
    assert all(value is not None for value in GOLDEN_ARGS[event].values())


@pytest.mark.parametrize("event", events.EVENTS)
def test_changes_match_golden_fixture(event: str) -> None:
    check_or_write(EVENT_FIXTURES / f"{event}.json", encode(golden_changes(event)))


def test_fixture_folder_holds_exactly_the_vocabulary() -> None:
    on_disk = {path.stem for path in EVENT_FIXTURES.glob("*.json")}
    assert sorted(events.EVENT_SET - on_disk) == [], "events without a golden fixture"
    assert sorted(on_disk - events.EVENT_SET) == [], "fixtures naming no declared event (stale or misspelt)"


def test_activity_frame_matches_golden_fixture(tmp_path: Path) -> None:
    """One row written through the real seam and read back as the frame every surface sends."""
    store = SqliteStore(tmp_path / "board.sqlite", clock=lambda: NOW)
    store.open()
    try:

        def record(tx: Tx) -> int:
            return tx.record(
                events.TASK_MOVED,
                events.task_moved(from_="in_progress", to="awaiting", delivery_round=1,
                                  awaiting_reason="which locale is the default?", question_comment_id=COMMENT_ID),
                task_id=TASK_ID,
                project_id="demo",
            )

        revision, appended = store.run_command(record, Actor("claude", "worker-1"))
        assert appended == [revision]
        frame = store.run_query(
            lambda conn: to_frame(conn.execute(f"SELECT {ACTIVITY_COLUMNS} FROM task_activities").fetchone())
        )
    finally:
        store.close()
    assert list(frame) == ["id", "revision", "task_id", "project_id", "actor_kind", "actor_id", "event", "changes",
                           "created_at"]
    check_or_write(FRAME_FIXTURE, encode(frame))


def test_fixture_check_catches_drift(tmp_path: Path) -> None:
    """The comparison itself must be able to fail: one changed byte is drift."""
    if REGENERATE:
        pytest.fail("regenerating the fixtures; run again without TASKLOOM_REGENERATE_GOLDEN")
    path = tmp_path / "task_moved.json"
    path.write_bytes(encode(golden_changes(events.TASK_MOVED)).replace(b"deliveryRound", b"delivery_round"))
    with pytest.raises(AssertionError, match="drifted"):
        check_or_write(path, encode(golden_changes(events.TASK_MOVED)))
