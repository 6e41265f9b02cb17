"""The coalescer on a fake clock: debounce, max wait, the minute limit, lock retries (SPEC §9)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.subscriber.coalesce import DEBOUNCE, LOCK_RETRY, MAX_WAIT, MIN_INTERVAL, Coalescer, Turn

EPS: Final = 1e-9


@dataclass
class Clock:
    """A monotonic clock the test moves by hand."""

    now: float = 0.0

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@dataclass
class Fired:
    """A turn and the time it was taken."""

    at: float
    turn: Turn


@dataclass
class Driver:
    """Runs a coalescer the way the subscriber will: sleep until due, take, report."""

    coalescer: Coalescer = field(default_factory=Coalescer)
    clock: Clock = field(default_factory=Clock)
    fired: list[Fired] = field(default_factory=list)

    def run_until(self, end: float) -> None:
        """Fire every turn due up to ``end``, each one running, then leave the clock at ``end``."""
        while (at := self.coalescer.due(self.clock.now)) is not None and at <= end:
            self.clock.now = at
            turn = self.coalescer.take(at)
            assert turn is not None, "due() promised a turn"
            self.fired.append(Fired(at, turn))
            self.coalescer.turn_ran(at)
        self.clock.now = max(self.clock.now, end)

    def add(self, revision: int, event: str, *, at: float) -> None:
        self.run_until(at)
        self.coalescer.add(at, revision, event)


def test_idle_coalescer_has_nothing_due() -> None:
    c = Coalescer()
    assert not c.pending
    assert c.due(0.0) is None
    assert c.take(100.0) is None


def test_burst_of_fifty_events_is_one_turn() -> None:
    d = Driver()
    names = ["task_created", "task_moved", "task_created", "comment_added", "task_moved"]
    for i in range(50):
        d.add(i + 1, names[i % len(names)], at=i * 0.001)
    last = 49 * 0.001
    assert d.coalescer.due(last) == pytest.approx(last + DEBOUNCE)
    assert d.coalescer.take(last + DEBOUNCE - 0.01) is None
    d.run_until(10.0)
    assert [f.turn for f in d.fired] == [Turn(revision=50, events=("task_created", "task_moved", "comment_added"))]
    assert d.fired[0].at == pytest.approx(last + DEBOUNCE)
    assert d.coalescer.due(10.0) is None


def test_second_burst_inside_the_minute_waits_for_the_minute_boundary() -> None:
    d = Driver()
    d.add(1, "task_created", at=0.0)
    d.run_until(1.0)
    assert [f.at for f in d.fired] == [pytest.approx(DEBOUNCE)]
    first_ran = d.fired[0].at

    for i in range(20):
        d.add(10 + i, "task_moved" if i % 2 else "relation_added", at=10.0 + i * 0.01)
    d.add(40, "report_written", at=59.0)
    # Deferred, not fired early and not dropped.
    assert d.coalescer.due(20.0) == pytest.approx(first_ran + MIN_INTERVAL)
    assert d.coalescer.take(first_ran + MIN_INTERVAL - EPS) is None
    d.run_until(200.0)
    assert len(d.fired) == 2
    assert d.fired[1].at == pytest.approx(first_ran + MIN_INTERVAL)
    assert d.fired[1].turn == Turn(revision=40, events=("relation_added", "task_moved", "report_written"))


def test_a_burst_after_the_minute_only_waits_for_its_debounce() -> None:
    d = Driver()
    d.add(1, "task_created", at=0.0)
    d.add(2, "task_created", at=100.0)
    d.run_until(200.0)
    assert [f.at for f in d.fired] == [pytest.approx(DEBOUNCE), pytest.approx(100.0 + DEBOUNCE)]


def test_refused_turn_is_retried_after_lock_retry_with_merged_events() -> None:
    c = Coalescer()
    c.add(0.0, 1, "task_created")
    c.add(0.1, 2, "task_moved")
    refused = c.take(0.4)
    assert refused == Turn(revision=2, events=("task_created", "task_moved"))
    c.turn_refused(0.4, refused)
    assert c.due(0.4) == pytest.approx(0.4 + LOCK_RETRY)

    # Events arriving while the lock is held join the retry and do not push it later.
    c.add(1.0, 3, "relation_added")
    c.add(5.3, 4, "task_moved")
    assert c.due(5.3) == pytest.approx(0.4 + LOCK_RETRY)
    assert c.take(0.4 + LOCK_RETRY - 0.01) is None
    retried = c.take(0.4 + LOCK_RETRY)
    assert retried == Turn(revision=4, events=("task_created", "task_moved", "relation_added"))
    c.turn_ran(0.4 + LOCK_RETRY)
    assert not c.pending


def test_events_added_between_take_and_refusal_are_merged_behind_the_refused_ones() -> None:
    c = Coalescer()
    c.add(0.0, 1, "task_created")
    turn = c.take(DEBOUNCE)
    assert turn is not None
    c.add(0.35, 2, "comment_added")  # arrives while the caller is checking the lock
    c.add(0.36, 3, "task_created")
    c.turn_refused(0.4, turn)
    assert c.take(0.4 + LOCK_RETRY) == Turn(revision=3, events=("task_created", "comment_added"))


def test_refused_again_keeps_retrying_and_drops_nothing() -> None:
    c = Coalescer()
    c.add(0.0, 7, "task_created")
    now = DEBOUNCE
    for _ in range(3):
        turn = c.take(now)
        assert turn == Turn(revision=7, events=("task_created",))
        c.turn_refused(now, turn)
        assert c.take(now + LOCK_RETRY - 0.01) is None
        now += LOCK_RETRY
    assert c.take(now) == Turn(revision=7, events=("task_created",))


def test_refused_turn_still_respects_the_minute() -> None:
    c = Coalescer()
    c.add(0.0, 1, "task_created")
    assert c.take(DEBOUNCE) is not None
    c.turn_ran(DEBOUNCE)
    c.add(58.0, 2, "task_moved")
    boundary = DEBOUNCE + MIN_INTERVAL
    turn = c.take(boundary)
    assert turn == Turn(revision=2, events=("task_moved",))
    c.turn_refused(boundary, turn)
    # The refused turn did not run, so the window still counts from 0.3; the retry is later.
    assert c.due(boundary) == pytest.approx(boundary + LOCK_RETRY)


def test_max_wait_caps_a_steady_trickle() -> None:
    """An event every 0.2 s never leaves a 0.3 s gap; the turn fires 2 s after the first one."""
    d = Driver(Coalescer(min_interval=0.0))
    for i in range(100):  # 0.0 … 19.8 s
        d.add(i + 1, "task_moved", at=i * 0.2)
    d.run_until(100.0)
    # Every turn is at most MAX_WAIT after its first event; a trickle yields one per MAX_WAIT.
    gaps = [b.at - a.at for a, b in zip(d.fired, d.fired[1:])]
    assert d.fired[0].at == pytest.approx(MAX_WAIT)
    assert all(gap == pytest.approx(MAX_WAIT) for gap in gaps[:-1])
    assert d.fired[-1].turn.revision == 100
    assert sorted({f.turn.revision for f in d.fired}) == [f.turn.revision for f in d.fired]


def test_max_wait_then_the_minute_under_default_settings() -> None:
    d = Driver()
    for i in range(600):  # a two-minute trickle
        d.add(i + 1, "task_moved", at=i * 0.2)
    d.run_until(500.0)
    fired_at = [f.at for f in d.fired]
    assert fired_at[0] == pytest.approx(MAX_WAIT)
    assert fired_at[1] == pytest.approx(MAX_WAIT + MIN_INTERVAL)
    assert fired_at[2] == pytest.approx(MAX_WAIT + 2 * MIN_INTERVAL)
    assert d.fired[-1].turn.revision == 600


def test_skipped_turn_is_dropped_and_does_not_start_the_minute() -> None:
    c = Coalescer()
    c.add(0.0, 1, "task_created")
    turn = c.take(DEBOUNCE)
    assert turn is not None
    c.turn_skipped(DEBOUNCE, turn)
    assert not c.pending
    c.add(1.0, 2, "task_moved")
    assert c.due(1.0) == pytest.approx(1.0 + DEBOUNCE)
    assert c.take(1.0 + DEBOUNCE) == Turn(revision=2, events=("task_moved",))


def test_turn_ran_starts_the_window_at_its_own_time() -> None:
    c = Coalescer()
    c.add(0.0, 1, "task_created")
    assert c.take(DEBOUNCE) is not None
    c.turn_ran(4.0)  # the caller reports when the command actually started
    c.add(5.0, 2, "task_moved")
    assert c.due(5.0) == pytest.approx(4.0 + MIN_INTERVAL)


def test_due_is_never_in_the_past() -> None:
    c = Coalescer()
    c.add(0.0, 1, "task_created")
    assert c.due(50.0) == 50.0
    assert c.take(50.0) is not None


def test_replayed_older_revisions_do_not_lower_the_turn_revision() -> None:
    c = Coalescer()
    c.add(0.0, 9, "task_moved")
    c.add(0.1, 4, "task_created")
    assert c.take(1.0) == Turn(revision=9, events=("task_moved", "task_created"))


@pytest.mark.parametrize("option", ["debounce", "max_wait", "min_interval", "lock_retry"])
def test_negative_settings_are_refused(option: str) -> None:
    with pytest.raises(ValueError, match=option):
        Coalescer(**{option: -1.0})


# --- property: whatever the timing and lock outcomes, nothing is lost ---------------------------

OUTCOMES: Final = ("ran", "refused", "skipped")


@settings(max_examples=300)
@given(
    gaps=st.lists(
        st.tuples(
            st.one_of(st.floats(0.0, 0.5), st.floats(0.0, 5.0), st.floats(0.0, 90.0)),
            st.sampled_from(["task_created", "task_moved", "comment_added", "report_written"]),
        ),
        min_size=1,
        max_size=60,
    ),
    outcomes=st.lists(st.sampled_from(OUTCOMES), max_size=40),
)
def test_nothing_is_lost_and_the_limits_hold(gaps: list[tuple[float, str]], outcomes: list[str]) -> None:
    c = Coalescer()
    adds: list[tuple[float, int, str]] = []
    t = 0.0
    for revision, (gap, name) in enumerate(gaps, start=1):
        t += gap
        adds.append((t, revision, name))

    # The model: what has been added since the last turn that left (ran or skipped).
    owed_names: dict[str, None] = {}
    owed_revision = 0
    ran_at: float | None = None
    refused_at: float | None = None
    last_add = 0.0
    outcome_iter = iter(outcomes)
    now = 0.0
    i = 0
    while i < len(adds) or c.pending:
        at = c.due(now)
        if at is not None and (i == len(adds) or at <= adds[i][0]):
            now = at
            assert c.take(now - 1e-3) is None, "take() agrees with due(): not a moment early"
            turn = c.take(now)
            assert turn is not None
            # Safety: the minute and the lock retry are honoured.
            if ran_at is not None:
                assert now >= ran_at + MIN_INTERVAL - EPS
            retry_at = None if refused_at is None else refused_at + LOCK_RETRY
            if retry_at is not None:
                assert now >= retry_at - EPS
            # Liveness: no later than the debounce, the minute or the retry demands.
            assert now <= max(last_add + DEBOUNCE, (ran_at or 0.0) + MIN_INTERVAL, retry_at or 0.0) + EPS
            refused_at = None
            outcome = next(outcome_iter, "ran")
            if outcome == "refused":
                c.turn_refused(now, turn)
                refused_at = now
                continue
            assert turn.events == tuple(owed_names)
            assert turn.revision == owed_revision
            owed_names, owed_revision = {}, 0
            if outcome == "ran":
                c.turn_ran(now)
                ran_at = now
            else:
                c.turn_skipped(now, turn)
        else:
            now, revision, name = adds[i]
            c.add(now, revision, name)
            owed_names.setdefault(name, None)
            owed_revision = max(owed_revision, revision)
            last_add = now
            i += 1
    assert not owed_names
