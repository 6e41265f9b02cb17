"""Card briefs: one card's state and activity rows rendered as markdown (SPEC §8). Pure: no I/O.

The caller hands in plain dicts, already in the order they should appear (the export route reads
them in one snapshot, ordered by creation). The output depends on nothing else, so the same card
state always gives the same bytes: no clock, no randomness, no dict-order surprises.

Other cards appear by identifier only (identifiers never change), never by their title or
status, which would go stale without this card's revision moving. One field depends on other
cards on purpose: ``blocked_by`` is the card's *open* blockers as the task view answers them
(``task["blocked_by"]``, the one rule of conditions/rules.py). A blocker reaching done/canceled,
or reopening, changes it without this card's row moving; the board says so with
``card_unblocked`` / ``card_blocked``, on which the hub re-renders a kept brief. The Relations
section still lists every relation, whatever its source's status.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

# The History section is rendered from the one timeline computation (queries/history.py), which
# GET /tasks/{ref}/history answers as JSON; the small phrasing helpers live with it.
from .queries.history import Card, history_line, one_line, relation_phrase, timeline, who


def _yaml(value: Any) -> str:
    """A front matter scalar or flow list; strings are JSON-quoted, which YAML reads as double-quoted."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml(item) for item in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def _token(value: str | None) -> str:
    """Enum values and identifiers are plain YAML tokens."""
    return "null" if value is None else str(value)


def history_lines(card: Card) -> list[str]:
    """The History section's lines: the card's timeline, oldest first, after a note when retention
    archived the card's earlier events."""
    lines = [history_line(entry) for entry in timeline(card)]
    archived = card.get("archived_through")
    if archived:
        lines.insert(0, f"- _Earlier events (up to revision {archived}) were archived by retention:"
                        " `<data_dir>/archive/activities-*.jsonl.gz` on the board._")
    return lines


#: CommonMark ATX headings and code fences (spec 0.31 §4.2, §4.5), enough to keep bodies in place.
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?=[ \t]|$)")
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}(?=[^`]*$)|~{3,})")


def nested(text: str, depth: int) -> list[str]:
    """Free markdown placed under a heading of level ``depth``.

    Its own ATX headings move ``depth`` levels down (at most 6) so they cannot pose as the brief's
    sections, and a code fence left open is closed so it cannot swallow the sections after it.
    Fenced code is untouched; nothing else changes.
    """
    lines: list[str] = []
    marks = ""  # the open fence's run of backticks or tildes; empty outside code
    for line in str(text).strip("\n").split("\n"):
        if marks:
            if re.match(rf" {{0,3}}{re.escape(marks[0])}{{{len(marks)},}}[ \t]*$", line):
                marks = ""
        elif opener := _FENCE_OPEN.match(line):
            marks = opener.group(1)
        elif heading := _HEADING.match(line):
            line = "#" * min(6, len(heading.group(1)) + depth) + line[heading.end():]
        lines.append(line)
    if marks:
        lines.append(marks)
    return lines


# -- the brief ---------------------------------------------------------------------------------


def _relation_names(card: Card, rel_type: str) -> list[str]:
    """Identifiers of the cards at the source end of ``rel_type`` relations targeting this card."""
    me = card["task"]["id"]
    names = card.get("identifiers", {})
    return [
        names.get(rel["source_id"], rel["source_id"])
        for rel in card.get("relations", ())
        if rel["type"] == rel_type and rel["target_id"] == me
    ]


def front_matter(card: Card) -> list[str]:
    task = card["task"]
    claimed = who(task.get("claimed_by_kind"), task["claimed_by"]) if task.get("claimed_by") else None
    assignee = who(task.get("assignee_kind"), task["assignee_id"]) if task.get("assignee_id") else None
    reporter = who(task.get("reporter_kind"), task["reporter_id"]) if task.get("reporter_id") else None
    pairs: list[tuple[str, str]] = [
        ("identifier", _token(task["identifier"])),
        ("project", _yaml(task["project_id"])),
        ("title", _yaml(task["title"])),
        ("status", _token(task["status"])),
        ("priority", _token(task["priority"])),
        ("kind", _token(task["kind"])),
        ("assignee", _yaml(assignee)),
        ("reporter", _yaml(reporter)),
        ("labels", _yaml(list(task.get("labels") or []))),
        ("parent", "[" + ", ".join(_relation_names(card, "parent")) + "]"),
        ("blocked_by", "[" + ", ".join(task["blocked_by"]) + "]"),
        ("delivery_round", _yaml(task["delivery_round"])),
        ("acceptance_mode", _token(task["acceptance_mode"])),
        ("claimed_by", _yaml(claimed)),
        ("claimed_at", _yaml(task.get("claimed_at"))),
        ("heartbeat_at", _yaml(task.get("heartbeat_at"))),
        ("archived_at", _yaml(task.get("archived_at"))),
        ("revision", _yaml(task["revision"])),
        ("created_at", _yaml(task["created_at"])),
        ("updated_at", _yaml(task["updated_at"])),
    ]
    return ["---", *(f"{key}: {value}" for key, value in pairs), "---"]


def _state_lines(task: Mapping[str, Any]) -> list[str]:
    """A one-glance summary of where the card stands, for a reader resuming it."""
    line = f"**{task['status']}** · round {task['delivery_round']}"
    if task.get("claimed_by"):
        line += f" · claimed by {who(task.get('claimed_by_kind'), task['claimed_by'])} since {task.get('claimed_at')}"
        if task.get("heartbeat_at"):
            line += f", last heartbeat at {task['heartbeat_at']}"
    lines = [line]
    reasons = (("Awaiting", "awaiting_reason"), ("Blocked", "blocked_reason"), ("Report waived", "waiver_reason"))
    for label, key in reasons:
        if task.get(key):
            lines += ["", f"**{label}:** {one_line(task[key])}"]
    return lines


def _section(title: str, body: list[str], empty: str) -> list[str]:
    return ["", f"## {title}", "", *(body or [empty])]


def _acceptance(card: Card) -> list[str]:
    task = card["task"]
    items = list(card.get("acceptance", ()))
    if not items:
        return []
    # Criteria are judged at review, not ticked one by one: a card shows them met once it is done.
    mark = "x" if task["status"] == "done" else " "
    if task["acceptance_mode"] == "review":
        note = "Judged at review: a `confirm` comment from someone other than who delivered accepts them."
    else:
        note = "Acceptance mode `none`: no review is required to finish."
    lines = [note, ""]
    for item in items:
        text_lines = str(item["text"]).strip("\n").split("\n")
        lines.append(f"- [{mark}] {text_lines[0]}")
        lines += [f"      {line}" if line.strip() else "" for line in text_lines[1:]]
    return lines


def _comments(card: Card) -> list[str]:
    lines: list[str] = []
    for comment in card.get("comments", ()):
        if lines:
            lines.append("")
        lines.append(
            f"### {who(comment['actor_kind'], comment['actor_id'])} · {comment['kind']} · "
            f"round {comment['round']} · {comment['created_at']}"
        )
        lines += ["", *nested(comment["body"], 3)]
    return lines


def _relations(card: Card) -> list[str]:
    me = card["task"]["id"]
    names = card.get("identifiers", {})
    return [
        f"- {relation_phrase(rel['type'], rel['source_id'], rel['target_id'], me, lambda ref: names.get(ref, ref))}"
        for rel in card.get("relations", ())
    ]


def _reports(card: Card) -> list[str]:
    lines: list[str] = []
    for report in card.get("reports", ()):
        if lines:
            lines.append("")
        author = who(report["actor_kind"], report["actor_id"])
        lines.append(f"### Round {report['round']} · {author} · {report['created_at']}")
        lines += ["", *nested(report["body"], 3)]
    return lines


def _sessions(card: Card) -> list[str]:
    lines = []
    for session in card.get("sessions", ()):
        line = (
            f"- `{session['id']}` · {who(session['owner_kind'], session['owner_id'])} · seg {session['seg']}"
            f" · phase {session['phase']} · {session['status']} · opened {session['created_at']}"
        )
        if session.get("closed_at"):
            line += f", closed {session['closed_at']}"
        lines.append(line)
    return lines


def _attachments(card: Card) -> list[str]:
    return [
        f"- `{item['id']}` · {one_line(item['filename'])} · {item['content_type']} · {item['size']} bytes"
        f" · sha256 {str(item['sha256'])[:12]} · updated {item['updated_at']}"
        for item in card.get("attachments", ())
    ]


def render(card: Card) -> str:
    """The brief of one card as markdown; ``card`` holds ``task`` and its rows (see the module doc)."""
    task = card["task"]
    lines = front_matter(card)
    lines += ["", f"# {task['identifier']}: {one_line(task['title'])}", "", *_state_lines(task)]
    description = str(task.get("description") or "")
    lines += _section("Description", nested(description, 2) if description.strip() else [], "_No description._")
    lines += _section("Acceptance", _acceptance(card), "_No acceptance criteria._")
    lines += _section("Comments", _comments(card), "_No comments._")
    lines += _section("Relations", _relations(card), "_No relations._")
    lines += _section("Reports", _reports(card), "_No reports._")
    lines += _section("Sessions", _sessions(card), "_No sessions._")
    lines += _section("Attachments", _attachments(card), "_No attachments._")
    lines += _section("History", history_lines(card), "_No activity._")
    return "\n".join(lines) + "\n"
