"""The board's log reader offers every page to its live streams in the order they joined.

Which stream the board writes first decides which reader reaches a CPU first; the hub bench
opens its direct stream on either side of the hub's to measure both orders, which it can only do
if the order is the streams' and not their objects' addresses.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.board.logreader import LogReader, Page
from services.board.sqlite_store import SqliteStore


class Recorder:
    """A live stream as the reader sees one: it takes pages, and may leave the fan-out."""

    def __init__(self, name: str, offered: list[str], *, leaves: bool = False) -> None:
        self.name = name
        self.offered = offered
        self.leaves = leaves

    def offer(self, page: Page) -> bool:
        self.offered.append(self.name)
        return not self.leaves

    def fail(self) -> None:
        self.offered.append(f"{self.name} failed")


@pytest.fixture
def reader(tmp_path: Path) -> Iterator[LogReader]:
    store = SqliteStore(tmp_path / "board.sqlite")
    store.open()
    log_reader = LogReader(store, poll_interval=1.0)
    try:
        yield log_reader
    finally:
        store.close()


def page(after: int) -> Page:
    return Page(after, after + 1, ())


def test_pages_go_to_the_streams_in_the_order_they_joined(reader: LogReader) -> None:
    offered: list[str] = []
    streams = [Recorder(name, offered) for name in ("hub", "browser", "cli", "agent", "ui")]
    for stream in streams:
        reader.subscribe(stream)
    for n in range(3):
        reader.publish(page(n))
    assert offered == ["hub", "browser", "cli", "agent", "ui"] * 3


def test_a_stream_that_leaves_and_rejoins_comes_last(reader: LogReader) -> None:
    offered: list[str] = []
    first, second, third = (Recorder(name, offered) for name in ("first", "second", "third"))
    for stream in (first, second, third):
        reader.subscribe(stream)
    reader.unsubscribe(first)
    reader.subscribe(first)  # a slow stream rejoins after its catch-up
    reader.publish(page(0))
    assert offered == ["second", "third", "first"]


def test_a_stream_that_leaves_during_a_page_keeps_the_others_in_order(reader: LogReader) -> None:
    offered: list[str] = []
    reader.subscribe(Recorder("first", offered))
    reader.subscribe(Recorder("slow", offered, leaves=True))
    reader.subscribe(Recorder("third", offered))
    reader.publish(page(0))
    reader.publish(page(1))
    assert offered == ["first", "slow", "third", "first", "third"]
    assert reader.subscribers == 2


def test_a_failed_read_fails_every_stream_in_order_and_empties_the_fan_out(reader: LogReader) -> None:
    offered: list[str] = []
    for name in ("a", "b", "c"):
        reader.subscribe(Recorder(name, offered))
    reader.fail_subscribers()
    assert offered == ["a failed", "b failed", "c failed"]
    assert reader.subscribers == 0
