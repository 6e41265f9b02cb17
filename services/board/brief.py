"""Card briefs: one card's state and activity rows rendered as markdown (SPEC §8). Pure: no I/O.

The caller hands in plain dicts, already in the order they should appear (the export route reads
them in one snapshot, ordered by creation). The output depends on nothing else, so the same card
state always gives the same bytes: no clock, no randomness, no dict-order surprises.

What a brief shows is a function of the card's own revision: other cards appear by identifier
only (identifiers never change), never by their title or status, which would go stale without
this card's revision moving.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

#: Longest excerpt of free text on one History line; the full text is in its own section.
EXCERPT_CHARS: Final = 120
#: Longest rendering of one before/after value on a History line.
VALUE_CHARS: Final = 80

Card = Mapping[str, Any]
Row = Mapping[str, Any]


# -- small text helpers ------------------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _quote(text: str, limit: int = EXCERPT_CHARS) -> str:
    """Free text on a History line: one line, clipped, in double quotes."""
    return json.dumps(_clip(_one_line(text), limit), ensure_ascii=False)


def _value(value: Any) -> str:
    """One before/after value: ``none``, a quoted string, or compact JSON."""
    if value is None:
        return "none"
    if isinstance(value, str):
        return _quote(value, VALUE_CHARS)
    return _clip(json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": ")), VALUE_CHARS)


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


def who(kind: str | None, actor_id: str | None) -> str:
    """An actor as people read it: ``worker-1 (claude)``."""
    if actor_id is None:
        return "nobody"
    return f"{actor_id} ({kind})" if kind else str(actor_id)


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


# -- relations ---------------------------------------------------------------------------------

#: How a relation reads from each end. The row's source relates to its target:
#: ``blocks`` source blocks target; ``parent`` source is the epic of target; ``review_of`` source
#: is the review card of target.
_FROM_SOURCE: Final = {"blocks": "blocks", "parent": "parent of", "related": "related to", "review_of": "review of"}
_FROM_TARGET: Final = {
    "blocks": "blocked by", "parent": "child of", "related": "related to", "review_of": "reviewed by",
}


def relation_phrase(rel_type: str, source: str, target: str, me: str, name: Callable[[str], str]) -> str:
    """``blocked by DEMO-0003`` from this card's point of view."""
    if target == me or name(target) == name(me):
        return f"{_FROM_TARGET.get(rel_type, rel_type + ' from')} {name(source)}"
    if source == me or name(source) == name(me):
        return f"{_FROM_SOURCE.get(rel_type, rel_type)} {name(target)}"
    return f"{name(source)} {_FROM_SOURCE.get(rel_type, rel_type)} {name(target)}"


# -- history -----------------------------------------------------------------------------------


class _Context:
    """What History lines may look up: comments by id, and identifiers of other cards."""

    def __init__(self, card: Card) -> None:
        self.task = card["task"]
        self.comments = {comment["id"]: comment for comment in card.get("comments", ())}
        self.identifiers: Mapping[str, str] = card.get("identifiers", {})
        self.previous: Row | None = None

    def name(self, task_ref: str) -> str:
        return self.identifiers.get(task_ref, task_ref)

    def follows_comment(self, comment_id: str | None) -> bool:
        """Whether the line just before is the ``comment_added`` of this comment (one command wrote both)."""
        row = self.previous
        return bool(comment_id) and row is not None and row["event"] == "comment_added" and (
            (row.get("changes") or {}).get("commentId") == comment_id
        )

    def comment_excerpt(self, comment_id: str | None) -> str | None:
        comment = self.comments.get(comment_id) if comment_id else None
        return _quote(comment["body"]) if comment else None


def _arrow(c: Row) -> str:
    return f"{c.get('from', '?')} → {c.get('to', '?')}"


def _reason(text: Any) -> str:
    return f": {_quote(text)}" if text else ""


def _items(entries: Iterable[Any]) -> str:
    shown = []
    for entry in entries:
        if isinstance(entry, Mapping):
            text = entry.get("text")
            shown.append(_quote(text) if text else str(entry.get("id", "?")))
        else:
            shown.append(_quote(str(entry)))
    return "; ".join(shown) if shown else "nothing"


def _task_created(c: Row, ctx: _Context) -> str:
    parts = [f"priority {c.get('priority', '?')}", f"acceptance {c.get('acceptance_mode', '?')}"]
    if c.get("labels"):
        parts.append("labels [" + ", ".join(c["labels"]) + "]")
    assignee = (c.get("dictionaries") or {}).get("assignee")
    if isinstance(assignee, Mapping):
        parts.append("assignee " + who(assignee.get("kind"), assignee.get("id")))
    return f"created in {c.get('status', '?')}: {', '.join(parts)}"


def _task_updated(c: Row, ctx: _Context) -> str:
    fields = list(c.get("fields") or [])
    before = c.get("before") or {}
    after = c.get("after") or {}
    parts: list[str] = []
    for person in ("assignee", "reporter"):
        kind, ident = f"{person}_kind", f"{person}_id"
        if ident in fields and ident in before and ident in after:
            old = who(before.get(kind, ctx.task.get(kind)), before[ident]) if before[ident] is not None else "none"
            new = who(after.get(kind, ctx.task.get(kind)), after[ident]) if after[ident] is not None else "none"
            parts.append(f"{person}: {old} → {new}")
            fields = [name for name in fields if name not in (kind, ident)]
    for name in fields:
        if name in before and name in after:
            parts.append(f"{name}: {_value(before[name])} → {_value(after[name])}")
        else:
            parts.append(f"{name} (changed)")
    return "updated " + ("; ".join(parts) if parts else "nothing")


def _task_claimed(c: Row, ctx: _Context) -> str:
    text = "re-claimed" if c.get("from") == c.get("to") else "claimed"
    text += f" ({_arrow(c)})"
    if c.get("stoleFrom"):
        text += f", taking it from {c['stoleFrom']}{_reason(c.get('reason'))}"
    if c.get("forced"):
        text += f", forced past open blockers{'' if c.get('stoleFrom') else _reason(c.get('reason'))}"
    return text


def _task_heartbeat(c: Row, ctx: _Context) -> str:
    return "heartbeat"


def _task_moved(c: Row, ctx: _Context) -> str:
    text = f"moved {_arrow(c)}"
    if c.get("from") == "in_review" and c.get("to") != "done" and c.get("deliveryRound"):
        text += f", round {c['deliveryRound']} begins"
    reason = _reason(c.get("awaitingReason") or c.get("blockedReason"))
    text += reason
    if c.get("forced"):
        text += f", forced past open blockers{_reason(c.get('reason'))}"
    question_id = c.get("questionCommentId")
    if question_id and not ctx.follows_comment(question_id):
        question = ctx.comment_excerpt(question_id)
        if question and reason != f": {question}":
            text += f"; question: {question}"
    return text


def _task_reopened(c: Row, ctx: _Context) -> str:
    return f"reopened ({_arrow(c)}), round {c.get('deliveryRound', '?')} begins{_reason(c.get('reason'))}"


def _task_resumed(c: Row, ctx: _Context) -> str:
    text = f"resumed ({_arrow(c)})"
    if ctx.follows_comment(c.get("commentId")):
        return text + " on that answer"
    answer = ctx.comment_excerpt(c.get("commentId"))
    return text + (f" on the answer {answer}" if answer else "")


def _task_archived(c: Row, ctx: _Context) -> str:
    return f"archived (was {c.get('from', '?')})"


def _report_written(c: Row, ctx: _Context) -> str:
    return f"wrote the report for round {c.get('round', '?')}"


def _task_delivered(c: Row, ctx: _Context) -> str:
    text = f"delivered round {c.get('round', '?')} ({_arrow(c)})"
    if c.get("rollup"):
        text += f", epic rollup ({c.get('canceled', 0)} canceled children)"
    if c.get("forced"):
        text += f", forced past open blockers{_reason(c.get('reason'))}"
    return text


def _report_waived(c: Row, ctx: _Context) -> str:
    forced = ", forced past open blockers" if c.get("forced") else ""
    return f"waived the report for round {c.get('round', '?')} ({_arrow(c)}){_reason(c.get('reason'))}{forced}"


def _acceptance_changed(c: Row, ctx: _Context) -> str:
    return f"added acceptance criteria: {_items(c.get('added') or [])}"


def _acceptance_pruned(c: Row, ctx: _Context) -> str:
    reason = c.get("reason")
    because = f", because {_quote(reason)}" if reason else ""
    return f"removed acceptance criteria: {_items(c.get('removed') or [])}{because}"


def _acceptance_override(c: Row, ctx: _Context) -> str:
    return f"changed acceptance mode ({_arrow(c)}){_reason(c.get('reason'))}"


def _epic_auto_start(c: Row, ctx: _Context) -> str:
    return f"started automatically ({_arrow(c)}) by child {ctx.name(str(c.get('child', '?')))} ({c.get('source', '?')})"


def _comment_added(c: Row, ctx: _Context) -> str:
    kind = c.get("kind", "note")
    excerpt = ctx.comment_excerpt(c.get("commentId"))
    head = "asked" if kind == "question" else f"commented ({kind})"
    return f"{head}: {excerpt}" if excerpt else head


def _relation(verb: str) -> Callable[[Row, _Context], str]:
    def render(c: Row, ctx: _Context) -> str:
        phrase = relation_phrase(
            str(c.get("type", "?")), str(c.get("source", "?")), str(c.get("target", "?")), ctx.task["id"], ctx.name
        )
        return f"{verb} relation: {phrase}"

    return render


def _label_gc(c: Row, ctx: _Context) -> str:
    return f"archived unused labels: {', '.join(c.get('archived') or []) or 'none'}"


def _session_registered(c: Row, ctx: _Context) -> str:
    return (
        f"registered session {c.get('sessionId', '?')} "
        f"(seg {c.get('seg', '?')}, {c.get('ownerKind', '?')}, phase {c.get('phase', '?')})"
    )


def _session_closed(c: Row, ctx: _Context) -> str:
    return f"closed session {c.get('sessionId', '?')} ({c.get('status', '?')})"


def _progress(c: Row, ctx: _Context) -> str:
    return f"progress: {_quote(c.get('line', ''))}"


def _attachment(verb: str) -> Callable[[Row, _Context], str]:
    def render(c: Row, ctx: _Context) -> str:
        return f"{verb} {_one_line(c.get('filename', '?'))} ({c.get('content_type', '?')}, {c.get('size', '?')} bytes)"

    return render


def _project(verb: str) -> Callable[[Row, _Context], str]:
    def render(c: Row, ctx: _Context) -> str:
        fields = c.get("fields")
        return f"{verb} project {c.get('project', '?')}" + (f" ({', '.join(fields)})" if fields else "")

    return render


def _import_completed(c: Row, ctx: _Context) -> str:
    counters = ", ".join(f"{key} {c[key]}" for key in sorted(c))
    return "import completed" + (f" ({counters})" if counters else "")


def _wip(verb: str) -> Callable[[Row, _Context], str]:
    def render(c: Row, ctx: _Context) -> str:
        return f"{c.get('status', '?')} {verb} its WIP limit ({c.get('count', '?')} / {c.get('limit', '?')})"

    return render


def _lane(verb: str) -> Callable[[Row, _Context], str]:
    def render(c: Row, ctx: _Context) -> str:
        return f"{c.get('status', '?')} {verb} ({c.get('count', '?')} cards)"

    return render


def _blockers(verb: str) -> Callable[[Row, _Context], str]:
    def render(c: Row, ctx: _Context) -> str:
        names = c.get("blockers")
        return f"{verb} by {', '.join(map(str, names)) if names else 'nothing open'}"

    return render


def _transition_rejected(c: Row, ctx: _Context) -> str:
    return f"refused {_arrow(c)} ({c.get('code', '?')})"


def _status_timeout(c: Row, ctx: _Context) -> str:
    return f"in {c.get('status', '?')} since {c.get('since', '?')}, past its {c.get('max', '?')} s"


def _card_idle(c: Row, ctx: _Context) -> str:
    return f"idle since {c.get('since', '?')} (threshold {c.get('threshold', '?')} s)"


def _claim_stale(c: Row, ctx: _Context) -> str:
    return (
        f"claim by {c.get('claimed_by', '?')} went stale: last heartbeat {c.get('heartbeat_at', '?')}"
        f" (threshold {c.get('threshold', '?')} s)"
    )


#: One phrase per declared event; tests/unit/test_brief.py holds this equal to ``shared.events.EVENTS``.
PHRASES: Final[dict[str, Callable[[Row, _Context], str]]] = {
    "project_created": _project("created"),
    "project_updated": _project("updated"),
    "task_created": _task_created,
    "task_updated": _task_updated,
    "task_claimed": _task_claimed,
    "task_heartbeat": _task_heartbeat,
    "task_moved": _task_moved,
    "task_reopened": _task_reopened,
    "task_resumed": _task_resumed,
    "task_archived": _task_archived,
    "report_written": _report_written,
    "task_delivered": _task_delivered,
    "report_waived": _report_waived,
    "acceptance_changed": _acceptance_changed,
    "acceptance_pruned": _acceptance_pruned,
    "acceptance_override": _acceptance_override,
    "epic_auto_start": _epic_auto_start,
    "comment_added": _comment_added,
    "relation_added": _relation("added"),
    "relation_removed": _relation("removed"),
    "label_gc": _label_gc,
    "session_registered": _session_registered,
    "session_closed": _session_closed,
    "progress": _progress,
    "attachment_added": _attachment("attached"),
    "attachment_updated": _attachment("replaced attachment"),
    "attachment_removed": _attachment("removed attachment"),
    "import_completed": _import_completed,
    "wip_exceeded": _wip("exceeded"),
    "wip_cleared": _wip("is back within"),
    "lane_drained": _lane("drained"),
    "lane_refilled": _lane("refilled"),
    "card_blocked": _blockers("blocked"),
    "card_unblocked": _blockers("unblocked; was blocked"),
    "transition_rejected": _transition_rejected,
    "status_timeout": _status_timeout,
    "card_idle": _card_idle,
    "claim_stale": _claim_stale,
}


def describe(row: Row, ctx: _Context) -> str:
    """What one activity row did, in words; an unknown event shows its name and raw changes."""
    changes = row.get("changes") or {}
    phrase = PHRASES.get(row["event"])
    if phrase is not None and isinstance(changes, Mapping):
        try:
            return phrase(changes, ctx)
        except (AttributeError, KeyError, TypeError, ValueError):
            pass  # a row of an unexpected shape must not make the card unexportable
    return f"{row['event']} {_clip(json.dumps(changes, ensure_ascii=False, sort_keys=True), EXCERPT_CHARS)}"


def _stamp(row: Row) -> str:
    revision = row.get("revision")
    tag = f" · r{revision}" if revision is not None else ""
    return f"{row['created_at']}{tag} · {who(row['actor_kind'], row['actor_id'])}"


def history_lines(card: Card) -> list[str]:
    """The timeline, oldest first; a run of heartbeats by one actor is one line."""
    ctx = _Context(card)
    rows: Sequence[Row] = card.get("activities", ())
    lines: list[str] = []
    index = 0
    while index < len(rows):
        row = rows[index]
        if row["event"] == "task_heartbeat":
            end = index
            while (
                end + 1 < len(rows)
                and rows[end + 1]["event"] == "task_heartbeat"
                and (rows[end + 1]["actor_kind"], rows[end + 1]["actor_id"]) == (row["actor_kind"], row["actor_id"])
            ):
                end += 1
            last = rows[end]
            count = end - index + 1
            what = "heartbeat" if count == 1 else f"{count} heartbeats, last at {last['created_at']}"
            lines.append(f"- {_stamp(last if count == 1 else row)} · {what}")
            ctx.previous = last
            index = end + 1
            continue
        lines.append(f"- {_stamp(row)} · {describe(row, ctx)}")
        ctx.previous = row
        index += 1
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
        ("blocked_by", "[" + ", ".join(_relation_names(card, "blocks")) + "]"),
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
            lines += ["", f"**{label}:** {_one_line(task[key])}"]
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
        f"- `{item['id']}` · {_one_line(item['filename'])} · {item['content_type']} · {item['size']} bytes"
        f" · sha256 {str(item['sha256'])[:12]} · updated {item['updated_at']}"
        for item in card.get("attachments", ())
    ]


def render(card: Card) -> str:
    """The brief of one card as markdown; ``card`` holds ``task`` and its rows (see the module doc)."""
    task = card["task"]
    lines = front_matter(card)
    lines += ["", f"# {task['identifier']}: {_one_line(task['title'])}", "", *_state_lines(task)]
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
