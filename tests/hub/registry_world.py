"""The card-brief registry's surroundings, in memory: a board of cards, a filesystem of briefs,
sessions and a clock. It performs the registry's actions the way an executor must (each I/O
action answered by its event) so that the rules of ``services/hub/registry.py`` are tested with
no socket, no file and no sleep. The registry itself is the real one.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from services.hub import registry as rg
from services.hub.protocol import validate_watch
from shared import hub_protocol as hp

#: Production cadence (SPEC §7.4): 300 ms debounce, 2 s maximum wait, 5 s floor.
CADENCE = rg.Cadence(hp.REFRESH_DEBOUNCE, hp.REFRESH_MAX_WAIT, hp.REFRESH_FLOOR)
EPOCH = 1_800_000_000.0  # the wall clock when the world starts


@dataclass
class BoardCard:
    task_id: str
    identifier: str
    status: str = "todo"
    version: int = 1

    def markdown(self) -> str:
        return f"{self.identifier} {self.status} v{self.version}\n"


@dataclass
class Session:
    records: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False
    after_close: list[dict[str, Any]] = field(default_factory=list)


class World:
    def __init__(self, *, cadence: rg.Cadence = CADENCE, persistent: bool = True, restore: bool = True,
                 auto_io: bool = True) -> None:
        ids = itertools.count(1)
        self.registry = rg.Registry(board="http://board.test", cadence=cadence, persistent=persistent,
                                    new_id=lambda: f"w_{next(ids):04d}")
        self.now = 100.0
        self.wall = EPOCH
        self.revision: int | None = 1
        self.board: dict[str, BoardCard] = {}
        self.board_up = True
        self.files: dict[str, str] = {}
        self.writes: list[str] = []
        self.renders: list[str] = []
        self.bad_paths: set[str] = set()
        self.unwritable: set[str] = set()
        self.sessions: dict[int, Session] = {}
        self.answers: dict[int, rg.Answer | rg.Refused] = {}
        self.persisted: dict[str, Any] | None = None
        self.persists = 0
        self.timer: float | None = None
        self.ended: list[rg.Ended] = []
        self.actions: list[rg.Action] = []
        #: When False, I/O actions wait in ``io`` until :meth:`complete` answers the oldest.
        self.auto_io = auto_io
        self.io: deque[rg.Action] = deque()
        self._tickets = itertools.count(1)
        self._events: deque[rg.Event] = deque()
        self._running = False
        if restore:
            self.feed(rg.Restore(None))

    # -- the board ------------------------------------------------------------------------------

    def card(self, number: int, *, status: str = "todo") -> BoardCard:
        card = BoardCard(f"00000000-0000-4000-8000-{number:012d}", f"DEMO-{number:04d}", status)
        self.board[card.task_id] = card
        return card

    def resolve(self, ref: str) -> BoardCard | None:
        return next((c for c in self.board.values() if ref in (c.task_id, c.identifier)), None)

    def edit(self, card: BoardCard, *, status: str | None = None) -> None:
        """A change on the board: the card's brief changes and its event reaches the registry."""
        card.version += 1
        if status is not None:
            card.status = status
        self.revision = (self.revision or 0) + 1
        self.feed(rg.BoardEvent({"task_id": card.task_id, "event": "task.updated"}))

    # -- requests -------------------------------------------------------------------------------

    def watch(self, *, detach: bool = False, ttl_ms: int = 0, **spelling: Any) -> int:
        """Send a ``watch`` (validated like the hub does) from a new session; returns its ticket."""
        ticket = next(self._tickets)
        self.sessions[ticket] = Session()
        fields = validate_watch(hp.watch(ttl_ms=ttl_ms, detach=detach, **spelling))
        self.feed(rg.Watch(ticket, fields))
        return ticket

    def stop(self, registration_id: str) -> int:
        ticket = next(self._tickets)
        self.sessions[ticket] = Session()
        self.feed(rg.Stop(ticket, registration_id))
        return ticket

    def leave(self, ticket: int) -> None:
        self.sessions[ticket].closed = True
        self.feed(rg.SessionClosed(ticket))

    def answer(self, ticket: int) -> rg.Answer | rg.Refused:
        return self.answers[ticket]

    def registered(self, ticket: int) -> dict[str, Any]:
        (first, *_) = self.sessions[ticket].records
        assert first["type"] == "registered", first
        return first

    def kinds(self, ticket: int) -> list[str]:
        return [record["type"] for record in self.sessions[ticket].records]

    # -- time -----------------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass, firing the registry's timer at each moment it asked for."""
        until = self.now + seconds
        for _ in range(100_000):
            if self.timer is None or self.timer > until:
                break
            step = self.timer - self.now
            self.now, self.wall = self.timer, self.wall + step
            self.feed(rg.Tick())
        else:
            raise AssertionError(f"the registry keeps asking for a timer at {self.timer} without moving on")
        self.wall += until - self.now
        self.now = until

    def settle(self, limit: float = 60.0) -> None:
        """Run the timer until nothing is pending (or ``limit`` seconds passed)."""
        deadline = self.now + limit
        while self.registry.pending() and self.timer is not None and self.timer <= deadline:
            self.advance(self.timer - self.now)

    # -- the executor ---------------------------------------------------------------------------

    def feed(self, event: rg.Event) -> None:
        self._events.append(event)
        if self._running:
            return
        self._running = True
        try:
            while self._events:
                actions = self.registry.handle(self._events.popleft(), now=self.now, wall=self.wall,
                                               revision=self.revision)
                for action in actions:
                    self._perform(action)
        finally:
            self._running = False

    def complete(self) -> None:
        """Answer the oldest waiting I/O action."""
        self.feed(self._io(self.io.popleft()))

    def _perform(self, action: rg.Action) -> None:
        self.actions.append(action)
        if isinstance(action, rg.CheckPaths | rg.Render | rg.Write):
            if self.auto_io:
                self._events.append(self._io(action))
            else:
                self.io.append(action)
        elif isinstance(action, rg.Send):
            session = self.sessions[action.ticket]
            (session.after_close if session.closed else session.records).append(action.message)
        elif isinstance(action, rg.Close):
            self.sessions[action.ticket].closed = True
        elif isinstance(action, rg.Answer):
            self.answers[action.ticket] = action
            if action.message is not None:
                self.sessions[action.ticket].records.append(action.message)
        elif isinstance(action, rg.Refuse):
            self.answers[action.ticket] = action.refused
        elif isinstance(action, rg.Persist):
            self.persisted = action.record
            self.persists += 1
        elif isinstance(action, rg.ArmTimer):
            self.timer = action.at
        elif isinstance(action, rg.Ended):
            self.ended.append(action)

    def _io(self, action: rg.Action) -> rg.Event:
        if isinstance(action, rg.CheckPaths):
            return rg.PathsChecked(tuple(f"{path} is refused" if path in self.bad_paths else None
                                         for path in action.paths))
        if isinstance(action, rg.Render):
            self.renders.append(action.ref)
            if not self.board_up:
                return rg.RenderDone(rg.RenderFailed(hp.BOARD_UNAVAILABLE, "cannot reach the board", permanent=False))
            card = self.resolve(action.ref)
            if card is None:
                return rg.RenderDone(rg.RenderFailed(hp.NOT_FOUND, f"no task {action.ref}", permanent=True))
            return rg.RenderDone(rg.Rendered(card.markdown(), card.task_id, card.identifier, card.status))
        assert isinstance(action, rg.Write)
        if action.path in self.unwritable:
            return rg.WriteDone(PermissionError(13, "Permission denied"))
        self.files[action.path] = action.markdown
        self.writes.append(action.path)
        return rg.WriteDone()
