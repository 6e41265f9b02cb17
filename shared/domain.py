"""The product's vocabulary: statuses and their graph, kinds, priorities, limits (SPEC §4).

The board enforces it, taskctl offers its choices, and the page keeps a literal copy (it has no
build step) that tests/contract/test_page_vocabulary.py holds equal to these tables.
"""

from __future__ import annotations

from typing import Final

from shared import limits
from shared.errors import validation

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

TITLE_MAX_CHARS: Final = limits.TITLE_MAX_CHARS
PROJECT_NAME_MAX_CHARS: Final = limits.PROJECT_NAME_MAX_CHARS
MIN_REASON_CHARS: Final = 8
MAX_PARENT_DEPTH: Final = 8
MAX_PARENT_FAN_IN: Final = 8
ATTACHMENT_MAX_BYTES: Final = limits.MAX_ATTACHMENT_BYTES

#: Claim freshness windows (SPEC §4.4), in seconds; configurable per board.
CLAIM_FRESH_SECONDS: Final = 10 * 60
CLAIM_STALE_SECONDS: Final = 6 * 60 * 60


#: Role words, not platforms: never written as an actor kind (SPEC §4.1).
ROLE_WORDS: Final = frozenset({"agent", "taskd"})


def check_actor_kind(kind: str, field: str) -> str:
    """Refuse a role word where a platform name (``claude``, ``codex``) or ``human`` belongs."""
    if kind.strip().lower() in ROLE_WORDS:
        raise validation(
            f"{field} {kind!r} is a role, not a kind: name the platform the agent runs on (claude, codex, …)"
            " or human",
            field=field,
            value=kind,
        )
    return kind


def can_move(from_status: str, to_status: str) -> bool:
    return to_status in TRANSITIONS.get(from_status, frozenset())
