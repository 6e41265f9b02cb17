"""What one board process sends the others with a commit (conditions/timer.py ``peer_notes``):
the effects come back as they were, in order, in notifications PostgreSQL accepts."""

from __future__ import annotations

from services.board.conditions.signals import Deadlines, Signal
from services.board.conditions.timer import peer_notes, read_peer_note
from services.board.store import PEER_NOTE_BYTES

AT = "2030-01-02T09:41:00.000Z"


def signal(n: int, blockers: int = 1) -> Signal:
    return Signal("card_blocked", "demo", f"t{n}", {"blockers": [f"DEMO-{k:04d}" for k in range(blockers)]}, AT)


def test_signals_and_deadlines_come_back_as_they_were() -> None:
    effects = [signal(1), Deadlines("t1", (("status_timeout", "in_review@r7", 1893583260.25),))]
    notes = peer_notes(effects, 42)
    assert len(notes) == 1
    assert read_peer_note(notes[0]) == (42, effects)


def test_a_card_left_with_no_deadline_is_not_sent() -> None:
    """A commit on a board without temporal conditions sends nothing to the other processes."""
    assert peer_notes([Deadlines("t1", ()), Deadlines("t2", ())], 5) == []


def test_a_large_batch_is_split_under_the_payload_limit_in_order() -> None:
    effects = [signal(n, blockers=20) for n in range(200)]
    notes = peer_notes(effects, 7)
    assert len(notes) > 1 and all(len(note.encode()) <= PEER_NOTE_BYTES for note in notes)
    back = [effect for note in notes for effect in read_peer_note(note)[1]]
    assert back == effects


def test_one_effect_too_large_for_any_notification_is_left_out_alone() -> None:
    effects = [signal(1), signal(2, blockers=1000), signal(3)]
    notes = peer_notes(effects, 9)
    assert [effect for note in notes for effect in read_peer_note(note)[1]] == [effects[0], effects[2]]
