"""A card's History: its activity rows as a timeline, computed once for every reader (SPEC §8).

The brief's History section (``brief.render``) and ``GET /api/v1/tasks/{ref}/history`` (and so
``taskctl task history``) are two renderings of :func:`timeline`: the same entries, as markdown
lines or as JSON. An agent resuming interrupted work reads the JSON and needs no markdown parsing;
a person reads the brief; neither can drift from the other.

:func:`timeline` is pure (plain dicts in, plain dicts out, no clock); :func:`task_history` reads
the card in one snapshot and computes it. Other cards appear by identifier only, as in the brief.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from .cards import card_snapshot

#: Longest excerpt of free text on one History line; the full text is in its own section.
EXCERPT_CHARS: Final = 120
#: Longest rendering of one before/after value on a History line.
VALUE_CHARS: Final = 80

Card = Mapping[str, Any]
Row = Mapping[str, Any]


# -- small text helpers ------------------------------------------------------------------------


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _quote(text: str, limit: int = EXCERPT_CHARS) -> str:
    """Free text on a History line: one line, clipped, in double quotes."""
    return json.dumps(_clip(one_line(text), limit), ensure_ascii=False)


def _value(value: Any) -> str:
    """One before/after value: ``none``, a quoted string, or compact JSON."""
    if value is None:
        return "none"
    if isinstance(value, str):
        return _quote(value, VALUE_CHARS)
    return _clip(json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": ")), VALUE_CHARS)



def who(kind: str | None, actor_id: str | None) -> str:
    """An actor as people read it: ``worker-1 (claude)``."""
    if actor_id is None:
        return "nobody"
    return f"{actor_id} ({kind})" if kind else str(actor_id)



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
        return f"{verb} {one_line(c.get('filename', '?'))} ({c.get('content_type', '?')}, {c.get('size', '?')} bytes)"

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


def _entry(row: Row, text: str, *, rows: Sequence[Row] = ()) -> dict[str, Any]:
    """One timeline entry; ``rows`` are the rows it folds (a run of heartbeats), else just ``row``."""
    folded = list(rows) or [row]
    return {
        "at": row["created_at"],
        "revision": row.get("revision"),
        "actor": {"kind": row["actor_kind"], "id": row["actor_id"]},
        "event": row["event"],
        "text": text,
        "changes": row.get("changes") or {},  # as stored, even a shape no phrase knows
        "activity_ids": [item.get("id") for item in folded],
        "last_at": folded[-1]["created_at"],
    }


def timeline(card: Card) -> list[dict[str, Any]]:
    """The card's History, oldest first; a run of heartbeats by one actor is one entry.

    An entry is ``{at, revision, actor: {kind, id}, event, text, changes, activity_ids, last_at}``:
    ``text`` is what the brief's History line says after its stamp; ``at``/``revision``/``actor``
    are the stamp (for a run of heartbeats: its first row, with ``last_at`` its last).
    """
    ctx = _Context(card)
    rows: Sequence[Row] = card.get("activities", ())
    entries: list[dict[str, Any]] = []
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
            entries.append(_entry(last if count == 1 else row, what, rows=rows[index:end + 1]))
            ctx.previous = last
            index = end + 1
            continue
        entries.append(_entry(row, describe(row, ctx)))
        ctx.previous = row
        index += 1
    return entries


def history_line(entry: Mapping[str, Any]) -> str:
    """An entry as the brief's History shows it: ``- at · rN · who · text``."""
    revision = entry.get("revision")
    tag = f" · r{revision}" if revision is not None else ""
    actor = entry["actor"]
    return f"- {entry['at']}{tag} · {who(actor['kind'], actor['id'])} · {entry['text']}"


def task_history(conn: Any, ref: str) -> dict[str, Any]:
    """``GET /tasks/{ref}/history``: the card's identity and its timeline, read in one snapshot.

    ``conn`` is the store's read connection (either engine: only the snapshot's SQL runs here).
    """
    card = card_snapshot(conn, ref)
    task = card["task"]
    return {
        "task": {key: task[key] for key in ("id", "identifier", "status", "revision")},
        "items": timeline(card),
        # Set when retention archived earlier rows of this card: the timeline starts after it.
        "archived_through": card.get("archived_through"),
    }
