"""The card-brief registry against a simple model of SPEC §7.4, over random sequences.

Hypothesis drives ``watch`` (foreground or detached, one card or several, by identifier or uuid,
``--out`` or ``--dir``), ``watch-stop``, sessions leaving, edits and terminal moves on the board,
task-less events, board reconnects, and time passing (batches, TTLs). After every step the real
registry (``services/hub/registry.py``, driven by ``registry_world.World``) must agree with the
model on: who owns and who views each brief, what is covered or refused (and why), which records
each session got, which files hold what, when each registration ended and with which reason, and
what is persisted.

The model is written from the rules, not from the code: a registration is a dict of briefs
``(task, path) → ref``, an owner and a list of watchers; everything else follows from the text.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from services.hub import registry as rg
from services.hub.protocol import RequestInvalid, validate_watch
from shared import hub_protocol as hp

from .registry_world import CADENCE, World

#: Few paths and cards, so that requests meet: viewers, covered cards, conflicts. Now and then a
#: request names a path that cannot hold a brief or a card the board does not have.
PATHS = ("/w/a.md", "/w/a.md", "/w/a.md", "/w/b.md", "/w/c.md", "/w/bad.md")
DIRS = (None, None, None, "/d1", "/d2", "/bad")
BAD = {"/w/bad.md", "/bad"}
MISSING = "DEMO-0404"
#: TTLs far apart from the cadence, so a step of time either serves batches or ends TTLs.
TTLS_MS = (0, 40_000, 80_000)
SETTLE = 8.0  # every batch of marks made at one instant starts within debounce + floor < 8 s

Key = tuple[str, str]


@dataclass
class MReg:
    id: str
    detached: bool
    cards: dict[Key, str]  # brief → the registering ref
    expiry: float | None
    owner: int | None = None
    watchers: list[int] = field(default_factory=list)
    last_batch: float | None = None


@dataclass
class MSession:
    keys: dict[Key, tuple[str, str]] = field(default_factory=dict)  # brief → (registration, my ref)
    owned: dict[str, None] = field(default_factory=dict)  # in the order they came to it
    stream: bool = False
    closed: bool = False
    expected: Counter[tuple[Any, ...]] = field(default_factory=Counter)
    seen: int = 0


class RegistryModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.world = World()
        self.world.bad_paths.update(BAD)
        self.cards = [self.world.card(n) for n in (1, 2, 3)]
        self.regs: dict[str, MReg] = {}
        self.sessions: dict[int, MSession] = {}
        self.ended: list[tuple[str, str]] = []
        self.pending: dict[str, set[str] | None] = {}  # registration → marked tasks (None: all)
        self.ids = 0
        self.known_ids: list[str] = []

    # -- helpers of the model -------------------------------------------------------------------

    def _card(self, task_id: str) -> Any:
        return self.world.board[task_id]

    def _by_key(self, key: Key) -> MReg | None:
        return next((reg for reg in self.regs.values() if key in reg.cards), None)

    def _by_path(self, path: str) -> Key | None:
        return next((key for reg in self.regs.values() for key in reg.cards if key[1] == path), None)

    def _expect(self, ticket: int, *record: Any) -> None:
        self.sessions[ticket].expected[record] += 1

    def _end(self, reg: MReg, reason: str, message: str | None) -> None:
        if reg.id not in self.regs:
            return
        del self.regs[reg.id]
        self.pending.pop(reg.id, None)
        self.ended.append((reg.id, reason))
        event(f"ended: {reason}")
        if message is not None:
            for ticket in list(reg.watchers):
                self._end_session(ticket, message)

    def _end_session(self, ticket: int, message: str) -> None:
        session = self.sessions[ticket]
        if session.closed:
            return
        self._expect(ticket, message)
        self._close(ticket)

    def _close(self, ticket: int) -> None:
        session = self.sessions[ticket]
        if session.closed:
            return
        session.closed = True
        for reg in self.regs.values():
            if ticket in reg.watchers:
                reg.watchers.remove(ticket)
        for reg_id in list(session.owned):
            reg = self.regs.get(reg_id)
            if reg is None or reg.owner != ticket:
                continue
            heir = next((w for w in reg.watchers if not self.sessions[w].closed), None)
            reg.owner = heir
            if heir is not None:
                event("handed over")
                self.sessions[heir].owned[reg.id] = None
            else:
                self._end(reg, "owner_left", None)
        session.owned.clear()

    def _drop(self, reg: MReg, key: Key) -> None:
        del reg.cards[key]
        if not reg.cards:
            self._end(reg, "done", None)
        for ticket in list(reg.watchers):
            session = self.sessions[ticket]
            if session.keys.pop(key, None) is None:
                continue
            if ticket != reg.owner and all(held != reg.id for held, _ in session.keys.values()):
                reg.watchers.remove(ticket)  # a viewer of nothing here is no viewer
            if not session.keys:
                self._end_session(ticket, "done")

    # -- rules ----------------------------------------------------------------------------------

    @rule(
        picks=st.lists(st.tuples(st.sampled_from((0, 1, 2, 0, 1, 2, 3)), st.booleans(),
                                 st.integers(0, len(PATHS) - 1)), min_size=1, max_size=3, unique_by=lambda t: t[0]),
        by_dir=st.sampled_from(DIRS),
        detach=st.booleans(),
        ttl_ms=st.sampled_from(TTLS_MS),
    )
    def watch(self, picks: list[tuple[int, bool, int]], by_dir: str | None, detach: bool, ttl_ms: int) -> None:
        refs = [MISSING if n == 3 else (self.cards[n].identifier if by_id else self.cards[n].task_id)
                for n, by_id, _ in picks]
        if by_dir is None:
            self._watch([(ref, PATHS[p]) for ref, (_, _, p) in zip(refs, picks, strict=True)], None, detach, ttl_ms)
        else:
            self._watch([(ref, None) for ref in refs], by_dir, detach, ttl_ms)

    @precondition(lambda self: bool(self.regs))
    @rule(data=st.data(), by_id=st.booleans(), detach=st.booleans(), ttl_ms=st.sampled_from(TTLS_MS))
    def watch_a_kept_brief(self, data: st.DataObject, by_id: bool, detach: bool, ttl_ms: int) -> None:
        """Another session asks for a brief that is kept: a viewer, covered, or refused."""
        task_id, path = data.draw(st.sampled_from(sorted(key for reg in self.regs.values() for key in reg.cards)))
        card = self._card(task_id)
        self._watch([(card.identifier if by_id else card.task_id, path)], None, detach, ttl_ms)

    def _watch(self, wanted: list[tuple[str, str | None]], by_dir: str | None, detach: bool, ttl_ms: int) -> None:
        spelling: dict[str, Any]
        if by_dir is None:
            spelling = {"cards": [{"ref": ref, "out": out} for ref, out in wanted]}
        else:
            spelling = {"refs": [ref for ref, _ in wanted], "dir": by_dir}
        try:
            validate_watch(hp.watch(ttl_ms=ttl_ms, detach=detach, **spelling))
        except RequestInvalid:
            return  # the protocol's to refuse (tests/hub/test_watch_units.py); it never reaches the registry
        ticket = self.world.watch(ttl_ms=ttl_ms, detach=detach, **spelling)
        self.sessions[ticket] = MSession()
        code, plan = self._plan(wanted, by_dir, detach)
        event(f"watch: {code or ', '.join(sorted({item['state'] for item in plan}))}")
        answer = self.world.answer(ticket)
        if code is not None:
            assert isinstance(answer, rg.Refused) and answer.code == code, (answer, code)
            self.sessions[ticket].closed = True  # a refused request ends nothing but is done
            return
        assert isinstance(answer, rg.Answer), answer
        self._commit(ticket, plan, detach, ttl_ms)

    def _plan(self, wanted: list[tuple[str, str | None]], by_dir: str | None,
              detach: bool) -> tuple[str | None, list[dict[str, Any]]]:
        if by_dir in BAD or any(out in BAD for _, out in wanted):
            return hp.VALIDATION_FAILED, []
        if any(ref == MISSING for ref, _ in wanted):
            return hp.NOT_FOUND, []
        plan, seen = [], set()
        for ref, out in wanted:
            card = self.world.resolve(ref)
            assert card is not None
            if card.task_id in seen:
                return hp.VALIDATION_FAILED, []
            seen.add(card.task_id)
            path = out or f"{by_dir}/.taskloom/{card.identifier}/card.md"
            key = (card.task_id, path)
            kept = self._by_path(path)
            if kept is not None and kept != key:
                return hp.WATCH_CONFLICT, []
            holder = self._by_key(key)
            if card.status in hp.TERMINAL_STATUSES:
                state = "terminal"
            elif holder is None:
                state = "registered"
            elif not detach:
                state = "viewer"
            elif holder.detached:
                state = "covered"
            else:
                return hp.WATCH_CONFLICT, []
            plan.append({"ref": ref, "key": key, "state": state, "holder": holder.id if holder else None})
        return None, plan

    def _commit(self, ticket: int, plan: list[dict[str, Any]], detach: bool, ttl_ms: int) -> None:
        answer = self.world.registered(ticket)
        assert [card["state"] for card in answer["cards"]] == [item["state"] for item in plan]
        assert [card["path"] for card in answer["cards"]] == [item["key"][1] for item in plan]
        fresh = [item for item in plan if item["state"] == "registered"]
        session = self.sessions[ticket]
        reg = None
        if fresh:
            self.ids += 1
            reg = MReg(f"w_{self.ids:04d}", detach, {item["key"]: item["ref"] for item in fresh},
                       self.world.now + ttl_ms / 1000 if ttl_ms else None)
            self.regs[reg.id] = reg
            self.known_ids.append(reg.id)
            assert answer["registration_id"] == reg.id and answer["refs"] == [item["ref"] for item in fresh]
        elif any(item["state"] == "viewer" for item in plan):
            first = next(item for item in plan if item["state"] == "viewer")
            assert (answer["registration_id"], answer["reason"]) == (first["holder"], hp.REASON_VIEWER)
        elif any(item["state"] == "covered" for item in plan):
            assert (answer["registration_id"], answer["reason"]) == (None, hp.REASON_COVERED)
        else:
            assert (answer["registration_id"], answer["reason"], answer["running"]) == (None, hp.REASON_TERMINAL, False)
        for item in plan:
            if item["state"] != "covered":
                task_id, path = item["key"]
                assert self.world.files[path] == self._card(task_id).markdown()  # written before the answer
        self._expect(ticket, "registered")
        if detach:
            session.closed = True  # one answer; the session is not a stream
            return
        session.stream = True
        if reg is not None:
            reg.owner = ticket
            reg.watchers.append(ticket)
            session.owned[reg.id] = None
        for item in plan:
            if item["state"] == "registered" and reg is not None:
                session.keys[item["key"]] = (reg.id, item["ref"])
            elif item["state"] == "viewer":
                holder = self.regs[item["holder"]]
                session.keys[item["key"]] = (holder.id, item["ref"])
                if ticket not in holder.watchers:
                    holder.watchers.append(ticket)
            if item["state"] != "covered":
                self._expect(ticket, "refresh", item["ref"], self._card(item["key"][0]).status)
        if not session.keys:
            self._end_session(ticket, "done")

    @rule(data=st.data())
    def stop(self, data: st.DataObject) -> None:
        registration_id = data.draw(st.sampled_from([*self.known_ids, "w_9999"]))
        ticket = self.world.stop(registration_id)
        self.sessions[ticket] = MSession(closed=True)
        answer = self.world.answer(ticket)
        reg = self.regs.get(registration_id)
        if reg is None:
            assert isinstance(answer, rg.Refused) and answer.code == hp.NOT_FOUND
            return
        assert isinstance(answer, rg.Answer) and answer.message == hp.watch_stopped(
            registration_id=registration_id, refs=list(reg.cards.values()))
        self._expect(ticket, "watch-stopped")
        self._end(reg, "stopped", "shutdown")

    @precondition(lambda self: any(not s.closed for s in self.sessions.values()))
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        ticket = data.draw(st.sampled_from([t for t, s in self.sessions.items() if not s.closed]))
        self.world.leave(ticket)
        self._close(ticket)

    @rule(n=st.integers(0, 2), status=st.sampled_from(("todo", "todo", "done", "canceled")))
    def edit(self, n: int, status: str) -> None:
        card = self.cards[n]
        self.world.edit(card, status=status)
        for reg in self.regs.values():
            if any(task_id == card.task_id for task_id, _ in reg.cards):
                marked = self.pending.setdefault(reg.id, set())
                if marked is not None:
                    marked.add(card.task_id)

    @rule(reconnect=st.booleans())
    def everything_changed(self, reconnect: bool) -> None:
        if reconnect:
            self.world.feed(rg.BoardOpened())
        else:
            self.world.feed(rg.BoardEvent({"task_id": None, "event": "project.updated"}))
        for reg in self.regs.values():
            self.pending[reg.id] = None

    def _expiry_within(self, seconds: float) -> bool:
        return any(r.expiry is not None and r.expiry <= self.world.now + seconds for r in self.regs.values())

    @precondition(lambda self: not self._expiry_within(SETTLE + 1))
    @rule()
    def time_passes(self) -> None:
        """Every pending batch runs, once, in the order of their due times."""
        marked_at = self.world.now
        self.world.advance(SETTLE)
        due = {}
        for reg_id in self.pending:
            reg = self.regs[reg_id]
            at = marked_at + CADENCE.debounce
            if reg.last_batch is not None:
                at = max(at, reg.last_batch + CADENCE.floor)
            due[reg_id] = at
        for reg_id in sorted(due, key=lambda r: (due[r], self.known_ids.index(r))):
            tasks = self.pending.pop(reg_id, set())
            reg = self.regs.get(reg_id)
            if reg is None:
                continue  # ended by an earlier batch (its owner got done and left)
            reg.last_batch = due[reg_id]
            for key in list(reg.cards):
                if reg.id not in self.regs:
                    break
                if key not in reg.cards or (tasks is not None and key[0] not in tasks):
                    continue
                status = self._card(key[0]).status
                for ticket in list(reg.watchers):
                    held = self.sessions[ticket].keys.get(key)
                    if held is not None and not self.sessions[ticket].closed:
                        self._expect(ticket, "refresh", held[1], status)
                if status in hp.TERMINAL_STATUSES:
                    self._drop(reg, key)
        assert not self.pending
        for reg in self.regs.values():
            for task_id, path in reg.cards:
                assert self.world.files[path] == self._card(task_id).markdown(), (reg.id, path)

    @precondition(lambda self: not self.pending and self._expiry_within(10**6))
    @rule()
    def ttl_passes(self) -> None:
        until = min(r.expiry for r in self.regs.values() if r.expiry is not None) + 0.001
        self.world.advance(until - self.world.now)
        due = [r for r in self.regs.values() if r.expiry is not None and r.expiry <= until]
        for reg in sorted(due, key=lambda r: (r.expiry, self.known_ids.index(r.id))):
            self._end(reg, "ttl", "ttl")

    # -- what must agree after every step -------------------------------------------------------

    @invariant()
    def registrations_agree(self) -> None:
        real = {reg.id: reg for reg in self.world.registry.registrations()}
        assert set(real) == set(self.regs)
        for reg_id, model in self.regs.items():
            reg = real[reg_id]
            assert reg.detached == model.detached
            assert {key: card.ref for key, card in reg.cards.items()} == model.cards
            assert (reg.owner.ticket if reg.owner else None) == model.owner, reg_id
            assert [w.ticket for w in reg.watchers] == model.watchers, reg_id
        assert self.world.registry.count() == len(self.regs)

    @invariant()
    def ends_agree(self) -> None:
        assert [(e.registration_id, e.reason) for e in self.world.ended] == self.ended

    @invariant()
    def records_agree(self) -> None:
        for ticket, model in self.sessions.items():
            session = self.world.sessions[ticket]
            assert session.after_close == [], ticket  # nothing after a close
            got = Counter(self._shape(record) for record in session.records)
            assert got == model.expected, (ticket, got, model.expected)
            if model.stream:
                assert session.closed == model.closed, ticket

    @staticmethod
    def _shape(record: dict[str, Any]) -> tuple[Any, ...]:
        if record["type"] == "refresh":
            return ("refresh", record["ref"], record.get("status"))
        return (record["type"],)

    @invariant()
    def persisted_agrees(self) -> None:
        record = self.world.persisted or {"registrations": []}
        on_file = [(entry["registration_id"], [(c["task_id"], c["path"]) for c in entry["cards"]])
                   for entry in record["registrations"]]
        assert on_file == [(reg.id, list(reg.cards)) for reg in self.regs.values() if reg.detached]

    @invariant()
    def one_card_per_path(self) -> None:
        paths = [path for reg in self.world.registry.registrations() for _, path in reg.cards]
        assert len(paths) == len(set(paths))


RegistryModel.TestCase.settings = settings(
    max_examples=250, stateful_step_count=50, suppress_health_check=[HealthCheck.too_slow],
)
test_registry_model = RegistryModel.TestCase
