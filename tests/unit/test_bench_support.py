"""The benches' shared plumbing (``bench/support.py``) against the real ``taskd`` and ``taskhub``,
and every bench module importable: ``python -m bench`` imports each one only when it runs it, so a
bench broken by a move in the services would otherwise show only in a measured run."""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from bench import support
from bench.__main__ import modules
from tests.support.waiting import async_wait_until

BENCH = Path(support.__file__).parent


@pytest.mark.parametrize("name", modules([]))
def test_every_bench_module_imports_and_has_a_main(name: str) -> None:
    module = importlib.import_module(f"bench.{name}")
    assert callable(module.main)


@pytest.mark.parametrize("name", modules([]))
def test_no_bench_starts_or_finds_a_board_or_hub_of_its_own(name: str) -> None:
    """Starting the services, finding their pointers and stopping them live in ``bench/support.py``."""
    source = (BENCH / f"{name}.py").read_text()
    for own in ('"taskd"', '"taskhub"', "board.json", "hub-{", ".terminate()"):
        assert own not in source, f"{name} handles {own} itself: use bench.support"


def test_start_board_serves_until_stopped(tmp_path: Path) -> None:
    board = support.start_board(tmp_path / "board", env=support.isolated_env(tmp_path / "board"))
    try:
        reply = httpx.get(f"{board.url}/api/v1/meta", headers={"Authorization": f"Bearer {board.token}"})
        assert reply.status_code == 200, reply.text
        assert board.data_dir == tmp_path / "board" / "data"
        assert board.cpu_seconds() >= 0
    finally:
        board.stop()
    assert board.process.returncode == 0  # SIGTERM is a clean shutdown, not the kill fallback
    board.stop()  # a second stop of a stopped board is a no-op


def test_a_board_that_cannot_start_raises_with_its_log_and_leaves_nothing_running(tmp_path: Path) -> None:
    folder = tmp_path / "board"
    with pytest.raises(RuntimeError, match=r"(?s)taskd exited: .*Invalid value for '--durability'"):
        support.start_board(folder, "--durability", "sometimes", env=support.isolated_env(folder))
    assert not (folder / "run" / "board.json").exists()
    assert not (folder / "data" / "board.sqlite").exists()


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(support, "STOP_SECONDS", 0.2)
    process = subprocess.Popen(["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"],
                               stdout=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.readline() == b"ready\n"  # the trap is set
    support.Service(process).stop()
    assert process.returncode == -9


async def test_a_hub_follower_and_a_board_stream_hear_a_write_on_the_board(tmp_path: Path) -> None:
    env = support.isolated_env(tmp_path)
    board = support.start_board(tmp_path, env=env)
    hub: support.Service | None = None
    followers: list[asyncio.Task[None]] = []
    try:
        hub, pointer = support.start_hub(tmp_path, env, board.url, board.token)
        via_hub: list[dict[str, Any]] = []
        via_stream: list[dict[str, Any]] = []
        opened = [asyncio.Event(), asyncio.Event()]
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {board.token}",
                                                  "X-Taskloom-Actor-Kind": "human", "X-Taskloom-Actor": "bench"}) as http:
            followers = [
                asyncio.create_task(support.follow_hub(pointer["port"], pointer["token"], opened[0],
                                                       lambda message, _at: via_hub.append(message))),
                asyncio.create_task(support.follow_board(board.url, board.token, opened[1],
                                                         lambda event, data, _at: via_stream.append(json.loads(data))
                                                         if event is None else None)),
            ]
            await asyncio.wait_for(asyncio.gather(*(event.wait() for event in opened)), 10)
            async with http.post(f"{board.url}/api/v1/projects", json={"id": "bench", "name": "Bench"}) as reply:
                assert reply.status == 201, await reply.text()

            async def heard() -> bool:
                return (any(m["type"] == "event" and m["activity"]["event"] == "project_created" for m in via_hub)
                        and any(frame["event"] == "project_created" for frame in via_stream))

            await async_wait_until(heard, what="project_created at the hub follower and on the board's stream")
    finally:
        await support.cancel_all(followers)
        if hub is not None:
            hub.stop()
        board.stop()


async def test_a_chunk_is_stamped_when_it_reached_the_socket_not_when_a_busy_loop_read_it() -> None:
    """The benches read many streams in one loop: a consumer whose loop was busy must still see
    when its bytes arrived (the kernel's receive timestamp), or it is charged with the others' work."""
    accepted: asyncio.Queue[asyncio.StreamWriter] = asyncio.Queue()

    async def on_accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await accepted.put(writer)

    server = await asyncio.start_server(on_accept, "127.0.0.1", 0)
    stream = await support.stamped_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    peer = await accepted.get()
    try:
        # Linux turns receive timestamps on for the whole host from a work queue, a moment after
        # the first socket asks, so a chunk may still be stamped as it is read; the benches'
        # consumers have done a round trip or two (hello, open) before anything they measure.
        # A stamp taken when the loop reads would fail every round.
        lags = []
        for _ in range(20):
            peer.write(b"hello\n")
            await peer.drain()
            sent = time.perf_counter()
            busy_until = sent + 0.02
            while time.perf_counter() < busy_until:
                pass  # the loop is busy (another consumer's parsing) while the bytes wait in the socket
            stamp, data = await asyncio.wait_for(stream.chunks.get(), 10)
            assert data == b"hello\n"
            lags.append(stamp - sent)
            if -0.01 <= stamp - sent < 0.01:
                break
        else:
            raise AssertionError(f"every chunk was stamped when the loop read it: {lags}")
    finally:
        stream.close()
        peer.close()
        server.close()
