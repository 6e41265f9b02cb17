"""Table tests for the loop subscriber's classifier (SPEC §9)."""

from __future__ import annotations

import itertools
from typing import Any, Final

import pytest

from services.subscriber.classify import (
    CONDITIONAL,
    DISPATCH_FIELDS,
    IGNORE,
    WAKE,
    Decision,
    LoopIdentity,
    UnknownNames,
    classify,
)
from shared import events as ev

OWN_AGENT: Final = "worker-1"
DIRECTOR: Final = "Director"
WHO: Final = LoopIdentity(agents=frozenset({OWN_AGENT, "worker-2"}), director=DIRECTOR)

#: Column order of every expectation row below.
ACTORS: Final[dict[str, tuple[str, str]]] = {
    "human": (ev.HUMAN, "ana"),
    "system": (ev.SYSTEM, "system"),
    "claude": ("claude", "someone-else"),
    "own": ("claude", OWN_AGENT),
    "director": ("claude", DIRECTOR),
}

_T, _F = True, False
#: A dispatch event: others wake us, the board, our own agents and the director do not.
DISPATCH: Final = (_T, _F, _T, _F, _F)
NEVER: Final = (_F, _F, _F, _F, _F)
ALWAYS: Final = (_T, _T, _T, _T, _T)

_revisions = itertools.count(1)


def frame(event: str, changes: Any, actor: tuple[str, str]) -> dict[str, Any]:
    """An activity frame as the hub hands it over."""
    kind, actor_id = actor
    revision = next(_revisions)
    return {
        "id": revision,
        "revision": revision,
        "task_id": "8d7f0c7e-0000-4000-8000-000000000001",
        "project_id": "web",
        "actor_kind": kind,
        "actor_id": actor_id,
        "event": event,
        "changes": changes,
        "created_at": "2026-11-01T12:00:00.000Z",
    }


#: One representative row per declared event, built with the real constructors, and what each
#: actor column should get. Written out literally so the table is not derived from the lists.
EXPECTED: Final[dict[str, tuple[dict[str, Any], tuple[bool, ...]]]] = {
    ev.PROJECT_CREATED: (ev.project_created(project="web"), NEVER),
    ev.PROJECT_UPDATED: (ev.project_updated(project="web", fields=["readme"]), NEVER),
    ev.TASK_CREATED: (
        ev.task_created(identifier="WEB-0001", status="todo", priority="medium", acceptance_mode="review"),
        DISPATCH,
    ),
    ev.TASK_UPDATED: (ev.task_updated(fields=["assignee"]), DISPATCH),
    ev.TASK_CLAIMED: (ev.task_claimed(from_="todo", to="in_progress"), NEVER),
    ev.TASK_HEARTBEAT: (ev.task_heartbeat(heartbeat_at="2026-11-01T12:00:00.000Z"), NEVER),
    ev.TASK_MOVED: (ev.task_moved(from_="blocked", to="todo", delivery_round=1), DISPATCH),
    ev.TASK_REOPENED: (ev.task_reopened(from_="done", to="todo", reason="regressed again", delivery_round=2), DISPATCH),
    ev.TASK_RESUMED: (ev.task_resumed(comment_id="c1", from_="awaiting", to="todo"), DISPATCH),
    ev.TASK_ARCHIVED: (ev.task_archived(from_="done", archived_at="2026-11-01T12:00:00.000Z"), NEVER),
    ev.REPORT_WRITTEN: (ev.report_written(round_=1, report_id="r1", delivery_round=1), DISPATCH),
    ev.TASK_DELIVERED: (ev.task_delivered(from_="in_progress", to="in_review", round_=1, report_id="r1"), DISPATCH),
    ev.REPORT_WAIVED: (
        ev.report_waived(from_="in_progress", to="in_review", round_=1, reason="trivial change", delivery_round=1),
        DISPATCH,
    ),
    ev.ACCEPTANCE_CHANGED: (ev.acceptance_changed(added=[{"text": "works"}], revision=2), NEVER),
    ev.ACCEPTANCE_PRUNED: (ev.acceptance_pruned(reason="out of scope", removed=[{"text": "x"}]), NEVER),
    ev.ACCEPTANCE_OVERRIDE: (ev.acceptance_override(from_="review", to="none"), NEVER),
    ev.EPIC_AUTO_START: (ev.epic_auto_start(from_="todo", to="in_progress", child="WEB-0002", source="claim"), NEVER),
    ev.COMMENT_ADDED: (ev.comment_added(comment_id="c1", kind="note"), (_T, _F, _F, _F, _F)),
    ev.RELATION_ADDED: (ev.relation_added(relation_id="l1", type_="blocks", source="a", target="b"), DISPATCH),
    ev.RELATION_REMOVED: (ev.relation_removed(relation_id="l1", type_="blocks", source="a", target="b"), DISPATCH),
    ev.LABEL_GC: (ev.label_gc(archived=["old"], kept=3, mismatched=0, reason="ttl", ttl_days=30), NEVER),
    ev.SESSION_REGISTERED: (ev.session_registered(session_id="s1", seg=1, owner_kind="claude", phase="work"), NEVER),
    ev.SESSION_CLOSED: (ev.session_closed(session_id="s1", status="done"), NEVER),
    ev.PROGRESS: (ev.progress(line="step", seq=1), NEVER),
    ev.ATTACHMENT_ADDED: (
        ev.attachment_added(attachment_id="a1", filename="f", content_type="text/plain", size=1),
        NEVER,
    ),
    ev.ATTACHMENT_UPDATED: (
        ev.attachment_updated(attachment_id="a1", filename="f", content_type="text/plain", size=2),
        NEVER,
    ),
    ev.ATTACHMENT_REMOVED: (
        ev.attachment_removed(attachment_id="a1", filename="f", content_type="text/plain", size=2),
        NEVER,
    ),
    # The historical importer's closing row passes the board suppression (reference §7).
    ev.IMPORT_COMPLETED: (ev.import_completed(cards=3, tasks=12), (_T, _T, _T, _F, _F)),
    # Persisted conditions (actor system): the board noticing is not housekeeping, and a dead
    # worker's card is work whoever the worker was (tests/subscriber/test_conditions_wake.py).
    ev.WIP_EXCEEDED: (ev.wip_exceeded(status="in_progress", count=4, limit=3), NEVER),
    ev.WIP_CLEARED: (ev.wip_cleared(status="in_progress", count=3, limit=3), NEVER),
    ev.LANE_DRAINED: (ev.lane_drained(status="todo", count=0), NEVER),
    ev.LANE_REFILLED: (ev.lane_refilled(status="todo", count=1), NEVER),
    ev.CARD_BLOCKED: (ev.card_blocked(blockers=["WEB-0002"]), NEVER),
    ev.CARD_UNBLOCKED: (ev.card_unblocked(blockers=["WEB-0002"]), ALWAYS),
    ev.TRANSITION_REJECTED: (ev.transition_rejected(from_="todo", to="done", code="INVALID_TRANSITION"), NEVER),
    # This loop names no --wake-on-timeout status.
    ev.STATUS_TIMEOUT: (ev.status_timeout(status="in_review", since="2026-11-01T12:00:00.000Z", max_=60), NEVER),
    ev.CARD_IDLE: (ev.card_idle(since="2026-11-01T12:00:00.000Z", threshold=60), NEVER),
    ev.CLAIM_STALE: (
        ev.claim_stale(claimed_by=OWN_AGENT, heartbeat_at="2026-11-01T12:00:00.000Z", threshold=600), ALWAYS,
    ),
}


def cases(rows: dict[str, tuple[dict[str, Any], tuple[bool, ...]]]) -> list[Any]:
    """Expand event → (changes, row) into one pytest case per actor column."""
    return [
        pytest.param(event, changes, actor, wake, id=f"{event}-{actor}")
        for event, (changes, row) in rows.items()
        for actor, wake in zip(ACTORS, row, strict=True)
    ]


# --- the contract: one declared vocabulary, one decision per name ---------------------------


def test_every_declared_event_is_in_exactly_one_list() -> None:
    for name in ev.EVENTS:
        lists = {"wake": WAKE, "conditional": CONDITIONAL, "ignore": IGNORE}
        homes = [label for label, names in lists.items() if name in names]
        assert len(homes) == 1, f"{name} is in {homes or 'no list'}"


def test_lists_name_only_declared_events() -> None:
    assert (WAKE | CONDITIONAL | IGNORE) <= ev.EVENT_SET
    assert len(WAKE) + len(CONDITIONAL) + len(IGNORE) == len(ev.EVENT_SET)


def test_lists_match_spec() -> None:
    assert WAKE == {
        "task_created", "task_moved", "task_reopened", "task_delivered", "task_resumed",
        "report_written", "report_waived", "relation_added", "relation_removed", "import_completed",
        "card_unblocked", "claim_stale",
    }  # fmt: skip
    assert CONDITIONAL == {"comment_added", "task_updated", "status_timeout"}
    assert ev.WIRE_NOISE <= IGNORE


def test_table_covers_every_declared_event() -> None:
    assert set(EXPECTED) == ev.EVENT_SET


# --- every declared event × every actor -------------------------------------------------------


@pytest.mark.parametrize(("event", "changes", "actor", "wake"), cases(EXPECTED))
def test_every_event_for_every_actor(event: str, changes: dict[str, Any], actor: str, wake: bool) -> None:
    assert classify(frame(event, changes, ACTORS[actor]), WHO).wake is wake


# --- task_moved: the release and awaiting rules ----------------------------------------------

MOVES: Final = {
    # A release wakes even from our own agent or the director: it is the director's answer.
    ("in_progress", "todo"): (_T, _F, _T, _T, _T),
    # A parked worker waits for a human comment; nobody's move to awaiting wakes, a human's neither.
    ("in_progress", "awaiting"): NEVER,
    ("blocked", "awaiting"): NEVER,
    ("awaiting", "todo"): DISPATCH,
    ("todo", "in_progress"): DISPATCH,
    ("in_review", "done"): DISPATCH,
    ("in_review", "in_progress"): DISPATCH,
    ("todo", "backlog"): DISPATCH,
    ("in_progress", "blocked"): DISPATCH,
}


@pytest.mark.parametrize(
    ("move", "actor", "wake"),
    [
        pytest.param(move, actor, wake, id=f"{move[0]}->{move[1]}-{actor}")
        for move, row in MOVES.items()
        for actor, wake in zip(ACTORS, row, strict=True)
    ],
)
def test_task_moved_rules(move: tuple[str, str], actor: str, wake: bool) -> None:
    changes = ev.task_moved(from_=move[0], to=move[1], delivery_round=1)
    assert classify(frame(ev.TASK_MOVED, changes, ACTORS[actor]), WHO).wake is wake


def test_release_and_awaiting_reasons() -> None:
    release = ev.task_moved(from_="in_progress", to="todo", delivery_round=1)
    parked = ev.task_moved(from_="in_progress", to="awaiting", delivery_round=1, question_comment_id="c9")
    assert classify(frame(ev.TASK_MOVED, release, ACTORS["director"]), WHO) == Decision(True, "release")
    assert classify(frame(ev.TASK_MOVED, release, ACTORS["own"]), WHO) == Decision(True, "release")
    assert classify(frame(ev.TASK_MOVED, release, ACTORS["system"]), WHO) == Decision(False, "board")
    assert classify(frame(ev.TASK_MOVED, parked, ACTORS["human"]), WHO) == Decision(False, "awaiting")


# --- task_updated: only fields that change who may pick the card up --------------------------

FIELD_CASES: Final = {
    **{name: True for name in sorted(DISPATCH_FIELDS)},
    "title": False,
    "description": False,
    "priority": False,
    "reporter": False,
    "acceptance_mode": False,
}


@pytest.mark.parametrize("actor", ["human", "claude"])
@pytest.mark.parametrize(("field", "wake"), FIELD_CASES.items())
def test_task_updated_fields(field: str, wake: bool, actor: str) -> None:
    decision = classify(frame(ev.TASK_UPDATED, ev.task_updated(fields=[field]), ACTORS[actor]), WHO)
    assert decision == Decision(wake, "fields")


def test_task_updated_spec_spellings_are_accepted() -> None:
    for name in ("assigneeId", "assigneeKind", "kind", "labels", "meta"):
        assert name in DISPATCH_FIELDS
    for name in ("assignee", "assignee_id", "assignee_kind"):
        assert name in DISPATCH_FIELDS


def test_task_updated_mixed_fields_wake_once_any_meets() -> None:
    changes = ev.task_updated(fields=["title", "labels"], labels=["ui"])
    assert classify(frame(ev.TASK_UPDATED, changes, ACTORS["claude"]), WHO).wake


@pytest.mark.parametrize(
    "changes", [{"fields": []}, {}, {"fields": "assignee"}, {"fields": None}, {"fields": [1, None]}]
)
def test_task_updated_without_usable_fields_is_ignored(changes: dict[str, Any]) -> None:
    assert classify(frame(ev.TASK_UPDATED, changes, ACTORS["human"]), WHO) == Decision(False, "fields")


@pytest.mark.parametrize("actor", ["system", "own", "director"])
def test_task_updated_dispatch_fields_still_suppressed_by_actor(actor: str) -> None:
    changes = ev.task_updated(fields=["assignee"])
    assert not classify(frame(ev.TASK_UPDATED, changes, ACTORS[actor]), WHO).wake


# --- comment_added: questions and humans ------------------------------------------------------

COMMENT_KINDS: Final = {
    # A question is a handoff, so our own worker's question wakes us too (SPEC §9 "except the
    # rules above"); the director's does not: its only waking write is a release.
    "question": (_T, _F, _T, _T, _F),
    **{kind: (_T, _F, _F, _F, _F) for kind in ("note", "discuss", "decision", "confirm", "change", "defect")},
}


@pytest.mark.parametrize(
    ("kind", "actor", "wake"),
    [
        pytest.param(kind, actor, wake, id=f"{kind}-{actor}")
        for kind, row in COMMENT_KINDS.items()
        for actor, wake in zip(ACTORS, row, strict=True)
    ],
)
def test_comment_rules(kind: str, actor: str, wake: bool) -> None:
    changes = ev.comment_added(comment_id="c1", kind=kind)
    assert classify(frame(ev.COMMENT_ADDED, changes, ACTORS[actor]), WHO).wake is wake


def test_comment_reasons() -> None:
    question = ev.comment_added(comment_id="c1", kind="question")
    note = ev.comment_added(comment_id="c2", kind="note")
    assert classify(frame(ev.COMMENT_ADDED, question, ACTORS["own"]), WHO) == Decision(True, "question")
    assert classify(frame(ev.COMMENT_ADDED, question, ACTORS["director"]), WHO) == Decision(False, "director")
    assert classify(frame(ev.COMMENT_ADDED, note, ACTORS["human"]), WHO) == Decision(True, "human")
    assert classify(frame(ev.COMMENT_ADDED, note, ACTORS["claude"]), WHO) == Decision(False, "comment")
    # The epic rollup's summary comment is board housekeeping.
    assert classify(frame(ev.COMMENT_ADDED, question, ACTORS["system"]), WHO) == Decision(False, "board")


def test_an_ask_wakes_once() -> None:
    """The ask writes a question then a move to awaiting: the question wakes, the move does not."""
    question = classify(frame(ev.COMMENT_ADDED, ev.comment_added(comment_id="q1", kind="question"), ACTORS["own"]), WHO)
    parked = ev.task_moved(from_="in_progress", to="awaiting", delivery_round=1, question_comment_id="q1")
    move = classify(frame(ev.TASK_MOVED, parked, ACTORS["own"]), WHO)
    assert (question.wake, move.wake) == (True, False)


# --- actor suppression by id --------------------------------------------------------------------

CREATED: Final = ev.task_created(identifier="WEB-0001", status="todo", priority="low", acceptance_mode="none")


@pytest.mark.parametrize("actor_id", [OWN_AGENT, DIRECTOR, "system", "Orchestrator"])
def test_human_is_never_suppressed(actor_id: str) -> None:
    assert classify(frame(ev.TASK_CREATED, CREATED, (ev.HUMAN, actor_id)), WHO) == Decision(True, "dispatch")


@pytest.mark.parametrize("kind", ["claude", "codex", "pi"])
def test_board_ids_are_suppressed_whatever_the_kind(kind: str) -> None:
    assert classify(frame(ev.TASK_CREATED, CREATED, (kind, "Orchestrator")), WHO) == Decision(False, "board")
    assert classify(frame(ev.TASK_CREATED, CREATED, (kind, "system")), WHO) == Decision(False, "board")


def test_system_kind_is_suppressed_whatever_the_id() -> None:
    assert classify(frame(ev.TASK_DELIVERED, {"rollup": True}, (ev.SYSTEM, "rollup")), WHO) == Decision(False, "board")


def test_historical_import_wakes_but_its_other_rows_do_not() -> None:
    importer = (ev.SYSTEM, "md-import")
    assert classify(frame(ev.IMPORT_COMPLETED, {"cards": 2}, importer), WHO) == Decision(True, "dispatch")
    # The closing row's turn rescans the board, so the rows before it need not wake one each.
    assert classify(frame(ev.TASK_CREATED, CREATED, importer), WHO) == Decision(False, "board")


def test_own_agents_and_director() -> None:
    assert classify(frame(ev.TASK_CREATED, CREATED, ("claude", "worker-2")), WHO) == Decision(False, "own_agent")
    assert classify(frame(ev.TASK_CREATED, CREATED, ACTORS["director"]), WHO) == Decision(False, "director")


def test_without_a_director_that_id_is_just_another_agent() -> None:
    who = LoopIdentity(agents=frozenset({OWN_AGENT}))
    assert classify(frame(ev.TASK_CREATED, CREATED, ("claude", DIRECTOR)), who) == Decision(True, "dispatch")


def test_another_loops_agent_wakes_us() -> None:
    other_loop = LoopIdentity(agents=frozenset({"reviewer-1"}), director=None)
    assert classify(frame(ev.TASK_DELIVERED, {}, ACTORS["own"]), other_loop).wake


def test_identity_accepts_any_iterable_of_agents() -> None:
    who = LoopIdentity(agents=("a", "b", "a"), director="d")  # type: ignore[arg-type]
    assert who.agents == frozenset({"a", "b"})
    assert hash(who) == hash(LoopIdentity(agents=frozenset({"a", "b"}), director="d"))


# --- unknown names and malformed frames: never an error ----------------------------------------


@pytest.mark.parametrize("actor", list(ACTORS))
def test_unknown_event_is_ignored(actor: str) -> None:
    assert classify(frame("task_teleported", {"to": "mars"}, ACTORS[actor]), WHO) == Decision(False, "unknown")


@pytest.mark.parametrize("event", [None, 42, "", ["task_created"]])
def test_missing_or_odd_event_name_is_unknown(event: Any) -> None:
    assert classify({"event": event, "actor_kind": ev.HUMAN}, WHO) == Decision(False, "unknown")


def test_heartbeat_never_wakes() -> None:
    beat = ev.task_heartbeat(heartbeat_at="2026-11-01T12:00:00.000Z")
    for actor in ACTORS.values():
        assert classify(frame(ev.TASK_HEARTBEAT, beat, actor), WHO) == Decision(False, "noise")


@pytest.mark.parametrize(
    "bad",
    [
        {"event": ev.TASK_MOVED, "changes": None, "actor_kind": "claude", "actor_id": "x"},
        {"event": ev.TASK_MOVED, "changes": ["in_progress", "todo"], "actor_kind": "claude", "actor_id": "x"},
        {"event": ev.COMMENT_ADDED, "changes": "question", "actor_kind": "claude", "actor_id": "x"},
        {"event": ev.TASK_CREATED, "changes": {}, "actor_kind": None, "actor_id": ["worker-1"]},
        {"event": ev.TASK_CREATED, "changes": {}, "actor_kind": "claude", "actor_id": {"id": "worker-1"}},
        {"event": ev.TASK_UPDATED},
        {"event": ev.TASK_CREATED},
    ],
)
def test_malformed_frames_do_not_raise(bad: dict[str, Any]) -> None:
    assert isinstance(classify(bad, WHO), Decision)


def test_frame_without_actor_errs_toward_waking() -> None:
    """An unattributed row is nobody we know to suppress; a spare turn only costs a rescan."""
    assert classify({"event": ev.TASK_CREATED, "changes": {}}, WHO) == Decision(True, "dispatch")


def test_unknown_names_log_once() -> None:
    seen = UnknownNames()
    assert seen.first_sighting("task_teleported")
    assert not seen.first_sighting("task_teleported")
    assert seen.first_sighting("task_cloned")
    assert len(seen) == 2


def test_unknown_names_stop_growing_at_the_limit() -> None:
    seen = UnknownNames(limit=2)
    assert seen.first_sighting("a") and seen.first_sighting("b")
    assert not seen.first_sighting("c")
    assert len(seen) == 2
