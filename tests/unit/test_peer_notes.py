"""What one board process sends the others with a commit (conditions/timer.py ``peer_notes``):
the effects come back as they were, in order, in notifications PostgreSQL accepts."""

from __future__ import annotations

from typing import Any

import pytest

from services.board.conditions.signals import Deadlines, Signal
from services.board.conditions.timer import MAX_PARTS, PART_MARK, PeerNoteReader, peer_notes, read_peer_note
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


def read_all(notes: list[str]) -> list[Any]:
    """The effects ``notes`` carry, read in order as a receiving process reads them."""
    reader = PeerNoteReader()
    return [effect for note in notes if (read := reader.read(note)) is not None for effect in read[1]]


def test_one_effect_too_large_for_a_notification_goes_in_parts_in_its_place() -> None:
    """A card with hundreds of open blockers: its signal was left out, and the other processes'
    streams never heard it."""
    effects = [signal(1), signal(2, blockers=1000), signal(3)]
    notes = peer_notes(effects, 9)
    assert all(len(note.encode()) <= PEER_NOTE_BYTES for note in notes)
    assert sum(note.startswith(PART_MARK) for note in notes) > 1
    assert read_all(notes) == effects


def test_parts_are_cut_between_characters() -> None:
    """Every part is text PostgreSQL takes: a cut inside a multi-byte character would not decode."""
    wide = Signal("card_blocked", "demo", "t1", {"blockers": ["DÉMO-Ω-😀" * 3 for _ in range(400)]}, AT)
    notes = peer_notes([wide], 3)
    assert len(notes) > 1 and all(len(note.encode()) <= PEER_NOTE_BYTES for note in notes)
    assert read_all(notes) == [wide]


def test_an_effect_past_the_most_parts_is_left_out_alone() -> None:
    huge = Signal("card_blocked", "demo", "t2", {"blockers": ["x" * 100] * (MAX_PARTS * 80)}, AT)
    effects = [signal(1), huge, signal(3)]
    assert read_all(peer_notes(effects, 9)) == [effects[0], effects[2]]


def test_a_split_note_is_delivered_only_whole() -> None:
    """A part missing (the listener reconnected halfway) delivers nothing of its note; what comes
    after it is read as usual."""
    whole = signal(2, blockers=2000)
    split = peer_notes([whole], 9)
    assert len(split) >= 3
    reader = PeerNoteReader()
    assert [reader.read(note) for note in split[:-1]] == [None] * (len(split) - 1)
    assert reader.read(peer_notes([signal(3)], 10)[0]) == (10, [signal(3)])
    assert reader.read(split[0]) is None
    with pytest.raises(ValueError, match="out of order"):
        reader.read(split[2])  # part 1 never came
    assert [read for note in split if (read := reader.read(note)) is not None] == [(9, [whole])]
