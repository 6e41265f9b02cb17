"""The brief renderer as a pure function: phrases, History folding, structure, determinism."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from services.board import brief
from services.board.queries import history as timeline_module
from shared import events

ME = "11111111-1111-1111-1111-111111111111"
EPIC = "22222222-2222-2222-2222-222222222222"
OTHER = "33333333-3333-3333-3333-333333333333"
SECTIONS = ["Description", "Acceptance", "Comments", "Relations", "Reports", "Sessions", "Attachments", "History"]
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def task(**overrides: Any) -> dict[str, Any]:
    base = {
        "id": ME, "identifier": "DEMO-0001", "project_id": "demo", "number": 1, "title": "Write the docs",
        "description": "", "kind": "task", "priority": "medium", "status": "todo", "labels": [],
        "assignee_kind": None, "assignee_id": None, "reporter_kind": None, "reporter_id": None,
        "claimed_by_kind": None, "claimed_by": None, "claimed_at": None, "heartbeat_at": None,
        "delivered_by": None, "delivery_round": 1, "acceptance_mode": "review", "waiver_reason": None,
        "awaiting_reason": None, "blocked_reason": None, "idem": None, "meta": {}, "version": 1, "revision": 7,
        "archived_at": None, "created_at": "2030-01-01T10:00:00.000Z", "updated_at": "2030-01-01T10:00:00.000Z",
        "blocked_by": [],  # the task view's open blockers (conditions/rules.py), not the relations
    }
    return {**base, **overrides}


def card(**parts: Any) -> dict[str, Any]:
    return {
        "task": parts.pop("task", task()),
        "acceptance": [], "comments": [], "relations": [], "reports": [], "sessions": [], "attachments": [],
        "activities": [], "identifiers": {ME: "DEMO-0001", EPIC: "DEMO-0002", OTHER: "DEMO-0003"},
        **parts,
    }


_next_id = iter(range(1, 10_000))


def row(event: str, changes: dict[str, Any], *, actor: tuple[str, str] = ("human", "ann"),
        at: str = "2030-01-01T10:00:00.000Z", revision: int | None = None) -> dict[str, Any]:
    number = next(_next_id)
    return {
        "id": number, "revision": number if revision is None else revision, "task_id": ME, "project_id": "demo",
        "actor_kind": actor[0], "actor_id": actor[1], "event": event, "changes": changes, "created_at": at,
    }


def history(rows: list[dict[str, Any]], **parts: Any) -> list[str]:
    return [line.split(" · ", 3)[3] for line in brief.history_lines(card(activities=rows, **parts))]


def sections_of(markdown: str) -> dict[str, str]:
    """Top-level (``## ``) sections outside code fences, by title."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    fence = ""
    for line in markdown.split("\n"):
        if fence:
            if re.match(rf" {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", line):
                fence = ""
        elif opener := re.match(r" {0,3}(`{3,}(?=[^`]*$)|~{3,})", line):
            fence = opener.group(1)
        elif re.match(r" {0,3}##?(?=[ \t]|$)", line):
            current = found.setdefault(line, [])
            continue
        if current is not None:
            current.append(line)
    return {title: "\n".join(body).strip("\n") for title, body in found.items()}


# -- every declared event has words -----------------------------------------------------------

SAMPLES: dict[str, dict[str, Any]] = {
    "project_created": events.project_created(project="demo"),
    "project_updated": events.project_updated(project="demo", fields=["name"]),
    "task_created": events.task_created(identifier="DEMO-0001", status="todo", priority="high", acceptance_mode="review",
                                        labels=["docs"], dictionaries={"assignee": {"kind": "claude", "id": "w1"}}),
    "task_updated": events.task_updated(fields=["title"], before={"title": "A"}, after={"title": "B"}),
    "task_claimed": events.task_claimed(from_="todo", to="in_progress"),
    "task_heartbeat": events.task_heartbeat(heartbeat_at="2030-01-01T10:00:00.000Z"),
    "task_moved": events.task_moved(from_="in_progress", to="blocked", delivery_round=1, blocked_reason="CI is red"),
    "task_reopened": events.task_reopened(from_="done", to="todo", reason="missed a case", delivery_round=2),
    "task_resumed": events.task_resumed(comment_id="c1", from_="awaiting", to="todo"),
    "task_archived": events.task_archived(from_="done", archived_at="2030-01-01T10:00:00.000Z"),
    "report_written": events.report_written(round_=1, report_id="r1", delivery_round=1),
    "task_delivered": events.task_delivered(from_="in_progress", to="in_review", round_=1, report_id="r1"),
    "report_waived": events.report_waived(from_="in_progress", to="in_review", round_=1, reason="trivial fix",
                                          delivery_round=1),
    "acceptance_changed": events.acceptance_changed(added=[{"id": "a1", "text": "It works"}], revision=3),
    "acceptance_pruned": events.acceptance_pruned(reason="out of scope", removed=[{"id": "a1", "text": "It works"}]),
    "acceptance_override": events.acceptance_override(from_="review", to="none", reason="docs only"),
    "epic_auto_start": events.epic_auto_start(from_="todo", to="in_progress", child="DEMO-0004", source="claim"),
    "comment_added": events.comment_added(comment_id="c1", kind="note"),
    "relation_added": events.relation_added(relation_id="r1", type_="blocks", source=OTHER, target=ME),
    "relation_removed": events.relation_removed(relation_id="r1", type_="blocks", source=OTHER, target=ME),
    "label_gc": events.label_gc(archived=["old"], kept=2, mismatched=0, reason="ttl", ttl_days=30),
    "session_registered": events.session_registered(session_id="s1", seg=1, owner_kind="claude", phase="work"),
    "session_closed": events.session_closed(session_id="s1", status="done"),
    "progress": events.progress(line="half way", seq=1),
    "attachment_added": events.attachment_added(attachment_id="f1", filename="a.txt", content_type="text/plain", size=3),
    "attachment_updated": events.attachment_updated(attachment_id="f1", filename="a.txt", content_type="text/plain",
                                                    size=4),
    "attachment_removed": events.attachment_removed(attachment_id="f1", filename="a.txt", content_type="text/plain",
                                                    size=4),
    "import_completed": events.import_completed(cards=3, tasks=2),
    "wip_exceeded": events.wip_exceeded(status="in_progress", count=4, limit=3),
    "wip_cleared": events.wip_cleared(status="in_progress", count=3, limit=3),
    "lane_drained": events.lane_drained(status="todo", count=0),
    "lane_refilled": events.lane_refilled(status="todo", count=1),
    "card_blocked": events.card_blocked(blockers=["DEMO-0003"]),
    "card_unblocked": events.card_unblocked(blockers=["DEMO-0003"]),
    "transition_rejected": events.transition_rejected(from_="todo", to="in_progress", code="DEPENDENCY_OPEN"),
    "status_timeout": events.status_timeout(status="in_review", since="2030-01-01T10:00:00.000Z", max_=86400),
    "card_idle": events.card_idle(since="2030-01-01T10:00:00.000Z", threshold=3600),
    "claim_stale": events.claim_stale(claimed_by="w1", heartbeat_at="2030-01-01T10:00:00.000Z", threshold=600),
}


def test_every_declared_event_has_a_phrase_and_a_sample() -> None:
    assert set(timeline_module.PHRASES) == set(events.EVENTS)
    assert set(SAMPLES) == set(events.EVENTS)


def test_every_phrase_reads_the_keys_its_constructor_writes() -> None:
    comments = [{"id": "c1", "kind": "note", "body": "Yes, go ahead", "actor_kind": "human", "actor_id": "ann",
                 "round": 1, "created_at": "2030-01-01T10:00:00.000Z"}]
    for name, changes in SAMPLES.items():
        (line,) = history([row(name, changes)], comments=comments)
        assert "?" not in line, (name, line)  # a "?" is a key the phrase expected and did not find
        assert not line.startswith(f"{name} {{"), (name, line)  # no fallback to the raw row


def test_unknown_event_and_odd_rows_fall_back_to_the_raw_row() -> None:
    lines = history([
        row("card_teleported", {"to": "mars"}),
        row("task_updated", {"fields": 7}),
        row("task_moved", ["not", "a", "dict"]),
    ])
    assert lines == [
        'card_teleported {"to": "mars"}',
        'task_updated {"fields": 7}',
        'task_moved ["not", "a", "dict"]',
    ]


# -- History phrasing ----------------------------------------------------------------------------


def test_updates_show_before_and_after_and_name_long_fields() -> None:
    lines = history([
        row("task_updated", events.task_updated(
            fields=["title", "description", "priority", "labels"],
            before={"title": "Old", "priority": "low", "labels": []},
            after={"title": "New \"quoted\"", "priority": "urgent", "labels": ["a", "b"]},
        )),
        row("task_updated", events.task_updated(
            fields=["assignee_kind", "assignee_id"],
            before={"assignee_kind": None, "assignee_id": None},
            after={"assignee_kind": "claude", "assignee_id": "w1"},
        )),
    ])
    assert lines == [
        'updated title: "Old" → "New \\"quoted\\""; description (changed); priority: "low" → "urgent"; '
        'labels: [] → ["a", "b"]',
        "updated assignee: none → w1 (claude)",
    ]


def test_heartbeats_fold_into_one_line_per_run() -> None:
    worker = ("claude", "w1")
    rows = [
        row("task_claimed", events.task_claimed(from_="todo", to="in_progress"), actor=worker),
        *[row("task_heartbeat", {}, actor=worker, at=f"2030-01-01T10:0{n}:00.000Z") for n in range(1, 5)],
        row("comment_added", events.comment_added(comment_id="x", kind="note"), actor=worker),
        row("task_heartbeat", {}, actor=worker, at="2030-01-01T10:09:00.000Z"),
        row("task_heartbeat", {}, actor=("claude", "w2"), at="2030-01-01T10:10:00.000Z"),
    ]
    lines = brief.history_lines(card(activities=rows))
    assert len(lines) == 5
    assert lines[1].startswith("- 2030-01-01T10:01:00.000Z ·")
    assert lines[1].endswith("w1 (claude) · 4 heartbeats, last at 2030-01-01T10:04:00.000Z")
    assert lines[3].endswith("w1 (claude) · heartbeat") and "10:09" in lines[3]
    assert lines[4].endswith("w2 (claude) · heartbeat")


def test_question_and_answer_read_once_each() -> None:
    comments = [
        {"id": "q", "kind": "question", "body": "Which\nprefix?", "actor_kind": "claude", "actor_id": "w1", "round": 1,
         "created_at": "2030-01-01T10:00:00.000Z"},
        {"id": "a", "kind": "note", "body": "Use /api/v1.", "actor_kind": "human", "actor_id": "ann", "round": 1,
         "created_at": "2030-01-01T10:01:00.000Z"},
    ]
    lines = history([
        row("comment_added", events.comment_added(comment_id="q", kind="question")),
        row("task_moved", events.task_moved(from_="in_progress", to="awaiting", delivery_round=1,
                                            awaiting_reason="Which prefix?", question_comment_id="q")),
        row("comment_added", events.comment_added(comment_id="a", kind="note")),
        row("task_resumed", events.task_resumed(comment_id="a", from_="awaiting", to="todo")),
        row("task_resumed", events.task_resumed(comment_id="a", from_="awaiting", to="todo")),
    ], comments=comments)
    assert lines == [
        'asked: "Which prefix?"',
        'moved in_progress → awaiting: "Which prefix?"',
        'commented (note): "Use /api/v1."',
        "resumed (awaiting → todo) on that answer",
        'resumed (awaiting → todo) on the answer "Use /api/v1."',
    ]


def test_relations_read_from_this_cards_end_by_identifier() -> None:
    lines = history([
        row("relation_added", events.relation_added(relation_id="1", type_="parent", source=EPIC, target=ME)),
        row("relation_added", events.relation_added(relation_id="2", type_="blocks", source=ME, target=OTHER)),
        row("relation_removed", events.relation_removed(relation_id="3", type_="review_of", source=OTHER, target=ME)),
        row("relation_added", events.relation_added(relation_id="4", type_="related", source="DEMO-0003", target="DEMO-0001")),
    ])
    assert lines == [
        "added relation: child of DEMO-0002",
        "added relation: blocks DEMO-0003",
        "removed relation: reviewed by DEMO-0003",
        "added relation: related to DEMO-0003",
    ]


def test_long_text_is_one_clipped_line() -> None:
    comments = [{"id": "c", "kind": "discuss", "body": "word " * 100 + "\n\nend", "actor_kind": "human",
                 "actor_id": "ann", "round": 1, "created_at": "2030-01-01T10:00:00.000Z"}]
    (line,) = history([row("comment_added", events.comment_added(comment_id="c", kind="discuss"))], comments=comments)
    excerpt = json.loads(line.split(": ", 1)[1])
    assert len(excerpt) == timeline_module.EXCERPT_CHARS and excerpt.endswith("…") and "\n" not in excerpt


def test_a_row_without_revision_has_no_revision_tag() -> None:
    rows = [row("progress", events.progress(line="x", seq=1))]
    rows[0]["revision"] = None
    (line,) = brief.history_lines(card(activities=rows))
    assert line == '- 2030-01-01T10:00:00.000Z · ann (human) · progress: "x"'


# -- the document --------------------------------------------------------------------------------


def test_an_empty_card_has_every_section_saying_so() -> None:
    markdown = brief.render(card())
    found = sections_of(markdown)
    assert list(found) == ["# DEMO-0001: Write the docs", *(f"## {name}" for name in SECTIONS)]
    for name in SECTIONS:
        assert found[f"## {name}"].startswith("_No "), name
    assert markdown.endswith("\n") and not markdown.endswith("\n\n")


def test_front_matter_quotes_free_text_as_json_strings() -> None:
    tricky = 'Fix: "quotes", colons\nand # hashes'
    markdown = brief.render(card(
        task=task(title=tricky, labels=["true", "v1.2"], assignee_kind="claude", assignee_id="w: 1",
                  blocked_by=["DEMO-0003"]),
        relations=[{"id": "r", "type": "parent", "source_id": EPIC, "target_id": ME, "created_at": "x"},
                   {"id": "s", "type": "blocks", "source_id": OTHER, "target_id": ME, "created_at": "x"},
                   {"id": "t", "type": "blocks", "source_id": ME, "target_id": EPIC, "created_at": "x"}],
    ))
    head = markdown.split("---\n")[1]
    fields = dict(line.split(": ", 1) for line in head.strip().split("\n"))
    assert list(fields) == [
        "identifier", "project", "title", "status", "priority", "kind", "assignee", "reporter", "labels", "parent",
        "blocked_by", "delivery_round", "acceptance_mode", "claimed_by", "claimed_at", "heartbeat_at", "archived_at",
        "revision", "created_at", "updated_at",
    ]
    assert json.loads(fields["title"]) == tricky
    assert json.loads(fields["labels"]) == ["true", "v1.2"]
    assert json.loads(fields["assignee"]) == "w: 1 (claude)"
    assert fields["reporter"] == "null" and fields["revision"] == "7"
    assert fields["parent"] == "[DEMO-0002]" and fields["blocked_by"] == "[DEMO-0003]"
    assert "# DEMO-0001: Fix: \"quotes\", colons and # hashes\n" in markdown


def test_blocked_by_is_the_open_blockers_while_relations_list_every_blocks() -> None:
    """The front matter reads the task view's ``blocked_by``; a done blocker's relation stays listed."""
    relations = [{"id": "s", "type": "blocks", "source_id": OTHER, "target_id": ME, "created_at": "x"},
                 {"id": "t", "type": "blocks", "source_id": EPIC, "target_id": ME, "created_at": "x"}]
    for open_blockers in ([], ["DEMO-0003"], ["DEMO-0002", "DEMO-0003"]):
        markdown = brief.render(card(task=task(blocked_by=open_blockers), relations=relations))
        assert f"\nblocked_by: [{', '.join(open_blockers)}]\n" in markdown
        assert sections_of(markdown)["## Relations"] == "- blocked by DEMO-0003\n- blocked by DEMO-0002"


def test_bodies_cannot_pose_as_sections() -> None:
    description = "# Goal\n\n## History\n\n```sh\n# a shell comment\n## still code\n```\n\n~~~\n## unclosed fence"
    comment = {"id": "c", "kind": "note", "body": "## Acceptance\n###### deep", "actor_kind": "human",
               "actor_id": "ann", "round": 1, "created_at": "2030-01-01T10:00:00.000Z"}
    markdown = brief.render(card(task=task(description=description), comments=[comment]))
    assert list(sections_of(markdown))[1:] == [f"## {name}" for name in SECTIONS]
    body = sections_of(markdown)["## Description"]
    assert body.split("\n") == [
        "### Goal", "", "#### History", "", "```sh", "# a shell comment", "## still code", "```", "", "~~~",
        "## unclosed fence", "~~~",
    ]
    assert "##### Acceptance\n###### deep" in markdown


def test_acceptance_items_are_checked_once_the_card_is_done() -> None:
    items = [{"id": "a", "position": 1, "text": "It works\non two lines", "created_at": "x"},
             {"id": "b", "position": 2, "text": "It is fast", "created_at": "x"}]
    open_card = sections_of(brief.render(card(acceptance=items)))["## Acceptance"]
    assert "- [ ] It works\n      on two lines\n- [ ] It is fast" in open_card
    assert "confirm" in open_card
    done = sections_of(brief.render(card(task=task(status="done"), acceptance=items)))["## Acceptance"]
    assert "- [x] It works" in done and "- [x] It is fast" in done


def test_the_state_line_says_who_holds_the_card_and_why_it_waits() -> None:
    markdown = brief.render(card(task=task(
        status="blocked", claimed_by_kind="claude", claimed_by="w1", claimed_at="2030-01-01T10:00:00.000Z",
        heartbeat_at="2030-01-01T10:05:00.000Z", blocked_reason="CI\nis red", delivery_round=2,
    )))
    assert ("**blocked** · round 2 · claimed by w1 (claude) since 2030-01-01T10:00:00.000Z, "
            "last heartbeat at 2030-01-01T10:05:00.000Z\n\n**Blocked:** CI is red\n") in markdown


def full_card() -> dict[str, Any]:
    comments = [{"id": "c1", "kind": "question", "body": "Why?", "actor_kind": "claude", "actor_id": "w1",
                 "round": 1, "created_at": "2030-01-01T10:03:00.000Z"}]
    return card(
        task=task(status="in_progress", labels=["docs"], description="Do it."),
        acceptance=[{"id": "a", "position": 1, "text": "Done right", "created_at": "2030-01-01T10:01:00.000Z"}],
        comments=comments,
        relations=[{"id": "r", "type": "related", "source_id": ME, "target_id": OTHER,
                    "created_at": "2030-01-01T10:02:00.000Z"}],
        reports=[{"id": "p", "round": 1, "body": "Report.", "actor_kind": "claude", "actor_id": "w1",
                  "created_at": "2030-01-01T10:04:00.000Z"}],
        sessions=[{"id": "s", "owner_kind": "claude", "owner_id": "w1", "seg": 1, "phase": "work", "status": "open",
                   "created_at": "2030-01-01T10:05:00.000Z", "updated_at": "2030-01-01T10:05:00.000Z",
                   "closed_at": None}],
        attachments=[{"id": "f", "filename": "a.txt", "content_type": "text/plain", "size": 3, "sha256": "ab" * 32,
                      "created_at": "2030-01-01T10:06:00.000Z", "updated_at": "2030-01-01T10:06:00.000Z"}],
        activities=[row(name, changes, at="2030-01-01T10:07:00.000Z") for name, changes in SAMPLES.items()],
    )


def test_same_input_same_bytes_and_no_clock() -> None:
    first = full_card()
    markdown = brief.render(first)
    assert brief.render(copy.deepcopy(first)) == markdown
    reordered = {key: first[key] for key in reversed(list(first))}
    assert brief.render(reordered) == markdown
    # Every timestamp in the brief comes from the card: nothing says "now".
    given_stamps = set(TIMESTAMP.findall(json.dumps(first)))
    assert set(TIMESTAMP.findall(markdown)) <= given_stamps
    untouched = copy.deepcopy(first)
    brief.render(first)
    assert first == untouched  # rendering never mutates its input


@settings(max_examples=200)
@given(
    description=st.text(alphabet="#`~ \na-", max_size=80),
    body=st.text(alphabet="#`~ \nb", min_size=1, max_size=60),
)
def test_arbitrary_markdown_bodies_keep_the_sections_intact(description: str, body: str) -> None:
    comment = {"id": "c", "kind": "note", "body": body, "actor_kind": "human", "actor_id": "ann", "round": 1,
               "created_at": "2030-01-01T10:00:00.000Z"}
    report = {"id": "p", "round": 1, "body": body, "actor_kind": "human", "actor_id": "ann",
              "created_at": "2030-01-01T10:00:00.000Z"}
    markdown = brief.render(card(task=task(description=description), comments=[comment], reports=[report]))
    assert list(sections_of(markdown)) == ["# DEMO-0001: Write the docs", *(f"## {name}" for name in SECTIONS)]
    assert brief.render(card(task=task(description=description), comments=[comment], reports=[report])) == markdown
