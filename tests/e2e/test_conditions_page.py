"""The page shows the board's conditions, in real Chromium against a real ``taskd`` (issue 17 §6).

Column headers read ``count / limit`` and turn to the warning colour while ``wip_exceeded``
holds; a dependency-blocked card and a card whose claim went stale carry a marker; a ``signal``
frame leaves ``EventSource.lastEventId`` as it was; after a reconnect the page reads
``/breaches`` and drops a condition that ended while it was away.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support_browser import Api
from tests.support.board import TaskdProcess

pytestmark = pytest.mark.e2e

TIMEOUT_MS = 10_000
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
#: The claim freshness window for this board's project, seconds: a claim with no heartbeat goes
#: stale this long after it was taken.
STALE_AFTER = 1


def card(page: Any, identifier: str) -> Any:
    return page.locator(f".card[data-identifier={identifier}]")


def header(page: Any, status: str) -> Any:
    return page.locator(f".column[data-status={status}] .column-head .count")


def test_wip_limits_blockers_stale_claims_and_the_catch_up(browser: Any, taskd: TaskdProcess) -> None:
    taskd.start()
    api = Api(taskd.url, taskd.token)
    api.post("/projects", {"id": "demo", "name": "Demo"})
    api.patch("/projects/demo", {"settings": {"wip_limits": {"in_progress": 1},
                                              "monitors": {"claim_stale_after": STALE_AFTER}}})
    blocker = api.post("/tasks", {"project": "demo", "title": "Lay the pipe"})
    blocked = api.post("/tasks", {"project": "demo", "title": "Open the tap"})
    first = api.post("/tasks", {"project": "demo", "title": "First job"})
    second = api.post("/tasks", {"project": "demo", "title": "Second job"})

    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    breaches_reads: list[str] = []
    page.on("request", lambda request: breaches_reads.append(request.url) if "/api/v1/breaches" in request.url else None)
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(api.post("/login-links")["url"])
    page.wait_for_selector("#connection[data-state=live]")
    page.wait_for_function("() => window.taskloom.conditions.limits.get('in_progress') === 1")
    assert header(page, "in_progress").inner_text() == "0 / 1"
    assert header(page, "todo").inner_text() == "4"  # no limit: the count alone
    page.wait_for_function("n => n > 0", arg=len(breaches_reads))  # the first open read /breaches

    # A probe of our own on the same stream: what lastEventId is on each frame, in order.
    page.evaluate(
        """after => {
          window.__frames = [];
          const source = new EventSource(`/api/v1/events?after=${after}`);
          source.onmessage = (m) => window.__frames.push(["message", m.lastEventId]);
          source.addEventListener("signal", (m) => window.__frames.push(["signal", m.lastEventId, JSON.parse(m.data).type]));
          window.__probe = source;
        }""",
        api.get("/meta")["revision"],
    )
    page.wait_for_function("() => window.__probe.readyState === 1")

    # 1. A blocks relation: the blocked card carries the dependency marker, the blocker does not.
    api.post(f"/tasks/{blocker['id']}/relations", {"type": "blocks", "target": blocked["id"]})
    marker = card(page, blocked["identifier"]).locator("[data-condition=dependency]")
    marker.wait_for()
    assert blocker["identifier"] in marker.inner_text()
    assert card(page, blocker["identifier"]).locator("[data-condition]").count() == 0

    # 2. Over the WIP limit: "2 / 1" in the warning colour while wip_exceeded holds.
    api.as_actor("claude", "worker-1").post(f"/tasks/{first['id']}/claim")
    heartbeats = api.as_actor("claude", "worker-2")
    heartbeats.post(f"/tasks/{second['id']}/claim")
    page.wait_for_selector(".column[data-status=in_progress][data-wip=exceeded]")
    # The signal may land before the claim's own frame has refreshed the card: wait for both.
    page.wait_for_function(
        "() => document.querySelector('.column[data-status=in_progress] .column-head .count').textContent === '2 / 1'")
    warn = page.evaluate("() => getComputedStyle(document.querySelector('.column[data-status=in_progress] .column-head')).backgroundColor")
    calm = page.evaluate("() => getComputedStyle(document.querySelector('.column[data-status=todo] .column-head')).backgroundColor")
    assert warn != calm, "the warning colour shows"

    # A signal frame leaves lastEventId as the last data frame left it.
    page.wait_for_function("() => window.__frames.some((f) => f[0] === 'signal' && f[2] === 'wip_exceeded')")
    frames = page.evaluate("() => window.__frames")
    assert any(f[0] == "signal" for f in frames[1:]) and any(f[0] == "message" for f in frames), frames
    for at, frame in enumerate(frames):
        if frame[0] == "signal":
            # The last data frame's id, or the empty string before any: never reset, never moved.
            before = next((f[1] for f in reversed(frames[:at]) if f[0] == "message"), "")
            assert frame[1] == before, frames
    ids = [int(f[1]) for f in frames if f[0] == "message"]
    assert ids == sorted(ids) and len(ids) == len(set(ids)), frames

    # 3. worker-1 never heart-beats: its card is marked stale once the window passes.
    #    worker-2 keeps beating, so its card stays unmarked.
    heartbeats.post(f"/tasks/{second['id']}/heartbeat")
    card(page, first["identifier"]).locator("[data-condition=stale]").wait_for(timeout=TIMEOUT_MS + STALE_AFTER * 1000)
    assert "worker-1" in card(page, first["identifier"]).locator("[data-condition=stale]").inner_text()
    page.screenshot(path=str(ARTIFACTS / "conditions-page.png"))

    # 4. The page misses a signal (its stream is down) and catches up from /breaches on reconnect.
    page.evaluate("() => window.taskloom.live.halt()")
    reads = len(breaches_reads)
    api.post(f"/tasks/{second['id']}/move", {"to": "todo"})  # wip_cleared, unheard by the page
    page.wait_for_function("() => window.__frames.some((f) => f[2] === 'wip_cleared')")
    assert page.locator(".column[data-status=in_progress][data-wip=exceeded]").count() == 1  # it missed it
    page.click("#resync")
    page.wait_for_selector("#connection[data-state=live]")
    page.wait_for_selector(".column[data-status=in_progress]:not([data-wip=exceeded])")
    assert len(breaches_reads) > reads
    page.wait_for_function(
        "() => document.querySelector('.column[data-status=in_progress] .column-head .count').textContent === '1 / 1'")

    # 5. The blocker is done with: the signal lifts the marker on the blocked card.
    api.post(f"/tasks/{blocker['id']}/move", {"to": "canceled"})
    page.wait_for_function(
        "id => !document.querySelector(`.card[data-identifier=${id}] [data-condition=dependency]`)", arg=blocked["identifier"]
    )
    page.evaluate("() => window.__probe.close()")
    context.close()
    assert not errors, errors
