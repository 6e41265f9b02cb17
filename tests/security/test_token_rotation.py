"""Token rotation must not silently break the loop (issue: rotation attack, SPEC §7.1, §9).

After ``taskctl token rotate`` the hub key (a hash of the board URL and a fingerprint of the
token) changes. These tests run the real processes: ``taskd``, ``taskhub`` spawned on demand,
``taskctl loop subscribe`` / ``events follow`` / ``events hub``, and a raw TCP session to the hub.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from services.hub.pointer import pid_alive, read_pointer
from shared import hub_protocol as hp
from tests.support.board import BoardClient, TaskdProcess
from tests.support.waiting import async_wait_until

from .support_rotation import (
    API,
    TASKCTL,
    TASKHUB,
    RawSession,
    Subscriber,
    clean_env,
    hub_files,
    kill_hubs,
    taskctl,
    wait_for_pointer,
)

pytestmark = pytest.mark.asyncio

#: SPEC-level promise of this issue: the next human comment after a rotation wakes the loop within this.
WAKE_DEADLINE = 5.0
#: ``taskhub serve``'s exit status when the board refuses its token.
EXIT_UNAUTHORIZED = 77


@pytest.fixture
async def board(taskd: TaskdProcess) -> AsyncIterator[tuple[TaskdProcess, BoardClient]]:
    taskd.start()
    try:
        async with aiohttp.ClientSession() as session:
            yield taskd, BoardClient(taskd.url, taskd.token, session)
    finally:
        kill_hubs(taskd.url)


async def make_task(client: BoardClient) -> dict:
    if (await client.get(f"{API}/projects/demo")).status == 404:
        assert (await client.post(f"{API}/projects", {"id": "demo"})).status == 201
    reply = await client.post(f"{API}/tasks", {"project": "demo", "title": "Survive a token rotation"})
    assert reply.status == 201, reply.body
    return reply.body


async def human_comment(taskd: TaskdProcess, task: dict, body: str) -> int:
    """A comment by a human, with the token the board holds now; returns its revision."""
    async with aiohttp.ClientSession() as session:
        client = BoardClient(taskd.url, taskd.token, session, ("human", "ann"))
        reply = await client.post(f"{API}/tasks/{task['id']}/comments", {"body": body})
        assert reply.status == 201, reply.body
        rows = (await client.get(f"{API}/tasks/{task['id']}/activities?order=desc&limit=1")).body["items"]
    return int(rows[0]["revision"])


async def rotate(taskd: TaskdProcess) -> tuple[str, str]:
    """``taskctl token rotate`` as a user runs it; returns (old token, new token)."""
    old = taskd.token
    code, out, err = await taskctl(clean_env(taskd), "--json", "token", "rotate", "--url", taskd.url)
    assert code == 0, err
    assert out["data"]["rotated"] is True
    new = taskd.token
    assert new != old and old not in json.dumps(out) and new not in json.dumps(out)
    return old, new


def restart_board(taskd: TaskdProcess) -> None:
    """Stop ``taskd`` and start it again on the same port: every board stream is cut."""
    port = urlsplit(taskd.url).port
    assert taskd.stop() == 0
    taskd.start(port=port)


async def start_hub(taskd: TaskdProcess, token: str) -> asyncio.subprocess.Process:
    """``taskhub serve`` as a supervisor runs it, with the board token in its environment."""
    env = clean_env(taskd, TASKLOOM_TOKEN=token)
    return await asyncio.create_subprocess_exec(
        TASKHUB, "serve", "--board", taskd.url, "--idle-exit", "0",
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


# -- (a) a hub whose board answers 401 says so to every session and exits ----------------------


async def test_a_hub_refused_by_its_board_tells_every_session_and_exits(
    board: tuple[TaskdProcess, BoardClient], tmp_path: Path
) -> None:
    taskd, client = board
    task = await make_task(client)
    token = taskd.token
    hub = await start_hub(taskd, token)
    files = hub_files(taskd, token)
    pointer = await wait_for_pointer(files, what="taskhub serve to publish its pointer")
    assert pointer["pid"] == hub.pid

    follower = await RawSession.greeted(pointer["port"], pointer["token"])
    await follower.send(hp.follow(idle_ms=0))
    assert (await follower.recv_until("open", skip=("heartbeat",)))["replay"] == "live"
    card = tmp_path / "briefs" / "card.md"
    watcher = await RawSession.greeted(pointer["port"], pointer["token"])
    await watcher.send({"type": "watch", "ref": task["identifier"], "out": str(card)})
    assert (await watcher.recv_until("registered", skip=("heartbeat",), timeout=30))["running"] is True
    brief = card.read_text()
    idle = await RawSession.greeted(pointer["port"], pointer["token"])
    await idle.send(hp.ping())
    assert (await idle.recv_until("pong", skip=()))["clients"] == 3

    await rotate(taskd)
    restart_board(taskd)  # the hub's stream is cut; its reconnect meets 401

    for session in (follower, watcher, idle):
        error = await session.recv_until("error", skip=("heartbeat", "refresh"), timeout=20)
        assert error["code"] == hp.UNAUTHORIZED, error
        assert "401" in error["message"] and error["details"]["board"] == hp.resolve_board_url(taskd.url)
        assert await session.at_eof()
    assert await asyncio.wait_for(hub.wait(), 20) == EXIT_UNAUTHORIZED
    assert not files.pointer.exists()  # its own pointer, removed on the way out
    # Under a supervisor (stderr not a terminal) the hub logs to stderr, not hub-<key>.log.
    assert hub.stderr is not None
    written = (await hub.stderr.read()).decode()
    log = [json.loads(line) for line in written.splitlines() if line.startswith("{")]
    refused = [entry for entry in log if entry.get("event") == "hub_board_unauthorized"]
    assert refused and "401" in refused[0]["reason"]
    assert token not in written and taskd.token not in written
    assert card.read_text() == brief  # nothing lost: the brief is as it was


async def test_a_hub_started_with_a_refused_token_exits_without_a_pointer(
    board: tuple[TaskdProcess, BoardClient],
) -> None:
    taskd, _ = board
    old, _ = await rotate(taskd)
    hub = await start_hub(taskd, old)
    assert await asyncio.wait_for(hub.wait(), 20) == EXIT_UNAUTHORIZED
    files = hub_files(taskd, old)
    assert not files.pointer.exists()  # never published: no client could ever trust it
    # `events follow` with that stale token says so and exits 1, instead of waiting for ever.
    code, out, err = await taskctl(clean_env(taskd, TASKLOOM_TOKEN=old), "events", "follow", "--url", taskd.url,
                                   "--idle", "0", timeout=60)
    assert code == 1, (out, err)
    record = json.loads(out.splitlines()[-1]) if isinstance(out, str) else out
    assert record["type"] == "error" and record["code"] == hp.UNAUTHORIZED
    assert old not in out and old not in err


# -- (c) `events hub --stop` finds the hubs of the board whatever token they hold ---------------


async def test_a_rotation_ends_the_hub_that_holds_the_old_token(board: tuple[TaskdProcess, BoardClient]) -> None:
    taskd, _ = board
    hub = await start_hub(taskd, taskd.token)
    old_files = hub_files(taskd, taskd.token)
    pointer = await wait_for_pointer(old_files)
    # The pointer names its board in clear, beside the key that hides the token.
    assert pointer["board"] == hp.resolve_board_url(taskd.url) and isinstance(pointer["board_id"], str)
    await rotate(taskd)
    # The board closes every stream at the rotation, so the old hub's reconnect meets 401 at once
    # and it goes by itself: nobody has to find it.
    assert await asyncio.wait_for(hub.wait(), 20) == EXIT_UNAUTHORIZED
    assert not old_files.pointer.exists()
    env = clean_env(taskd)
    code, shown, err = await taskctl(env, "--json", "events", "hub", "--url", taskd.url)
    assert code == 0, err
    assert shown["data"]["running"] is False and shown["data"].get("stale", []) == []
    code, stopped, err = await taskctl(env, "--json", "events", "hub", "--stop", "--url", taskd.url)
    assert code == 0 and stopped["data"]["stopped"] is False, (stopped, err)


async def test_hub_stop_needs_no_token_and_works_with_the_board_down(
    board: tuple[TaskdProcess, BoardClient], tmp_path: Path
) -> None:
    taskd, _ = board
    hub = await start_hub(taskd, taskd.token)
    files = hub_files(taskd, taskd.token)
    pointer = await wait_for_pointer(files)
    assert taskd.stop() == 0
    # A shell that has no token at all (another data dir): the pointer's board URL is enough.
    env = clean_env(taskd, TASKLOOM_DATA_DIR=str(tmp_path / "elsewhere"))
    code, stopped, err = await taskctl(env, "--json", "events", "hub", "--stop", "--url", taskd.url)
    assert code == 0, err
    assert stopped["data"]["stopped"] is True and stopped["data"]["pid"] == pointer["pid"]
    assert await asyncio.wait_for(hub.wait(), 20) == 0


# -- (b)+(d) consumers re-read the token; the loop wakes after a rotation ------------------------


@pytest.mark.parametrize("after_rotation", ["nothing", "hub_stop", "hub_stop_all", "board_restart"])
async def test_a_rotation_under_a_running_loop_still_wakes_it(
    board: tuple[TaskdProcess, BoardClient], tmp_path: Path, after_rotation: str
) -> None:
    taskd, client = board
    task = await make_task(client)
    sub = Subscriber(tmp_path / "sub", clean_env(taskd), taskd.url)
    sub.dir.mkdir()
    await sub.start()
    try:
        await sub.ready()
        old_files = hub_files(taskd, taskd.token)
        old_hub = (await wait_for_pointer(old_files))["pid"]
        warm = await human_comment(taskd, task, "before the rotation")
        await sub.wait_wake(warm, timeout=WAKE_DEADLINE)

        _, new = await rotate(taskd)
        env = clean_env(taskd)
        # The loop may already be on a hub keyed by the new token (it starts one once the old one
        # is refused): --stop stops every hub of the board, and the loop starts that one again.
        new_key = hub_files(taskd, new).key
        if after_rotation == "hub_stop":
            # What `token rotate` tells the user to do. The old hub may already have gone by itself
            # (the rotation closed its stream); if not, --stop must find it under the old key.
            code, out, err = await taskctl(env, "--json", "events", "hub", "--stop", "--url", taskd.url)
            stopped = out["data"].get("hubs", [out["data"]]) if code == 0 else []
            assert code == 0 and all(row["pid"] in (None, old_hub) or row["key"] == new_key for row in stopped), (out, err)
        elif after_rotation == "hub_stop_all":
            code, out, err = await taskctl(env, "--json", "events", "hub", "--stop", "--all")
            assert code == 0 and all(row["pid"] == old_hub or row["key"] == new_key for row in out["data"]), (out, err)
        elif after_rotation == "board_restart":
            restart_board(taskd)

        revision = await human_comment(taskd, task, "after the rotation: please look")
        wake = await sub.wait_wake(revision, timeout=WAKE_DEADLINE)
        assert int(wake["revision"]) >= revision

        # The loop is on the hub keyed by the new token, and says it streams; the old hub is gone.
        new_files = hub_files(taskd, new)
        assert (await wait_for_pointer(new_files))["board"] == hp.resolve_board_url(taskd.url)
        await async_wait_until(lambda: _true(not pid_alive(old_hub)), timeout=20, what="the old hub to exit")
        code, status, err = await taskctl(env, "--json", "loop", "status", "--state-dir", str(sub.state_dir))
        assert code == 0 and status["data"]["state"] == "streaming", (status, err)
    finally:
        await sub.cleanup()


async def test_loop_status_says_unauthorized_until_the_token_file_works(
    board: tuple[TaskdProcess, BoardClient], tmp_path: Path
) -> None:
    taskd, client = board
    task = await make_task(client)
    # The subscriber's shell finds its token in its own data dir (no board pointer in its runtime
    # dir), so the test controls the file it re-reads: first a stale token, then the right one.
    runtime, data = tmp_path / "sub-run", tmp_path / "sub-data"
    data.mkdir()
    token_file = data / "token"
    token_file.write_text("tl_" + "0" * 32 + "\n")
    token_file.chmod(0o600)
    env = clean_env(taskd, TASKLOOM_RUNTIME_DIR=str(runtime), TASKLOOM_DATA_DIR=str(data))
    sub = Subscriber(tmp_path / "sub", env, taskd.url)
    sub.dir.mkdir()
    await sub.start()
    try:
        state = await sub.wait_state(lambda s: s.get("state") == "unauthorized", "the subscriber to say unauthorized")
        assert hp.UNAUTHORIZED in state["last_problem"]
        code, status, err = await taskctl(env, "--json", "loop", "status", "--state-dir", str(sub.state_dir))
        assert code == 0 and status["data"]["running"] is True and status["data"]["state"] == "unauthorized", err
        code, human, _ = await taskctl(env, "loop", "status", "--state-dir", str(sub.state_dir))
        assert code == 0 and human.startswith("unauthorized")
        assert not list(runtime.glob("hub-*.json"))  # no hub was left running with the stale token

        token_file.write_text(taskd.token + "\n")  # what a rotation does to the file
        await sub.ready()
        revision = await human_comment(taskd, task, "now that the token works")
        await sub.wait_wake(revision, timeout=WAKE_DEADLINE)
    finally:
        await sub.cleanup()
        kill_hubs(taskd.url)


async def test_events_follow_moves_to_the_new_token_after_its_hub_is_refused(
    board: tuple[TaskdProcess, BoardClient],
) -> None:
    taskd, client = board
    task = await make_task(client)
    env = clean_env(taskd)
    follower = await asyncio.create_subprocess_exec(
        TASKCTL, "events", "follow", "--url", taskd.url, "--idle", "0",
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )

    async def record(timeout: float = 20.0) -> dict:
        assert follower.stdout is not None
        line = await asyncio.wait_for(follower.stdout.readline(), timeout)
        assert line, "taskctl events follow ended"
        return json.loads(line)

    async def next_of(*kinds: str, timeout: float = 20.0) -> dict:
        """The next record of one of ``kinds`` within ``timeout`` overall; only heartbeats may come first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (got := await record(max(0.01, deadline - loop.time())))["type"] not in kinds:
            assert got["type"] == "heartbeat", got
        return got

    try:
        assert (await next_of("open"))["type"] == "open"
        old, new = await rotate(taskd)  # the board closes the hub's stream; its reconnect meets 401
        error = await next_of("error")
        assert error["code"] == hp.UNAUTHORIZED
        reopened = await next_of("open")  # the same process, on the hub keyed by the new token
        assert reopened["type"] == "open" and follower.returncode is None
        revision = await human_comment(taskd, task, "seen through the new hub")
        event = await next_of("event", "reset")
        while event["type"] == "event" and event["revision"] < revision:
            event = await next_of("event", "reset")
        assert event["revision"] >= revision
        assert read_pointer(hub_files(taskd, new)) is not None
    finally:
        if follower.returncode is None:
            follower.kill()
        await follower.wait()


async def _true(value: bool) -> bool:
    return value


# -- card briefs: what a hub under the old token kept is not lost -------------------------------


async def _comment_in(path: Path, text: str) -> bool:
    try:
        return text in path.read_text()
    except OSError:
        return False


async def test_detached_briefs_move_to_the_hub_of_the_new_token(
    board: tuple[TaskdProcess, BoardClient], tmp_path: Path
) -> None:
    taskd, client = board
    task = await make_task(client)
    brief = tmp_path / "project" / "card.md"
    env = clean_env(taskd)
    code, out, err = await taskctl(env, "--json", "export", "watch", task["identifier"], "--out", str(brief),
                                   "--detach", "--ttl", "0", "--url", taskd.url)
    assert code == 0, (out, err)
    registration_id = out["data"]["registration_id"]
    old_files = hub_files(taskd, taskd.token)
    old_hub = (await wait_for_pointer(old_files))["pid"]

    _, new = await rotate(taskd)
    restart_board(taskd)  # the old hub meets 401 and exits, keeping its registrations on file
    await async_wait_until(lambda: _true(not pid_alive(old_hub)), timeout=20, what="the refused hub to exit")
    assert old_files.registrations.exists()

    # The next hub (keyed by the new token) takes them over and keeps the brief fresh.
    code, out, err = await taskctl(env, "--json", "export", "watch", "--status", "--url", taskd.url)
    assert code == 0, err
    assert [r["registration_id"] for r in out["data"]] == [registration_id]
    assert not old_files.registrations.exists() and hub_files(taskd, new).registrations.exists()
    await human_comment(taskd, task, "a comment the brief must show")
    await async_wait_until(lambda: _comment_in(brief, "a comment the brief must show"), timeout=20,
                           what="the brief to be refreshed by the new hub")


async def test_a_foreground_watch_registers_again_with_the_new_token(
    board: tuple[TaskdProcess, BoardClient], tmp_path: Path
) -> None:
    taskd, client = board
    task = await make_task(client)
    brief = tmp_path / "card.md"
    watch = await asyncio.create_subprocess_exec(
        TASKCTL, "export", "watch", task["identifier"], "--out", str(brief), "--url", taskd.url,
        env=clean_env(taskd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )

    async def next_of(kind: str, timeout: float = 20.0) -> dict:
        assert watch.stdout is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            line = await asyncio.wait_for(watch.stdout.readline(), max(0.01, deadline - loop.time()))
            assert line, "taskctl export watch ended"
            record = json.loads(line)
            if record["type"] == kind:
                return record
            assert record["type"] in ("heartbeat", "refresh", "registered"), record

    try:
        await next_of("registered")
        await rotate(taskd)  # the board closes the old hub's stream; its reconnect meets 401
        again = await next_of("registered")  # on the hub keyed by the new token, same process
        assert again["running"] is True and watch.returncode is None
        await human_comment(taskd, task, "seen by the re-registered watch")
        await async_wait_until(lambda: _comment_in(brief, "seen by the re-registered watch"), timeout=20,
                               what="the brief to be refreshed after the rotation")
    finally:
        if watch.returncode is None:
            watch.kill()
        await watch.wait()
