"""Decide whether one activity frame should wake the loop (SPEC §9, reference §5.4).

Pure: a frame and the loop's identity in, a ``Decision`` out. It never raises on a malformed
frame or a newer board's event, because a throw here would kill the subscriber and
reconnect-loop it against a working board (reference §2.5).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from shared import events as ev

# -- conditions (docs/conditions.md) ------------------------------------------------------------
# A condition reaches the loop as a ``signal`` record (the default lane) or, in a project that
# persists it, as an activity row of the same name written by ``system``. One rule decides both,
# so persisting a condition never changes whether it wakes the loop.

#: Conditions that make work dispatchable: a card's last open blocker closed, or the worker on a
#: card stopped heart-beating (its card is work again, SPEC §12).
CONDITION_WAKE: Final[frozenset[str]] = frozenset({ev.CARD_UNBLOCKED, ev.CLAIM_STALE})
#: Wakes only for the statuses a loop names with ``--wake-on-timeout STATUS``: a review that has
#: waited a day is work for a loop that reviews, noise for one that does not.
CONDITION_CONDITIONAL: Final[frozenset[str]] = frozenset({ev.STATUS_TIMEOUT})
#: Every other condition, each named so a new one is a decision rather than a default.
#: (The three lists join WAKE, CONDITIONAL and IGNORE below: every condition is a declared event.)
CONDITION_IGNORE: Final[frozenset[str]] = frozenset(
    {
        ev.WIP_EXCEEDED,  # a full column is a reason to start less, not more
        ev.WIP_CLEARED,  # room in a column is not a card to pick up; the moves that made it carry their own wakes
        ev.LANE_DRAINED,  # an empty lane is a dashboard fact
        ev.LANE_REFILLED,  # the task_created / task_moved that refilled it already woke the loop
        ev.CARD_BLOCKED,  # takes work off the queue
        ev.TRANSITION_REJECTED,  # a refused write changed nothing
        ev.CARD_IDLE,  # quiet is not work; a supervisor that cares polls /breaches
    }
)
CONDITIONS: Final[frozenset[str]] = CONDITION_WAKE | CONDITION_CONDITIONAL | CONDITION_IGNORE

#: Events that can make work dispatchable. ``task_moved`` also has field rules (see ``classify``).
WAKE: Final[frozenset[str]] = frozenset(
    {
        ev.TASK_CREATED,
        ev.TASK_MOVED,
        ev.TASK_REOPENED,
        ev.TASK_DELIVERED,
        ev.TASK_RESUMED,
        ev.REPORT_WRITTEN,
        ev.REPORT_WAIVED,
        ev.RELATION_ADDED,
        ev.RELATION_REMOVED,
        # Historical: boards that carry an importer's rows still get a turn to discover the work.
        ev.IMPORT_COMPLETED,
    }
) | CONDITION_WAKE

#: Events that wake only when their ``changes`` say so. ``task_updated`` sits here, not in WAKE,
#: as in the reference design's CONDITIONAL_EVENTS: most updates (title, description) are not work.
CONDITIONAL: Final[frozenset[str]] = frozenset({ev.COMMENT_ADDED, ev.TASK_UPDATED}) | CONDITION_CONDITIONAL

#: Every other declared event, each named so a new event is a decision rather than a default.
IGNORE: Final[frozenset[str]] = frozenset(
    {
        ev.PROJECT_CREATED,  # no task: a project alone holds nothing to dispatch
        ev.PROJECT_UPDATED,
        ev.TASK_CLAIMED,  # takes work off the queue; the claimer is already on it
        ev.TASK_HEARTBEAT,  # wire noise (SPEC §6.4); never wakes
        ev.TASK_ARCHIVED,  # only terminal tasks are archived
        ev.ACCEPTANCE_CHANGED,  # review bookkeeping; delivery and report events carry the wake
        ev.ACCEPTANCE_PRUNED,
        ev.ACCEPTANCE_OVERRIDE,
        ev.EPIC_AUTO_START,  # board-authored; a side effect of a claim, not new work
        ev.LABEL_GC,  # housekeeping
        ev.SESSION_REGISTERED,  # the loop's own session bookkeeping; a resume is local state
        ev.SESSION_CLOSED,
        ev.PROGRESS,  # historical; nothing reads it as work
        ev.ATTACHMENT_ADDED,  # files on a card do not change what is dispatchable
        ev.ATTACHMENT_UPDATED,
        ev.ATTACHMENT_REMOVED,
    }
) | CONDITION_IGNORE

KNOWN: Final[frozenset[str]] = WAKE | CONDITIONAL | IGNORE

#: ``task_updated`` fields that change who a card is for or what it is, hence who may pick it up.
#: SPEC §9 spells them as the log's camelCase (assigneeId, assigneeKind), but the board lists the
#: patched fields as the snake_case API names them (§4.4: ``assignee``, ``assignee_kind``), so
#: every spelling counts: a missed wake waits for the continue clock, an extra one costs a rescan.
DISPATCH_FIELDS: Final[frozenset[str]] = frozenset(
    {"assigneeId", "assigneeKind", "assignee", "assignee_id", "assignee_kind", "kind", "labels", "meta"}
)

#: Actor ids of the board's housekeeping and the orchestration lane (SPEC §9, reference §5.4).
BOARD_ACTOR_IDS: Final[frozenset[str]] = frozenset({"system", "Orchestrator"})

IN_PROGRESS: Final = "in_progress"
TODO: Final = "todo"
AWAITING: Final = "awaiting"
QUESTION: Final = "question"

#: Distinct unknown names remembered; past this the stream is garbage, not a newer board.
UNKNOWN_NAMES_LIMIT: Final = 256


@dataclass(frozen=True, slots=True)
class LoopIdentity:
    """Who this loop is: its ``--agent`` ids, its ``--director`` id, the statuses it wakes on
    when they time out (``--wake-on-timeout``)."""

    agents: frozenset[str]
    director: str | None = None
    wake_on_timeout: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # click hands over a tuple; freeze it so membership is cheap and the value hashable.
        object.__setattr__(self, "agents", frozenset(self.agents))
        object.__setattr__(self, "wake_on_timeout", frozenset(self.wake_on_timeout))


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether a frame wakes the loop, and a short reason word for the log."""

    wake: bool
    reason: str


def classify(frame: Mapping[str, Any], who: LoopIdentity) -> Decision:
    """Classify one activity frame for the loop ``who``.

    Wake reasons: ``dispatch``, ``fields``, ``release``, ``question``, ``human`` (a human's
    non-question comment), and for a persisted condition those of ``classify_condition``.
    Ignore reasons: ``unknown``, ``noise``, ``ignored``, ``awaiting``, ``fields``, ``comment``,
    ``board``, ``director``, ``own_agent``.
    """
    event = frame.get("event")
    if not isinstance(event, str) or event not in KNOWN:
        return Decision(False, "unknown")
    if event in IGNORE:
        return Decision(False, "noise" if event in ev.WIRE_NOISE else "ignored")

    changes = frame.get("changes")
    if not isinstance(changes, Mapping):
        changes = {}
    if event in CONDITIONS:
        # A persisted condition is written by ``system``; it is the board noticing, not housekeeping.
        return classify_condition(event, changes, who)
    kind = frame.get("actor_kind")
    actor = frame.get("actor_id")
    if not isinstance(actor, str):
        actor = None  # a malformed id must not reach a set lookup (unhashable) or match anyone
    human = kind == ev.HUMAN

    # Field rules come before actor suppression: they hold whoever wrote the row (reference §5.4).
    release = False
    question = False
    wake_reason = "dispatch"
    if event == ev.TASK_MOVED:
        if changes.get("to") == AWAITING:
            # The worker is parked; only a human comment (task_resumed) brings the card back.
            return Decision(False, "awaiting")
        release = changes.get("from") == IN_PROGRESS and changes.get("to") == TODO
        if release:
            wake_reason = "release"
    elif event == ev.TASK_UPDATED:
        if not _meets_dispatch_fields(changes.get("fields")):
            return Decision(False, "fields")
        wake_reason = "fields"
    elif event == ev.COMMENT_ADDED:
        question = changes.get("kind") == QUESTION
        if not (question or human):
            return Decision(False, "comment")  # a plain agent note is not work
        wake_reason = "question" if question else "human"

    if human:
        # A person's write is never suppressed, even under an id the loop also runs as.
        return Decision(True, wake_reason)
    if (kind == ev.SYSTEM or actor in BOARD_ACTOR_IDS) and event != ev.IMPORT_COMPLETED:
        # Board housekeeping is not work; the historical importer's closing row (actor id
        # ``md-import``, kind ``system``) is the one board-side write that still is (reference §7).
        # Its other rows stay suppressed: the closing row's turn rescans everything they added.
        return Decision(False, "board")
    if who.director is not None and actor == who.director:
        # The decision lane's only waking write is a release: its answer to a worker (SPEC §9).
        return Decision(True, "release") if release else Decision(False, "director")
    if actor in who.agents:
        # Our own writes are echoes, except SPEC §9's "except the rules above": a release, and a
        # worker's question, which is a handoff to the director lane rather than an echo
        # (reference §5.4). The ask's move to ``awaiting`` stays silent, so an ask wakes once.
        if release or question:
            return Decision(True, wake_reason)
        return Decision(False, "own_agent")
    return Decision(True, wake_reason)


def classify_signal(signal: Mapping[str, Any], who: LoopIdentity) -> Decision:
    """Classify one ``signal`` record's body (``{type, project_id, task_id, changes, at}``).

    Wake reasons: ``unblocked``, ``stale_claim``, ``timeout``. Ignore reasons: ``unknown``,
    ``ignored``, ``status`` (a timeout of a status this loop was not asked to wake on).
    """
    name = signal.get("type")
    if not isinstance(name, str) or name not in CONDITIONS:
        return Decision(False, "unknown")
    changes = signal.get("changes")
    return classify_condition(name, changes if isinstance(changes, Mapping) else {}, who)


def classify_condition(name: str, changes: Mapping[str, Any], who: LoopIdentity) -> Decision:
    """The one rule for a condition, whichever lane (signal or persisted row) carried it."""
    if name == ev.CARD_UNBLOCKED:
        return Decision(True, "unblocked")
    if name == ev.CLAIM_STALE:
        # Whoever held the claim, this loop's own agent included: a dead worker's card is work.
        return Decision(True, "stale_claim")
    if name == ev.STATUS_TIMEOUT:
        status = changes.get("status")
        if isinstance(status, str) and status in who.wake_on_timeout:
            return Decision(True, "timeout")
        return Decision(False, "status")
    return Decision(False, "ignored") if name in CONDITIONS else Decision(False, "unknown")


def _meets_dispatch_fields(fields: Any) -> bool:
    """True when a ``fields`` list names at least one field that changes dispatch."""
    if isinstance(fields, str) or not isinstance(fields, Iterable):
        return False
    return any(isinstance(name, str) and name in DISPATCH_FIELDS for name in fields)


class UnknownNames:
    """Remembers unknown event names so the caller logs each one once."""

    def __init__(self, *, limit: int = UNKNOWN_NAMES_LIMIT) -> None:
        self._seen: set[str] = set()
        self._limit = limit

    def first_sighting(self, name: str) -> bool:
        """True the first time ``name`` is seen (and while fewer than ``limit`` names are known)."""
        if name in self._seen or len(self._seen) >= self._limit:
            return False
        self._seen.add(name)
        return True

    def __len__(self) -> int:
        return len(self._seen)
