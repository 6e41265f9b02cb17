"""Card-brief registrations over real TCP on loopback, in front of a real board (SPEC §7.4).

The hub runs in this process with short cadence knobs; the board is real, the files are real.
"""

from __future__ import annotations

import asyncio
import json
import stat
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from services.board.sqlite_store import SqliteStore
from services.hub.server import Hub
from shared import hub_protocol as hp
from tests.support.board import REPORT, BoardClient, RunningBoard, start_board
from tests.support.waiting import async_wait_until

from .conftest import (
    WRITER,
    Closed,
    RawClient,
    activity_count,
    block,
    bulk_rows,
    hub_caught_up,
    make_task,
    start_board_on,
    start_hub,
)

pytestmark = pytest.mark.asyncio

#: Short cadence for tests (production: 0.3 s / 2 s / 5 s).
FAST_WATCH = {"refresh_debounce": 0.03, "refresh_max_wait": 0.2, "refresh_floor": 0.05}


def registrations_file(tmp_path: Path) -> Path:
    return tmp_path / "run" / "hub-test.registrations.json"


@pytest.fixture
async def whub(board: RunningBoard, tmp_path: Path) -> AsyncIterator[Hub]:
    running = await start_hub(board.url, board.token, registrations_path=registrations_file(tmp_path), **FAST_WATCH)
    try:
        yield running
    finally:
        await running.stop()


def front(path: Path) -> dict[str, Any]:
    """The brief's front matter as a dict (values are YAML scalars, strings JSON-quoted)."""
    text = path.read_text()
    assert text.startswith("---\n"), text[:100]
    head = text[4:text.index("\n---\n", 4)]
    out: dict[str, Any] = {}
    for row in head.splitlines():
        key, _, value = row.partition(": ")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value  # a plain token (status, identifier) or a list of identifiers
    return out


async def watch(raw: RawClient, **fields: Any) -> dict[str, Any]:
    await raw.send(hp.watch(**fields))
    return await raw.recv()


async def pong(hub: Hub) -> dict[str, Any]:
    raw = await RawClient.greeted(hub)
    try:
        await raw.send(hp.ping())
        return await raw.recv()
    finally:
        await raw.close()


async def status(hub: Hub) -> list[dict[str, Any]]:
    raw = await RawClient.greeted(hub)
    try:
        await raw.send(hp.watch_status())
        answer = await raw.recv()
        assert answer["type"] == "watch-status", answer
        return answer["registrations"]
    finally:
        await raw.close()


async def next_refresh(raw: RawClient, timeout: float = 10.0) -> dict[str, Any]:
    """The next ``refresh`` within ``timeout`` overall (heartbeats do not extend it)."""
    return await asyncio.wait_for(raw.recv_type("refresh"), timeout)


async def kept_brief(hub: Hub, board: RunningBoard, card: dict[str, Any], out: Path) -> RawClient:
    """Once the hub has seen what was written so far, keep ``card``'s brief at ``out``; the
    session, after the first snapshot is on disk."""
    await hub_caught_up(hub, board)
    raw = await RawClient.greeted(hub)
    assert (await watch(raw, ref=card["identifier"], out=str(out)))["type"] == "registered"
    await next_refresh(raw)
    return raw


async def rename(client: BoardClient, task: dict[str, Any], title: str) -> None:
    reply = await client.patch(f"/api/v1/tasks/{task['id']}", {"title": title})
    assert reply.status == 200, reply.body


async def move(client: BoardClient, task: dict[str, Any], to: str) -> None:
    reply = await client.post(f"/api/v1/tasks/{task['id']}/move", {"to": to})
    assert reply.status == 200, reply.body


def persisted(tmp_path: Path) -> dict[str, Any] | None:
    path = registrations_file(tmp_path)
    return json.loads(path.read_text()) if path.exists() else None


async def titled(path: Path, title: str) -> bool:
    try:
        return front(path)["title"] == title
    except (OSError, ValueError):
        return False


# -- the life of a registration -------------------------------------------------------------------


async def test_a_foreground_watch_keeps_the_brief_fresh_until_the_card_is_done(
    whub: Hub, board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    task = await make_task(client)
    out = tmp_path / "work" / "card.md"
    await hub_caught_up(whub, board)
    raw = await RawClient.greeted(whub)
    answer = await watch(raw, ref=task["identifier"], out=str(out))
    assert out.exists()  # the first snapshot is on disk before `registered` is answered
    assert answer["type"] == "registered" and answer["refs"] == [task["identifier"]]
    assert (answer["reused"], answer["running"]) == (False, True) and answer["registration_id"].startswith("w_")
    assert answer["cards"][0]["state"] == "registered" and answer["cards"][0]["task_id"] == task["id"]
    first = await next_refresh(raw)
    assert first == {"type": "refresh", "ref": task["identifier"], "path": str(out), "revision": whub.revision,
                     "status": "todo"}
    assert front(out)["identifier"] == task["identifier"] and front(out)["title"] == task["title"]
    assert (await pong(whub))["registrations"] == 1

    await rename(client, task, "A fresher title")
    target = await hub_caught_up(whub, board)
    got = await next_refresh(raw)
    assert got["revision"] >= target and front(out)["title"] == "A fresher title"
    reply = await client.post(f"/api/v1/tasks/{task['id']}/comments", {"body": "a note the agent must read"})
    assert reply.status == 201
    await next_refresh(raw)
    assert "a note the agent must read" in out.read_text()

    await move(client, task, "canceled")
    last = await next_refresh(raw)
    assert last["status"] == "canceled" and front(out)["status"] == "canceled"  # written once more
    assert await raw.recv_type("done") == {"type": "done"}
    assert await raw.closed()
    assert (await pong(whub))["registrations"] == 0


async def test_a_detached_registration_outlives_its_session_and_is_persisted(
    whub: Hub, board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    one, two = await make_task(client), await make_task(client)
    paths = [tmp_path / "a.md", tmp_path / "b.md"]
    raw = await RawClient.greeted(whub)
    answer = await watch(raw, cards=[{"ref": one["identifier"], "out": str(paths[0])},
                                     {"ref": two["id"], "out": str(paths[1])}], ttl_ms=0, detach=True)
    assert answer["refs"] == [one["identifier"], two["id"]] and answer["running"]
    await raw.send(hp.ping())
    assert (await raw.recv())["type"] == "pong"  # a detached answer is one answer: the session goes on
    await raw.close()
    registration_id = answer["registration_id"]

    record = persisted(tmp_path)
    assert record["version"] == hp.REGISTRATIONS_VERSION == 2
    (entry,) = record["registrations"]
    assert entry["registration_id"] == registration_id and entry["ttl_ms"] == 0 and entry["expires_at"] is None
    assert [(c["task_id"], c["path"]) for c in entry["cards"]] == [(one["id"], str(paths[0])), (two["id"], str(paths[1]))]
    assert stat.S_IMODE(registrations_file(tmp_path).stat().st_mode) == 0o600

    for n in range(3):
        await rename(client, two, f"Edit {n}")
        await async_wait_until(lambda n=n: titled(paths[1], f"Edit {n}"), what=f"edit {n} in the brief")
    (listed,) = await status(whub)
    assert listed["registration_id"] == registration_id and listed["detached"] and not listed["owner"]
    assert [card["identifier"] for card in listed["cards"]] == [one["identifier"], two["identifier"]]

    raw = await RawClient.greeted(whub)
    await raw.send(hp.watch_stop(registration_id))
    assert await raw.recv() == hp.watch_stopped(registration_id=registration_id, refs=[one["identifier"], two["id"]])
    await raw.send(hp.watch_stop(registration_id))
    assert (await raw.recv())["code"] == hp.NOT_FOUND
    await raw.close()
    assert persisted(tmp_path)["registrations"] == [] and (await pong(whub))["registrations"] == 0


# -- validation before any write ------------------------------------------------------------------


async def _refused_without_a_trace(
    hub: Hub, board: RunningBoard, tmp_path: Path, message: dict[str, Any], code: str
) -> dict[str, Any]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    files_before = sorted(str(p) for p in work.rglob("*"))
    rows_before = await activity_count(board)
    raw = await RawClient.greeted(hub)
    await raw.send(message)
    answer = await raw.recv()
    assert answer["type"] == "error" and answer["code"] == code, answer
    await raw.send(hp.ping())
    assert (await raw.recv())["registrations"] == 0  # the session survives; nothing registered
    await raw.close()
    assert sorted(str(p) for p in work.rglob("*")) == files_before  # no file, no directory
    assert persisted(tmp_path) is None  # nothing persisted
    assert await activity_count(board) == rows_before  # the hub never writes board state
    return answer


async def test_validation_failures_write_nothing(whub: Hub, board: RunningBoard, client: BoardClient, tmp_path: Path) -> None:
    task, other = await make_task(client), await make_task(client)
    ref = task["identifier"]
    work = tmp_path / "work"
    (work / "a-directory").mkdir(parents=True)
    (work / "a-file").write_text("not a directory")
    (work / "taken" / ".taskloom" / ref / "card.md").mkdir(parents=True)
    files = sorted(work.rglob("*"))
    w = str(work)
    cases: list[tuple[dict[str, Any], str, str]] = [
        (hp.watch(ref=ref, out="card.md", detach=True), hp.VALIDATION_FAILED, "out"),
        (hp.watch(ref=ref, out=f"{w}/a-directory", detach=True), hp.VALIDATION_FAILED, "paths"),
        (hp.watch(ref=ref, out=f"{w}/a-file/card.md", detach=True), hp.VALIDATION_FAILED, "paths"),
        (hp.watch(refs=[ref], dir=f"{w}/a-file", detach=True), hp.VALIDATION_FAILED, "paths"),
        (hp.watch(refs=[ref], dir=f"{w}/taken", detach=True), hp.VALIDATION_FAILED, "paths"),
        (hp.watch(cards=[{"ref": ref, "out": f"{w}/1.md"}, {"ref": ref, "out": f"{w}/2.md"}], detach=True),
         hp.VALIDATION_FAILED, "refs"),
        (hp.watch(cards=[{"ref": ref, "out": f"{w}/1.md"}, {"ref": task["id"], "out": f"{w}/2.md"}], detach=True),
         hp.VALIDATION_FAILED, "refs"),  # one card, two spellings
        (hp.watch(cards=[{"ref": ref, "out": f"{w}/1.md"}, {"ref": other["identifier"], "out": f"{w}/1.md"}],
                  detach=True), hp.VALIDATION_FAILED, "paths"),
        ({**hp.watch(cards=[{"ref": ref, "out": f"{w}/1.md"}], detach=True), "out": f"{w}/2.md"},
         hp.VALIDATION_FAILED, "cards"),
        ({**hp.watch(cards=[{"ref": ref, "out": f"{w}/1.md"}]), "dir": w}, hp.VALIDATION_FAILED, "cards"),
    ]
    for message, code, field in cases:
        answer = await _refused_without_a_trace(whub, board, tmp_path, message, code)
        assert answer["details"]["field"] == field, (message, answer)
    # Unknown refs are named, all of them; the known card in the same request is not written.
    answer = await _refused_without_a_trace(
        whub, board, tmp_path,
        hp.watch(cards=[{"ref": ref, "out": f"{w}/known.md"}, {"ref": "DEMO-0404", "out": f"{w}/x.md"},
                        {"ref": "NOPE-0001", "out": f"{w}/y.md"}], detach=True),
        hp.NOT_FOUND,
    )
    assert answer["details"]["refs"] == ["DEMO-0404", "NOPE-0001"]
    assert sorted(work.rglob("*")) == files


async def test_a_refused_foreground_watch_leaves_the_session_free(whub: Hub, tmp_path: Path) -> None:
    raw = await RawClient.greeted(whub)
    answer = await watch(raw, ref="DEMO-0404", out=str(tmp_path / "x.md"))
    assert answer["code"] == hp.NOT_FOUND
    await raw.send(hp.follow(idle_ms=0))
    assert (await raw.recv())["type"] == "open"
    assert not (tmp_path / "x.md").exists()
    await raw.close()


# -- owner, viewer, covered -----------------------------------------------------------------------


async def test_covered_cards_are_dropped_and_foreground_holders_refuse(
    whub: Hub, board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    one, two, three, four = [await make_task(client) for _ in range(4)]
    p = {n: str(tmp_path / f"{n}.md") for n in ("one", "two", "three", "four", "one-elsewhere")}
    raw = await RawClient.greeted(whub)
    held = await watch(raw, ref=one["identifier"], out=p["one"], detach=True, ttl_ms=0)

    covered = await watch(raw, ref=one["id"], out=p["one"], detach=True)
    assert {k: covered[k] for k in ("registration_id", "refs", "reused", "running", "reason")} == {
        "registration_id": None, "refs": [], "reused": True, "running": True, "reason": "covered",
    }
    assert covered["cards"][0]["registration_id"] == held["registration_id"]

    partly = await watch(raw, cards=[{"ref": one["identifier"], "out": p["one"]},
                                     {"ref": two["identifier"], "out": p["two"]}], detach=True)
    assert partly["refs"] == [two["identifier"]] and partly["registration_id"] not in (None, held["registration_id"])
    assert [c["state"] for c in partly["cards"]] == ["covered", "registered"]
    assert (await pong(whub))["registrations"] == 2

    # A foreground registration does not promise a fresh brief beyond its session: refused.
    owner = await RawClient.greeted(whub)
    assert (await watch(owner, ref=three["identifier"], out=p["three"]))["type"] == "registered"
    conflict = await watch(raw, ref=three["identifier"], out=p["three"], detach=True)
    assert conflict["code"] == hp.WATCH_CONFLICT and conflict["details"]["path"] == p["three"]
    # A path is kept for one card.
    taken = await watch(raw, ref=four["identifier"], out=p["one"], detach=True)
    assert taken["code"] == hp.WATCH_CONFLICT and not Path(p["four"]).exists()
    # The same card at another path is another brief.
    elsewhere = await watch(raw, ref=one["identifier"], out=p["one-elsewhere"], detach=True)
    assert elsewhere["registration_id"] and not elsewhere["reused"]
    assert (await pong(whub))["registrations"] == 4
    ids = [entry["registration_id"] for entry in persisted(tmp_path)["registrations"]]
    assert held["registration_id"] in ids and partly["registration_id"] in ids and len(ids) == 3  # detached only
    await owner.close()
    await raw.close()


async def test_owner_and_viewers(whub: Hub, board: RunningBoard, client: BoardClient, tmp_path: Path) -> None:
    task = await make_task(client)
    await hub_caught_up(whub, board)  # else the first batch may re-render what the snapshot holds
    out = str(tmp_path / "card.md")
    owner = await RawClient.greeted(whub)
    made = await watch(owner, ref=task["identifier"], out=out)
    await next_refresh(owner)

    viewer = await RawClient.greeted(whub)
    seen = await watch(viewer, ref=task["id"], out=out)
    assert {k: seen[k] for k in ("registration_id", "refs", "reused", "running", "reason")} == {
        "registration_id": made["registration_id"], "refs": [task["id"]], "reused": True, "running": True,
        "reason": "viewer",
    }
    assert (await next_refresh(viewer))["ref"] == task["id"]  # in the viewer's own spelling
    await rename(client, task, "Both see it")
    assert (await next_refresh(owner))["ref"] == task["identifier"]
    assert (await next_refresh(viewer))["ref"] == task["id"]

    # A viewer leaving retires nothing.
    await viewer.close()
    await async_wait_until(lambda: _ready(whub.clients == 1), what="the viewer to be gone")
    assert (await pong(whub))["registrations"] == 1
    await rename(client, task, "Owner still")
    await next_refresh(owner)

    # The owner leaving hands the registration to a viewer…
    heir = await RawClient.greeted(whub)
    await watch(heir, ref=task["identifier"], out=out)
    await next_refresh(heir)
    await owner.close()
    await async_wait_until(lambda: _ready(whub.clients == 1), what="the owner to be gone")
    (listed,) = await status(whub)
    assert listed["registration_id"] == made["registration_id"] and listed["owner"] and listed["viewers"] == 0
    await rename(client, task, "Inherited")
    assert (await next_refresh(heir))["status"] == "todo"
    assert await titled(Path(out), "Inherited")
    # …and the last session leaving ends it.
    await heir.close()
    await async_wait_until(lambda: _ready(whub.registrations.count() == 0), what="the registration to end")
    assert await status(whub) == []


async def _ready(value: bool) -> bool:
    return value


# -- TTL, terminal cards, routing ------------------------------------------------------------------


async def test_ttl_ends_a_registration(whub: Hub, board: RunningBoard, client: BoardClient, tmp_path: Path) -> None:
    task = await make_task(client)
    await hub_caught_up(whub, board)
    raw = await RawClient.greeted(whub)
    started = time.monotonic()
    await watch(raw, ref=task["identifier"], out=str(tmp_path / "fg.md"), ttl_ms=300)
    await next_refresh(raw)
    assert await raw.recv_type("ttl") == {"type": "ttl", "ttl_ms": 300}
    assert time.monotonic() - started >= 0.3
    assert await raw.closed()
    detached = await RawClient.greeted(whub)
    answer = await watch(detached, ref=task["identifier"], out=str(tmp_path / "bg.md"), ttl_ms=200, detach=True)
    assert persisted(tmp_path)["registrations"][0]["expires_at"] is not None
    await async_wait_until(lambda: _ready(whub.registrations.count() == 0), what="the detached TTL")
    assert persisted(tmp_path)["registrations"] == [] and answer["registration_id"]
    await detached.close()


async def test_a_card_terminal_at_registration_is_written_once_without_a_stream(tmp_path: Path) -> None:
    # A board that refuses every stream: the hub cannot open one, and a terminal card needs none.
    board = await start_board(tmp_path / "data", max_streams=0)
    import aiohttp

    try:
        async with aiohttp.ClientSession() as session:
            client = BoardClient(board.url, board.token, session)
            task = await make_task(client)
            await move(client, task, "canceled")
            hub = await start_hub(board.url, board.token, registrations_path=registrations_file(tmp_path), **FAST_WATCH)
            try:
                raw = await RawClient.greeted(hub)
                out = tmp_path / "card.md"
                answer = await watch(raw, ref=task["identifier"], out=str(out))
                assert {k: answer[k] for k in ("registration_id", "refs", "reused", "running", "reason")} == {
                    "registration_id": None, "refs": [], "reused": False, "running": False, "reason": "terminal",
                }
                assert (await next_refresh(raw))["status"] == "canceled"
                assert await raw.recv_type("done") == {"type": "done"}
                assert await raw.closed()
                assert front(out)["status"] == "canceled"
                detached = await RawClient.greeted(hub)
                again = await watch(detached, ref=task["id"], out=str(tmp_path / "bg.md"), detach=True)
                assert again["reason"] == "terminal" and (tmp_path / "bg.md").exists()
                await detached.close()
                assert hub.registrations.count() == 0 and persisted(tmp_path) is None
                assert hub._link.connects == 0  # no board stream was ever opened
            finally:
                await hub.stop()
    finally:
        await board.runner.cleanup()


async def test_relations_refresh_both_ends_and_task_less_events_refresh_all(
    whub: Hub, board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    tasks = [await make_task(client) for _ in range(3)]
    await hub_caught_up(whub, board)
    raw = await RawClient.greeted(whub)
    cards = [{"ref": t["identifier"], "out": str(tmp_path / f"{t['identifier']}.md")} for t in tasks]
    await watch(raw, cards=cards)
    for _ in tasks:
        await next_refresh(raw)
    await block(client, tasks[0], tasks[1])
    first = {(await next_refresh(raw))["ref"], (await next_refresh(raw))["ref"]}
    assert first == {tasks[0]["identifier"], tasks[1]["identifier"]}  # the source too, not the bystander
    assert "blocked_by: [" + tasks[0]["identifier"] + "]" in Path(cards[1]["out"]).read_text()
    reply = await client.patch("/api/v1/projects/demo", {"name": "Renamed project"})
    assert reply.status == 200, reply.body
    everyone = {(await next_refresh(raw))["ref"] for _ in tasks}
    assert everyone == {t["identifier"] for t in tasks}
    await raw.close()


async def test_a_blocker_finishing_or_reopening_refreshes_the_card_it_blocks(
    whub: Hub, board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    """The kept card's own row never moves here: only its open blockers do, and the board says so
    with ``card_unblocked`` / ``card_blocked`` on the signal lane, which mark the card's brief."""
    card = await make_task(client)
    blocker = await make_task(client, title="Land the schema", acceptance_mode="none")
    await block(client, blocker, card)
    out = tmp_path / "card.md"
    raw = await kept_brief(whub, board, card, out)
    open_line, none_line = f"\nblocked_by: [{blocker['identifier']}]\n", "\nblocked_by: []\n"
    assert open_line in out.read_text()
    signals = await RawClient.following(whub)

    async def kept_brief_says(line: str, signal: str) -> None:
        async def refreshed() -> None:
            while line not in out.read_text():
                await raw.recv_type("refresh")
        await asyncio.wait_for(refreshed(), 10.0)
        while True:  # the cause: a signal about the kept card (its events name only the blocker)
            record = await signals.recv()
            if record["type"] == "event":
                assert card["id"] not in (record["activity"]["task_id"], *record["activity"]["changes"].values())
            if record["type"] == "signal" and record["signal"]["type"] == signal:
                assert record["signal"]["task_id"] == card["id"]
                return

    worker = client.as_actor("claude", "worker-1")
    for path, body in (("claim", {}), ("deliver", {"body": REPORT}), ("move", {"to": "done"})):
        reply = await worker.post(f"/api/v1/tasks/{blocker['id']}/{path}", body)
        assert reply.status == 200, (path, reply.body)
    await kept_brief_says(none_line, "card_unblocked")
    reply = await client.post(f"/api/v1/tasks/{blocker['id']}/reopen", {"reason": "the schema needs another column"})
    assert reply.status == 200, reply.body
    await kept_brief_says(open_line, "card_blocked")
    await move(client, blocker, "canceled")
    await kept_brief_says(none_line, "card_unblocked")
    assert "- blocked by " + blocker["identifier"] in out.read_text()  # the relation itself stays listed

    await raw.close()
    await signals.close()


async def test_one_of_two_blockers_finishing_narrows_the_kept_brief(
    whub: Hub, board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    """The card stays blocked, so no ``card_unblocked``: the board sends ``card_blocked`` again with
    the blocker still open, and the hub re-renders on it. Without that the brief would name a
    finished blocker as open until the card's own next event."""
    card = await make_task(client)
    blockers = [await make_task(client) for _ in range(2)]
    for blocker in blockers:
        await block(client, blocker, card)
    out = tmp_path / "card.md"
    raw = await kept_brief(whub, board, card, out)
    both = ", ".join(sorted(b["identifier"] for b in blockers))
    assert f"\nblocked_by: [{both}]\n" in out.read_text()
    await move(client, blockers[0], "canceled")
    narrowed = f"\nblocked_by: [{blockers[1]['identifier']}]\n"

    async def refreshed() -> None:
        while narrowed not in out.read_text():
            await raw.recv_type("refresh")
    await asyncio.wait_for(refreshed(), 10.0)
    await raw.close()


async def test_batches_respect_the_floor_and_coalesce(board: RunningBoard, client: BoardClient, tmp_path: Path) -> None:
    floor = 0.5
    hub = await start_hub(board.url, board.token, refresh_debounce=0.02, refresh_max_wait=0.1, refresh_floor=floor)
    try:
        task = await make_task(client)
        out = tmp_path / "card.md"
        raw = await RawClient.greeted(hub)
        await watch(raw, ref=task["identifier"], out=str(out))
        await next_refresh(raw)
        renders = hub.registrations.renders
        first_render = len(hub.registrations.render_starts)
        arrivals: list[float] = []

        async def timestamp_refreshes() -> None:
            while True:
                await next_refresh(raw)
                arrivals.append(time.monotonic())

        clock = asyncio.create_task(timestamp_refreshes())
        started = time.monotonic()
        try:
            for n in range(12):
                await rename(client, task, f"Burst {n}")
                await asyncio.sleep(0.1)  # a writer's pace (not a synchronisation): 12 edits over ~1.2 s
            await async_wait_until(lambda: titled(out, "Burst 11"), what="the last edit in the brief")
        finally:
            clock.cancel()
        spent = time.monotonic() - started
        # The floor holds between the renders themselves; the refreshes a follower reads arrive
        # with its own delivery jitter on top, so they only show that batches reached it.
        starts = list(hub.registrations.render_starts)[first_render:]
        gaps = [b - a for a, b in zip(starts, starts[1:])]
        assert len(arrivals) >= 2 and len(starts) >= 2 and all(gap >= floor - 0.05 for gap in gaps), gaps
        batches = hub.registrations.renders - renders
        assert batches <= spent / floor + 1 and batches < 12  # twelve edits, fewer renders
        await raw.close()
    finally:
        await hub.stop()


# -- failures and the board going away -------------------------------------------------------------


async def test_a_failed_refresh_keeps_the_old_file_and_a_reconnect_re_renders(
    whub: Hub, board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    task = await make_task(client)
    await hub_caught_up(whub, board)
    out = tmp_path / "card.md"
    raw = await RawClient.greeted(whub)
    await watch(raw, ref=task["identifier"], out=str(out))
    await next_refresh(raw)
    before = out.read_text()
    port = int(board.url.rsplit(":", 1)[1])
    # Hold the render lock so the batch for this edit runs only once the board is gone.
    async with whub.registrations._render_lock:
        await rename(client, task, "Edited before the outage")
        await hub_caught_up(whub, board)
        await board.runner.cleanup()
    failed = await next_refresh(raw)
    assert failed["ok"] is False and failed["error"]["code"] == hp.BOARD_UNAVAILABLE
    assert out.read_text() == before  # the old brief stays
    (listed,) = await status(whub)
    assert listed["cards"][0]["error"]["code"] == hp.BOARD_UNAVAILABLE
    runner, _ = await start_board_on(board.data_dir, port)
    try:
        got = await next_refresh(raw)  # the reconnect re-renders every registration
        assert "ok" not in got and await titled(out, "Edited before the outage")
    finally:
        await raw.close()
        await runner.cleanup()


async def test_a_card_edited_while_the_board_is_down_is_fresh_after_it_returns(
    whub: Hub, board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    task = await make_task(client)
    out = tmp_path / "card.md"
    raw = await RawClient.greeted(whub)
    await watch(raw, ref=task["identifier"], out=str(out), detach=True)
    await raw.close()
    port = int(board.url.rsplit(":", 1)[1])
    await board.runner.cleanup()
    # Another process writes the file while the board is away.
    store = SqliteStore(board.data_dir / "board.sqlite")
    store.open()
    try:
        def retitle(tx: Any) -> None:
            tx.execute("UPDATE tasks SET title = ? WHERE id = ?", ("Edited offline", task["id"]))
            bulk_rows(tx, task["id"], task["project_id"], 1)

        await store.command(retitle, WRITER)
    finally:
        store.close()
    runner, _ = await start_board_on(board.data_dir, port)
    try:
        await async_wait_until(lambda: titled(out, "Edited offline"), what="the brief after the board returned")
    finally:
        await runner.cleanup()


# -- persistence ---------------------------------------------------------------------------------


async def test_rehydration_keeps_live_cards_writes_terminal_ones_once_and_drops_the_gone(
    board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    path = registrations_file(tmp_path)
    live, ending = await make_task(client), await make_task(client)
    out_live, out_ending, out_gone = tmp_path / "live.md", tmp_path / "ending.md", tmp_path / "gone.md"
    first = await start_hub(board.url, board.token, registrations_path=path, **FAST_WATCH)
    raw = await RawClient.greeted(first)
    answer = await watch(raw, cards=[{"ref": live["identifier"], "out": str(out_live)},
                                     {"ref": ending["identifier"], "out": str(out_ending)}], detach=True, ttl_ms=0)
    await raw.close()
    await first.stop()
    record = json.loads(path.read_text())
    assert [r["registration_id"] for r in record["registrations"]] == [answer["registration_id"]]  # stop keeps it

    # While no hub runs: one card changes, one ends; and a card the board never had is on file.
    await rename(client, live, "Changed while no hub ran")
    await move(client, ending, "canceled")
    record["registrations"][0]["cards"].append(
        {"ref": "DEMO-0999", "task_id": "00000000-0000-4000-8000-000000000000", "identifier": "DEMO-0999",
         "path": str(out_gone)})
    record["registrations"].append({"registration_id": "w_broken", "cards": "not a list"})
    path.write_text(json.dumps(record))

    second = await start_hub(board.url, board.token, registrations_path=path, **FAST_WATCH)
    try:
        await async_wait_until(lambda: _ready(second.registrations.count() == 1), what="rehydration")
        (listed,) = await status(second)
        assert listed["registration_id"] == answer["registration_id"]
        assert [card["task_id"] for card in listed["cards"]] == [live["id"]]
        assert await titled(out_live, "Changed while no hub ran")
        assert front(out_ending)["status"] == "canceled"  # written once, then dropped
        assert not out_gone.exists()
        kept = json.loads(path.read_text())["registrations"]
        assert [[c["task_id"] for c in r["cards"]] for r in kept] == [[live["id"]]]
        await rename(client, live, "After rehydration")
        await async_wait_until(lambda: titled(out_live, "After rehydration"), what="a refresh by the new hub")
    finally:
        await second.stop()


async def test_rehydration_with_the_board_down_keeps_the_registration(
    board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    path = registrations_file(tmp_path)
    task = await make_task(client)
    out = tmp_path / "card.md"
    first = await start_hub(board.url, board.token, registrations_path=path, **FAST_WATCH)
    raw = await RawClient.greeted(first)
    await watch(raw, ref=task["identifier"], out=str(out), detach=True)
    await raw.close()
    await first.stop()
    await rename(client, task, "Changed before the outage")
    port = int(board.url.rsplit(":", 1)[1])
    await board.runner.cleanup()
    second = await start_hub(board.url, board.token, registrations_path=path, first_contact_timeout=0.2, **FAST_WATCH)
    try:
        await async_wait_until(lambda: _ready(second.registrations.count() == 1), what="the deferred registration")
        assert not await titled(out, "Changed before the outage")
        assert len(json.loads(path.read_text())["registrations"]) == 1  # kept for later, not dropped
        runner, _ = await start_board_on(board.data_dir, port)
        try:
            await async_wait_until(lambda: titled(out, "Changed before the outage"), what="the brief once the board is back")
        finally:
            await runner.cleanup()
    finally:
        await second.stop()


async def test_stop_ends_foreground_registrations_with_shutdown(
    board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    path = registrations_file(tmp_path)
    task = await make_task(client)
    hub = await start_hub(board.url, board.token, registrations_path=path, **FAST_WATCH)
    raw = await RawClient.greeted(hub)
    await watch(raw, ref=task["identifier"], out=str(tmp_path / "fg.md"))
    await next_refresh(raw)
    other = await RawClient.greeted(hub)
    await watch(other, ref=task["identifier"], out=str(tmp_path / "bg.md"), detach=True)
    await other.close()
    await hub.stop()
    assert await raw.recv_type("shutdown") == {"type": "shutdown", "reason": "hub_stopping"}
    with pytest.raises(Closed):
        await raw.recv()
    kept = json.loads(path.read_text())["registrations"]
    assert [c["path"] for r in kept for c in r["cards"]] == [str(tmp_path / "bg.md")]


async def test_a_reader_never_sees_a_partial_brief(board: RunningBoard, client: BoardClient, tmp_path: Path) -> None:
    hub = await start_hub(board.url, board.token, refresh_debounce=0, refresh_max_wait=0, refresh_floor=0)
    try:
        task = await make_task(client)
        out = tmp_path / "card.md"
        raw = await RawClient.greeted(hub)
        await watch(raw, ref=task["identifier"], out=str(out))
        await next_refresh(raw)
        stop = threading.Event()

        def read_loop() -> int:
            count = 0
            while not stop.is_set():
                text = out.read_text()
                assert text.startswith("---\n") and "\n---\n" in text[4:], text[:200]
                assert "\n## History\n" in text and text.endswith("\n"), text[-200:]
                count += 1
            return count

        reader = asyncio.get_running_loop().run_in_executor(None, read_loop)
        try:
            for n in range(40):  # one comment per refresh: forty whole-file replacements under the reader
                reply = await client.post(f"/api/v1/tasks/{task['id']}/comments", {"body": f"comment {n} " + "x" * 2000})
                assert reply.status == 201
                while f"comment {n} " not in out.read_text():
                    await next_refresh(raw)
        finally:
            stop.set()
        reads = await reader
        assert reads > 40
        await raw.close()
    finally:
        await hub.stop()


async def test_the_hub_does_not_idle_out_while_a_registration_lives(
    board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    hub = await start_hub(board.url, board.token, idle_exit=0.2, registrations_path=registrations_file(tmp_path),
                          **FAST_WATCH)
    try:
        task = await make_task(client)
        raw = await RawClient.greeted(hub)
        await watch(raw, ref=task["identifier"], out=str(tmp_path / "card.md"), ttl_ms=800, detach=True)
        await raw.close()
        alone_since = time.monotonic()
        # No session is left: only the registration keeps the hub, which must live to see its TTL…
        await async_wait_until(lambda: _ready(persisted(tmp_path)["registrations"] == []), what="the TTL")
        assert time.monotonic() - alone_since >= 0.5 and not hub.stopped.is_set()  # idle exit is 0.2 s
        # …and then leaves on its idle exit.
        await asyncio.wait_for(hub.stopped.wait(), 10)
    finally:
        await hub.stop()


async def test_registration_is_serialised(whub: Hub, board: RunningBoard, client: BoardClient, tmp_path: Path) -> None:
    task = await make_task(client)
    out = str(tmp_path / "card.md")
    sessions = [await RawClient.greeted(whub) for _ in range(4)]
    answers = await asyncio.gather(*(watch(raw, ref=task["identifier"], out=out, detach=True) for raw in sessions))
    # Had two requests passed the duplicate check together, there would be two registrations.
    made = [a for a in answers if a["registration_id"]]
    assert len(made) == 1 and sorted(a.get("reason", "") for a in answers) == ["", "covered", "covered", "covered"]
    assert (await pong(whub))["registrations"] == 1
    for raw in sessions:
        await raw.close()
