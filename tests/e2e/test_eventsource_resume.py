"""A native EventSource on ``/api/v1/events?after=N`` that reconnects receives no frame twice.

Chromium's EventSource reconnects by itself with the URL it was opened on (``?after=N``) and the
``Last-Event-ID`` of its progress. The board ends each stream after a short lifetime (a
``shutdown`` frame), so the browser reconnects several times during the test; every frame it
received is counted by id.
"""

from __future__ import annotations

from typing import Any

import pytest

from shared.events import WIRE_NOISE
from tests.e2e.support_browser import TIMEOUT_MS, Api, log_in
from tests.support.board import TaskdProcess

pytestmark = pytest.mark.e2e

#: Seconds each stream lives: the browser's reconnect (retry 1000 ms) comes round within the test.
STREAM_LIFETIME = "1.5"
RECONNECT_TIMEOUT_MS = 20_000


def streamed_revisions(api: Api, after: int) -> list[int]:
    """Revisions an unfiltered stream sends as data after ``after``, oldest first."""
    rows = api.get("/activities?order=asc&limit=1000")["items"]
    return [row["revision"] for row in rows if row["revision"] > after and row["event"] not in WIRE_NOISE]


def test_a_reconnecting_eventsource_on_after_gets_no_duplicates(browser: Any, taskd: TaskdProcess) -> None:
    taskd.start("--stream-lifetime", STREAM_LIFETIME)
    api = Api(taskd.url, taskd.token)
    api.post("/projects", {"id": "demo", "name": "Demo"})
    opened_at = api.get("/meta")["revision"]
    for n in range(3):
        api.post("/tasks", {"project": "demo", "title": f"before the reconnects {n}"})

    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    log_in(page, api, taskd.url)
    page.evaluate(
        """after => {
          window.__ids = [];
          window.__opens = 0;
          const source = new EventSource(`/api/v1/events?after=${after}`);
          source.onopen = () => { window.__opens += 1; };
          source.onmessage = (message) => { window.__ids.push(Number(message.lastEventId)); };
          window.__source = source;
        }""",
        opened_at,
    )
    # Two reconnects of the browser's own: each resent ?after= with a newer Last-Event-ID.
    page.wait_for_function("() => window.__opens >= 3", timeout=RECONNECT_TIMEOUT_MS)
    api.post("/tasks", {"project": "demo", "title": "after the reconnects"})
    expected = streamed_revisions(api, opened_at)
    # The stream is in revision order: once the newest row is in, any replay came before it.
    page.wait_for_function("last => window.__ids.includes(last)", arg=expected[-1], timeout=RECONNECT_TIMEOUT_MS)
    ids = page.evaluate("() => { window.__source.close(); return window.__ids; }")
    context.close()
    assert len(ids) == len(set(ids)), f"frames received twice: {sorted(i for i in set(ids) if ids.count(i) > 1)}"
    assert ids == expected
