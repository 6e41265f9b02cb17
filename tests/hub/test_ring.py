"""The replay ring (services/hub/ring.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.hub.ring import Ring


def test_since_replays_inside_the_ring() -> None:
    ring = Ring(4, base=10)
    for revision in (12, 13, 17):
        ring.append(revision, b"%d" % revision)
    assert ring.since(10) == [(12, b"12"), (13, b"13"), (17, b"17")]
    assert ring.since(13) == [(17, b"17")]
    assert ring.since(15) == [(17, b"17")]  # revisions are not contiguous
    assert ring.since(17) == []
    assert ring.since(9) is None  # older than the ring: the caller resets


def test_overflow_moves_the_base() -> None:
    ring = Ring(3, base=0)
    for revision in range(1, 6):
        ring.append(revision, b"")
    assert len(ring) == 3 and ring.base == 2 and ring.last == 5
    assert ring.since(1) is None
    assert [r for r, _ in ring.since(2)] == [3, 4, 5]


def test_limit_and_restart() -> None:
    ring = Ring(10, base=0)
    for revision in range(1, 8):
        ring.append(revision, b"")
    assert [r for r, _ in ring.since(2, limit=2)] == [3, 4]
    ring.restart(100)
    assert len(ring) == 0 and ring.since(99) is None and ring.since(100) == []


def test_unknown_base_covers_nothing() -> None:
    assert Ring(4).since(0) is None


def test_revisions_must_increase() -> None:
    ring = Ring(4, base=0)
    ring.append(5, b"")
    with pytest.raises(ValueError):
        ring.append(5, b"")


@given(st.lists(st.integers(min_value=1, max_value=5), max_size=300), st.integers(min_value=1, max_value=40), st.data())
def test_ring_matches_a_plain_list(steps: list[int], capacity: int, data: st.DataObject) -> None:
    ring = Ring(capacity, base=0)
    held: list[int] = []
    revision = 0
    for step in steps:
        revision += step
        ring.append(revision, str(revision).encode())
        held.append(revision)
    kept = held[-capacity:]
    assert [r for r, _ in ring.since(ring.base)] == kept
    after = data.draw(st.integers(min_value=0, max_value=revision + 2))
    got = ring.since(after)
    complete_from = held[-capacity - 1] if len(held) > capacity else 0
    if after < complete_from:
        assert got is None
    else:
        assert [r for r, line in got] == [r for r in held if r > after]
        assert all(line == str(r).encode() for r, line in got)
