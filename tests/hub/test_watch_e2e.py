"""``taskctl export watch`` as users run it: real ``taskd``, ``taskhub`` and ``taskctl`` processes.

The hub is spawned by taskctl (find-or-start) with short cadence knobs from the environment.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from services.board.sqlite_store import SqliteStore
from services.hub.pointer import pid_alive, read_pointer
from tests.support.board import (
    REPORT,
    VENV_BIN,
    BoardClient,
    RunningBoard,
    TaskdProcess,
    start_board,
)
from tests.support.waiting import async_wait_until

from .conftest import WRITER, Runtime, block, bulk_rows, hub_pids, make_task

pytestmark = pytest.mark.asyncio

TASKCTL = str(VENV_BIN / "taskctl")
CADENCE = {
    "TASKLOOM_HUB_REFRESH_DEBOUNCE": "0.03",
    "TASKLOOM_HUB_REFRESH_MAX_WAIT": "0.2",
    "TASKLOOM_HUB_REFRESH_FLOOR": "0.1",
}


async def taskctl(env: dict[str, str], *args: str, timeout: float = 60.0) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        TASKCTL, *args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    return process.returncode or 0, out.decode(), err.decode()


async def streaming(runtime: Runtime, env: dict[str, str], *args: str) -> Any:
    process = await asyncio.create_subprocess_exec(
        TASKCTL, *args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )
    runtime.processes.append(process)
    return process


async def record_of(runtime: Runtime, process: Any, kind: str, timeout: float = 20.0) -> dict[str, Any]:
    """The next record of ``kind`` within ``timeout`` overall (heartbeats skipped; anything else fails)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        left = deadline - asyncio.get_running_loop().time()
        assert left > 0, f"no {kind} record in {timeout:g} s; hub log:\n{runtime.log_tail()}"
        line = await runtime.line(process, left)
        if line["type"] == kind:
            return line
        assert line["type"] in ("heartbeat", "open"), f"expected {kind}, got {line}"


def title_of(path: Path) -> str | None:
    try:
        for row in path.read_text().splitlines()[1:]:
            if row.startswith("title: "):
                return json.loads(row[len("title: "):])
            if row == "---":
                return None
    except (OSError, ValueError):
        return None
    return None


async def titled(path: Path, title: str, what: str) -> None:
    async def check() -> bool:
        return title_of(path) == title

    await async_wait_until(check, timeout=20, what=what)


async def rename(client: BoardClient, task: dict[str, Any], title: str) -> None:
    reply = await client.patch(f"/api/v1/tasks/{task['id']}", {"title": title})
    assert reply.status == 200, reply.body


async def offline_rename(data_dir: Path, task: dict[str, Any], title: str) -> None:
    """Another process edits the board's file while ``taskd`` is down."""
    store = SqliteStore(data_dir / "board.sqlite")
    store.open()
    try:
        def retitle(tx: Any) -> None:
            tx.execute("UPDATE tasks SET title = ? WHERE id = ?", (title, task["id"]))
            bulk_rows(tx, task["id"], task["project_id"], 1)

        await store.command(retitle, WRITER)
    finally:
        store.close()


async def test_a_detached_brief_survives_its_cli_a_hub_kill_and_a_board_restart(
    taskd: TaskdProcess, runtime: Runtime, tmp_path: Path
) -> None:
    taskd.start()
    port = urlsplit(taskd.url).port
    env = runtime.env(taskd, **CADENCE)
    work = tmp_path / "work"
    async with aiohttp.ClientSession() as session:
        client = BoardClient(taskd.url, taskd.token, session)
        task = await make_task(client)
        code, out, err = await taskctl(env, "export", "watch", "demo-1", "--dir", str(work), "--detach", "--ttl", "0",
                                       "--url", taskd.url)
        assert code == 0, err
        registration_id = out.strip()
        assert registration_id.startswith("w_")
        brief = work / ".taskloom" / task["identifier"] / "card.md"
        assert title_of(brief) == task["title"]  # written before taskctl returned
        first_hub = read_pointer(runtime.files(taskd))["pid"]

        # The taskctl that registered is gone; the hub keeps the brief fresh.
        for n in range(3):
            await rename(client, task, f"Edit {n}")
            await titled(brief, f"Edit {n}", f"edit {n} in the brief")

        # SIGKILL the hub: no goodbye, no chance to save anything more.
        os.kill(first_hub, signal.SIGKILL)
        await async_wait_until(lambda: _ready(not pid_alive(first_hub)), what="the hub to die")
        await rename(client, task, "Edited with no hub")
        code, out, err = await taskctl(env, "--json", "export", "watch", "--status", "--url", taskd.url)
        assert code == 0, err
        (listed,) = json.loads(out)["data"]
        assert listed["registration_id"] == registration_id and listed["detached"]  # rehydrated by a new hub
        second_hub = read_pointer(runtime.files(taskd))["pid"]
        assert second_hub != first_hub
        await titled(brief, "Edited with no hub", "the rehydrated brief")
        await rename(client, task, "After the restart")
        await titled(brief, "After the restart", "a refresh by the new hub")

        # Restart the board; while it is down another process edits the card.
        taskd.stop()
        await offline_rename(taskd.data_dir, task, "Edited while the board was down")
        taskd.start(port=port)
        await titled(brief, "Edited while the board was down", "the brief after the board came back")
        await rename(client, task, "Board is back")
        await titled(brief, "Board is back", "a refresh after the board restart")
        assert read_pointer(runtime.files(taskd))["pid"] == second_hub  # the same hub rode it out

        code, out, err = await taskctl(env, "--json", "export", "watch", "--stop", registration_id, "--url", taskd.url)
        assert code == 0 and json.loads(out)["data"]["registration_id"] == registration_id, err
        code, out, err = await taskctl(env, "--json", "export", "watch", "--status", "--url", taskd.url)
        assert json.loads(out)["data"] == []
        code, out, err = await taskctl(env, "--json", "export", "watch", "--stop", registration_id, "--url", taskd.url)
        assert code == 1 and json.loads(out)["error"]["code"] == "NOT_FOUND"
        registrations = json.loads(runtime.files(taskd).registrations.read_text())
        assert registrations == {"version": 2, "board": registrations["board"], "registrations": []}


async def _ready(value: bool) -> bool:
    return value


async def test_foreground_watch_owner_viewer_and_done(taskd: TaskdProcess, runtime: Runtime, tmp_path: Path) -> None:
    taskd.start()
    env = runtime.env(taskd, **CADENCE)
    out = tmp_path / "card.md"
    async with aiohttp.ClientSession() as session:
        client = BoardClient(taskd.url, taskd.token, session)
        task = await make_task(client)
        owner = await streaming(runtime, env, "export", "watch", task["identifier"], "--out", str(out), "--url", taskd.url)
        registered = await record_of(runtime, owner, "registered")
        assert registered["refs"] == [task["identifier"]] and registered["running"]
        assert (await record_of(runtime, owner, "refresh"))["path"] == str(out)

        viewer = await streaming(runtime, env, "export", "watch", task["id"], "--out", str(out), "--url", taskd.url)
        seen = await record_of(runtime, viewer, "registered")
        assert seen["reason"] == "viewer" and seen["registration_id"] == registered["registration_id"]
        await record_of(runtime, viewer, "refresh")

        await rename(client, task, "Seen by both")
        assert (await record_of(runtime, owner, "refresh"))["ref"] == task["identifier"]
        assert (await record_of(runtime, viewer, "refresh"))["ref"] == task["id"]

        # The owner goes away abruptly: the viewer inherits the registration and keeps getting refreshes.
        owner.kill()
        await owner.wait()
        await rename(client, task, "Inherited")
        await record_of(runtime, viewer, "refresh")
        assert title_of(out) == "Inherited"

        reply = await client.post(f"/api/v1/tasks/{task['id']}/move", {"to": "canceled"})
        assert reply.status == 200
        last = await record_of(runtime, viewer, "refresh")
        assert last["status"] == "canceled"
        await record_of(runtime, viewer, "done")
        assert await asyncio.wait_for(viewer.wait(), 20) == 0


async def test_cli_refusals_write_nothing(taskd: TaskdProcess, runtime: Runtime, tmp_path: Path) -> None:
    taskd.start()
    env = runtime.env(taskd, **CADENCE)
    work = tmp_path / "work"
    (work / "a-directory").mkdir(parents=True)
    async with aiohttp.ClientSession() as session:
        client = BoardClient(taskd.url, taskd.token, session)
        task = await make_task(client)
    cases = [
        (("--out", str(work / "a-directory"), task["identifier"]), "VALIDATION_FAILED"),
        (("--out", str(work / "x.md"), "DEMO-0404"), "NOT_FOUND"),
        (("--dir", str(work), task["identifier"], task["id"]), "VALIDATION_FAILED"),
    ]
    for mode in (("--detach",), ("--standalone",)):
        for args, expected in cases:
            code, out, err = await taskctl(env, "--json", "export", "watch", *args, *mode, "--url", taskd.url)
            assert code == 1, (args, mode, out, err)
            assert json.loads(out)["error"]["code"] == expected, (args, mode, out)
            assert sorted(p.name for p in work.rglob("*")) == ["a-directory"]
    assert not runtime.files(taskd).registrations.exists() or json.loads(
        runtime.files(taskd).registrations.read_text())["registrations"] == []
    for args in (("--detach", "--standalone"), ("--after", "3"), ("--out", "x.md", "--dir", ".")):
        code, _, err = await taskctl(env, "export", "watch", task["identifier"], *args, "--url", taskd.url)
        assert code == 2, (args, err)


async def test_standalone_follows_the_board_directly(taskd: TaskdProcess, runtime: Runtime, tmp_path: Path) -> None:
    taskd.start()
    port = urlsplit(taskd.url).port
    env = runtime.env(taskd, **CADENCE)
    out = tmp_path / "card.md"
    async with aiohttp.ClientSession() as session:
        client = BoardClient(taskd.url, taskd.token, session)
        task = await make_task(client)
        watcher = await streaming(runtime, env, "export", "watch", task["identifier"], "--out", str(out),
                                  "--standalone", "--url", taskd.url)
        registered = await record_of(runtime, watcher, "registered")
        assert registered["registration_id"] is None and registered["running"]
        start = (await record_of(runtime, watcher, "refresh"))["revision"]
        assert (await record_of(runtime, watcher, "open"))["after"] == start
        await rename(client, task, "Standalone edit")
        got = await record_of(runtime, watcher, "refresh")
        assert got["revision"] > start and title_of(out) == "Standalone edit"
        assert hub_pids(taskd.url) == []  # no hub involved

        # The board going away on purpose ends the watcher cleanly.
        taskd.stop()
        ended = await record_of(runtime, watcher, "shutdown")
        assert ended["revision"] == got["revision"]
        assert await asyncio.wait_for(watcher.wait(), 20) == 0

        # A broken stream is exit 1 with the revision to resume from; resuming catches up.
        taskd.start(port=port)
        watcher = await streaming(runtime, env, "export", "watch", task["identifier"], "--out", str(out),
                                  "--standalone", "--url", taskd.url)
        for kind in ("registered", "refresh", "open"):
            await record_of(runtime, watcher, kind)
        await rename(client, task, "Before the crash")
        refreshed = await record_of(runtime, watcher, "refresh")
        while refreshed["revision"] < (await client.get("/api/v1/meta")).body["revision"]:
            refreshed = await record_of(runtime, watcher, "refresh")
        taskd.stop(signal.SIGKILL)
        broken = await runtime.line(watcher)
        # The board died mid-stream (its chunked body never ended): a stream error, not an end.
        assert broken["type"] == "error" and broken["code"] == "STREAM_BROKEN", broken
        assert broken["resume_after"] == refreshed["revision"]
        assert await asyncio.wait_for(watcher.wait(), 20) == 1
        resume = broken["resume_after"]
        await offline_rename(taskd.data_dir, task, "Missed while nobody watched")
        taskd.start(port=port)
        watcher = await streaming(runtime, env, "export", "watch", task["identifier"], "--out", str(out),
                                  "--standalone", "--after", str(resume), "--ttl", "0.01", "--url", taskd.url)
        await record_of(runtime, watcher, "registered")
        await record_of(runtime, watcher, "refresh")
        assert (await record_of(runtime, watcher, "open"))["after"] == resume
        assert title_of(out) == "Missed while nobody watched"  # the first snapshot is current
        replayed = await record_of(runtime, watcher, "refresh")
        assert replayed["revision"] > resume  # the replayed row was seen too
        assert (await record_of(runtime, watcher, "ttl"))["ttl_ms"] == 600
        assert await asyncio.wait_for(watcher.wait(), 20) == 0


@pytest.mark.parametrize("through", ["hub", "standalone"])
async def test_a_finished_blocker_refreshes_the_card_it_held(
    taskd: TaskdProcess, runtime: Runtime, tmp_path: Path, through: str
) -> None:
    """The blocker's rows name only the blocker: the board's ``card_unblocked`` signal is what
    tells the watcher (the hub process, or taskctl on its own) that the kept card's
    ``blocked_by`` changed."""
    taskd.start()
    env = runtime.env(taskd, **CADENCE)
    out = tmp_path / "card.md"
    async with aiohttp.ClientSession() as session:
        client = BoardClient(taskd.url, taskd.token, session)
        card = await make_task(client)
        blocker = await make_task(client, title="Land it", acceptance_mode="none")
        await block(client, blocker, card)
        mode = ["--standalone"] if through == "standalone" else []
        watcher = await streaming(runtime, env, "export", "watch", card["identifier"], "--out", str(out),
                                  *mode, "--url", taskd.url)
        await record_of(runtime, watcher, "registered")
        # Every mark made so far is served once the rename is in the file (batches are serial).
        await rename(client, card, "Renamed while blocked")
        while title_of(out) != "Renamed while blocked":
            await record_of(runtime, watcher, "refresh")
        assert f"\nblocked_by: [{blocker['identifier']}]\n" in out.read_text()

        for path, body in (("claim", {}), ("deliver", {"body": REPORT}), ("move", {"to": "done"})):
            reply = await client.post(f"/api/v1/tasks/{blocker['id']}/{path}", body)
            assert reply.status == 200, (path, reply.body)
        while "\nblocked_by: []\n" not in out.read_text():
            await record_of(runtime, watcher, "refresh")
        assert f"- blocked by {blocker['identifier']}" in out.read_text()  # the relation stays listed
        watcher.terminate()
        await asyncio.wait_for(watcher.wait(), 20)


async def test_terminal_cards_need_no_stream_standalone_or_through_the_hub(runtime: Runtime, tmp_path: Path) -> None:
    # This board refuses every stream: both watchers must finish without one.
    board: RunningBoard = await start_board(tmp_path / "data", max_streams=0)
    try:
        env = runtime.env(board, **CADENCE)
        async with aiohttp.ClientSession() as session:
            client = BoardClient(board.url, board.token, session)
            task = await make_task(client)
            reply = await client.post(f"/api/v1/tasks/{task['id']}/move", {"to": "canceled"})
            assert reply.status == 200
        for mode, name in ((("--standalone",), "standalone.md"), ((), "hub.md")):
            out = tmp_path / name
            process = await streaming(runtime, env, "export", "watch", task["identifier"], "--out", str(out), *mode,
                                      "--url", board.url)
            registered = await record_of(runtime, process, "registered")
            assert registered["running"] is False and registered["reason"] == "terminal"
            assert (await record_of(runtime, process, "refresh"))["status"] == "canceled"
            await record_of(runtime, process, "done")
            assert await asyncio.wait_for(process.wait(), 20) == 0
            assert out.exists()
        code, out_text, _ = await taskctl(env, "--json", "export", "watch", "--status", "--url", board.url)
        assert code == 0 and json.loads(out_text)["data"] == []
        log = runtime.files(board).log.read_text()
        assert "board_streaming" not in log  # the hub never had a stream open
    finally:
        await board.runner.cleanup()


async def test_root_level_global_options_reach_export(taskd: TaskdProcess, runtime: Runtime, tmp_path: Path) -> None:
    taskd.start()
    env = runtime.env(taskd, **CADENCE)
    env.pop("TASKLOOM_TOKEN")  # named on the command line instead
    token_file = tmp_path / "board-token"
    token_file.write_text(taskd.token)
    async with aiohttp.ClientSession() as session:
        await make_task(BoardClient(taskd.url, taskd.token, session))
    out_dir = tmp_path / "md"
    code, out, err = await taskctl(env, "--json", "--url", taskd.url, "--token-file", str(token_file),
                                   "export", "md", "--out", str(out_dir), "--check")
    assert code == 3, err
    code, out, err = await taskctl(env, "--json", "--url", taskd.url, "--token-file", str(token_file),
                                   "export", "md", "--out", str(out_dir))
    assert code == 0 and json.loads(out)["data"]["cards"] == 1, err
    code, out, err = await taskctl(env, "--json", "--url", taskd.url, "--token-file", str(token_file),
                                   "export", "watch", "--status")
    assert code == 0 and json.loads(out) == {"ok": True, "data": []}, err
    assert taskd.token not in out + err


async def test_a_replaced_generation_hands_over_its_detached_registrations(
    runtime: Runtime, board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    from .test_hub_lifecycle import _old_hub

    env = runtime.env(board, **CADENCE)
    task = await make_task(client)
    out = tmp_path / "card.md"
    files = runtime.files(board)
    runtime.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    # What a hub of the previous generation left on file (the file is shared by key).
    files.registrations.write_text(json.dumps({"version": 2, "board": board.url, "registrations": [{
        "registration_id": "w_from_before", "created_at": "2030-01-01T00:00:00.000Z", "ttl_ms": 0, "expires_at": None,
        "cards": [{"ref": task["identifier"], "task_id": task["id"], "identifier": task["identifier"], "path": str(out)}],
    }]}))
    old = await _old_hub(runtime, board)
    code, text, err = await taskctl(env, "--json", "export", "watch", "--status", "--url", board.url)
    assert code == 0, err
    assert await asyncio.wait_for(old.wait(), 20) == 0  # replaced
    assert [r["registration_id"] for r in json.loads(text)["data"]] == ["w_from_before"]
    assert title_of(out) == task["title"]
    await rename(client, task, "Kept by the new generation")
    await titled(out, "Kept by the new generation", "a refresh by the replacing hub")


async def test_a_foreground_watch_ends_cleanly_when_the_hub_stops(
    runtime: Runtime, board: RunningBoard, client: BoardClient, tmp_path: Path
) -> None:
    env = runtime.env(board, **CADENCE)
    task = await make_task(client)
    watcher = await streaming(runtime, env, "export", "watch", task["identifier"], "--out", str(tmp_path / "card.md"),
                              "--url", board.url)
    await record_of(runtime, watcher, "registered")
    await record_of(runtime, watcher, "refresh")
    code, _, err = await taskctl(env, "events", "hub", "--stop", "--url", board.url)
    assert code == 0, err
    assert (await record_of(runtime, watcher, "shutdown"))["reason"] == "hub_stopping"
    assert await asyncio.wait_for(watcher.wait(), 20) == 0
    # A foreground registration is not persisted: the next hub has nothing to bring back.
    code, out, err = await taskctl(env, "--json", "export", "watch", "--status", "--url", board.url)
    assert code == 0 and json.loads(out)["data"] == [], err
