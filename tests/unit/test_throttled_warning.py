"""``ThrottledWarning``: a line a client can cause at will is written at most once per interval,
and every occurrence is still counted, by kind, in some line."""

from __future__ import annotations

from typing import Any

from services.board.httpserver import ThrottledWarning
from tests.support.waiting import async_wait_until


class Lines:
    def __init__(self) -> None:
        self.written: list[dict[str, Any]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.written.append({"event": event, **fields})


async def test_the_first_is_written_at_once_and_the_rest_in_one_line_when_the_interval_ends() -> None:
    lines = Lines()
    throttled = ThrottledWarning("request_unparseable", logger=lines, interval=0.2)
    throttled.note("BadStatusLine", remote="a")
    assert lines.written == [{"event": "request_unparseable", "count": 1, "kinds": {"BadStatusLine": 1}, "remote": "a"}]
    for kind in ("BadStatusLine", "InvalidHeader", "BadStatusLine"):
        throttled.note(kind, remote="b")
    assert len(lines.written) == 1, "nothing more before the interval ends"
    await async_wait_until(lambda: _async(len(lines.written) == 2), timeout=5, what="the interval's line")
    assert lines.written[1] == {"event": "request_unparseable", "count": 3,
                                "kinds": {"BadStatusLine": 2, "InvalidHeader": 1}, "remote": "b"}


async def test_close_writes_what_is_still_counted_and_nothing_after() -> None:
    lines = Lines()
    throttled = ThrottledWarning("request_timed_out", logger=lines, interval=60)
    throttled.note("handler_timeout")
    throttled.note("handler_timeout")
    throttled.close()
    assert [line["count"] for line in lines.written] == [1, 1]
    throttled.close()
    assert len(lines.written) == 2


async def _async(value: bool) -> bool:
    return value
