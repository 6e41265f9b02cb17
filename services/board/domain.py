"""Domain vocabulary of the board: statuses and their graph, kinds, priorities, limits (SPEC §4)."""

from __future__ import annotations

from typing import Final

STATUSES: Final = ("backlog", "todo", "in_progress", "awaiting", "blocked", "in_review", "done", "canceled")
TERMINAL: Final = frozenset({"done", "canceled"})
KINDS: Final = ("task", "epic", "bug", "review")
PRIORITIES: Final = ("low", "medium", "high", "urgent")
ACCEPTANCE_MODES: Final = ("review", "none")
COMMENT_KINDS: Final = ("note", "question", "discuss", "decision", "confirm", "change", "defect")
RELATION_TYPES: Final = ("blocks", "related", "parent", "review_of")

#: The status graph of SPEC §4.3, without reopen. The schema's status_transitions table holds the
#: same pairs plus REOPEN; a contract test keeps the two equal.
TRANSITIONS: Final[dict[str, frozenset[str]]] = {
    "backlog": frozenset({"todo", "canceled"}),
    "todo": frozenset({"backlog", "in_progress", "blocked", "canceled"}),
    "in_progress": frozenset({"todo", "awaiting", "blocked", "in_review", "canceled"}),
    "awaiting": frozenset({"todo", "in_progress", "canceled"}),
    "blocked": frozenset({"todo", "in_progress", "in_review", "canceled"}),
    "in_review": frozenset({"done", "in_progress", "blocked", "todo"}),
    "done": frozenset(),
    "canceled": frozenset(),
}
#: Reopen is the only way out of a terminal status.
REOPEN: Final[frozenset[tuple[str, str]]] = frozenset({("done", "todo"), ("canceled", "todo")})

MIN_REASON_CHARS: Final = 8
MAX_PARENT_DEPTH: Final = 8
MAX_PARENT_FAN_IN: Final = 8
ATTACHMENT_MAX_BYTES: Final = 8 * 1024 * 1024

#: Claim freshness windows (SPEC §4.4), in seconds; configurable per board.
CLAIM_FRESH_SECONDS: Final = 10 * 60
CLAIM_STALE_SECONDS: Final = 6 * 60 * 60


def can_move(from_status: str, to_status: str) -> bool:
    return to_status in TRANSITIONS.get(from_status, frozenset())
